"""Builders for workflow tests: a fake cluster with one running 2-node job and its log file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from revive.config import ClusterConfig
from revive.models import IncidentInput, JobIdentity, JobRecord, NodeRecord, Trigger, TriggerKind
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import FakeScheduler

T0 = datetime(2026, 11, 29, 15, 4, 0, tzinfo=UTC)


def progress(it: int, rank: int, host: str, t: datetime) -> str:
    return (f"{t.isoformat(timespec='milliseconds')} [rank {rank} host {host}] iteration {it}/1000 | loss 0.5 "
            f"| compute_ms 10.0 | step_time_ms 20.0")


def job_log(fault: str, resumed: bool = False) -> str:
    lines = [f"=== attempt restart=0 {T0.isoformat()}"]
    for it in range(1, 16):
        t = T0 + timedelta(seconds=it)
        lines += [progress(it, 0, "node1", t), progress(it, 1, "node2", t)]
        if it % 10 == 0:
            lines.append(f"{t.isoformat()} [rank 0 host node1] saved checkpoint at iteration {it}")
    if fault == "xid79":
        lines += ["Traceback (most recent call last):", '  File "examples/train.py", line 1, in <module>',
                  "RuntimeError: CUDA error: unknown error", "srun: error: node2: task 1: Exited with exit code 1"]
    elif fault == "app":
        lines += ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
                  "KeyError: 'optimizer.state.exp_avg'"]
    if resumed:
        t = T0 + timedelta(seconds=60)
        lines += [f"=== attempt restart=1 {t.isoformat()}",
                  f"{t.isoformat()} [rank 0 host node3] resumed from checkpoint at iteration 10",
                  progress(11, 0, "node3", t + timedelta(seconds=1))]
    return "\n".join(lines) + "\n"


def fake_cluster(tmp: Path, fault: str = "xid79", resumed: bool = False) -> tuple[FakeScheduler, ClusterConfig, Path]:
    log = tmp / "train-7.out"
    log.write_text(job_log(fault, resumed))
    (tmp / "nodes" / "node2").mkdir(parents=True, exist_ok=True)
    kern = ""
    if fault == "xid79":
        kern = ("Nov 29 15:04:05 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.\n")
    (tmp / "nodes" / "node2" / "kern.log").write_text(kern)
    job = JobRecord(job_id="7", name="train", user="root", state="FAILED", exit_code="1:0", nodes=["node1", "node2"],
                    partition="debug", restart_count=0, submit_time=T0, std_out=str(log), requeue=True)
    nodes = [NodeRecord(name=f"node{i}", state="IDLE", partitions=["debug"]) for i in range(1, 5)]
    sched = FakeScheduler(cluster="fake", jobs=[job], nodes=nodes)
    cfg = ClusterConfig(name="fake", audit_file=str(tmp / "audit.jsonl"), state_dir=str(tmp / "state"),
                        kernel_log={"path_template": str(tmp / "nodes" / "{node}" / "kern.log")})
    return sched, cfg, log


def incident(log: Path, policy: RecoveryPolicy, iid: str = "fake-7-a0-gpu") -> IncidentInput:
    return IncidentInput(
        incident_id=iid, cluster="fake", job=JobIdentity(job_id="7", user="root", name="train", restart_count=0),
        job_submit_time=T0, attempt=0, fault_family="gpu",
        trigger=Trigger(kind=TriggerKind.job_state, at=T0 + timedelta(seconds=20), state_from="RUNNING",
                        state_to="FAILED"),
        partition="debug", nodes=["node1", "node2"], log_path=str(log), detected_at=T0 + timedelta(seconds=20),
        policy=policy, checkpoint_iteration=10,
    )
