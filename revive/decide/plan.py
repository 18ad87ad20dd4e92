"""Decide stage — plan selection: attribution + policy + the job's incident history → a ``Plan``.

Runs inside workflow code (and in ``revive backtest``), so it does no I/O and reads no clock: the
caller passes ``now``. Every plan names the rule that produced it; the attribution's recommendation
and the executed action are both kept.

Rules, first match wins (issue #4's runbook list):

==============================================  ===========================  =====================
attribution                                     runbook                      rule
==============================================  ===========================  =====================
healthy (category none)                         none                         attribution:healthy
recommendation stop_no_retry                    stop                         runbook:stop_at_first_sight
budget spent / same root cause repeating        stop                         budget:* / rule:*
preemption or time limit, checkpoint stalled    stop                         rule:no_checkpoint_progress
recommendation escalate                         escalate                     attribution:conflict
NCCL/IB error naming >= 2 nodes behind one      escalate                     runbook:shared_switch
  switch (``policy.topology``)
hang                                            hang                         runbook:hang
drain_and_requeue, culprit nodes named          drain_and_requeue            runbook:hardware_on_identified_node
drain_and_requeue, no node identified           restart_in_place             runbook:hardware_node_not_identified
requeue_exclude_nodes, nodes named              requeue_exclude              runbook:exclude_named_nodes
straggler, slow node named                      straggler                    runbook:straggler_at_checkpoint
  (repeat offenders among them are drained)
anything else                                   restart_in_place             runbook:restart_in_place
==============================================  ===========================  =====================
"""

from __future__ import annotations

from datetime import datetime

from revive.decide.budgets import (
    JobIncidentHistory,
    checkpoint_advanced,
    exclusions_allowed,
    repeat_offenders,
    stop_rule,
)
from revive.models import Action, Attribution, Category, JobRecord, Plan, PlanStep, RunbookName, StepKind
from revive.policy import RecoveryPolicy

RUNBOOK_NONE = RunbookName.none
RUNBOOK_STOP = RunbookName.stop
RUNBOOK_ESCALATE = RunbookName.escalate


def shared_switch(policy: RecoveryPolicy, nodes: list[str]) -> str | None:
    """The switch (``policy.topology`` value) that at least two distinct ``nodes`` share and all
    of them sit behind, or None (fewer than two nodes, a node missing from the map, several
    switches, or no topology). Pure."""
    distinct = list(dict.fromkeys(nodes))
    if len(distinct) < 2 or not policy.topology:
        return None
    switches = {policy.topology.get(n) for n in distinct}
    if len(switches) != 1 or None in switches:
        return None
    return switches.pop()


