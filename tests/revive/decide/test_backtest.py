"""revive explain / backtest over audit records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from revive.backtest import Diff, backtest, explain
from revive.decide.budgets import JobIncidentHistory, history_from_priors, prior_from_result
from revive.decide.plan import plan_for
from revive.models import (
    Action,
    Attribution,
    Category,
    Domain,
    Event,
    IncidentOutcome,
    IncidentResult,
    Plan,
    PlanStep,
)
from revive.policy import RecoveryPolicy, RetryBudget

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _att(cat=Category.crash, action=Action.restart_in_place, nodes=(), sig=None) -> Attribution:  # type: ignore[no-untyped-def]
    return Attribution(category=cat, domain=Domain.unknown, culprit_nodes=list(nodes), action=action,
                       root_event=Event(source="job.log", line_no=42, text="Segmentation fault", signature_id=sig),
                       explanation="no root cause in the evidence")


def test_explain_reads_in_order() -> None:
    att = _att(Category.gpu_hardware, Action.drain_and_requeue, ["n2"], "xid79")
    plan = Plan(action=Action.drain_and_requeue, recommended=Action.drain_and_requeue, runbook="drain_and_requeue",
                rule="runbook:hardware_on_identified_node", drain_nodes=["n2"],
                steps=[PlanStep(kind="drain", nodes=["n2"]), PlanStep(kind="requeue")], needs_approval=False)
    res = IncidentResult(incident_id="inc-1", outcome=IncidentOutcome.recovered, category=Category.gpu_hardware,
                         executed=Action.drain_and_requeue, recommended=Action.drain_and_requeue,
                         rule="runbook:hardware_on_identified_node", job_id="7", attempt=1,
                         detected_at=T0, closed_at=T0 + timedelta(minutes=3))
    text = explain(res, att, plan)
    order = [text.index(s) for s in ("Evidence", "job.log:42", "Attribution", "gpu_hardware",
                                     "runbook:hardware_on_identified_node", "Action", "Outcome", "recovered")]
    assert order == sorted(order)
    assert "n2" in text and "xid79" in text
    bare = explain(IncidentResult(incident_id="x", outcome=IncidentOutcome.expired), None, None)
    assert "none recorded" in bare and "expired" in bare


def _records(policy: RecoveryPolicy) -> list[dict]:
    recs: list[dict] = []
    results: list[IncidentResult] = []
    for i in range(3):
        att = _att()
        hist = history_from_priors([prior_from_result(r, "7") for r in results])
        plan = plan_for(att, policy, hist, None, None, now=T0 + timedelta(hours=i))
        res = IncidentResult(
            incident_id=f"inc-{i}", outcome=IncidentOutcome.not_recovered if plan.action != Action.stop_no_retry
            else IncidentOutcome.stopped, category=att.category, executed=plan.action,
            recommended=att.action, rule=plan.rule, job_id="7", attempt=i,
            detected_at=T0 + timedelta(hours=i), closed_at=T0 + timedelta(hours=i, minutes=5))
        results.append(res)
        recs.append({"incident_id": res.incident_id, "cluster": "c", "job_id": "7", "attempt": i,
                     "mode": "auto", "attribution": att.model_dump(mode="json"),
                     "plan": plan.model_dump(mode="json"), "decision": None, "actions": [], "verify": None,
                     "result": res.model_dump(mode="json"), "policy": policy.model_dump(mode="json")})
    return recs


def test_backtest_same_policy_no_diff() -> None:
    pol = RecoveryPolicy()
    recs = _records(pol)
    assert backtest(recs, pol) == []
    assert backtest(list(reversed(recs)), pol) == []  # order comes from the records' times


def test_backtest_stricter_budget_differs() -> None:
    lax = RecoveryPolicy(budgets=RetryBudget(max_requeues_per_job=10))
    recs = _records(lax)
    strict = RecoveryPolicy(budgets=RetryBudget(max_requeues_per_job=0))
    diffs = backtest(recs, strict)
    assert diffs and all(isinstance(d, Diff) for d in diffs)
    assert diffs[0].incident_id == "inc-0" and diffs[0].new_rule == "budget:max_requeues_per_job"
    assert "→" in diffs[0].line()


def test_backtest_skips_records_without_attribution() -> None:
    rec = {"incident_id": "x", "cluster": "c", "job_id": "1", "attribution": None, "plan": None,
           "result": IncidentResult(incident_id="x", outcome=IncidentOutcome.expired).model_dump(mode="json")}
    assert backtest([rec], RecoveryPolicy()) == []
    assert JobIncidentHistory().requeues == 0
