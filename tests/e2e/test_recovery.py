"""End to end: the real local Slurm cluster, a Temporal dev server, the production worker and the
monitor, and a real two-rank torch job with an injected fault. These fail (never skip) when torch,
Slurm or Temporal is missing. The tests that take the ``cluster`` fixture run twice: with local
access and through the SSH login node only (``tests/e2e/conftest.py``)."""

from __future__ import annotations

import asyncio

import pytest

from revive.models import Decision, IncidentOutcome
from revive.policy import RecoveryPolicy
from revive.scheduler.slurm_cli import SlurmCLI
from tests.helpers import slurm as hs
from tests.helpers.harness import Harness

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.temporal]


def test_torch_is_installed() -> None:
    import torch  # noqa: F401  -- e2e tests need it: fail loudly, never skip


def auto_policy(**kw) -> RecoveryPolicy:
    base = {"mode": "auto", "hang": {"k": 5, "floor": 15}, "verify": {"timeout": 240}}
    base.update(kw)
    return RecoveryPolicy.model_validate(base)


@pytest.fixture
def job_box(slurm_cluster):
    box: dict[str, str | None] = {"job": None}
    yield box
    hs.cleanup(slurm_cluster, box["job"])


async def test_xid79_on_node2_auto_drains_and_recovers(cluster, local_env, tmp_path, job_box):
    cfg = cluster  # local, or only through the SSH login node
    async with Harness(cfg, local_env.client, auto_policy(), tmp_path) as h:
        job, log, marker = hs.submit_train(cfg, "xid79", tmp_path / "run", comment=h.comment)
        job_box["job"] = job
        iid = await h.incident(job)
        res = await h.result(iid)
    assert res.outcome == IncidentOutcome.recovered, (res, log.read_text()[-3000:])
    bad = hs.fault_node(marker)
    assert res.category.value == "gpu_hardware" and res.culprit_nodes == [bad]
    assert res.executed.value == "drain_and_requeue"
    hs.assert_drained(cfg, bad)
    live = await SlurmCLI.from_config(cfg).get_job(job)
    assert live.state == "RUNNING" and bad not in live.nodes and live.restart_count >= 1
    text = log.read_text()
    assert "resumed from checkpoint at iteration" in text
    assert res.detected_at.timestamp() - hs.fault_time(marker) < 30


async def test_crash_requeues_without_drain(cluster, local_env, tmp_path, job_box):
    cfg = cluster  # local, or only through the SSH login node
    async with Harness(cfg, local_env.client, auto_policy(), tmp_path) as h:
        job, log, marker = hs.submit_train(cfg, "crash", tmp_path / "run", comment=h.comment)
        job_box["job"] = job
        res = await h.result(await h.incident(job))
    assert res.outcome == IncidentOutcome.recovered, (res, log.read_text()[-3000:])
    assert res.category.value == "crash" and res.culprit_nodes == []
    assert res.executed.value == "restart_in_place"
    assert [c[0] for c in h.sched.mutating_calls] == ["requeue"]
    hs.assert_not_drained(cfg, hs.fault_node(marker))


async def test_hang_is_detected_within_the_window_and_recovers(cluster, local_env, tmp_path, job_box):
    cfg = cluster  # local, or only through the SSH login node
    pol = auto_policy()
    async with Harness(cfg, local_env.client, pol, tmp_path) as h:
        job, log, marker = hs.submit_train(cfg, "hang", tmp_path / "run", comment=h.comment)
        job_box["job"] = job
        iid = await h.incident(job, timeout=240)
        res = await h.result(iid)
    assert res.outcome == IncidentOutcome.recovered, (res, log.read_text()[-3000:])
    assert res.category.value == "hang"
    window = pol.hang.floor.total_seconds()
    detect_s = res.detected_at.timestamp() - hs.fault_time(marker)
    assert window <= detect_s + 1 and detect_s < window + 10, detect_s
    # diagnostics were taken on the nodes themselves (scontrol listpids + py-spy), before the requeue
    import json

    rec = next(json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines() if iid in x)
    diag = rec["runbook"]["diagnostics"]
    assert any(k.startswith("py-spy") and "Thread" in v for k, v in diag.items()), diag


