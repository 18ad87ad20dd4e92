"""Issue #4's guards on the real local Slurm cluster (+ a Temporal dev server where a workflow runs).

The cluster is shared with other engineers' tests, so every test here: uses job names starting
with ``revive-guards-<tag>``, opts its jobs in with its own ``--comment`` key (the monitor's
cluster-wide partition allowlist is switched off), runs under its own cluster name (own drain
breaker, own job history), cancels only its own jobs, and resumes only nodes whose drain reason
carries its own tag. It never cancels other jobs and never stops the cluster.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from revive.failopen import arm_hold_release
from revive.health import resume_node
from revive.models import IncidentOutcome
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import RecordingScheduler
from revive.scheduler.runners import LocalRunner
from revive.scheduler.slurm_cli import SlurmCLI
from tests.helpers import slurm as hs
from tests.helpers.harness import Harness, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.temporal]
ROOT = Path(__file__).resolve().parents[2]


class Box:
    """What a test created on the shared cluster, undone in teardown."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.tag = f"rg{uuid.uuid4().hex[:6]}"
        self.jobs: list[str] = []
        self.nodes: list[str] = []
        """Nodes this test drained by hand (resumed in teardown if the reason is still ours)."""

    def sbatch(self, *argv: str, env: dict | None = None) -> str:
        r = subprocess.run(["sbatch", "--parsable", *argv], env=env or hs.slurm_env(self.cfg),
                           capture_output=True, text=True, check=True)
        job = r.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def teardown(self) -> None:
        env = hs.slurm_env(self.cfg)
        # every job of ours, including resubmissions (same name)
        out = subprocess.run(["squeue", "-h", "-o", "%i %j"], env=env, capture_output=True, text=True).stdout
        mine = set(self.jobs) | {ln.split()[0] for ln in out.splitlines() if f"revive-guards-{self.tag}" in ln}
        for j in sorted(mine):
            subprocess.run(["scancel", j], env=env, capture_output=True)
        for n in ("node1", "node2", "node3", "node4"):
            line = hs.node_line(self.cfg, n)
            reason = line.split("Reason=", 1)[1] if "Reason=" in line else ""
            if self.tag in reason:
                subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=env, capture_output=True)


@pytest.fixture
def box(slurm_cluster):
    b = Box(slurm_cluster)
    yield b
    b.teardown()


def job_line(cfg, job: str) -> str:
    return hs.scontrol(cfg, "show", "job", "-o", job)


def train_env(cfg) -> dict[str, str]:
    return dict(hs.slurm_env(cfg), REVIVE_HOME=str(ROOT), REVIVE_PYTHON=sys.executable,
                REVIVE_CLUSTER_DIR=str(Path(cfg.state_dir).parent))


def train_args(out: Path, fault: str, node: str | None, it: int) -> list[str]:
    """``node``: the node whose rank faults; None = rank 1's node, wherever the job landed."""
    where = ["--fault-node", node] if node else ["--fault-rank", "1"]
    return [str(ROOT / "examples" / "train.sbatch"), "--ckpt-dir", str(out / "ckpt"), "--iterations", "100000",
            "--step-seconds", "0.3", "--ckpt-every", "5", "--fault", fault, *where,
            "--fault-iteration", str(it), "--fault-marker", str(out / "fault.json")]


# ---- (1) drain circuit breaker ------------------------------------------------------------------
async def test_breaker_three_hardware_faults_at_once_drain_exactly_one(slurm_cluster, local_env, tmp_path, box):
    cfg = slurm_cluster
    pol = RecoveryPolicy.model_validate({
        "mode": "auto", "breaker": {"max_fraction": 0.25, "max_nodes": 10, "window": 3600},
        "approval": {"timeout": 25}, "verify": {"timeout": 40}})
    async with Harness(cfg, local_env.client, pol, tmp_path, box.tag) as h:
        jobs = {}
        for node in ("node1", "node2", "node3"):
            out = tmp_path / node
            out.mkdir()
            jobs[node] = box.sbatch(
                "--requeue", "--nodes=1", "--ntasks-per-node=1", "--open-mode=append", "-w", node,
                f"--job-name=revive-guards-{box.tag}-{node}", "-o", str(out / "train-%j.out"),
                f"--comment={json.dumps({box.tag: {}})}", *train_args(out, "xid79", node, 8), env=train_env(cfg))
        iids = {node: await h.incident(job, timeout=90) for node, job in jobs.items()}
        results = dict(zip(iids, await asyncio.gather(*(h.result(i, 120) for i in iids.values())), strict=True))

    drains = [c for c in h.sched.mutating_calls if c[0] == "drain_nodes"]
    assert len(drains) == 1, h.sched.mutating_calls
    drained = drains[0][1]["nodes"]
    assert len(drained) == 1 and drains[0][1]["reason"].startswith("revive:")
    hs.assert_drained(cfg, drained[0])
    others = [n for n in iids if n != drained[0]]
    for n in others:
        r = results[n]
        assert r.outcome == IncidentOutcome.escalated, r
        assert r.breaker_reason and r.breaker_reason.startswith("breaker:max_fraction"), r
        assert "approval expired while breaker" in r.reason
        hs.assert_not_drained(cfg, n) if n not in drained else None
    audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    waited = [a for a in audit if a["plan"] and a["plan"].get("approval_reason", "").startswith("breaker:")]
    assert len(waited) == 2 and all(a["plan"]["needs_approval"] for a in waited), audit


