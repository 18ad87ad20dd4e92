"""The pure rules behind the guard's mode/policy Updates and the per-job record (admit/report)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from revive.decide.budgets import RULE_MAX_REQUEUES, stop_rule
from revive.decide.jobrecord import (
    MAX_ENTRIES,
    PENDING_EXPIRY,
    AdmitInput,
    JobRecordState,
    ReportInput,
    admit,
    report,
)
from revive.decide.settings import (
    MAX_POLICY_BYTES,
    GuardSettings,
    ModeChange,
    PolicyApply,
    apply_mode,
    apply_policy,
    effective_mode,
)
from revive.errors import ConfigError
from revive.models import Action, Attribution, Category, Domain, IncidentOutcome
from revive.policy import Mode, RecoveryPolicy
from tests.helpers.builders import T0


def _admit(iid: str, attempt: int = 0, at=T0, **kw) -> AdmitInput:
    return AdmitInput(cluster="c", job_id="7", incident_id=iid, attempt=attempt, family="gpu",
                      category=Category.gpu_hardware, root_signature="xid79", now=at, job_submit_time=T0, **kw)


def test_a_partition_override_wins_over_the_cluster_mode_and_a_repeat_update_id_applies_once():
    s = GuardSettings()
    assert effective_mode(s, "gpu") is None  # nothing set: the incident keeps its input policy's mode
    a = apply_mode(s, ModeChange(mode=Mode.auto, who="alice", note="canary", update_id="u1"), T0)
    assert a.applied and "mode auto for cluster (canary)" == a.summary
    apply_mode(s, ModeChange(mode=Mode.observe, partition="gpu", who="bob", update_id="u2"), T0 + timedelta(1))
    assert effective_mode(s, "gpu") == (Mode.observe, "guard:partition", "bob")
    assert effective_mode(s, "debug") == (Mode.auto, "guard:global", "alice")
    again = apply_mode(s, ModeChange(mode=Mode.auto, partition="gpu", who="bob", update_id="u2"), T0 + timedelta(2))
    assert not again.applied and effective_mode(s, "gpu")[0] == Mode.observe
    assert len(s.changes) == 2 and s.changes[0].startswith(T0.isoformat())


@pytest.mark.parametrize("bad", [
    {"mode": "yolo", "who": "a", "update_id": "x"},
    {"mode": "auto", "who": "", "update_id": "x"},
    {"mode": "auto", "who": "a" * 129, "update_id": "x"},
    {"mode": "auto", "who": "a", "note": "n" * 1001, "update_id": "x"},
    {"mode": "auto", "who": "a\x1b[31m", "update_id": "x"},
    {"mode": "auto", "who": "a", "partition": "gpu; rm -rf /", "update_id": "x"},
    {"mode": "auto", "who": "a"},
    "auto",
    None,
])
def test_a_malformed_mode_change_is_refused_by_validation(bad):
    with pytest.raises(ValidationError):
        ModeChange.model_validate(bad)


def test_a_policy_document_is_validated_and_versioned():
    s = GuardSettings()
    p = PolicyApply(policy={"name": "canary", "mode": "auto"}, who="alice", update_id="p1")
    a = apply_policy(s, p, p.parsed(), T0)
    assert a.applied and a.policy_version == 1 and s.policy.name == "canary" and s.policy_by == "alice"
    with pytest.raises(ConfigError, match="mode"):
        PolicyApply(policy={"mode": "sometimes"}, who="a", update_id="p2").parsed()
    with pytest.raises(ValueError, match="cap"):
        PolicyApply(policy={"name": "x" * (MAX_POLICY_BYTES + 1)}, who="a", update_id="p3").parsed()
    assert apply_policy(s, p, p.parsed(), T0).applied is False and s.policy_version == 1


def test_two_quick_failures_of_one_job_cannot_both_pass_a_budget_of_one():
    st = JobRecordState(cluster="c", job_id="7")
    pol = RecoveryPolicy.model_validate({"budgets": {"max_requeues_per_job": 1}})
    att = Attribution(category=Category.gpu_hardware, domain=Domain.hardware, action=Action.drain_and_requeue)
    first = admit(st, _admit("i-a0-gpu"))
    second = admit(st, _admit("i-a0-crash"))
    assert first.history.requeues == 0 and stop_rule(first.history, att, pol, None) is None
    assert second.reserved == 1 and stop_rule(second.history, att, pol, None) == RULE_MAX_REQUEUES
    # the first reports it did not requeue after all: its reservation is released
    report(st, ReportInput(cluster="c", job_id="7", incident_id="i-a0-gpu", outcome=IncidentOutcome.rejected,
                           closed_at=T0 + timedelta(minutes=1)))
    third = admit(st, _admit("i-a1-gpu", attempt=1, at=T0 + timedelta(minutes=2)))
    assert third.reserved == 1  # i-a0-crash is still open


def test_admit_is_idempotent_and_a_lost_incident_stops_reserving_after_the_expiry():
    st = JobRecordState(cluster="c", job_id="7")
    admit(st, _admit("i1"))
    admit(st, _admit("i1"))
    assert len(st.entries) == 1 and st.first_submit == T0
    late = admit(st, _admit("i2", at=T0 + PENDING_EXPIRY + timedelta(seconds=1)))
    assert late.reserved == 0 and late.history.requeues == 0


def test_a_reused_job_id_is_another_job_whose_budget_starts_afresh():
    """Job 7 of a re-created cluster (or after Slurm's id wrap-around) is a different job: the
    monitor names it by another first SubmitTime. The earlier job 7's requeues are not its budget;
    the same job requeued (same first SubmitTime, its SubmitTime reset by Slurm) keeps counting."""
    st = JobRecordState(cluster="c", job_id="7")
    pol = RecoveryPolicy.model_validate({"budgets": {"max_requeues_per_job": 1}})
    att = Attribution(category=Category.gpu_hardware, domain=Domain.hardware, action=Action.drain_and_requeue)
    admit(st, _admit("c-7-old-a0"))
    report(st, ReportInput(cluster="c", job_id="7", incident_id="c-7-old-a0", outcome=IncidentOutcome.recovered,
                           executed=Action.drain_and_requeue, closed_at=T0 + timedelta(minutes=1)))
    same_job = admit(st, _admit("c-7-old-a1", attempt=1, at=T0 + timedelta(minutes=5)))
    assert stop_rule(same_job.history, att, pol, None) == RULE_MAX_REQUEUES
    later = T0 + timedelta(days=2)
    new_job = _admit("c-7-new-a0", at=later + timedelta(minutes=1)).model_copy(update={"job_submit_time": later})
    fresh = admit(st, new_job)
    assert fresh.first_submit == later and st.earlier_jobs == 1
    assert fresh.history.requeues == 0 and stop_rule(fresh.history, att, pol, None) is None
    assert [e.incident_id for e in st.entries] == ["c-7-new-a0"]
    assert admit(st, new_job).first_submit == later and st.earlier_jobs == 1  # a retried admit: the same job


def test_the_record_stays_small_and_keeps_counting_dropped_requeues():
    st = JobRecordState(cluster="c", job_id="7")
    for i in range(MAX_ENTRIES + 10):
        admit(st, _admit(f"i{i}", attempt=i, at=T0 + timedelta(minutes=i)))
        report(st, ReportInput(cluster="c", job_id="7", incident_id=f"i{i}", outcome=IncidentOutcome.recovered,
                               executed=Action.restart_in_place, closed_at=T0 + timedelta(minutes=i, seconds=30)))
    assert len(st.entries) == MAX_ENTRIES and st.requeues_dropped == 10
    assert admit(st, _admit("next", attempt=99, at=T0 + timedelta(hours=5))).history.requeues == MAX_ENTRIES + 10
    assert len(st.model_dump_json()) < 40_000
