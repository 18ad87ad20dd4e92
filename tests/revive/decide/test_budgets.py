"""Pure guard functions (run inside workflow code)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from revive.decide.breaker import DrainGrantInput, GuardState, evaluate_drain
from revive.decide.budgets import (
    RULE_MAX_REQUEUES,
    RULE_NO_PROGRESS,
    RULE_SAME_ROOT_CAUSE,
    RULE_UNKNOWN_CRASH_REPEATED,
    JobIncidentHistory,
    PriorIncident,
    checkpoint_advanced,
    drain_reason,
    exclusions_allowed,
    history_from_priors,
    owns_drain,
    prior_from_result,
    repeat_offenders,
    stop_rule,
)
from revive.models import Action, Attribution, Category, Domain, Event, IncidentOutcome, IncidentResult
from revive.policy import BreakerPolicy, RecoveryPolicy, RepeatOffenderPolicy, RetryBudget

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def att(cat: Category = Category.gpu_hardware, sig: str | None = "xid79", nodes=("n1",)) -> Attribution:  # type: ignore[no-untyped-def]
    ev = Event(source="job.log", text="x", signature_id=sig) if sig else None
    return Attribution(category=cat, domain=Domain.unknown, culprit_nodes=list(nodes),
                       action=Action.drain_and_requeue, root_event=ev)


def prior(i: int, cat=Category.gpu_hardware, sig="xid79", executed=Action.drain_and_requeue,  # type: ignore[no-untyped-def]
          ckpt=None, nodes=("n1",), age=timedelta(hours=1), outcome=IncidentOutcome.recovered) -> PriorIncident:
    return PriorIncident(incident_id=f"i{i}", job_id="1", attempt=i, category=cat, root_signature=sig,
                         executed=executed, outcome=outcome, culprit_nodes=list(nodes),
                         checkpoint_iteration=ckpt, closed_at=NOW - age + timedelta(minutes=i))


def test_no_history_never_stops() -> None:
    assert stop_rule(JobIncidentHistory(), att(), RecoveryPolicy(), None) is None
    assert stop_rule(JobIncidentHistory(), att(Category.crash, None), RecoveryPolicy(), 10) is None


def test_budget_requeues_per_job() -> None:
    pol = RecoveryPolicy(budgets=RetryBudget(max_requeues_per_job=2, max_same_root_cause=10))
    h = history_from_priors([prior(1, sig="a"), prior(2, sig="b")])
    assert h.requeues == 2
    assert stop_rule(h, att(sig="c"), pol, None) == RULE_MAX_REQUEUES
    zero = RecoveryPolicy(budgets=RetryBudget(max_requeues_per_job=0))
    assert stop_rule(JobIncidentHistory(), att(), zero, None) == RULE_MAX_REQUEUES


def test_same_root_cause() -> None:
    pol = RecoveryPolicy(budgets=RetryBudget(max_same_root_cause=2))
    one = history_from_priors([prior(1)])
    two = history_from_priors([prior(1), prior(2)])
    assert stop_rule(one, att(), pol, None) is None
    assert stop_rule(two, att(), pol, None) == RULE_SAME_ROOT_CAUSE
    assert stop_rule(two, att(sig="other"), pol, None) is None
    # without a signature, the category is the key
    nosig = history_from_priors([prior(1, sig=None), prior(2, sig=None)])
    assert stop_rule(nosig, att(sig=None), pol, None) == RULE_SAME_ROOT_CAUSE
    # no_action incidents do not count
    na = history_from_priors([prior(1, outcome=IncidentOutcome.no_action, executed=None), prior(2)])
    assert stop_rule(na, att(), pol, None) is None


def test_preemption_is_not_a_repeat() -> None:
    pol = RecoveryPolicy(budgets=RetryBudget(max_same_root_cause=1))
    h = history_from_priors([prior(i, cat=Category.preempted, sig=None, executed=Action.restart_in_place,
                                   ckpt=10 * i) for i in (1, 2, 3)])
    assert stop_rule(h, att(Category.preempted, None), pol, 40) is None


def test_unknown_crash_once_then_stop() -> None:
    h0 = JobIncidentHistory()
    assert stop_rule(h0, att(Category.crash, None), RecoveryPolicy(), None) is None
    h1 = history_from_priors([prior(1, cat=Category.crash, sig=None, executed=Action.restart_in_place)])
    assert stop_rule(h1, att(Category.crash, None), RecoveryPolicy(), None) == RULE_UNKNOWN_CRASH_REPEATED
    # a different root cause after an unknown crash is not a repeat
    assert stop_rule(h1, att(), RecoveryPolicy(), None) is None


def test_requeues_without_progress() -> None:
    pol = RecoveryPolicy(budgets=RetryBudget(max_requeues_without_progress=2, max_same_root_cause=10))
    h = history_from_priors([prior(1, sig="a", ckpt=100), prior(2, sig="b", ckpt=100)])
    assert stop_rule(h, att(sig="c"), pol, 100) == RULE_NO_PROGRESS
    assert stop_rule(h, att(sig="c"), pol, 150) is None
    # unknown checkpoints never count as "no progress" (rule 1 bounds those jobs)
    assert stop_rule(h, att(sig="c"), pol, None) is None
    one = history_from_priors([prior(1, sig="a", ckpt=100)])
    assert stop_rule(one, att(sig="c"), pol, 100) is None


def test_checkpoint_advanced() -> None:
    assert checkpoint_advanced(JobIncidentHistory(), None)
    h = history_from_priors([prior(1, ckpt=100), prior(2, ckpt=None)])
    assert checkpoint_advanced(h, 101)
    assert not checkpoint_advanced(h, 100)
    assert not checkpoint_advanced(h, None)


def test_repeat_offenders() -> None:
    pol = RecoveryPolicy(repeat_offender=RepeatOffenderPolicy(incidents=3, window=timedelta(hours=24)))
    h = JobIncidentHistory(
        prior=[prior(1, nodes=["n1"]), prior(2, nodes=["n1", "n2"])],
        node_incidents=[prior(2, nodes=["n1", "n2"]), prior(3, nodes=["n3"], age=timedelta(days=3))],
    )
    assert repeat_offenders(h, ["n1", "n2", "n3"], pol, NOW) == ["n1"]
    # outside the window → not counted
    assert repeat_offenders(h, ["n1"], pol, NOW + timedelta(days=2)) == []
    assert repeat_offenders([], ["n9"], RecoveryPolicy(repeat_offender=RepeatOffenderPolicy(incidents=1)), NOW) == ["n9"]


def test_exclusions_allowed() -> None:
    pol = RecoveryPolicy(max_excluded_nodes_per_job=2)
    assert exclusions_allowed(pol, [], ["a", "b", "c"]) == (["a", "b"], ["c"])
    assert exclusions_allowed(pol, ["a"], ["a", "b", "c"]) == (["a", "b"], ["c"])
    assert exclusions_allowed(pol, ["x", "y"], ["a"]) == ([], ["a"])
    assert exclusions_allowed(RecoveryPolicy(max_excluded_nodes_per_job=0), [], ["a"]) == ([], ["a"])


def test_owns_drain() -> None:
    pol = RecoveryPolicy()
    assert owns_drain(drain_reason(pol, "inc-1", Category.gpu_hardware), pol)
    assert owns_drain("revive:inc-1 nvlink", pol)
    assert not owns_drain("maintenance by bob", pol)
    assert not owns_drain("xrevive:inc", pol)
    assert not owns_drain(None, pol) and not owns_drain("", pol)
    assert owns_drain("ops:x", RecoveryPolicy(drain_reason_prefix="ops:"))


def test_prior_from_result() -> None:
    r = IncidentResult(incident_id="i", outcome=IncidentOutcome.stopped, category=Category.crash,
                       executed=Action.restart_in_place, job_id="7", checkpoint_iteration=3,
                       root_signature="s", attempt=1, closed_at=NOW)
    p = prior_from_result(r)
    assert (p.job_id, p.checkpoint_iteration, p.root_signature, p.attempt) == ("7", 3, "s", 1)
    assert prior_from_result(r, "8").job_id == "8"


def test_evaluate_drain_partition_size_unknown_and_pure() -> None:
    st = GuardState(cluster="c")
    inp = DrainGrantInput(incident_id="i", cluster="c", partition="p", nodes=["n1"], partition_size=0,
                          policy=BreakerPolicy(), now=NOW)
    g = evaluate_drain(st, inp, NOW)
    assert not g.granted and g.reason.startswith("breaker:partition_size_unknown")
    ok = evaluate_drain(st, inp.model_copy(update={"partition_size": 8}), NOW)
    assert ok.granted and ok.nodes == ["n1"]
    assert st.drains == []  # pure
