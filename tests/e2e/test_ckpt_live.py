"""Issue #9 on the real local Slurm 22.05 cluster: an array task fault (only that task requeued),
SIGUSR1 save before requeue (a job step that traps USR1 and writes its checkpoint line), and an
``afterok`` chain whose failed parent is requeued (the dependent waits for it again, then runs).

The runbooks run as workflows on the time-skipping server with the production worker and the
real ``SlurmCLI`` (wrapped in a ``RecordingScheduler``: the tests assert on the exact calls). Only
the visibility-backed incident history is replaced. Jobs are named ``revive-ckpt-<tag>`` and only
they are cancelled in teardown (the cluster may be shared)."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio import activity

from activities.jobspec import JobSpecActivities
from revive.decide.budgets import JobIncidentHistory
from revive.models import (
    Action,
    Category,
    IncidentHistoryInput,
    IncidentOutcome,
    JobIdentity,
    Plan,
    RunbookInput,
    RunbookName,
    RunbookResult,
    SaveJobSpecInput,
)
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import RecordingScheduler
from revive.scheduler.slurm_cli import SlurmCLI, parse_job_line
from runbooks import RUNBOOKS
from tests.helpers import slurm as hs
from worker.main import build_worker

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.temporal]

# the demo job's lines (revive_demo profile), written by bash
_LINES = r'''
ts() { date +%Y-%m-%dT%H:%M:%S.%3N%:z; }
it() { echo "$(ts) [rank 0 host ${SLURMD_NODENAME:-node}] iteration $1/1000 | loss 0.5 | compute_ms 10.0 | step_time_ms 20.0"; }
saved() { echo "$(ts) [rank 0 host ${SLURMD_NODENAME:-node}] saved checkpoint at iteration $1"; }
R=${SLURM_RESTART_COUNT:-0}
echo "=== attempt restart=$R $(ts)"
'''


def usr1_step(tmp_path: Path, on_usr1: str) -> Path:
    """A job step printing an iteration every 0.3 s from the checkpoint in ``<tmp>/ckpt`` (``$CK``,
    the iteration ``$i``), running the bash ``on_usr1`` when it gets SIGUSR1."""
    step = tmp_path / "step.sh"
    step.write_text("#!/bin/bash\n" + _LINES.replace('echo "=== attempt', ': "') + r'''
CK=''' + str(tmp_path / "ckpt") + r'''
i=$(cat "$CK" 2>/dev/null || echo 0)
[ "$R" != 0 ] && echo "$(ts) [rank 0 host $SLURMD_NODENAME] resumed from checkpoint at iteration $i"
trap ''' + shlex.quote(on_usr1) + r''' USR1
while true; do i=$((i+1)); it $i; sleep 0.3; done
''')
    step.chmod(0o755)
    return step


@activity.defn(name="incident_history")
async def no_history(inp: IncidentHistoryInput) -> JobIncidentHistory:
    return JobIncidentHistory()


class Box:
    def __init__(self, cfg, tmp: Path) -> None:
        self.cfg, self.tmp = cfg, tmp
        self.tag = f"revive-ckpt-{uuid.uuid4().hex[:6]}"
        self.jobs: list[str] = []

    def sbatch(self, script: str, *argv: str) -> str:
        path = self.tmp / f"job-{len(self.jobs)}.sh"
        path.write_text("#!/bin/bash\n" + script)
        r = subprocess.run(["sbatch", "--parsable", f"--job-name={self.tag}", *argv, str(path)],
                           env=hs.slurm_env(self.cfg), capture_output=True, text=True, check=True)
        job = r.stdout.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def show(self, job: str):
        return [parse_job_line(ln) for ln in hs.scontrol(self.cfg, "show", "job", "-o", job).splitlines()
                if ln.startswith("JobId=")]

    async def until(self, job: str, pred, what: str, timeout: float = 60.0):
        for _ in range(int(timeout / 0.5)):
            recs = self.show(job)
            if recs and pred(recs):
                return recs
            await asyncio.sleep(0.5)
        raise AssertionError(f"{what}: {[(r.job_id, r.state, r.reason, r.restart_count) for r in self.show(job)]}")

    def teardown(self) -> None:
        for j in self.jobs:
            subprocess.run(["scancel", j], env=hs.slurm_env(self.cfg), capture_output=True)


@pytest.fixture
def box(slurm_cluster, tmp_path):
    b = Box(slurm_cluster, tmp_path)
    yield b
    b.teardown()


async def _runbook(env, cfg, job_id: str, log: str, category: Category, policy: RecoveryPolicy,
                   checkpoint: int | None, incident_id: str | None = None,
                   plan: Plan | None = None) -> tuple[RunbookResult, RecordingScheduler]:
    sched = RecordingScheduler(SlurmCLI.from_config(cfg))
    plan = plan or Plan(action=Action.restart_in_place, recommended=Action.restart_in_place,
                        runbook=RunbookName.restart_in_place, rule="runbook:restart_in_place", needs_approval=False)
    inp = RunbookInput(incident_id=incident_id or f"{cfg.name}-{job_id}-{uuid.uuid4().hex[:6]}", cluster=cfg.name,
                       job=JobIdentity(job_id=job_id, user="root", name=None, restart_count=0), plan=plan,
                       category=category, log_path=log, checkpoint_iteration=checkpoint, policy=policy)
    tq = f"ckpt-{uuid.uuid4().hex[:6]}"
    async with build_worker(env.client, cfg, sched, task_queue=tq, replace=[no_history]):
        res = await env.client.execute_workflow(RUNBOOKS[plan.runbook].run, inp, id=f"rb-{inp.incident_id}",
                                                task_queue=tq)
    return res, sched


POLICY = RecoveryPolicy(mode="auto", verify={"timeout": 90, "poll_interval": 0.5})


async def test_array_task_fault_requeues_only_that_task(ts_env, box, tmp_path):
    """A three-task array; the task whose own JobId equals the ArrayJobId fails. The runbook
    addresses it as <ArrayJobId>_<ArrayTaskId>: only it is requeued (`scontrol requeue <ArrayJobId>`
    would have requeued all three), and its own log proves the resume."""
    script = _LINES + r'''
if [ "$R" = 0 ] && [ "$SLURM_JOB_ID" = "$SLURM_ARRAY_JOB_ID" ]; then
  for i in 1 2 3 4 5 6 7 8 9 10 11; do it $i; [ $i = 10 ] && saved 10; done
  echo "[rank 0 host $SLURMD_NODENAME] Segmentation fault (core dumped)"; exit 139
fi
[ "$R" != 0 ] && echo "$(ts) [rank 0 host $SLURMD_NODENAME] resumed from checkpoint at iteration 10"
for i in $(seq 11 400); do it $i; sleep 0.5; done
'''
    arr = box.sbatch(script, "--requeue", "--array=1-3", "-o", str(tmp_path / "arr-%A_%a.out"))
    recs = await box.until(arr, lambda rs: any(r.array_job_id and r.state == "FAILED" for r in rs)
                           and sum(r.state == "RUNNING" for r in rs) == 2, "one task failed, two running")
    bad = next(r for r in recs if r.state == "FAILED")
    assert bad.job_id == f"{arr}_{bad.array_task_id}" and "_" in bad.job_id
    # its own JobId is the ArrayJobId: the plain id would address every task
    assert hs.scontrol(box.cfg, "show", "job", "-o", bad.job_id).startswith(f"JobId={arr} ")
    res, sched = await _runbook(ts_env, box.cfg, bad.job_id, bad.std_out, Category.crash, POLICY, 10)
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert [c for c in sched.mutating_calls if c[0] == "requeue"] == [("requeue", {"job_id": bad.job_id, "hold": False})]
    after = {r.job_id: r for r in box.show(arr)}
    assert after[bad.job_id].restart_count == 1
    others = [r for j, r in after.items() if j != bad.job_id]
    assert len(others) == 2 and all(r.restart_count == 0 and r.state == "RUNNING" for r in others)
    assert res.verify.resumed_from == 10 and res.verify.first_iteration_after == 11


async def test_sigusr1_save_before_requeue(ts_env, box, tmp_path):
    """A job step traps USR1 and writes its checkpoint line; a fault line while it runs → the
    runbook sends USR1 to the steps (`scancel --signal=USR1`), sees the save, requeues, and the next
    attempt resumes from the checkpoint saved on the signal."""
    step = usr1_step(tmp_path, 'echo $i > "$CK"; saved $i')
    script = _LINES + f"srun --ntasks=1 {step}\n"
    job = box.sbatch(script, "--requeue", "--nodes=1", "--open-mode=append", "-o", str(tmp_path / "usr1-%j.out"))
    recs = await box.until(job, lambda rs: rs[0].state == "RUNNING", "running")
    log = Path(recs[0].std_out)
    for _ in range(60):
        if log.exists() and log.read_text().count(" iteration ") >= 5:
            break
        await asyncio.sleep(0.5)
    pol = POLICY.model_copy(update={"save_before_requeue": POLICY.save_before_requeue.model_copy(
        update={"signal": "USR1"})})
    res, sched = await _runbook(ts_env, box.cfg, job, str(log), Category.nccl_error, pol, None)
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert [c[0] for c in sched.mutating_calls][:2] == ["signal_job", "requeue"]
    assert sched.mutating_calls[0][1] == {"job_id": job, "signal": "USR1", "scope": "steps"}
    saved = int((tmp_path / "ckpt").read_text())
    assert res.saved_checkpoint == saved and res.verify.resumed_from == saved
    assert f"saved checkpoint at iteration {saved}" in log.read_text()


async def test_afterok_dependent_waits_for_the_requeued_parent_and_then_runs(ts_env, box, tmp_path):
    """The parent fails; Slurm 22.05 marks its afterok dependent DependencyNeverSatisfied and keeps
    it so even after `scontrol requeue` of the parent. The runbook requeues the parent and re-points
    the dependent; the parent's second attempt completes and the dependent then runs."""
    parent_script = _LINES + r'''
if [ "$R" = 0 ]; then for i in 1 2 3 4 5 6 7 8 9 10 11; do it $i; [ $i = 10 ] && saved 10; done; exit 1; fi
echo "$(ts) [rank 0 host $SLURMD_NODENAME] resumed from checkpoint at iteration 10"
for i in $(seq 11 30); do it $i; sleep 0.3; done
exit 0
'''
    parent = box.sbatch(parent_script, "--requeue", "--open-mode=append", "-o", str(tmp_path / "p-%j.out"))
    child = box.sbatch("echo child ran\n", f"--dependency=afterok:{parent}", "-o", str(tmp_path / "c-%j.out"))
    await box.until(child, lambda rs: rs[0].reason == "DependencyNeverSatisfied", "dependent never satisfied")
    res, sched = await _runbook(ts_env, box.cfg, parent, str(tmp_path / f"p-{parent}.out"), Category.crash, POLICY, 10)
    assert res.outcome == IncidentOutcome.recovered, res.reason
    kinds = [(c[0], c[1].get("job_id")) for c in sched.mutating_calls]
    assert kinds == [("requeue", parent), ("update_job", child)], sched.mutating_calls
    assert sched.mutating_calls[1][1]["Dependency"] == f"afterok:{parent}"
    await box.until(child, lambda rs: rs[0].state == "COMPLETED", "dependent ran after the parent", timeout=90)
    assert box.show(parent)[0].state == "COMPLETED"


