"""IncidentWorkflow logic on the time-skipping test server, with the real activities over a
FakeScheduler (which records every mutating call) and real log/kernel-log files."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from revive.decide.budgets import JobIncidentHistory
from revive.models import Decision, IncidentHistoryInput, IncidentOutcome, IncidentResult
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster, incident
from worker.main import build_worker
from workflows.incident import IncidentWorkflow

pytestmark = pytest.mark.temporal


@activity.defn(name="incident_history")
async def no_history(inp: IncidentHistoryInput) -> JobIncidentHistory:
    return JobIncidentHistory()


def _worker(env: WorkflowEnvironment, sched, cfg, tq: str):
    """The production worker, except the visibility-backed history read (the Java test server
    has no visibility): an empty history stands in for it."""
    return build_worker(env.client, cfg, sched, task_queue=tq, replace=[no_history])


async def _run(env, sched, cfg, inp, during=None) -> IncidentResult:
    tq = f"tq-{uuid.uuid4()}"
    async with _worker(env, sched, cfg, tq):
        h = await env.client.start_workflow(IncidentWorkflow.run, inp, id=f"{inp.incident_id}-{uuid.uuid4().hex[:6]}",
                                            task_queue=tq)
        if during:
            await during(h)
        return await h.result()


async def _wait_state(h, state: str) -> None:
    import asyncio

    for _ in range(200):
        try:
            if (await h.query("status"))["state"] == state:
                return
        except Exception:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached state {state}")


async def test_auto_mode_xid79_drains_node2_requeues_and_verifies(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})
    res = await _run(ts_env, sched, cfg, incident(log, pol))
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert res.category.value == "gpu_hardware" and res.culprit_nodes == ["node2"]
    assert res.executed.value == "drain_and_requeue"
    kinds = [c[0] for c in sched.mutating_calls]
    assert kinds == ["drain_nodes", "requeue"], sched.calls
    assert sched.mutating_calls[0][1]["reason"].startswith("revive:")
    assert "DRAIN" in sched.nodes["node2"].state
    audit = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert len(audit) == 1 and '"outcome":"recovered"' in audit[0]


async def test_observe_mode_expiry_does_nothing(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    pol = RecoveryPolicy(approval={"timeout": 3600})
    res = await _run(ts_env, sched, cfg, incident(log, pol))
    assert res.outcome == IncidentOutcome.expired
    assert sched.mutating_calls == []


async def test_observe_mode_reject_runs_nothing_and_validator_refuses_bad_decisions(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    pol = RecoveryPolicy(approval={"timeout": 3600, "approvers": ["alice", "bob"]})

    async def during(h):
        await _wait_state(h, "awaiting_approval")
        with pytest.raises(WorkflowUpdateFailedError):
            await h.execute_update("decide", Decision(decision="approve", approver=""))
        with pytest.raises(WorkflowUpdateFailedError):
            await h.execute_update("decide", Decision(decision="approve", approver="mallory"))
        await h.signal("decide", {"decision": "maybe", "approver": "alice"})  # invalid: recorded, ignored
        with pytest.raises(WorkflowUpdateFailedError):
            await h.execute_update("decide", {"decision": "maybe", "approver": "alice"})
        await h.execute_update("decide", Decision(decision="reject", approver="bob", note="not now"))
        await h.signal("decide", Decision(decision="approve", approver="alice"))  # late: recorded, ignored

    res = await _run(ts_env, sched, cfg, incident(log, pol), during)
    assert res.outcome == IncidentOutcome.rejected and res.decided_by == "bob"
    assert sched.mutating_calls == []
    rec = (tmp_path / "audit.jsonl").read_text()
    assert "'maybe' by alice" in rec


async def test_observe_mode_approve_then_plan_runs(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    pol = RecoveryPolicy(verify={"timeout": 5, "poll_interval": 0.2})

    async def during(h):
        await _wait_state(h, "awaiting_approval")
        assert sched.mutating_calls == []
        await h.execute_update("decide", Decision(decision="approve", approver="alice"))

    res = await _run(ts_env, sched, cfg, incident(log, pol), during)
    assert res.outcome == IncidentOutcome.recovered and res.decided_by == "alice"
    assert [c[0] for c in sched.mutating_calls] == ["drain_nodes", "requeue"]


async def test_verify_timeout_is_not_recovered(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=False)
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 2, "poll_interval": 0.2})
    res = await _run(ts_env, sched, cfg, incident(log, pol))
    assert res.outcome == IncidentOutcome.not_recovered
    assert [c[0] for c in sched.mutating_calls] == ["drain_nodes", "requeue"]


async def test_app_bug_stops_at_first_sight_without_touching_the_cluster(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "app")
    res = await _run(ts_env, sched, cfg, incident(log, RecoveryPolicy(mode="auto")))
    assert res.outcome == IncidentOutcome.stopped and "stop_at_first_sight" in res.reason
    assert sched.mutating_calls == []


async def test_identity_mismatch_is_refused(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"name": "someone-elses-job"})
    res = await _run(ts_env, sched, cfg, incident(log, RecoveryPolicy(mode="auto")))
    assert res.outcome == IncidentOutcome.stopped and "JobIdentityMismatch" in res.reason
    assert sched.mutating_calls == []


async def test_malformed_and_oversized_signals_never_wedge_the_incident(ts_env, tmp_path):
    """decide/add_trigger with no input, two inputs, the wrong shape or a huge payload are recorded
    and ignored; the incident still takes a valid decision and closes with its audit record."""
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    pol = RecoveryPolicy(approval={"timeout": 3600})

    async def during(h):
        await _wait_state(h, "awaiting_approval")
        await h.signal("decide")  # no input
        await h.signal("decide", args=[{"decision": "approve"}, "extra"])  # two inputs
        await h.signal("decide", {"decision": "approve", "approver": "x" * 300_000})  # oversized approver
        await h.signal("add_trigger")
        await h.signal("add_trigger", args=["a", "b"])
        await h.signal("add_trigger", {"not": "text"})
        for _ in range(120):
            await h.signal("add_trigger", "y" * 10_000)
        await h.execute_update("decide", Decision(decision="reject", approver="bob"))

    res = await _run(ts_env, sched, cfg, incident(log, pol), during)
    assert res.outcome == IncidentOutcome.rejected and res.decided_by == "bob"
    rec = (tmp_path / "audit.jsonl").read_text()
    assert "invalid decide signal" in rec and "more trigger(s) not kept" in rec
    assert len(rec) < 2_000_000 and sched.mutating_calls == []


async def test_an_approval_the_operator_gave_up_on_is_refused_as_stale(ts_env, tmp_path):
    """``revive approve`` stamps ``valid_until`` (when it stops waiting); a decision that reaches
    the workflow after that — a worker back minutes later — is refused, by the Update's validator
    and by the Signal handler (recorded), and the incident still takes a fresh decision."""
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    pol = RecoveryPolicy(approval={"timeout": 3600})
    # the time-skipping server's clock, not the wall clock: the server may have skipped ahead
    now = await ts_env.get_current_time()
    past = now - timedelta(minutes=5)

    async def during(h):
        await _wait_state(h, "awaiting_approval")
        with pytest.raises(WorkflowUpdateFailedError) as e:
            await h.execute_update("decide", Decision(decision="approve", approver="alice", valid_until=past))
        assert "stale" in str(e.value.cause)
        await h.signal("decide", {"decision": "approve", "approver": "carol", "valid_until": past.isoformat()})
        await h.execute_update("decide", Decision(decision="reject", approver="bob",
                                                  valid_until=(await ts_env.get_current_time()) + timedelta(days=365)))

    res = await _run(ts_env, sched, cfg, incident(log, pol), during)
    assert res.outcome == IncidentOutcome.rejected and res.decided_by == "bob"
    assert sched.mutating_calls == []  # the stale approvals ran nothing
    rec = (tmp_path / "audit.jsonl").read_text()
    assert "approve by carol: stale" in rec


async def test_slurmctld_down_between_drain_and_requeue_longer_than_one_retry_deadline(ts_env, tmp_path):
    """Node drained, then slurmctld unreachable for ~9 minutes (longer than MUTATING_DEADLINE's
    5): the requeue waits for the cluster and goes through once it returns — one drain, one
    successful requeue, recovered — instead of closing with the node drained and the job dead."""
    from revive.errors import SchedulerUnavailable

    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    real_requeue, tries = sched.requeue, []

    async def requeue(job_id: str, hold: bool = False) -> list[str]:
        tries.append(job_id)
        if len(tries) <= 30:  # ~21 tries fill one 5-minute deadline of backoff: two rounds fail
            raise SchedulerUnavailable("slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
        return await real_requeue(job_id, hold)

    sched.requeue = requeue  # type: ignore[method-assign]
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})
    res = await _run(ts_env, sched, cfg, incident(log, pol))
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert [c[0] for c in sched.mutating_calls] == ["drain_nodes", "requeue"]  # one drain, one requeue that ran
    assert len(tries) == 31 and sched.jobs["7"].restart_count == 1


@activity.defn(name="notify")
async def notify_dies(inp: object) -> None:
    raise RuntimeError("worker killed during the approval_needed notification")


async def test_a_failed_approval_notification_does_not_lose_the_incident(ts_env, tmp_path):
    """Chaos finding: the worker killed during the ``approval_needed`` notification made the
    activity time out, and the incident FAILED with no audit record. A notification is best effort:
    the incident waits for the decision (the gate is open while the notification is on its way),
    acts on the approval and closes with its audit record."""
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    pol = RecoveryPolicy(approval={"timeout": 3600}, notify={"webhooks": ["http://127.0.0.1:9/hook"]},
                         verify={"timeout": 5, "poll_interval": 0.2})
    tq = f"tq-{uuid.uuid4()}"
    async with build_worker(ts_env.client, cfg, sched, task_queue=tq, replace=[no_history, notify_dies]):
        h = await ts_env.client.start_workflow(IncidentWorkflow.run, incident(log, pol), id=f"n-{uuid.uuid4().hex[:6]}",
                                               task_queue=tq)
        await _wait_state(h, "awaiting_approval")
        await h.execute_update("decide", Decision(decision="approve", approver="oncall-bob"))
        res = await h.result()
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert [c[0] for c in sched.mutating_calls] == ["drain_nodes", "requeue"]
    assert '"outcome":"recovered"' in (tmp_path / "audit.jsonl").read_text()
