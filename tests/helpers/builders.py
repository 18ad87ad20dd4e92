"""Builders for workflow tests: a fake cluster with one running 2-node job and its log file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from revive.config import ClusterConfig
from revive.models import IncidentInput, JobIdentity, JobRecord, NodeRecord, Trigger, TriggerKind
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import FakeScheduler

T0 = datetime(2026, 11, 29, 15, 4, 0, tzinfo=UTC)


def progress(it: int, rank: int, host: str, t: datetime, compute_ms: float = 10.0, step_ms: float = 20.0) -> str:
    return (f"{t.isoformat(timespec='milliseconds')} [rank {rank} host {host}] iteration {it}/1000 | loss 0.5 "
            f"| compute_ms {compute_ms:.1f} | step_time_ms {step_ms:.1f}")


FAULTS = ("xid79", "app", "segfault", "hang", "straggler", "node_fail")
"""Fault kinds ``fake_cluster`` builds; any other name (``crash`` in test_guards_workflow_level.py, which
appends its own lines) is a clean log of a failed job.

- ``xid79``: GPU fell off the bus on node2 (drain_and_requeue), ``app``: KeyError (stop).
- ``segfault``: a segfault on node2 with no hardware evidence (restart_in_place).
- ``hang``: a running job that went silent; open it with ``trigger_for("hang")`` (no_progress → hang).
- ``straggler``: a running job whose step time rose ~30 % from iteration 16 on, node2's compute time
  with it (straggler, node2 named); ``trigger_for("straggler")`` (slow_progress). Resume lines only
  after the requeue: a restart marker in the log would reset the straggler series.
- ``node_fail``: Slurm NODE_FAIL, ``srun: error: Node failure on node2``, node2 DOWN (requeue_exclude).
"""
STRAGGLER_FROM = 16
"""First slow iteration of the ``straggler`` log."""


def job_log(fault: str, resumed: bool = False) -> str:
    last = 40 if fault == "straggler" else 15
    lines = [f"=== attempt restart=0 {T0.isoformat()}"]
    for it in range(1, last + 1):
        t = T0 + timedelta(seconds=it)
        if fault == "straggler" and it >= STRAGGLER_FROM:
            lines += [progress(it, 0, "node1", t, step_ms=26.0), progress(it, 1, "node2", t, 16.0, 26.0)]
        else:
            lines += [progress(it, 0, "node1", t), progress(it, 1, "node2", t)]
        if it % 10 == 0:
            lines.append(f"{t.isoformat()} [rank 0 host node1] saved checkpoint at iteration {it}")
    if fault == "xid79":
        lines += ["Traceback (most recent call last):", '  File "examples/train.py", line 1, in <module>',
                  "RuntimeError: CUDA error: unknown error", "srun: error: node2: task 1: Exited with exit code 1"]
    elif fault == "app":
        lines += ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
                  "KeyError: 'optimizer.state.exp_avg'"]
    elif fault == "segfault":
        lines += ["[rank 1 host node2] Segmentation fault (core dumped)",
                  "srun: error: node2: task 1: Exited with exit code 139"]
    elif fault == "node_fail":
        lines += ["srun: error: Node failure on node2", "srun: error: node2: task 1: Killed"]
    if resumed:
        lines += resume_lines(last // 10 * 10).splitlines()
    return "\n".join(lines) + "\n"


def resume_lines(checkpoint: int = 10) -> str:
    """The requeued attempt's first lines (restart 1 on node3, resumed from ``checkpoint``)."""
    t = T0 + timedelta(seconds=60)
    return "\n".join([f"=== attempt restart=1 {t.isoformat()}",
                      f"{t.isoformat()} [rank 0 host node3] resumed from checkpoint at iteration {checkpoint}",
                      progress(checkpoint + 1, 0, "node3", t + timedelta(seconds=1))]) + "\n"


