"""Return to service on the real local Slurm cluster with a Temporal dev server: the production
worker (real ``SlurmCLI``, wrapped in a ``RecordingScheduler``) runs ``ReturnToServiceWorkflow``.

Each test drains node2 with Revive's reason (an Xid incident of its own tag) and node3 by hand (a
person's maintenance), runs one pass with the configured check (``true`` passes, ``false`` fails),
and reads the result back from ``scontrol``. Teardown resumes only the nodes whose reason carries
the test's tag. The scan looks at every node, so other Revive drains on the cluster would be
checked too: run it on a testbed of your own (``REVIVE_CLUSTER_DIR`` …).
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from revive.decide.rts import RtsInput, RtsOutcome, RtsResult
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import RecordingScheduler
from revive.scheduler.slurm_cli import SlurmCLI
from tests.helpers import slurm as hs
from worker.main import build_worker
from workflows.return_to_service import ReturnToServiceWorkflow

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.temporal]

OURS, THEIRS = "node2", "node3"


@pytest.fixture
def tag(slurm_cluster):
    t = f"rts{uuid.uuid4().hex[:6]}"
    yield t
    env = hs.slurm_env(slurm_cluster)
    for n in (OURS, THEIRS):
        line = hs.node_line(slurm_cluster, n)
        if t in (line.split("Reason=", 1)[1] if "Reason=" in line else ""):
            subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=env, capture_output=True)
    subprocess.run(["scontrol", "delete", f"ReservationName=revive-rts-{OURS}"], env=env, capture_output=True)


def _drain(cfg, tag: str) -> str:
    incident = f"{cfg.name}-{tag}-20261201T120000-a0-gpu"
    hs.scontrol(cfg, "update", f"NodeName={OURS}", "State=DRAIN", f"Reason=revive:{incident} gpu_hardware")
    hs.scontrol(cfg, "update", f"NodeName={THEIRS}", "State=DRAIN", f"Reason=maintenance {tag}")
    return incident


def _reason(cfg, node: str) -> str:
    line = hs.node_line(cfg, node)
    return line.split("Reason=", 1)[1] if "Reason=" in line else ""


def _reservations(cfg) -> str:
    return hs.scontrol(cfg, "show", "reservation")


async def _pass(cfg, client, tmp_path, method: str, command: list[str]) -> tuple[RtsResult, RecordingScheduler]:
    sched = RecordingScheduler(SlurmCLI.from_config(cfg))
    pol = RecoveryPolicy(mode="auto", return_to_service={"enabled": True, "command": command, "method": method,
                                                         "timeout": 60})
    c = cfg.model_copy(update={"audit_file": str(tmp_path / "audit.jsonl"), "state_dir": str(tmp_path / "state")})
    tq = f"rts-live-{uuid.uuid4().hex[:6]}"
    async with build_worker(client, c, sched, task_queue=tq):
        res = await client.execute_workflow(ReturnToServiceWorkflow.run, RtsInput(cluster=cfg.name, policy=pol, task_queue=tq),
                                            id=f"rts-live-{uuid.uuid4().hex[:6]}", task_queue=tq)
    return res, sched


def _ours(res: RtsResult):
    return [r for r in res.checked if r.node == OURS]


@pytest.mark.parametrize("method", ["direct", "reservation"])
async def test_passing_check_returns_our_node_to_idle_and_never_touches_a_persons_drain(
        slurm_cluster, local_env, tmp_path, tag, method):
    cfg = slurm_cluster
    incident = _drain(cfg, tag)
    res, sched = await _pass(cfg, local_env.client, tmp_path, method, ["true"])

    [r] = _ours(res)
    assert r.outcome == RtsOutcome.resumed and r.incident_id == incident and r.false_isolation, r
    hs.assert_not_drained(cfg, OURS)
    assert "IDLE" in hs.node_line(cfg, OURS)
    assert THEIRS not in [x.node for x in res.checked]
    assert _reason(cfg, THEIRS).startswith(f"maintenance {tag}")
    assert all(THEIRS not in kw.get("nodes", []) for _m, kw in sched.mutating_calls)
    assert f"revive-rts-{OURS}" not in _reservations(cfg)
    if method == "reservation":
        assert [m for m, _ in sched.mutating_calls] == [
            "create_maintenance_window", "resume_nodes", "submit", "drain_nodes", "delete_maintenance_window",
            "resume_nodes"]
    else:
        assert [m for m, _ in sched.mutating_calls] == ["resume_nodes"]


@pytest.mark.parametrize("method", ["direct", "reservation"])
async def test_failing_check_keeps_our_node_drained_with_the_updated_reason(slurm_cluster, local_env, tmp_path, tag,
                                                                            method):
    cfg = slurm_cluster
    incident = _drain(cfg, tag)
    res, _sched = await _pass(cfg, local_env.client, tmp_path, method, ["false"])

    [r] = _ours(res)
    assert r.outcome == RtsOutcome.check_failed, r
    hs.assert_drained(cfg, OURS, reason_prefix="revive: health check failed ")
    reason = _reason(cfg, OURS)
    assert f"(incident {incident} gpu_hardware)" in reason, reason
    if method == "reservation":  # the check really ran as a job in the window, and failed there
        assert "FAILED exit 1:0" in r.detail, r.detail
    assert _reason(cfg, THEIRS).startswith(f"maintenance {tag}")
    assert f"revive-rts-{OURS}" not in _reservations(cfg)


async def test_maintenance_window_is_idempotent_on_real_slurm(slurm_cluster, tag):
    """A retried activity creates or deletes the same window again: both are no-ops, not errors."""
    cli = SlurmCLI.from_config(slurm_cluster)
    name = f"revive-rts-{OURS}"
    argv = await cli.create_maintenance_window(name, [OURS], 90, ["root"])
    assert "Flags=MAINT,IGNORE_JOBS" in argv and "Duration=2" in argv
    await cli.create_maintenance_window(name, [OURS], 90, ["root"])
    assert name in await cli.list_maintenance_windows()
    assert f"ReservationName={name}" in _reservations(slurm_cluster)
    await cli.delete_maintenance_window(name)
    await cli.delete_maintenance_window(name)
    assert name not in await cli.list_maintenance_windows()
    with pytest.raises(ValueError):
        await cli.create_maintenance_window("x; rm -rf /", [OURS], 60, ["root"])