async def test_afterok_dependent_of_a_resubmitted_parent_waits_for_the_new_job_and_runs_after_it(ts_env, box, tmp_path):
    """The parent was submitted with --no-requeue and fails: requeue is impossible, so the runbook
    resubmits it from the spec saved at detection. Its afterok dependent is held first (once the
    old parent is purged Slurm drops the dependency and it would start), re-pointed at the new job
    id and released: it still waits, and runs only after the new parent completed."""
    done = tmp_path / "parent-ran-once"
    parent_script = _LINES + f"""
if [ ! -e {done} ]; then touch {done}; for i in 1 2 3 4 5 6 7 8 9 10 11; do it $i; [ $i = 10 ] && saved 10; done; exit 1; fi
echo "$(ts) [rank 0 host $SLURMD_NODENAME] resumed from checkpoint at iteration 10"
for i in $(seq 11 30); do it $i; sleep 0.3; done
date +%s.%N > {tmp_path / "parent-end"}
exit 0
"""
    parent = box.sbatch(parent_script, "--no-requeue", "--open-mode=append", "-o", str(tmp_path / "p-%j.out"))
    child = box.sbatch(f"date +%s.%N > {tmp_path / 'child-start'}\necho child ran\n",
                       f"--dependency=afterok:{parent}", "-o", str(tmp_path / "c-%j.out"))
    await box.until(child, lambda rs: rs[0].reason == "DependencyNeverSatisfied", "dependent never satisfied")
    incident = f"{box.cfg.name}-{parent}-{uuid.uuid4().hex[:6]}"
    saved = await JobSpecActivities(SlurmCLI.from_config(box.cfg), Path(box.cfg.state_dir) / "jobspec").save_job_spec(
        SaveJobSpecInput(incident_id=incident, cluster=box.cfg.name, job_id=parent))  # what gather saves
    assert saved.saved, saved
    res, sched = await _runbook(ts_env, box.cfg, parent, str(tmp_path / f"p-{parent}.out"), Category.crash, POLICY,
                                10, incident_id=incident)
    sub = next(a for a in res.actions if a.action == "resubmit")
    new = sub.new_job_id
    assert new and new != parent
    box.jobs.append(new)
    kinds = [(c[0], c[1].get("job_id")) for c in sched.mutating_calls]
    assert kinds[:4] == [("hold", child), ("submit", None), ("update_job", child), ("release", child)], kinds
    assert sched.mutating_calls[2][1]["Dependency"] == f"afterok:{new}"
    assert f"re-pointed at job {new} and released: {child}" in sub.detail
    assert res.outcome == IncidentOutcome.recovered, res.reason
    recs = await box.until(child, lambda rs: rs[0].state == "COMPLETED", "dependent ran after the new parent",
                           timeout=90)
    assert recs[0].dependency in (None, "(null)", "") or new in (recs[0].dependency or "")
    assert box.show(new)[0].state == "COMPLETED"
    assert float((tmp_path / "child-start").read_text()) >= float((tmp_path / "parent-end").read_text())