_JOB_STATE = {"hang": ("RUNNING", "0:0"), "straggler": ("RUNNING", "0:0"), "segfault": ("FAILED", "139:0"),
              "node_fail": ("NODE_FAIL", "0:0")}


def fake_cluster(tmp: Path, fault: str = "xid79", resumed: bool = False) -> tuple[FakeScheduler, ClusterConfig, Path]:
    log = tmp / "train-7.out"
    log.write_text(job_log(fault, resumed))
    (tmp / "nodes" / "node2").mkdir(parents=True, exist_ok=True)
    kern = ""
    if fault == "xid79":
        kern = ("Nov 29 15:04:05 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.\n")
    (tmp / "nodes" / "node2" / "kern.log").write_text(kern)
    state, exit_code = _JOB_STATE.get(fault, ("FAILED", "1:0"))
    job = JobRecord(job_id="7", name="train", user="root", state=state, exit_code=exit_code, nodes=["node1", "node2"],
                    partition="debug", restart_count=0, submit_time=T0, std_out=str(log), requeue=True)
    nodes = [NodeRecord(name=f"node{i}", state="DOWN*" if fault == "node_fail" and i == 2 else "IDLE",
                        partitions=["debug"]) for i in range(1, 5)]
    sched = FakeScheduler(cluster="fake", jobs=[job], nodes=nodes)
    cfg = ClusterConfig(name="fake", audit_file=str(tmp / "audit.jsonl"), state_dir=str(tmp / "state"),
                        kernel_log={"path_template": str(tmp / "nodes" / "{node}" / "kern.log")})
    return sched, cfg, log


def trigger_for(fault: str) -> Trigger:
    """The trigger the monitor would open ``fault``'s incident with (``incident``'s default for the others)."""
    at = T0 + timedelta(seconds=20)
    if fault == "hang":
        return Trigger(kind=TriggerKind.no_progress, at=T0 + timedelta(seconds=615), since=T0 + timedelta(seconds=15),
                       threshold_s=600.0)
    if fault == "straggler":
        return Trigger(kind=TriggerKind.slow_progress, at=T0 + timedelta(seconds=41))
    if fault == "node_fail":
        return Trigger(kind=TriggerKind.job_state, at=at, state_from="RUNNING", state_to="NODE_FAIL")
    return Trigger(kind=TriggerKind.job_state, at=at, state_from="RUNNING", state_to="FAILED")


def incident(log: Path, policy: RecoveryPolicy, iid: str = "fake-7-a0-gpu", trigger: Trigger | None = None,
             fault_family: str = "gpu") -> IncidentInput:
    return IncidentInput(
        incident_id=iid, cluster="fake", job=JobIdentity(job_id="7", user="root", name="train", restart_count=0),
        job_submit_time=T0, attempt=0, fault_family=fault_family,
        trigger=trigger or Trigger(kind=TriggerKind.job_state, at=T0 + timedelta(seconds=20), state_from="RUNNING",
                                   state_to="FAILED"),
        partition="debug", nodes=["node1", "node2"], log_path=str(log), detected_at=T0 + timedelta(seconds=20),
        policy=policy, checkpoint_iteration=10,
    )


async def start_incident(client, tq: str, inp):  # noqa: ANN001, ANN201
    """Start ``IncidentWorkflow`` for ``inp`` on ``tq`` with the search attributes the monitor sets
    (cluster, job id, incident id, nodes); returns the handle."""
    from temporalio.common import SearchAttributePair, TypedSearchAttributes

    from revive import search_attributes as sa
    from workflows.incident import IncidentWorkflow

    return await client.start_workflow(
        IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq,
        search_attributes=TypedSearchAttributes([
            SearchAttributePair(sa.CLUSTER, inp.cluster), SearchAttributePair(sa.JOB_ID, inp.job.job_id),
            SearchAttributePair(sa.INCIDENT_ID, inp.incident_id), SearchAttributePair(sa.NODES, list(inp.nodes)),
        ]))