# ---- (2) requeue impossible → resubmit ----------------------------------------------------------
async def test_no_requeue_job_is_resubmitted_with_exclusions(slurm_cluster, local_env, tmp_path, box, monkeypatch):
    cfg = slurm_cluster
    for k, v in train_env(cfg).items():  # the resubmitted job gets the worker's environment
        if k.startswith("REVIVE_"):
            monkeypatch.setenv(k, v)
    pol = RecoveryPolicy.model_validate({"mode": "auto", "breaker": {"max_fraction": 1.0, "max_nodes": 4},
                                         "verify": {"timeout": 8}})
    out = tmp_path / "run"
    out.mkdir()
    async with Harness(cfg, local_env.client, pol, tmp_path, box.tag) as h:
        job = box.sbatch("--no-requeue", "--nodes=2", "--ntasks-per-node=1", "--open-mode=append",
                         f"--job-name=revive-guards-{box.tag}-noreq", "-o", str(out / "train-%j.out"),
                         f"--comment={json.dumps({box.tag: {}})}", *train_args(out, "xid79", None, 8),
                         env=train_env(cfg))
        iid = await h.incident(job, timeout=90)
        await h.result(iid, 90)
        h.stop.set()  # no incidents for the resubmitted job
    bad = hs.fault_node(out / "fault.json")
    kinds = [c[0] for c in h.sched.mutating_calls]
    # no refused requeue; a cancel only when the failing job was still tearing down (srun's KillWait)
    # when the runbook acted, so that two copies never run
    assert kinds in (["drain_nodes", "submit"], ["drain_nodes", "cancel", "submit"]), h.sched.mutating_calls
    opts = h.sched.mutating_calls[-1][1]["options"]
    assert f"--exclude={bad}" in opts and "--no-requeue" in opts and "--nodes=2" in opts, opts
    audit = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    act = audit["runbook"]["actions"][-1]
    assert act["action"] == "resubmit" and act["new_job_id"], act
    new = act["new_job_id"]
    box.jobs.append(new)
    assert "--no-requeue" in act["detail"] and "submit environment cannot be recovered" in act["detail"]
    line = job_line(cfg, new)
    assert f"JobName=revive-guards-{box.tag}-noreq" in line and f"ExcNodeList={bad}" in line, line
    assert f"StdOut={out}/train-{job}.out" in line and "Requeue=0" in line, line


# ---- (3) fail-open: a forced hold is released with no worker and no monitor ----------------------
async def test_forced_hold_is_released_without_worker_or_monitor(slurm_cluster, box):
    cfg = slurm_cluster
    job = box.sbatch("--requeue", "--nodes=1", f"--job-name=revive-guards-{box.tag}-hold", "-o", "/dev/null",
                     "--wrap", "sleep 600")
    await wait_for(lambda: "JobState=RUNNING" in job_line(cfg, job), 60, f"job {job} running")
    pid = await arm_hold_release(LocalRunner(cfg.slurm_conf), job, 4, cfg.slurm_conf)
    assert pid > 0
    hs.scontrol(cfg, "requeuehold", job)
    await wait_for(lambda: "Reason=job_requeued_in_held_state" in job_line(cfg, job), 10, "the hold")
    # nothing of Revive runs here: only the detached guard process can release the job
    await wait_for(lambda: "job_requeued_in_held_state" not in job_line(cfg, job), 20, "the guard's release", 0.5)
    line = job_line(cfg, job)
    assert "Priority=0 " not in line and ("JobState=PENDING" in line or "JobState=RUNNING" in line), line


# ---- (4) ownership: Revive never lifts a drain it did not set -----------------------------------
async def test_resume_never_lifts_a_drain_somebody_else_set(slurm_cluster, box):
    cfg = slurm_cluster
    sched = RecordingScheduler(SlurmCLI.from_config(cfg))
    pol = RecoveryPolicy()
    hs.scontrol(cfg, "update", "NodeName=node4", "State=DRAIN", f"Reason=maintenance {box.tag}")
    ok, msg = await resume_node(sched, LocalRunner(cfg.slurm_conf), "node4", ["true"], pol)
    assert not ok and "not set by Revive" in msg, msg
    assert sched.mutating_calls == []
    hs.assert_drained(cfg, "node4", reason_prefix="maintenance")
    hs.scontrol(cfg, "update", "NodeName=node4", "State=DRAIN", f"Reason=revive:{box.tag} gpu_hardware")
    ok, msg = await resume_node(sched, LocalRunner(cfg.slurm_conf), "node4", ["true"], pol)
    assert ok, msg
    assert [c[0] for c in sched.mutating_calls] == ["resume_nodes"]
    hs.assert_not_drained(cfg, "node4")
