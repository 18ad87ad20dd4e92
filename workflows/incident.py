"""IncidentWorkflow: one durable workflow per detected incident; its history is the audit log.

Decide only; every side effect is an activity. The run reads like the on-call procedure:
gather evidence → attribute → plan (runbook + rule) → approval gate (observe mode) → run the
runbook as a child workflow (act → verify) → close with one audit record.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import notify as notify_activity
    from activities.attribution import AttributionActivities
    from activities.audit import AuditActivities
    from activities.evidence import EvidenceActivities
    from activities.guard import GuardActivities
    from activities.jobspec import JobSpecActivities
    from activities.remediation import RemediationActivities
    from revive import card, ids, retry
    from revive import search_attributes as sa
    from revive.decide.approval import needs_person
    from revive.decide.breaker import DrainGrant, DrainGrantInput
    from revive.decide.budgets import JobIncidentHistory
    from revive.decide.jobrecord import AdmitAnswer, AdmitIncidentInput, AdmitInput, ReportInput
    from revive.decide.plan import plan_for
    from revive.decide.settings import ModeAnswer, ModeQuery
    from revive.logline import cap_line
    from revive.models import (
        Action,
        ActionKind,
        Attribution,
        AuditRecord,
        DecisionKind,
        EvidenceBundle,
        GatherEvidenceInput,
        IncidentHistoryInput,
        IncidentInput,
        IncidentOutcome,
        IncidentResult,
        IncidentState,
        JobRecord,
        JobSpecSaved,
        LoopCheckInput,
        LoopVerdict,
        ModeInput,
        NotifyEvent,
        NotifyInput,
        Plan,
        RunbookInput,
        RunbookName,
        RunbookResult,
        SaveJobSpecInput,
    )
    from revive.policy import ExpiryAction, Mode
    from runbooks import RUNBOOKS, steps
    from workflows.approval import ApprovalGate

MAX_EXTRA_TRIGGERS = 100
"""Later triggers kept per incident (the monitor sends at most 20; a storm is counted, not stored)."""
PATCH_SAVE_JOB_SPEC = "save-job-spec"
"""Job specs saved at detection (resubmission). Remove once no incident started before it is open."""
PATCH_EXTERNAL_IN_BACKGROUND = "external-attribution-in-background"
"""The external attribution no longer holds up the plan. Remove with the previous one."""
PATCH_CULPRIT_SA = "culprit-search-attribute"
"""``ReviveCulprits`` upserted after attribution (one more command). Remove once no incident started
before it is open."""
PATCH_JOB_RECORD = "job-record-budgets"
"""Budgets read from (and reserved in) the per-job record (``admit_incident`` instead of
``incident_history``) and the outcome reported to it at the close (``report_job_outcome``). Remove
once no incident started before it is open."""
PATCH_MODE_FROM_GUARD = "mode-from-guard"
"""The gate reads the mode from the cluster's guard (``read_guard_mode``) instead of the policy file
(``read_mode``). Remove with the previous one."""
PATCH_SUSPECT_NEEDS_PERSON = "suspect-checkpoint-needs-person"
"""Before the gate, a requeueing plan is checked for a bad-checkpoint loop (``runbooks.steps.
bad_checkpoint``); when the layout allows resuming from the previous checkpoint, the plan needs a
person even in auto mode ("checkpoint N suspect"), and on approval the runbook performs the step."""
GATHER_HEARTBEAT = timedelta(seconds=15)
"""Heartbeat timeout of ``gather_evidence`` (it heartbeats every 5 s): a worker killed while gathering
has its gather retried after ~15 s, not after the 2-minute start-to-close."""
NOTIFY_HEARTBEAT = timedelta(seconds=15)
"""Heartbeat timeout of ``notify`` (it heartbeats every 5 s): a worker killed while notifying costs
the incident ~15 s, not the 60 s start-to-close (notifications are best effort)."""
PATCH_FAST_FIRST_ACTION = "fast-first-action"
"""Reads that do not wait for each other run side by side: ``save_job_spec`` beside
``gather_evidence``; after attribution ``read_guard_mode`` and the bad-checkpoint check
(``checkpoint_loop``, when the policy asks for it) beside ``admit_incident``; a runbook started
without a person's decision in between is told the check found nothing (``RunbookInput.loop_checked``)
and does not repeat it. The decisions and their inputs are unchanged. Remove once no incident
started before it is open."""
MAX_TRIGGER_PAYLOAD = 4096
"""Characters of one ``add_trigger`` payload accepted by the Update (the kept text is capped further
by ``revive.logline.cap_line``)."""


@workflow.defn
class IncidentWorkflow:
    """Decide only; every side effect is an activity."""

    @workflow.init
    def __init__(self, inp: IncidentInput) -> None:
        self._inp = inp
        self._state: str = IncidentState.opened
        self._gate = ApprovalGate(inp.policy.approval.approvers)
        self._attribution: Attribution | None = None
        self._external: Attribution | None = None
        self._external_handle: workflow.ActivityHandle | None = None
        self._plan: Plan | None = None
        self._mode = inp.policy.mode_for(inp.partition)
        self._extra_triggers: list[str] = []
        self._partition_size = 1
        self._breaker_reason = ""
        self._dropped_triggers = 0
        self._job: JobRecord | None = None
        self._mode_source = "input"
        """Where the gate's mode came from (``revive.decide.settings.ModeAnswer.source``, or
        ``policy_file`` before ``PATCH_MODE_FROM_GUARD``)."""
        self._policy_version = 0
        """The guard's policy version at the gate (0: none applied there)."""
        self._admitted = False
        """The job record admitted this incident (``PATCH_JOB_RECORD``): report the outcome at close."""
        self._fast = False
        """``PATCH_FAST_FIRST_ACTION`` applies to this incident (decided once, in the gather stage)."""
        self._mode_read: workflow.ActivityHandle[ModeAnswer] | None = None
        self._loop_read: workflow.ActivityHandle[LoopVerdict] | None = None
        """Reads started beside the job-record admission (``PATCH_FAST_FIRST_ACTION``)."""
        self._waited = False
        """The gate waited for a person (the bad-checkpoint check is then repeated by the runbook)."""
        self._stages: dict[str, datetime] = {}
        """State → when it was entered (workflow time): the card's and ``revive show``'s timings."""

    @workflow.run
    async def run(self, inp: IncidentInput) -> IncidentResult:
        evidence = await self._gather(inp)
        attribution = await self._attribute(evidence)
        plan = await self._decide_plan(inp, evidence, attribution)
        if plan.runbook not in RUNBOOKS:  # reads started beside the admission that this plan does not use
            for read in (self._loop_read, self._mode_read):
                if read is not None:
                    await self._drop_read(read)
            self._loop_read = self._mode_read = None
        if plan.runbook == RunbookName.none:
            return await self._close(IncidentOutcome.no_action, plan.rule)
        if plan.runbook == RunbookName.stop:
            await self._notify("stopped", f"stopped: {plan.rule}")
            return await self._close(IncidentOutcome.stopped, f"stopped: {plan.rule}")
        if plan.runbook == RunbookName.escalate:
            await self._notify("escalated", plan.rule)
            return await self._close(IncidentOutcome.escalated, plan.rule)

        rb_inp = RunbookInput(
            incident_id=inp.incident_id, cluster=inp.cluster, job=inp.job, plan=plan,
            category=attribution.category, log_path=inp.log_path, attempt=inp.attempt,
            checkpoint_iteration=inp.checkpoint_iteration, policy=inp.policy,
            last_progress=inp.last_progress,
            # input only (no command changes): "same root cause" in the bad-checkpoint check
            root_signature=attribution.root_event.signature_id if attribution.root_event else None,
        )
        suspect: LoopVerdict | None = None
        loop_log: steps.RunbookLog | None = None
        if (plan.runbook in RUNBOOKS and inp.policy.bad_checkpoint.enabled and inp.policy.bad_checkpoint.propose_previous
                and inp.log_path and workflow.patched(PATCH_SUSPECT_NEEDS_PERSON)):
            loop_log = steps.RunbookLog(plan.runbook)
            v = await steps.bad_checkpoint(rb_inp, loop_log, pending=self._loop_read)
            self._loop_read = None
            if v is not None and v.previous is not None and v.proposal:
                suspect = v
            elif v is not None:
                loop_log = None  # a suspect the gate cannot propose a way out of: the runbook escalates it
        gate_outcome = await self._gate_plan(inp, plan, suspect=suspect)
        if gate_outcome is not None:
            return await self._close(*gate_outcome)
        rb_inp = rb_inp.model_copy(update={"plan": plan})  # as the gate left it
        if self._fast and loop_log is not None and suspect is None and not self._waited:
            rb_inp = rb_inp.model_copy(update={"loop_checked": dict(loop_log.diagnostics)})
        if suspect is not None:
            d = self._gate.decision
            rb_inp = rb_inp.model_copy(update={"rollback": suspect, "rollback_approved_by": d.approver if d else None,
                                               "checkpoint_iteration": suspect.previous})

        self._set_state(IncidentState.acting)
        rb: RunbookResult = await workflow.execute_child_workflow(
            RUNBOOKS[plan.runbook].run,
            rb_inp,
            id=ids.runbook_id(inp.incident_id),
            static_summary=f"runbook {plan.runbook} for {inp.incident_id}",
        )
        await self._notify(rb.outcome.value, rb.reason)
        return await self._close(rb.outcome, rb.reason, runbook=rb)

    # ---- stages --------------------------------------------------------------------------------
    async def _gather(self, inp: IncidentInput) -> EvidenceBundle:
        self._set_state(IncidentState.gathering)
        gather_in = GatherEvidenceInput(incident_id=inp.incident_id, cluster=inp.cluster, job_id=inp.job.job_id,
                                        trigger=inp.trigger, log_path=inp.log_path, nodes=inp.nodes,
                                        attempt=inp.attempt)
        # patched: incidents recorded before job specs were saved must keep replaying
        if workflow.patched(PATCH_SAVE_JOB_SPEC):
            self._fast = workflow.patched(PATCH_FAST_FIRST_ACTION)
            if self._fast:  # the job spec and the evidence side by side
                spec = self._start_save_job_spec(inp)
                evidence = self._start_gather(gather_in)
                try:
                    await spec
                except ActivityError:
                    pass  # as in _save_job_spec
                return await evidence
            await self._save_job_spec(inp)
        return await self._start_gather(gather_in)

    def _start_gather(self, gather_in: GatherEvidenceInput) -> workflow.ActivityHandle[EvidenceBundle]:
        return workflow.start_activity_method(
            EvidenceActivities.gather_evidence, gather_in,
            # the activity heartbeats (timeouts change no command: histories replay)
            start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=GATHER_HEARTBEAT,
            retry_policy=retry.READ_ONLY, summary="gather evidence",
        )

    def _start_save_job_spec(self, inp: IncidentInput) -> workflow.ActivityHandle[JobSpecSaved]:
        return workflow.start_activity_method(
            JobSpecActivities.save_job_spec,
            SaveJobSpecInput(incident_id=inp.incident_id, cluster=inp.cluster, job_id=inp.job.job_id),
            # heartbeats (a timeout changes no command: histories replay); a killed worker's save
            # held the gather stage for its whole 60 s start-to-close (chaos worker-kill-gathering)
            start_to_close_timeout=retry.SHORT, heartbeat_timeout=GATHER_HEARTBEAT,
            retry_policy=retry.READ_ONLY, summary="save job spec",
        )

    @staticmethod
    async def _drop_read(handle: workflow.ActivityHandle[Any]) -> None:
        """Wait out a read whose answer is no longer needed (its failure changes nothing)."""
        try:
            await handle
        except ActivityError:
            pass

    async def _save_job_spec(self, inp: IncidentInput) -> None:
        """The batch script and options, for a resubmission if the job cannot be requeued."""
        try:
            await self._start_save_job_spec(inp)
        except ActivityError:
            pass  # a resubmission then needs slurmctld to still know the job at action time

    async def _attribute(self, evidence: EvidenceBundle) -> Attribution:
        self._set_state(IncidentState.attributing)
        self._attribution = await workflow.execute_activity_method(
            AttributionActivities.attribute, evidence,
            start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="attribute",
        )
        # optional external service: recorded beside Revive's verdict; it never decides, and since
        # the patch it no longer holds up the plan (its slow pass may take minutes)
        if workflow.patched(PATCH_EXTERNAL_IN_BACKGROUND):
            self._external_handle = workflow.start_activity_method(
                AttributionActivities.attribute_external, evidence,
                start_to_close_timeout=timedelta(minutes=3), retry_policy=retry.PROBE, summary="external attribution",
            )
        else:
            try:
                self._external = await workflow.execute_activity_method(
                    AttributionActivities.attribute_external, evidence,
                    start_to_close_timeout=timedelta(minutes=3), retry_policy=retry.PROBE,
                    summary="external attribution",
                )
            except ActivityError:
                self._external = None
        a = self._attribution
        workflow.upsert_search_attributes([sa.CATEGORY.value_set(a.category.value)])
        # patched: histories recorded before it have one upsert fewer here
        if workflow.patched(PATCH_CULPRIT_SA) and a.culprit_nodes:
            workflow.upsert_search_attributes([sa.CULPRITS.value_set(list(a.culprit_nodes))])
        return a

    async def _decide_plan(self, inp: IncidentInput, evidence: EvidenceBundle, a: Attribution) -> Plan:
        self._set_state(IncidentState.planning)
        hist_in = IncidentHistoryInput(
            cluster=inp.cluster, job_id=inp.job.job_id,
            job_submit_time_iso=inp.job_submit_time.isoformat() if inp.job_submit_time else None,
            exclude_incident_id=inp.incident_id, nodes=list(inp.nodes),
            nodes_since_iso=(workflow.now() - inp.policy.repeat_offender.window).isoformat())
        history: JobIncidentHistory
        # patched: incidents recorded before the job record read the history through visibility
        if workflow.patched(PATCH_JOB_RECORD):
            root = a.root_event.signature_id if a.root_event else None
            if self._fast:
                self._start_reads(inp, a)
            answer: AdmitAnswer = await workflow.execute_activity_method(
                GuardActivities.admit_incident,
                AdmitIncidentInput(
                    admit=AdmitInput(cluster=inp.cluster, job_id=inp.job.job_id, incident_id=inp.incident_id,
                                     attempt=inp.attempt, family=inp.fault_family[:64], category=a.category,
                                     root_signature=root, checkpoint_iteration=inp.checkpoint_iteration,
                                     job_submit_time=inp.job_submit_time, now=workflow.now()),
                    history=hist_in,
                    # input only (no command change): repeat offenders from the guard's records
                    culprit_nodes=list(a.culprit_nodes)[:64], repeat_window=inp.policy.repeat_offender.window),
                start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="admit to job record",
            )
            self._admitted = True
            history = answer.history
        else:
            history = await workflow.execute_activity_method(
                GuardActivities.incident_history, hist_in,
                start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="job incident history",
            )
        self._job = evidence.job
        self._partition_size = evidence.partition_size or max(len(evidence.node_states), 1)
        self._plan = plan_for(a, inp.policy, history, evidence.job, inp.checkpoint_iteration, now=workflow.now())
        workflow.set_current_details(self._details())
        return self._plan

    def _start_reads(self, inp: IncidentInput, a: Attribution) -> None:
        """Start the gate's mode read and the bad-checkpoint check, to run beside the admission
        (``PATCH_FAST_FIRST_ACTION``). Same inputs as when they ran one after the other; the check
        runs whenever the policy asks for it and its answer is used only by a requeueing plan."""
        if workflow.patched(PATCH_MODE_FROM_GUARD):
            self._mode_read = workflow.start_activity_method(
                GuardActivities.read_guard_mode,
                ModeQuery(cluster=inp.cluster, partition=inp.partition, fallback=inp.policy.mode_for(inp.partition)),
                start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="read mode from guard",
            )
        bc = inp.policy.bad_checkpoint
        if (bc.enabled and bc.propose_previous and inp.log_path and workflow.patched(PATCH_SUSPECT_NEEDS_PERSON)
                and workflow.patched(steps.PATCH_BAD_CHECKPOINT)):
            self._loop_read = steps.start_loop_check(LoopCheckInput(
                incident_id=inp.incident_id, cluster=inp.cluster, job=inp.job, log_path=inp.log_path,
                category=a.category, root_signature=a.root_event.signature_id if a.root_event else None,
                checkpoint_iteration=inp.checkpoint_iteration, within_iterations=bc.within_iterations))

    async def _gate_plan(self, inp: IncidentInput, plan: Plan,
                         suspect: LoopVerdict | None = None) -> tuple[IncidentOutcome, str] | None:
        """Mode (read fresh) and the drain circuit breaker decide whether a person must approve.

        Auto mode asks the per-cluster guard for a drain grant first; a refusal (breaker open) sends
        the plan to a person whatever the mode. After a person approves a drain, the grant is asked
        again with ``approved_by`` so the drain counts in the breaker's window. A ``suspect``
        checkpoint (``PATCH_SUSPECT_NEEDS_PERSON``) needs a person in every mode, and its expiry
        never proceeds. Returns a closing (outcome, reason) when the plan must not run, else None.
        """
        # patched: incidents recorded before the guard held the mode re-read the policy file
        if self._mode_read is not None:  # started beside the admission, moments ago
            got: ModeAnswer = await self._mode_read
            self._mode_read = None
            self._mode, self._mode_source, self._policy_version = got.mode, got.source, got.policy_version
        elif workflow.patched(PATCH_MODE_FROM_GUARD):
            got = await workflow.execute_activity_method(
                GuardActivities.read_guard_mode,
                ModeQuery(cluster=inp.cluster, partition=inp.partition, fallback=inp.policy.mode_for(inp.partition)),
                start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="read mode from guard",
            )
            self._mode, self._mode_source, self._policy_version = got.mode, got.source, got.policy_version
        else:
            self._mode = Mode(await workflow.execute_activity_method(
                RemediationActivities.read_mode,
                ModeInput(policy_path=inp.policy_path, partition=inp.partition, fallback=self._mode.value),
                start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="read mode",
            ))
            self._mode_source = "policy_file" if inp.policy_path else "input"
        workflow.upsert_search_attributes([sa.MODE.value_set(self._mode.value)])
        if plan.drain_nodes and self._mode == Mode.auto:
            grant = await self._grant(inp, plan, approved_by=None)
            if not grant.granted:
                self._breaker_reason = grant.reason if grant.reason.startswith("breaker") else f"breaker: {grant.reason}"
                await self._notify("breaker_tripped", self._breaker_reason)
        plan.needs_approval, plan.approval_reason = needs_person(self._mode, self._breaker_reason)
        if suspect is not None:
            why = (f"checkpoint {suspect.suspect} suspect: {suspect.detail}; on approval Revive will "
                   f"{suspect.proposal}")
            plan.needs_approval = True
            plan.approval_reason = why + (f"; {plan.approval_reason}" if plan.approval_reason else "")
        if not plan.needs_approval:
            return None
        self._set_state(IncidentState.awaiting_approval)
        self._waited = True
        self._gate.open = True  # a decision sent while the notification is on its way counts
        await self._notify("approval_needed", plan.approval_reason)
        decision = await self._gate.wait(inp.policy.approval.timeout)
        if decision is None and suspect is not None:
            return (IncidentOutcome.escalated,
                    f"checkpoint {suspect.suspect} suspect: no decision within {inp.policy.approval.timeout}")
        if decision is None:
            if self._breaker_reason:
                return IncidentOutcome.escalated, f"approval expired while {self._breaker_reason}"
            if inp.policy.approval.on_expiry != ExpiryAction.proceed:
                return IncidentOutcome.expired, f"no decision within {inp.policy.approval.timeout}"
        elif decision.decision == DecisionKind.reject:
            return IncidentOutcome.rejected, f"rejected by {decision.approver}" + (f": {decision.note}" if decision.note else "")
        if plan.drain_nodes:
            who = decision.approver if decision else "policy:on_expiry=proceed"
            await self._grant(inp, plan, approved_by=who)  # a person's approval overrides the breaker
        return None

    async def _grant(self, inp: IncidentInput, plan: Plan, approved_by: str | None) -> DrainGrant:
        return await workflow.execute_activity_method(
            GuardActivities.request_drain_grant,
            DrainGrantInput(incident_id=inp.incident_id, cluster=inp.cluster, partition=inp.partition,
                            nodes=plan.drain_nodes, partition_size=self._partition_size,
                            policy=inp.policy.breaker, now=workflow.now(), approved_by=approved_by),
            start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="drain breaker",
        )

    async def _notify(self, event: str, text: str) -> None:
        """Best effort: a notification that fails (webhook down, the worker killed mid-call and the
        activity timed out) is logged and never fails the incident."""
        if not self._inp.policy.notify.webhooks:
            return
        inp, plan = self._inp, self._plan
        try:
            await self._send_notify(event, text, inp, plan)
        except ActivityError as e:
            workflow.logger.warning("notify %s failed (the incident goes on): %s", event, e.cause or e)

    async def _send_notify(self, event: str, text: str, inp: IncidentInput, plan: Plan | None) -> None:
        await workflow.execute_activity(
            notify_activity.notify,
            NotifyInput(
                event=NotifyEvent(kind=event, incident_id=inp.incident_id, cluster=inp.cluster, job_id=inp.job.job_id,
                                  summary=text, rule=plan.rule if plan else None,
                                  nodes=(plan.drain_nodes + plan.exclude_nodes) if plan else [],
                                  at=workflow.now(), link=inp.ui_url),
                webhooks=inp.policy.notify.webhooks, timeout_s=inp.policy.notify.timeout.total_seconds()),
            # the activity heartbeats (timeouts change no command: histories replay)
            start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=NOTIFY_HEARTBEAT,
            retry_policy=retry.PROBE, summary=f"notify {event}",
        )

    async def _close(self, outcome: IncidentOutcome, reason: str, runbook: RunbookResult | None = None) -> IncidentResult:
        inp, a, plan = self._inp, self._attribution, self._plan
        d = self._gate.decision
        if self._external_handle is not None:
            try:
                self._external = await self._external_handle
            except ActivityError:
                self._external = None
        result = IncidentResult(
            incident_id=inp.incident_id, outcome=outcome, reason=reason,
            category=a.category if a else None, domain=a.domain if a else None,
            culprit_nodes=a.culprit_nodes if a else [], recommended=a.action if a else None,
            executed=self._executed(plan, runbook),
            rule=plan.rule if plan else "", decided_by=d.approver if d else None,
            detected_at=inp.detected_at,
            fault_time=a.root_event.timestamp if a and a.root_event else None,
            first_action_at=runbook.first_action_at if runbook else None,
            resumed_at=runbook.verify.resumed_at if runbook and runbook.verify else None,
            closed_at=workflow.now(), job_id=inp.job.job_id, attempt=inp.attempt,
            root_signature=a.root_event.signature_id if a and a.root_event else None,
            checkpoint_iteration=inp.checkpoint_iteration, breaker_reason=self._breaker_reason or None,
        )
        self._set_state(outcome.value)
        if self._admitted:
            try:
                await workflow.execute_activity_method(
                    GuardActivities.report_job_outcome,
                    ReportInput(cluster=inp.cluster, job_id=inp.job.job_id, incident_id=inp.incident_id,
                                outcome=outcome, executed=result.executed, closed_at=result.closed_at or workflow.now(),
                                culprit_nodes=list(result.culprit_nodes)[:64], rule=result.rule[:300]),
                    start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="report to job record",
                )
            except ActivityError:
                pass  # the reservation then lapses after PENDING_EXPIRY; the audit record still says what ran
        await workflow.execute_activity_method(
            AuditActivities.append_audit,
            AuditRecord(incident_id=inp.incident_id, cluster=inp.cluster, job_id=inp.job.job_id,
                        attempt=inp.attempt, mode=self._mode.value, trigger=inp.trigger, attribution=a,
                        external_attribution=self._external, plan=plan, decision=d, runbook=runbook,
                        result=result, policy=inp.policy, ignored_decisions=list(self._gate.ignored),
                        extra_triggers=list(self._extra_triggers)
                        + ([f"{self._dropped_triggers} more trigger(s) not kept"] if self._dropped_triggers else []),
                        partition=inp.partition, job=self._job, last_progress=dict(inp.last_progress),
                        mode_source=self._mode_source, policy_version=self._policy_version),
            start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="append audit record",
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result

    @staticmethod
    def _executed(plan: Plan | None, runbook: RunbookResult | None) -> Action | None:
        """What really ran: the plan's action only when the runbook's cluster steps succeeded (a
        refused or failed step reports nothing it did not do); ``stop`` plans record the stop."""
        if plan is None:
            return None
        if runbook is None:
            return Action.stop_no_retry if plan.runbook == RunbookName.stop else None
        acted = any(a.ok and a.action in (ActionKind.drain, ActionKind.requeue, ActionKind.resubmit)
                    for a in runbook.actions)
        return plan.action if acted else None

    # ---- state, UI metadata --------------------------------------------------------------------
    def _set_state(self, state: str) -> None:
        self._state = state
        self._stages.setdefault(str(state), workflow.now())
        workflow.upsert_search_attributes([sa.STATE.value_set(state)])
        workflow.set_current_details(self._details())

    def _details(self) -> str:
        """The incident card (``revive.card``): verdict first, evidence, plan, decision, how to decide, timings."""
        inp, t = self._inp, self._inp.trigger
        return card.render(
            incident_id=inp.incident_id, state=str(self._state), mode=self._mode.value,
            attribution=self._attribution, plan=self._plan, decision=self._gate.decision,
            approvers=list(self._gate.approvers), stages=self._stages, detected_at=inp.detected_at,
            now=workflow.now(), trigger=f"{t.kind.value} {t.signature_id or t.state_to or ''}".strip(),
            breaker_reason=self._breaker_reason, ignored=len(self._gate.ignored),
        )

    # ---- human in the loop ---------------------------------------------------------------------
    # Handlers take ``*args``: the SDK then decodes any number of payloads as plain JSON values, so no
    # argument count or shape can fail a workflow task (a decide signal with no input, two inputs
    # or a wrong type is recorded and ignored; such an Update is refused by its validator).
    @workflow.update
    def decide(self, *args: Any) -> str:
        """Approve or reject the plan: ``{"decision": "approve"|"reject", "approver": "...", "note": "..."}``."""
        return self._gate.take_update(args)

    @decide.validator
    def _validate_decide(self, *args: Any) -> None:
        self._gate.check_update(args)

    @workflow.signal(name="decide")
    def decide_signal(self, *args: Any) -> None:
        """Same payload as the Update, for the Web UI and ``temporal workflow signal``. A signal
        cannot be refused, so a payload that is not a valid decision is recorded and ignored."""
        self._gate.take_signal(args)

    @workflow.signal(name="add_trigger")
    def add_trigger(self, *args: Any) -> None:
        """Later triggers of the same attempt, as a Signal (kept for old senders and histories: each
        writes an event, so a storm is better sent as the Update below). Any payload is recorded
        as capped text; at most ``MAX_EXTRA_TRIGGERS`` are kept, later ones counted."""
        if len(self._extra_triggers) >= MAX_EXTRA_TRIGGERS:
            self._dropped_triggers += 1
            return
        text = args[0] if len(args) == 1 and isinstance(args[0], str) else repr(args)
        self._extra_triggers.append(cap_line(text))

    @workflow.update(name="add_trigger")
    def add_trigger_update(self, *args: Any) -> int:
        """Later triggers as an Update: one string payload (≤ ``MAX_TRIGGER_PAYLOAD`` characters).
        The validator refuses it once ``MAX_EXTRA_TRIGGERS`` are kept — a refused Update writes no
        history event, so a storm of triggers costs the incident nothing beyond the cap (the
        sender counts the refusal as coalesced). Returns how many triggers are now kept."""
        self._extra_triggers.append(cap_line(str(args[0])))
        return len(self._extra_triggers)

    @add_trigger_update.validator
    def _validate_add_trigger(self, *args: Any) -> None:
        if len(self._extra_triggers) >= MAX_EXTRA_TRIGGERS:
            raise ValueError(f"coalesced: {MAX_EXTRA_TRIGGERS} triggers already kept")
        if len(args) != 1 or not isinstance(args[0], str):
            raise ValueError(f"expected one string payload, got {len(args)} payload(s)")
        if len(args[0]) > MAX_TRIGGER_PAYLOAD:
            raise ValueError(f"trigger text is {len(args[0])} characters, cap {MAX_TRIGGER_PAYLOAD}")

    @workflow.query
    def status(self) -> dict[str, object]:
        return {
            "state": self._state, "mode": self._mode.value,
            "attribution": self._attribution.model_dump(mode="json") if self._attribution else None,
            "plan": self._plan.model_dump(mode="json") if self._plan else None,
            "decision": self._gate.decision.model_dump(mode="json") if self._gate.decision else None,
            "ignored_decisions": list(self._gate.ignored),
            "incident_id": self._inp.incident_id, "job_id": self._inp.job.job_id,
            "detected_at": self._inp.detected_at.isoformat(),
            "stages": {k: v.isoformat() for k, v in self._stages.items()},
            "breaker_reason": self._breaker_reason or None,
            "mode_source": self._mode_source, "policy_version": self._policy_version,
            "extra_triggers": len(self._extra_triggers), "dropped_triggers": self._dropped_triggers,
        }