async def test_observe_mode_waits_then_runs_the_plan(cluster, local_env, tmp_path, job_box):
    cfg = cluster  # local, or only through the SSH login node
    async with Harness(cfg, local_env.client, RecoveryPolicy(verify={"timeout": 240}), tmp_path) as h:
        job, log, marker = hs.submit_train(cfg, "xid79", tmp_path / "run", comment=h.comment)
        job_box["job"] = job
        iid = await h.incident(job)
        await h.wait_state(iid, "awaiting_approval")
        await asyncio.sleep(3)
        assert h.sched.mutating_calls == []  # observe mode: nothing touched the cluster
        assert not (tmp_path / "calls.jsonl").exists()
        bad = hs.fault_node(marker)
        hs.assert_not_drained(cfg, bad)
        live = await SlurmCLI.from_config(cfg).get_job(job)
        assert live.restart_count == 0
        await local_env.client.get_workflow_handle(iid).execute_update(
            "decide", Decision(decision="approve", approver="oncall-alice"))
        res = await h.result(iid)
    assert res.outcome == IncidentOutcome.recovered and res.decided_by == "oncall-alice"
    assert [c[0] for c in h.sched.mutating_calls] == ["drain_nodes", "requeue"]
    hs.assert_drained(cfg, bad)


async def test_reject_runs_nothing(cluster, local_env, tmp_path, job_box):
    cfg = cluster  # local, or only through the SSH login node
    async with Harness(cfg, local_env.client, RecoveryPolicy(), tmp_path) as h:
        job, _, _ = hs.submit_train(cfg, "crash", tmp_path / "run", comment=h.comment)
        job_box["job"] = job
        iid = await h.incident(job)
        await h.wait_state(iid, "awaiting_approval")
        await local_env.client.get_workflow_handle(iid).execute_update(
            "decide", Decision(decision="reject", approver="oncall-bob", note="investigating by hand"))
        res = await h.result(iid)
    assert res.outcome == IncidentOutcome.rejected
    assert h.sched.mutating_calls == []
    sched = SlurmCLI.from_config(cfg)
    for _ in range(120):  # the crashed job may still be tearing down (srun --wait) when the reject lands
        live = await sched.get_job(job)
        if live.state != "RUNNING":
            break
        await asyncio.sleep(0.5)
    assert live.restart_count == 0 and live.state != "RUNNING", live  # it ended, and nothing requeued it


async def test_straggler_is_excluded_at_the_next_checkpoint(slurm_cluster, local_env, tmp_path, job_box):
    cfg = slurm_cluster
    async with Harness(cfg, local_env.client, auto_policy(), tmp_path) as h:
        job, log, marker = hs.submit_train(cfg, "slow", tmp_path / "run", fault_iteration=22, comment=h.comment)
        job_box["job"] = job
        res = await h.result(await h.incident(job, timeout=240))
    slow = hs.fault_node(marker)
    assert res.outcome == IncidentOutcome.recovered, (res, log.read_text()[-3000:])
    assert res.category.value == "straggler" and res.culprit_nodes == [slow]
    assert res.executed.value == "requeue_exclude_nodes" and res.rule == "runbook:straggler_at_checkpoint"
    assert [c[0] for c in h.sched.mutating_calls] == ["requeue", "update_job", "release"]  # hold, ExcNodeList, release
    hs.assert_not_drained(cfg, slow)  # excluded from this job, not drained
    live = await SlurmCLI.from_config(cfg).get_job(job)
    assert slow in live.exc_nodes and slow not in live.nodes


async def test_node_failure_slurm_requeues_and_revive_excludes_the_node(slurm_cluster, local_env, tmp_path, job_box):
    cfg = slurm_cluster
    victim = None
    try:
        async with Harness(cfg, local_env.client, auto_policy(), tmp_path) as h:
            job, log, _ = hs.submit_train(cfg, "none", tmp_path / "run", comment=h.comment)
            job_box["job"] = job
            sched = SlurmCLI.from_config(cfg)
            for _ in range(200):  # wait for a checkpoint, then take rank 1's node down
                if "saved checkpoint at iteration 10" in (log.read_text() if log.exists() else ""):
                    break
                await asyncio.sleep(0.2)
            victim = (await sched.get_job(job)).nodes[1]
            hs.kill_slurmd(cfg, victim)
            res = await h.result(await h.incident(job, timeout=120))
        assert res.outcome == IncidentOutcome.recovered, (res, log.read_text()[-3000:])
        assert res.category.value == "node_failure" and res.culprit_nodes == [victim]
        assert res.executed.value == "requeue_exclude_nodes"
        # Slurm requeued the job itself: the exclusion is set on the pending job, held while it is set
        assert [c[0] for c in h.sched.mutating_calls] in ([], ["update_job"], ["hold", "update_job", "release"])
        live = await sched.get_job(job)
        assert live.state == "RUNNING" and victim not in live.nodes and live.restart_count >= 1
    finally:
        if victim:
            hs.restart_slurmd(cfg, victim)
