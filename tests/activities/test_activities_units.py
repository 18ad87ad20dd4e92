"""Activities without a cluster: identity check, audit idempotency, resume parsing, fallback
attribution, evidence from unreadable sources."""

from __future__ import annotations

from datetime import UTC, datetime

from activities.attribution import AttributionActivities
from activities.audit import AuditActivities
from activities.evidence import EvidenceActivities
from activities.remediation import identity_problem
from revive.models import (
    AuditRecord,
    EvidenceBundle,
    GatherEvidenceInput,
    IncidentOutcome,
    IncidentResult,
    JobIdentity,
    JobRecord,
    Trigger,
    TriggerKind,
)
from revive.policy import RecoveryPolicy
from revive.progress import find_resume
from revive.scheduler.fake import FakeScheduler

NOW = datetime(2026, 11, 29, 15, tzinfo=UTC)


def test_identity_problem():
    want = JobIdentity(job_id="5", user="alice", name="llm", restart_count=1)
    assert identity_problem(want, JobRecord(job_id="5", user="alice", name="llm", restart_count=2)) is None
    assert "user" in identity_problem(want, JobRecord(job_id="5", user="bob", name="llm", restart_count=1))
    assert "name" in identity_problem(want, JobRecord(job_id="5", user="alice", name="other", restart_count=1))
    assert "restart count" in identity_problem(want, JobRecord(job_id="5", user="alice", name="llm", restart_count=0))


async def test_audit_appends_once_per_incident(tmp_path):
    a = AuditActivities(tmp_path / "audit.jsonl")
    rec = AuditRecord(incident_id="i1", cluster="c", job_id="1", attempt=0, mode="auto",
                      trigger=Trigger(kind=TriggerKind.job_state, at=NOW),
                      result=IncidentResult(incident_id="i1", outcome=IncidentOutcome.recovered),
                      policy=RecoveryPolicy())
    await a.append_audit(rec)
    await a.append_audit(rec)  # a retried activity
    assert len((tmp_path / "audit.jsonl").read_text().splitlines()) == 1


def test_find_resume_needs_a_later_attempt_and_an_iteration_past_the_checkpoint():
    lines = ["=== attempt restart=0 t", "2026-11-29T15:00:00+00:00 [rank 0 host node1] iteration 12/100 | loss 1",
             "=== attempt restart=1 t", "2026-11-29T15:01:00+00:00 [rank 0 host node3] resumed from checkpoint at iteration 10"]
    r = find_resume(lines, after_attempt=0)
    assert r.resumed_from == 10 and r.first_after is None
    lines.append("2026-11-29T15:01:01+00:00 [rank 0 host node3] iteration 11/100 | loss 1")
    r = find_resume(lines, after_attempt=0)
    assert r.first_after == 11 and r.host_set == {"node3"} and r.first_after_at.second == 1
    assert find_resume(lines, after_attempt=1).first_after is None


def test_an_attempt_requeued_again_is_superseded_by_the_next_one():
    """Attempt 1 resumed on node1, which Revive excluded too late (a self-requeued job); attempt 2
    runs on node2: the resume that counts is attempt 2's, on node2 only."""
    lines = ["=== attempt restart=0 t",
             "=== attempt restart=1 t", "2026-11-29T15:01:00+00:00 [rank 0 host node1] resumed from checkpoint at iteration 10",
             "2026-11-29T15:01:01+00:00 [rank 0 host node1] iteration 11/100 | loss 1"]
    assert find_resume(lines, after_attempt=0).host_set == {"node1"}
    lines += ["=== attempt restart=2 t"]
    assert find_resume(lines, after_attempt=0).first_after is None
    lines += ["2026-11-29T15:02:00+00:00 [rank 0 host node2] resumed from checkpoint at iteration 10",
              "2026-11-29T15:02:01+00:00 [rank 0 host node2] iteration 11/100 | loss 1"]
    r = find_resume(lines, after_attempt=0)
    assert r.attempt == 2 and r.first_after == 11 and r.host_set == {"node2"}