def plan_for(
    attribution: Attribution,
    policy: RecoveryPolicy,
    history: JobIncidentHistory,
    job: JobRecord | None,
    checkpoint_iteration: int | None,
    now: datetime | None = None,
) -> Plan:
    """Choose the runbook and its concrete steps. Pure; raises nothing for valid models."""
    rec = attribution.action
    cat = attribution.category

    def plan(action: Action, runbook: RunbookName, rule: str, **kw: object) -> Plan:
        return Plan(action=action, recommended=rec, runbook=runbook, rule=rule, **kw)

    if cat == Category.none and rec in (Action.none, Action.restart_in_place) and attribution.root_event is None:
        return plan(Action.none, RUNBOOK_NONE, "attribution:healthy", needs_approval=False)
    if rec == Action.stop_no_retry:
        return plan(
            Action.stop_no_retry, RUNBOOK_STOP, f"runbook:stop_at_first_sight({cat.value})",
            steps=[PlanStep(kind=StepKind.stop, detail="no requeue; notify the job owner with the evidence")],
            needs_approval=False,
        )
    stop = stop_rule(history, attribution, policy, checkpoint_iteration)
    if stop:
        return plan(Action.stop_no_retry, RUNBOOK_STOP, stop,
                    steps=[PlanStep(kind=StepKind.stop, detail=stop)], needs_approval=False)
    if cat in (Category.preempted, Category.timeout) and history.prior and not checkpoint_advanced(history, checkpoint_iteration):
        return plan(Action.stop_no_retry, RUNBOOK_STOP, "rule:no_checkpoint_progress",
                    steps=[PlanStep(kind=StepKind.stop, detail="checkpoint did not advance since the last attempt")],
                    needs_approval=False)
    if rec == Action.escalate:
        return plan(Action.escalate, RUNBOOK_ESCALATE, "attribution:conflict",
                    steps=[PlanStep(kind=StepKind.notify, detail="evidence conflicts; a person decides")])

    exc_now = list(job.exc_nodes) if job else []
    culprits = list(attribution.culprit_nodes)
    switch = shared_switch(policy, culprits) if cat == Category.nccl_error else None
    if switch is not None:
        return plan(Action.escalate, RUNBOOK_ESCALATE, "runbook:shared_switch",
                    steps=[PlanStep(kind=StepKind.notify, nodes=culprits,
                                    detail=f"nodes {', '.join(culprits)} share switch {switch}: suspect the "
                                           "switch, not the nodes; a person decides")])
    if cat == Category.hang:
        return plan(Action.restart_in_place, RunbookName.hang, "runbook:hang",
                    steps=[PlanStep(kind=StepKind.diagnose, detail="scontrol show job, last progress per rank, py-spy dump per node"),
                           PlanStep(kind=StepKind.requeue, detail="terminates the stuck attempt; resumes from the last checkpoint")])
    if rec == Action.drain_and_requeue:
        if not culprits:
            return plan(Action.restart_in_place, RunbookName.restart_in_place, "runbook:hardware_node_not_identified",
                        steps=[PlanStep(kind=StepKind.requeue, detail="per-node evidence named no node; restart in place and watch")])
        allowed, refused = exclusions_allowed(policy, exc_now, culprits)
        if refused:
            return plan(Action.escalate, RUNBOOK_ESCALATE, "budget:max_excluded_nodes_per_job",
                        steps=[PlanStep(kind=StepKind.notify, nodes=refused, detail="would exclude too many nodes")])
        return plan(Action.drain_and_requeue, RunbookName.drain_and_requeue, "runbook:hardware_on_identified_node",
                    drain_nodes=allowed,
                    steps=[PlanStep(kind=StepKind.drain, nodes=allowed, detail=f"reason {policy.drain_reason_prefix}<incident> {cat.value}"),
                           PlanStep(kind=StepKind.requeue, detail="plain requeue: Slurm never picks a drained node")])
    if rec == Action.requeue_exclude_nodes and culprits:
        allowed, refused = exclusions_allowed(policy, exc_now, culprits)
        if refused:
            return plan(Action.escalate, RUNBOOK_ESCALATE, "budget:max_excluded_nodes_per_job",
                        steps=[PlanStep(kind=StepKind.notify, nodes=refused, detail="would exclude too many nodes")])
        drain = repeat_offenders(history, allowed, policy, now) if now else []
        straggler = cat == Category.straggler
        rule = ("runbook:straggler_at_checkpoint" if straggler else "runbook:exclude_named_nodes") + (
            "+repeat_offender_drain" if drain else "")
        steps = [PlanStep(kind=StepKind.wait_checkpoint, detail="requeue at the next checkpoint boundary")] if straggler else []
        steps += [PlanStep(kind=StepKind.drain, nodes=drain, detail="repeat offender")] if drain else []
        steps.append(PlanStep(kind=StepKind.requeue_exclude, nodes=allowed, detail="ExcNodeList on the requeued job"))
        return plan(Action.requeue_exclude_nodes, RunbookName.straggler if straggler else RunbookName.requeue_exclude, rule,
                    exclude_nodes=allowed, drain_nodes=drain, steps=steps)
    return plan(Action.restart_in_place, RunbookName.restart_in_place, "runbook:restart_in_place",
                steps=[PlanStep(kind=StepKind.requeue, detail="requeue as is; resume from the last checkpoint")])
