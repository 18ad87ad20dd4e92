"""Domain helpers for end-to-end tests on the local Slurm cluster: inject a fault, assert state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def slurm_env(cfg) -> dict[str, str]:
    """The environment for the tests' own cluster operations (as the cluster's user, not Revive):
    the failing stand-ins of SSH-mode tests (``REVIVE_TEST_NO_SLURM_DIR``) are left off PATH."""
    env = dict(os.environ)
    standins = env.pop("REVIVE_TEST_NO_SLURM_DIR", None)
    if standins:
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != standins)
    if cfg.slurm_conf:
        env["SLURM_CONF"] = cfg.slurm_conf
    return env


def submit_train(cfg, fault: str, out_dir: Path, fault_iteration: int = 12, step_s: float = 0.3,
                 comment: str = '{"revive":{"policy":"test"}}') -> tuple[str, Path, Path]:
    """Submit the example job on 2 nodes with ``fault`` on rank 1's node (node2 on an idle cluster).
    Returns (job id, log, marker); the marker file names the node the fault hit."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "train-%j.out"
    env = dict(slurm_env(cfg), REVIVE_HOME=str(ROOT), REVIVE_PYTHON=sys.executable,
               REVIVE_CLUSTER_DIR=str(Path(cfg.state_dir).parent))
    argv = ["sbatch", "--parsable", "--requeue", "--nodes=2", "--ntasks-per-node=1", "--open-mode=append",
            f"--job-name=e2e-{fault}-{uuid.uuid4().hex[:6]}", "-o", str(log), f"--comment={comment}",
            str(ROOT / "examples" / "train.sbatch"), "--ckpt-dir", str(out_dir / "ckpt"),
            "--iterations", "100000", "--step-seconds", str(step_s), "--ckpt-every", "10",
            "--fault", fault, "--fault-rank", "1", "--fault-iteration", str(fault_iteration),
            "--fault-marker", str(out_dir / "fault.json")]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    job = r.stdout.strip().split(";")[0]
    return job, Path(str(log).replace("%j", job)), out_dir / "fault.json"


def scontrol(cfg, *args: str) -> str:
    return subprocess.run(["scontrol", *args], env=slurm_env(cfg), capture_output=True, text=True).stdout


def node_line(cfg, node: str) -> str:
    return scontrol(cfg, "show", "node", "-o", node)


def assert_drained(cfg, node: str, reason_prefix: str = "revive:") -> None:
    line = node_line(cfg, node)
    assert "DRAIN" in line.split("State=")[1].split()[0], line
    assert f"Reason={reason_prefix}" in line, line


def assert_not_drained(cfg, node: str) -> None:
    line = node_line(cfg, node)
    assert "DRAIN" not in line.split("State=")[1].split()[0], line


def cleanup(cfg, job: str | None) -> None:
    """Cancel the test's job and resume every node (tests share one cluster)."""
    if job:
        subprocess.run(["scancel", job], env=slurm_env(cfg), capture_output=True)
    for n in ("node1", "node2", "node3", "node4"):
        subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=slurm_env(cfg), capture_output=True)


def fault_node(marker: Path) -> str:
    return json.loads(marker.read_text())["node"]


def fault_time(marker: Path) -> float | None:
    try:
        return float(json.loads(marker.read_text())["unix_time"])
    except (OSError, ValueError, KeyError):
        return None


def kill_slurmd(cfg, node: str) -> None:
    """Kill a node's slurmd (SIGKILL): Slurm marks the node DOWN after SlurmdTimeout and requeues
    the jobs that ran on it."""
    import signal

    pidfile = Path(cfg.state_dir).parent / "run" / f"slurmd-{node}.pid"
    os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)


def restart_slurmd(cfg, node: str) -> None:
    """Start the node's slurmd again the way scripts/cluster-up.sh does, then resume the node."""
    cluster_dir = str(Path(cfg.state_dir).parent)
    env = dict(slurm_env(cfg), REVIVE_CLUSTER_DAEMON=cluster_dir)
    subprocess.run(["setsid", "slurmd", "-N", node], env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    import time

    for _ in range(100):
        line = node_line(cfg, node)
        if "State=DOWN" in line and "NOT_RESPONDING" not in line:
            break
        if "State=IDLE" in line or "State=MIXED" in line or "State=ALLOCATED" in line:
            break
        time.sleep(0.2)
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=slurm_env(cfg), capture_output=True)