async def test_unreadable_log_gives_a_recorded_unknown_not_a_crash(tmp_path):
    sched = FakeScheduler(cluster="c", jobs=[JobRecord(job_id="1", nodes=["node1"], std_out="/nonexistent/x.out")])
    ev = EvidenceActivities(sched, str(tmp_path / "{node}.kern"), tmp_path / "ev")
    trig = Trigger(kind=TriggerKind.job_state, at=NOW, state_from="RUNNING", state_to="FAILED")
    b = await ev.gather_evidence(GatherEvidenceInput(incident_id="i", cluster="c", job_id="1", trigger=trig, settle_s=0))
    assert any("unreadable" in n for n in b.notes)
    a = await AttributionActivities().attribute(b)
    assert a.domain.value == "unknown" and a.action.value == "restart_in_place" and a.engine == "revive-fallback"
    gone = await ev.gather_evidence(GatherEvidenceInput(incident_id="j", cluster="c", job_id="99", trigger=trig, settle_s=0))
    assert any("not found" in n for n in gone.notes)


async def test_engine_failure_falls_back_to_unknown(monkeypatch):
    import activities.attribution as act

    def boom(bundle):
        raise RuntimeError("bug")

    monkeypatch.setattr(act, "attribute", boom)  # the engine the activity runs (no catch-all inside it)
    a = await AttributionActivities().attribute(EvidenceBundle(trigger=Trigger(kind=TriggerKind.no_progress, at=NOW)))
    assert a.category.value == "hang" and a.domain.value == "unknown" and "bug" in a.explanation


async def test_no_hold_without_an_armed_release():
    """Fail-open: when the hold release cannot be armed, the exclusion (which needs a hold) is refused
    and nothing is held or requeued."""
    from temporalio.exceptions import ApplicationError

    from activities.remediation import RemediationActivities
    from revive.models import JobIdentity, RequeueInput

    sched = FakeScheduler(cluster="c", jobs=[JobRecord(job_id="5", user="u", name="train", state="FAILED",
                                                       nodes=["node1", "node2"])])

    async def not_armed(job_id: str, after_s: float) -> int:
        return 0

    rm = RemediationActivities(sched, arm_hold_release=not_armed)
    try:
        await rm.requeue_job(RequeueInput(incident_id="i", job=JobIdentity(job_id="5", user="u", name="train"),
                                          exclude_nodes=["node2"]))
    except ApplicationError as e:
        assert e.type == "HoldReleaseNotArmed" and e.non_retryable
    else:
        raise AssertionError("expected a refusal")
    assert sched.mutating_calls == []


async def test_gpu_metrics_from_each_nodes_exporter_become_evidence(tmp_path):
    """gpu.dcgm_url_template: each job node's exporter is scraped into the bundle; a dead one is a note."""
    from pathlib import Path

    import httpx

    from revive.config import GpuSignals

    scrape = (Path(__file__).resolve().parents[1] / "data" / "gpu" / "dcgm_h100_scrape1.prom").read_text()

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.host == "node2":
            raise httpx.ConnectError("refused", request=req)
        return httpx.Response(200, text=scrape)

    sched = FakeScheduler(cluster="c", jobs=[JobRecord(job_id="1", nodes=["node1", "node2"], std_out=str(tmp_path / "o"))])
    (tmp_path / "o").write_text("iteration 1/10\n")
    ev = EvidenceActivities(sched, None, tmp_path / "ev", gpu=GpuSignals(dcgm_url_template="http://{node}:9400/metrics"))
    ev.gpu_transport = httpx.MockTransport(handler)
    trig = Trigger(kind=TriggerKind.job_state, at=NOW, state_from="RUNNING", state_to="FAILED")
    b = await ev.gather_evidence(GatherEvidenceInput(incident_id="g", cluster="c", job_id="1", trigger=trig, settle_s=0))
    assert b.gpu_metrics and {s.node for s in b.gpu_metrics} == {"node1"}
    assert any("DCGM_FI_DEV_SM_CLOCK" in s.metrics or "sm_clock" in " ".join(s.metrics) for s in b.gpu_metrics)
    assert any("GPU metrics of node2 unavailable" in n for n in b.notes)
