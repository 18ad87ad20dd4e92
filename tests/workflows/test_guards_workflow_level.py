"""Issue #4's guards at workflow level: the dev server (``local_env``, real visibility for the job
history), the production worker (``build_worker``), the real activities over a ``FakeScheduler``
(which records every mutating call), real log and kernel-log files.

Each test uses its own cluster name, so the job history and the drain breaker of one test never
leak into another (the dev server is shared by the session).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from activities.jobspec import JobSpecActivities
from activities.remediation import RemediationActivities
from revive.models import IncidentInput, IncidentOutcome, IncidentResult, JobIdentity, SaveJobSpecInput
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import FakeScheduler
from tests.helpers.builders import T0, fake_cluster, incident, start_incident
from worker.main import build_worker

pytestmark = pytest.mark.temporal

SCRIPT = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --requeue\nset -e\nexec srun python -u train.py\n"


CRASH = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
         "[127.0.0.1]:29500\nsrun: error: node2: task 1: Killed\n")


class ResumingScheduler(FakeScheduler):
    """A FakeScheduler whose requeue makes the job print its next attempt (resumed from the
    checkpoint) to the log, as the real job does."""

    log: Path

    async def requeue(self, job_id: str, hold: bool = False) -> list[str]:
        argv = await super().requeue(job_id, hold)
        n = self.jobs[str(job_id)].restart_count
        t = (T0 + timedelta(minutes=n)).isoformat()
        with self.log.open("a") as f:
            f.write(f"=== attempt restart={n} {t}\n{t} [rank 0 host node3] resumed from checkpoint at iteration 10\n"
                    f"{t} [rank 0 host node3] iteration 11/1000 | loss 0.5 | compute_ms 10.0 | step_time_ms 20.0\n")
        return argv


def crash_cluster(tmp: Path):
    """``fake_cluster`` whose attempt 0 died from a SIGKILLed rank (no hardware evidence); a
    requeue makes the next attempt resume from the checkpoint."""
    base, cfg, log = fake_cluster(tmp, "crash", resumed=False)
    log.write_text(log.read_text() + CRASH)
    sched = ResumingScheduler(cluster="fake", jobs=list(base.jobs.values()), nodes=list(base.nodes.values()))
    sched.log = log
    return sched, cfg, log


def _inp(log: Path, pol: RecoveryPolicy, cluster: str, attempt: int = 0) -> IncidentInput:
    base = incident(log, pol, iid=f"{cluster}-7-a{attempt}-{uuid.uuid4().hex[:6]}")
    return base.model_copy(update={
        "cluster": cluster, "attempt": attempt,
        "job": JobIdentity(job_id="7", user="root", name="train", restart_count=attempt),
        "detected_at": base.detected_at + timedelta(minutes=attempt),
    })


async def _run(env, sched: FakeScheduler, cfg, inp: IncidentInput, jobspec: Path | None = None) -> IncidentResult:
    """Start the incident as the monitor does (search attributes included) on the production
    worker; ``jobspec``: the requeue/identity activities resubmit from specs saved there."""
    tq = f"guards-{uuid.uuid4().hex[:8]}"
    replace: list = []
    if jobspec is not None:
        rm = RemediationActivities(sched, jobspec_dir=jobspec)
        replace = [rm.check_identity, rm.drain_nodes, rm.requeue_job,
                   JobSpecActivities(sched, jobspec).save_job_spec]
    async with build_worker(env.client, cfg, sched, task_queue=tq, replace=replace):
        h = await start_incident(env.client, tq, inp)
        return await asyncio.wait_for(h.result(), 60)


async def _visible(env, cluster: str, n: int) -> None:
    """Wait until ``n`` closed incidents of ``cluster`` are visible (visibility is eventual)."""
    q = f"WorkflowType='IncidentWorkflow' AND ExecutionStatus='Completed' AND ReviveCluster='{cluster}'"
    for _ in range(100):
        if len([w async for w in env.client.list_workflows(q)]) >= n:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{n} closed incidents of {cluster} never became visible")


def _cluster() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


async def test_budget_spent_stops_retrying(local_env, tmp_path):
    sched, cfg, log = crash_cluster(tmp_path)
    cl = _cluster()
    pol = RecoveryPolicy(mode="auto", budgets={"max_requeues_per_job": 1}, verify={"timeout": 5, "poll_interval": 0.2})
    first = await _run(local_env, sched, cfg, _inp(log, pol, cl, attempt=0))
    assert first.outcome == IncidentOutcome.recovered and first.executed.value == "restart_in_place", first
    assert [c[0] for c in sched.mutating_calls] == ["requeue"]
    await _visible(local_env, cl, 1)
    # the requeued attempt now fails on hardware: the budget (1 requeue per job) is spent
    (tmp_path / "nodes" / "node2" / "kern.log").write_text(
        "Nov 29 15:05:05 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n")
    log.write_text(log.read_text() + "RuntimeError: CUDA error: unknown error\n"
                   "srun: error: node2: task 1: Exited with exit code 1\n")
    second = await _run(local_env, sched, cfg, _inp(log, pol, cl, attempt=1))
    assert second.outcome == IncidentOutcome.stopped, second
    assert second.rule == "budget:max_requeues_per_job" and "stopped: budget:max_requeues_per_job" in second.reason
    assert [c[0] for c in sched.mutating_calls] == ["requeue"]  # nothing more touched the cluster


async def test_unknown_crash_twice_is_stopped_with_its_rule(local_env, tmp_path):
    sched, cfg, log = crash_cluster(tmp_path)
    cl = _cluster()
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})
    first = await _run(local_env, sched, cfg, _inp(log, pol, cl, attempt=0))
    assert first.outcome == IncidentOutcome.recovered and first.category.value == "crash", first
    await _visible(local_env, cl, 1)
    log.write_text(log.read_text() + CRASH)  # the resumed attempt dies the same way
    second = await _run(local_env, sched, cfg, _inp(log, pol, cl, attempt=1))
    assert second.outcome == IncidentOutcome.stopped, second
    assert second.rule == "rule:unknown_crash_repeated", second
    assert second.executed.value == "stop_no_retry"
    assert [c[0] for c in sched.mutating_calls] == ["requeue"]
    audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert audit[-1]["result"]["rule"] == "rule:unknown_crash_repeated"


async def test_app_bug_stops_at_first_sight(local_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "app")
    res = await _run(local_env, sched, cfg, _inp(log, RecoveryPolicy(mode="auto"), _cluster()))
    assert res.outcome == IncidentOutcome.stopped and res.rule == "runbook:stop_at_first_sight(app_bug)", res
    assert sched.mutating_calls == []


async def test_identity_mismatch_is_refused_and_recorded(local_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"user": "mallory"})
    res = await _run(local_env, sched, cfg, _inp(log, RecoveryPolicy(mode="auto"), _cluster()))
    assert res.outcome == IncidentOutcome.stopped and "JobIdentityMismatch" in res.reason, res
    assert "user mallory != root" in res.reason
    assert sched.mutating_calls == []
    audit = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    assert "refused" in audit["runbook"]["reason"]


async def test_purged_job_is_resubmitted_with_exclusions(local_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={
        "num_nodes": 2, "num_tasks": 2, "work_dir": str(tmp_path), "comment": '{"revive":{}}',
        "time_limit": "01:00:00", "tres_per_node": "gres:gpu:1", "exc_nodes": ["node4"]})
    sched.scripts["7"] = SCRIPT
    cl = _cluster()
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 2, "poll_interval": 0.2},
                         breaker={"max_fraction": 1.0, "max_nodes": 4})
    inp = _inp(log, pol, cl)
    jobspec = tmp_path / "state" / "jobspec"
    saved = await JobSpecActivities(sched, jobspec).save_job_spec(
        SaveJobSpecInput(incident_id=inp.incident_id, cluster=cl, job_id="7"))  # what gather saves at detection
    assert saved.saved, saved
    del sched.jobs["7"]  # purged from slurmctld (MinJobAge) before the plan ran
    res = await _run(local_env, sched, cfg, inp, jobspec=jobspec)
    assert [c[0] for c in sched.mutating_calls] == ["drain_nodes", "submit"], sched.calls
    submit = sched.mutating_calls[1][1]
    assert submit["script"] == SCRIPT
    opts = submit["options"]
    assert "--exclude=node[2,4]" in opts, opts
    for o in ("--job-name=train", "--partition=debug", "--nodes=2", "--ntasks=2", "--gres=gpu:1",
              "--time=01:00:00", f"--chdir={tmp_path}", f"--output={log}", "--open-mode=append",
              '--comment={"revive":{}}', "--requeue"):
        assert o in opts, (o, opts)
    new_id = next(j for j in sched.jobs)  # the only job slurmctld knows now
    audit = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    acts = audit["runbook"]["actions"]
    assert acts[-1]["action"] == "resubmit" and acts[-1]["new_job_id"] == new_id, acts
    assert "submit environment cannot be recovered" in acts[-1]["detail"]
    assert "purged" in acts[-1]["detail"]
    # verify still follows the old job id (lead: follow new_job_id), so it cannot confirm progress
    assert res.outcome in (IncidentOutcome.not_recovered, IncidentOutcome.recovered), res


async def test_no_requeue_job_is_resubmitted_not_requeued(local_env, tmp_path):
    sched, cfg, log = crash_cluster(tmp_path)
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"requeue": False})
    sched.scripts["7"] = SCRIPT
    inp = _inp(log, RecoveryPolicy(mode="auto", verify={"timeout": 2, "poll_interval": 0.2}), _cluster())
    await _run(local_env, sched, cfg, inp, jobspec=tmp_path / "state" / "jobspec")
    kinds = [c[0] for c in sched.mutating_calls]
    assert kinds == ["submit"], sched.calls  # no refused requeue, no second copy
    assert "--no-requeue" in sched.mutating_calls[0][1]["options"]
