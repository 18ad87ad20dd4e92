"""Return to service: nodes Revive drained get a health check and, when it passes, go back.

Two workflow types:

- ``ReturnToServiceWorkflow`` (per cluster, input ``RtsInput``): started by the Temporal Schedule
  ``revive-rts-<cluster>`` every ``return_to_service.interval`` (overlap policy SKIP: never two
  runs at once; ``worker.rts_schedule``), or by hand (``revive health run``). It lists Revive's
  drained nodes (``rts_candidates``: a person's drain never appears), then runs one child
  ``NodeCheckWorkflow`` per node to check, at most ``max_concurrent`` at once.
- ``NodeCheckWorkflow`` (per node, id ``revive-rts-<cluster>-node-<node>``: a node whose check
  still runs is not started twice, the parent records it as ``busy``):

  1. guard: the cluster guard's drain records for the node; a repeat offender stays drained and a
     person is notified (``refused``);
  2. check: ``run_health_check`` (``direct`` on the node, or a job in a maintenance window);
  3. fail → the reason becomes ``revive: health check failed <when>: <short> (incident <id>
     <category>)``, the node stays drained, ``node_check_failed`` is notified;
  4. pass → the gate: the mode is read from the cluster guard (``read_guard_mode``, per the node's
     partition; the input policy's mode when the guard holds none), as incidents do; observe
     mode waits for ``decide`` (Update or Signal, ``workflows.approval.ApprovalGate``, same payload
     as incidents) up to ``approval.timeout``; auto mode goes on;
  5. resume (only while the node is still drained with the reason the check saw), recorded in
     ``node-resumes.jsonl`` and notified (``node_resumed``); a false isolation when the incident
     blamed hardware.

The node check's search attributes tie it to the incident: ``ReviveIncidentId`` (the drain's
incident), ``ReviveCluster``, ``ReviveNodes`` (the node), ``ReviveCategory`` and ``ReviveState``
(``checking`` → ``awaiting_approval`` → the ``RtsOutcome``). The incident itself is closed and is
not signalled: ``ReviveIncidentId='<id>'`` lists the incident and its node checks together.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities import notify as notify_activity
    from activities.guard import GuardActivities
    from activities.health import HealthActivities
    from revive import ids, retry
    from revive import search_attributes as sa
    from revive.decide.rts import (
        Candidate,
        CheckVerdict,
        GuardDrainsInput,
        HealthCheckInput,
        NodeActionInput,
        NodeActionResult,
        NodeCheckInput,
        NodeCheckResult,
        RtsInput,
        RtsOutcome,
        RtsResult,
        ScanInput,
        failed_reason,
        repeat_offender,
    )
    from revive.decide.settings import ModeQuery
    from revive.models import Category, DecisionKind, NotifyEvent, NotifyInput
    from revive.policy import ExpiryAction, Mode
    from workflows.approval import ApprovalGate

CHECK_MARGIN = timedelta(minutes=2)
"""start_to_close of the check = the policy's timeout plus this (window set-up and clean-up)."""
CHECK_HEARTBEAT = timedelta(seconds=30)
_CATEGORIES = {c.value for c in Category}


