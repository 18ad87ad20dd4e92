"""plan_for: one table row per rule (pure, no Temporal, no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from revive.decide.budgets import JobIncidentHistory, PriorIncident
from revive.decide.plan import plan_for, shared_switch
from revive.models import Action, Attribution, Category, Domain, Event, IncidentOutcome, JobRecord
from revive.policy import RecoveryPolicy
from runbooks import RUNBOOKS

NOW = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
SIG = {Category.gpu_hardware: "xid79", Category.crash: None, Category.app_bug: "py_keyerror",
       Category.nccl_error: "nccl_remote_error", Category.node_failure: None, Category.hang: None,
       Category.preempted: None, Category.straggler: None}


def att(cat: Category, action: Action, nodes: list[str] | None = None, sig: str | None = "default") -> Attribution:
    s = SIG.get(cat) if sig == "default" else sig
    ev = Event(source="job.log", text="x", signature_id=s) if cat != Category.none else None
    return Attribution(category=cat, domain=Domain.unknown, culprit_nodes=nodes or [], action=action, root_event=ev)


def prior(cat: Category, sig: str | None, executed: Action = Action.restart_in_place, ckpt: int | None = None,
          nodes: list[str] | None = None, ago_h: float = 1.0, n: int = 0) -> PriorIncident:
    return PriorIncident(incident_id=f"p{n}-{cat.value}", job_id="7", attempt=n, category=cat, root_signature=sig,
                         executed=executed, outcome=IncidentOutcome.recovered, culprit_nodes=nodes or [],
                         checkpoint_iteration=ckpt, closed_at=NOW - timedelta(hours=ago_h))


def hist(*p: PriorIncident) -> JobIncidentHistory:
    from revive.decide.budgets import history_from_priors
    return history_from_priors(list(p))


JOB = JobRecord(job_id="7", name="train", user="root", state="FAILED", nodes=["node1", "node2"])
TOPO = RecoveryPolicy(topology={"node1": "sw1", "node2": "sw1", "node3": "sw2", "node4": "sw2"})

# (id, attribution, policy, history, checkpoint, expected runbook, expected action, expected rule, drain, exclude)
CASES = [
    ("healthy", att(Category.none, Action.none), RecoveryPolicy(), hist(), 10,
     "none", Action.none, "attribution:healthy", [], []),
    ("app_bug_first_sight", att(Category.app_bug, Action.stop_no_retry), RecoveryPolicy(), hist(), 10,
     "stop", Action.stop_no_retry, "runbook:stop_at_first_sight(app_bug)", [], []),
    ("oom_sizing_first_sight", att(Category.oom_gpu, Action.stop_no_retry, sig=None), RecoveryPolicy(), hist(), 10,
     "stop", Action.stop_no_retry, "runbook:stop_at_first_sight(oom_gpu)", [], []),
    ("budget_requeues_spent", att(Category.gpu_hardware, Action.drain_and_requeue, ["node2"]),
     RecoveryPolicy(budgets={"max_requeues_per_job": 1}), hist(prior(Category.crash, None, ckpt=5)), 10,
     "stop", Action.stop_no_retry, "budget:max_requeues_per_job", [], []),
    ("unknown_crash_twice", att(Category.crash, Action.restart_in_place), RecoveryPolicy(),
     hist(prior(Category.crash, None, ckpt=5)), 10,
     "stop", Action.stop_no_retry, "rule:unknown_crash_repeated", [], []),
    ("same_root_cause_repeating", att(Category.nccl_error, Action.restart_in_place), RecoveryPolicy(),
     hist(prior(Category.nccl_error, "nccl_remote_error", ckpt=2, n=0),
          prior(Category.nccl_error, "nccl_remote_error", ckpt=5, n=1)), 10,
     "stop", Action.stop_no_retry, "budget:max_same_root_cause", [], []),
    ("no_progress_streak", att(Category.gpu_hardware, Action.drain_and_requeue, ["node2"]),
     RecoveryPolicy(budgets={"max_requeues_without_progress": 1}),
     hist(prior(Category.straggler, None, Action.requeue_exclude_nodes, ckpt=10)), 10,
     "stop", Action.stop_no_retry, "budget:max_requeues_without_progress", [], []),
    ("preempted_checkpoint_stalled", att(Category.preempted, Action.restart_in_place), RecoveryPolicy(),
     hist(prior(Category.preempted, None, Action.none, ckpt=10)), None,
     "stop", Action.stop_no_retry, "rule:no_checkpoint_progress", [], []),
    ("preempted_checkpoint_advanced", att(Category.preempted, Action.restart_in_place), RecoveryPolicy(),
     hist(prior(Category.preempted, None, Action.none, ckpt=10)), 20,
     "restart_in_place", Action.restart_in_place, "runbook:restart_in_place", [], []),
    ("conflict_escalates", att(Category.cuda_error, Action.escalate), RecoveryPolicy(), hist(), 10,
     "escalate", Action.escalate, "attribution:conflict", [], []),
    ("nccl_shared_switch_escalates", att(Category.nccl_error, Action.requeue_exclude_nodes, ["node1", "node2"]),
     TOPO, hist(), 10, "escalate", Action.escalate, "runbook:shared_switch", [], []),
    ("nccl_different_switches_excludes", att(Category.nccl_error, Action.requeue_exclude_nodes, ["node2", "node3"]),
     TOPO, hist(), 10, "requeue_exclude", Action.requeue_exclude_nodes, "runbook:exclude_named_nodes", [],
     ["node2", "node3"]),
    ("nccl_one_named_node_excludes", att(Category.nccl_error, Action.requeue_exclude_nodes, ["node2"]),
     TOPO, hist(), 10, "requeue_exclude", Action.requeue_exclude_nodes, "runbook:exclude_named_nodes", [], ["node2"]),
    ("nccl_nothing_named_restarts", att(Category.nccl_error, Action.restart_in_place), TOPO, hist(), 10,
     "restart_in_place", Action.restart_in_place, "runbook:restart_in_place", [], []),
    ("hang", att(Category.hang, Action.restart_in_place), RecoveryPolicy(), hist(), 10,
     "hang", Action.restart_in_place, "runbook:hang", [], []),
    ("hardware_identified", att(Category.gpu_hardware, Action.drain_and_requeue, ["node2"]), RecoveryPolicy(), hist(), 10,
     "drain_and_requeue", Action.drain_and_requeue, "runbook:hardware_on_identified_node", ["node2"], []),
    ("hardware_not_identified", att(Category.gpu_hardware, Action.drain_and_requeue, []), RecoveryPolicy(), hist(), 10,
     "restart_in_place", Action.restart_in_place, "runbook:hardware_node_not_identified", [], []),
    ("hardware_too_many_exclusions", att(Category.gpu_hardware, Action.drain_and_requeue, ["node1", "node2"]),
     RecoveryPolicy(max_excluded_nodes_per_job=1), hist(), 10,
     "escalate", Action.escalate, "budget:max_excluded_nodes_per_job", [], []),
    ("node_failure_excludes", att(Category.node_failure, Action.requeue_exclude_nodes, ["node2"]), RecoveryPolicy(),
     hist(), 10, "requeue_exclude", Action.requeue_exclude_nodes, "runbook:exclude_named_nodes", [], ["node2"]),
    ("straggler_excludes_at_checkpoint", att(Category.straggler, Action.requeue_exclude_nodes, ["node2"]),
     RecoveryPolicy(), hist(), 10, "straggler", Action.requeue_exclude_nodes, "runbook:straggler_at_checkpoint", [],
     ["node2"]),
    ("repeat_offender_drained", att(Category.node_failure, Action.requeue_exclude_nodes, ["node2"]),
     RecoveryPolicy(repeat_offender={"incidents": 2}),
     JobIncidentHistory(node_incidents=[prior(Category.nccl_error, "x", nodes=["node2"], n=9)]), 10,
     "requeue_exclude", Action.requeue_exclude_nodes, "runbook:exclude_named_nodes+repeat_offender_drain",
     ["node2"], ["node2"]),
    ("node_local_fault_node_not_named_restarts", att(Category.cuda_error, Action.requeue_exclude_nodes, []),
     RecoveryPolicy(), hist(), 10, "restart_in_place", Action.restart_in_place, "runbook:restart_in_place", [], []),
    ("unknown_crash_first", att(Category.crash, Action.restart_in_place), RecoveryPolicy(), hist(), 10,
     "restart_in_place", Action.restart_in_place, "runbook:restart_in_place", [], []),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_plan_for_rule_table(case) -> None:
    _id, a, pol, h, ckpt, runbook, action, rule, drain, exclude = case
    p = plan_for(a, pol, h, JOB, ckpt, now=NOW)
    assert (p.runbook, p.action, p.rule) == (runbook, action, rule), p
    assert p.drain_nodes == drain and p.exclude_nodes == exclude, p
    assert p.recommended == a.action
    assert p.runbook in RUNBOOKS or p.runbook in ("none", "stop", "escalate")
    if p.runbook in ("stop",):
        assert not p.needs_approval


def test_every_runbook_is_reachable() -> None:
    reached = {c[5] for c in CASES}
    assert set(RUNBOOKS) <= reached and {"none", "stop", "escalate"} <= reached


def test_plan_for_is_deterministic() -> None:
    for c in CASES:
        a, pol, h, ckpt = c[1], c[2], c[3], c[4]
        assert plan_for(a, pol, h, JOB, ckpt, now=NOW) == plan_for(a, pol, h, JOB, ckpt, now=NOW)


@pytest.mark.parametrize("nodes,want", [
    (["node1", "node2"], "sw1"), (["node1", "node1"], None), (["node1", "node3"], None),
    (["node1", "node9"], None), (["node3", "node4"], "sw2"), ([], None),
])
def test_shared_switch(nodes, want) -> None:
    assert shared_switch(TOPO, nodes) == want
    assert shared_switch(RecoveryPolicy(), nodes) is None


def test_topology_is_validated_and_optional() -> None:
    from revive.errors import ConfigError
    from revive.policy import parse_policy

    assert parse_policy({}).topology == {}
    assert parse_policy({"topology": {"node1": "sw1"}}).topology == {"node1": "sw1"}
    with pytest.raises(ConfigError, match="topology"):
        parse_policy({"topology": ["node1"]})