@workflow.defn(name=ids.NODE_CHECK_WORKFLOW)
class NodeCheckWorkflow:
    """One node's health check, gate and resume. Input ``NodeCheckInput``; result ``NodeCheckResult``."""

    @workflow.init
    def __init__(self, inp: NodeCheckInput) -> None:
        self._inp = inp
        self._gate = ApprovalGate(inp.policy.approval.approvers)
        self._state = "checking"
        self._verdict: CheckVerdict | None = None

    @workflow.run
    async def run(self, inp: NodeCheckInput) -> NodeCheckResult:
        d, pol = inp.drain, inp.policy
        rts = pol.return_to_service
        attrs: list[SearchAttributeUpdate[Any]] = [sa.CLUSTER.value_set(inp.cluster), sa.NODES.value_set([d.node])]
        if d.incident_id:
            attrs.append(sa.INCIDENT_ID.value_set(d.incident_id))
        if d.category in _CATEGORIES:
            attrs.append(sa.CATEGORY.value_set(d.category))
        workflow.upsert_search_attributes(attrs)
        self._set_state("checking")

        drains = await workflow.execute_activity_method(
            HealthActivities.rts_guard_drains, GuardDrainsInput(cluster=inp.cluster, node=d.node),
            start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="guard records",
        )
        why = repeat_offender(drains, pol, workflow.now())
        if why:
            await self._notify("escalated", f"{d.node} stays drained: {why}")
            return await self._done(RtsOutcome.refused, why)

        try:
            verdict = await workflow.execute_activity_method(
                HealthActivities.run_health_check,
                HealthCheckInput(cluster=inp.cluster, node=d.node, command=rts.command, method=rts.method.value,
                                 timeout_s=rts.timeout.total_seconds(), window_name=ids.maintenance_window_name(d.node),
                                 window_s=(rts.timeout + rts.reservation_extra).total_seconds(),
                                 users=rts.reservation_users, reason=d.reason),
                start_to_close_timeout=rts.timeout + CHECK_MARGIN, heartbeat_timeout=CHECK_HEARTBEAT,
                retry_policy=retry.PROBE, summary=f"health check {d.node} ({rts.method.value})",
            )
        except ActivityError as e:
            c = e.cause
            verdict = CheckVerdict(node=d.node, passed=False,
                                   summary=f"check did not finish: {c.message if isinstance(c, ApplicationError) else c or e}")
        self._verdict = verdict

        if not verdict.passed:
            reason = failed_reason(pol, d, workflow.now(), verdict.summary)
            r = await self._act(HealthActivities.redrain_checked_node, d.node, reason, "keep drained")
            if not r.done:
                return await self._done(RtsOutcome.changed, r.detail, r)
            await self._notify("node_check_failed", f"{d.node} stays drained: {verdict.summary}")
            return await self._done(RtsOutcome.check_failed, verdict.summary, r)

        answer = await workflow.execute_activity_method(
            GuardActivities.read_guard_mode,
            ModeQuery(cluster=inp.cluster, partition=d.partition, fallback=pol.mode_for(d.partition)),
            start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="read mode",
        )
        mode = answer.mode
        workflow.upsert_search_attributes([sa.MODE.value_set(mode.value)])
        if mode != Mode.auto:
            self._set_state("awaiting_approval")
            waiting = asyncio.ensure_future(self._gate.wait(pol.approval.timeout))  # open before the webhook
            await self._notify("approval_needed", f"resume {d.node}? health check passed: {verdict.summary}")
            decision = await waiting
            if decision is None and pol.approval.on_expiry != ExpiryAction.proceed:
                return await self._done(RtsOutcome.expired, f"no decision within {pol.approval.timeout}; stays drained")
            if decision is not None and decision.decision == DecisionKind.reject:
                return await self._done(RtsOutcome.rejected, f"rejected by {decision.approver}"
                                  + (f": {decision.note}" if decision.note else ""))

        r = await self._act(HealthActivities.resume_checked_node, d.node, "", "resume")
        if not r.done:
            return await self._done(RtsOutcome.changed, r.detail, r)
        await self._notify("node_resumed", f"{d.node} back in service: {verdict.summary}")
        return await self._done(RtsOutcome.resumed, verdict.summary, r, false_isolation=d.blamed_hardware)

    async def _act(self, fn: Any, node: str, new_reason: str, what: str) -> NodeActionResult:
        d = self._inp.drain
        return await workflow.execute_activity_method(
            fn, NodeActionInput(cluster=self._inp.cluster, node=node, expected_reason=d.reason, new_reason=new_reason,
                                incident_id=d.incident_id, category=d.category, blamed_hardware=d.blamed_hardware,
                                prefix=self._inp.policy.drain_reason_prefix),
            start_to_close_timeout=retry.SHORT, schedule_to_close_timeout=retry.MUTATING_DEADLINE,
            retry_policy=retry.MUTATING, summary=f"{what} {node}",
        )

    async def _done(self, outcome: RtsOutcome, detail: str, r: NodeActionResult | None = None,
                    false_isolation: bool = False) -> NodeCheckResult:
        """Close: the result, also appended to the audit trail (``record_node_check``)."""
        self._set_state(outcome.value)
        d = self._inp.drain
        cmds = (self._verdict.commands if self._verdict else []) + (r.commands if r else [])
        dec = self._gate.decision
        res = NodeCheckResult(cluster=self._inp.cluster, node=d.node, incident_id=d.incident_id, category=d.category,
                              outcome=outcome, detail=detail, verdict=self._verdict,
                              decided_by=dec.approver if dec else None, false_isolation=false_isolation,
                              commands=cmds, check_id=workflow.info().workflow_id, closed_at=workflow.now())
        await workflow.execute_activity_method(
            HealthActivities.record_node_check, res, start_to_close_timeout=retry.SHORT,
            retry_policy=retry.READ_ONLY, summary="audit record",
        )
        return res

    def _set_state(self, state: str) -> None:
        self._state = state
        workflow.upsert_search_attributes([sa.STATE.value_set(state)])
        d = self._inp.drain
        v = f"; check: {self._verdict.summary}" if self._verdict else ""
        workflow.set_current_details(
            f"return to service of {d.node} (incident {d.incident_id or 'unknown'}, {d.category or 'unknown'}): "
            f"{state}{v}" + ("\n\nApprove: `revive approve <this workflow id> --as <you>`" if state == "awaiting_approval"
                             else ""))

    async def _notify(self, event: str, text: str) -> None:
        pol = self._inp.policy
        if not pol.notify.webhooks:
            return
        d = self._inp.drain
        await workflow.execute_activity(
            notify_activity.notify,
            NotifyInput(event=NotifyEvent(kind=event, incident_id=d.incident_id or workflow.info().workflow_id,
                                          cluster=self._inp.cluster, summary=text, nodes=[d.node], at=workflow.now(),
                                          detail={"check": workflow.info().workflow_id}),
                        webhooks=pol.notify.webhooks, timeout_s=pol.notify.timeout.total_seconds()),
            start_to_close_timeout=timedelta(seconds=60), retry_policy=retry.PROBE, summary=f"notify {event}",
        )

    # ---- human in the loop (same payload and rules as IncidentWorkflow.decide) ----------------
    @workflow.update
    def decide(self, *args: Any) -> str:
        """Approve or reject the resume: ``{"decision": "approve"|"reject", "approver": "...", "note": "..."}``."""
        return self._gate.take_update(args)

    @decide.validator
    def _validate_decide(self, *args: Any) -> None:
        self._gate.check_update(args)

    @workflow.signal(name="decide")
    def decide_signal(self, *args: Any) -> None:
        """Same payload as the Update; an invalid one is recorded and ignored."""
        self._gate.take_signal(args)

    @workflow.query
    def status(self) -> dict[str, object]:
        d = self._inp.drain
        return {"state": self._state, "node": d.node, "incident_id": d.incident_id, "category": d.category,
                "reason": d.reason, "check": self._verdict.model_dump(mode="json") if self._verdict else None,
                "decision": self._gate.decision.model_dump(mode="json") if self._gate.decision else None,
                "ignored_decisions": list(self._gate.ignored)}


@workflow.defn(name=ids.RTS_WORKFLOW)
class ReturnToServiceWorkflow:
    """One pass over a cluster's Revive-drained nodes. Input ``RtsInput``; result ``RtsResult``."""

    @workflow.run
    async def run(self, inp: RtsInput) -> RtsResult:
        workflow.upsert_search_attributes([sa.CLUSTER.value_set(inp.cluster)])
        now = workflow.now()
        cands: list[Candidate] = await workflow.execute_activity_method(
            HealthActivities.rts_candidates, ScanInput(cluster=inp.cluster, policy=inp.policy, now=now),
            start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="Revive's drained nodes",
        )
        result = RtsResult(cluster=inp.cluster, scanned_at=now, skipped=[c for c in cands if not c.check])
        todo = [c for c in cands if c.check]
        workflow.set_current_details(f"return to service on {inp.cluster}: {len(todo)} node(s) to check, "
                                     f"{len(result.skipped)} skipped")
        limit = inp.policy.return_to_service.max_concurrent
        tq = inp.task_queue
        self._running = 0

        async def one(c: Candidate) -> None:
            try:
                res = await workflow.execute_child_workflow(
                    NodeCheckWorkflow.run,
                    NodeCheckInput(cluster=inp.cluster, drain=c.drain, policy=inp.policy, policy_path=inp.policy_path),
                    id=ids.node_check_id(inp.cluster, c.drain.node, tq),
                    parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                    static_summary=f"check {c.drain.node}",
                )
                result.checked.append(res)
            except WorkflowAlreadyStartedError:
                result.busy.append(c.drain.node)
            except ChildWorkflowError as e:  # one node's failed check never hides the others
                result.skipped.append(Candidate(drain=c.drain, check=False, why=f"check failed to run: {e.cause or e}"))
            finally:
                self._running -= 1

        tasks = []
        for c in todo:
            await workflow.wait_condition(lambda: self._running < limit)
            self._running += 1
            tasks.append(asyncio.create_task(one(c)))
        await asyncio.gather(*tasks)
        result.checked.sort(key=lambda r: r.node)
        workflow.set_current_details(
            f"return to service on {inp.cluster}: "
            + (", ".join(f"{r.node} {r.outcome.value}" for r in result.checked) or "nothing checked")
            + (f"; busy: {', '.join(result.busy)}" if result.busy else ""))
        return result


__all__ = ["NodeCheckWorkflow", "ReturnToServiceWorkflow"]
