"""A job that requeues itself on its save signal (Lightning's SIGUSR1 handler runs
``scontrol requeue $SLURM_JOB_ID``), slowed by the node it runs on, on the real Slurm 22.05
testbed. Slurm refuses ``ExcNodeList`` on a running job, so the exclusion can only be set while the
self-requeued job pends (it is eligible again within seconds):

- Revive in time: the straggler runbook signals, the job saves and requeues itself, Revive holds
  the pending job, sets ``ExcNodeList`` and releases it; the next attempt runs elsewhere.
- Revive late: Slurm already started the new attempt on the slow node; ``requeue_job`` requeues
  that attempt once more (requeuehold → ExcNodeList → release) and it runs elsewhere.

Jobs are named ``revive-ckpt-<tag>`` and only they are cancelled in teardown."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.remediation import RemediationActivities
from revive.models import Action, Category, IncidentOutcome, JobIdentity, Plan, RequeueInput, RunbookName
from revive.scheduler.slurm_cli import SlurmCLI
from tests.e2e.test_ckpt_live import _LINES, POLICY, Box, _runbook, usr1_step
from tests.e2e.test_ckpt_live import box as box  # noqa: F401  (fixture)
from tests.helpers import slurm as hs

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.temporal]


def _self_requeuing_job(box: Box, tmp_path: Path) -> str:
    """One node; iterations every 0.3 s; on USR1 it saves its iteration and requeues itself."""
    step = usr1_step(tmp_path, 'echo $i > "$CK"; saved $i; scontrol requeue "$SLURM_JOB_ID"; exit 0')
    return box.sbatch(_LINES + f"srun --ntasks=1 {step}\n", "--requeue", "--nodes=1", "--open-mode=append",
                      "-o", str(tmp_path / "selfrq-%j.out"))


async def _iterations(log: Path, n: int) -> None:
    for _ in range(120):
        if log.exists() and log.read_text().count(" iteration ") >= n:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{log}: fewer than {n} iterations")


async def test_self_requeued_straggler_is_held_and_excluded_before_slurm_restarts_it(ts_env, box, tmp_path):
    job = _self_requeuing_job(box, tmp_path)
    recs = await box.until(job, lambda rs: rs[0].state == "RUNNING" and rs[0].nodes, "running")
    slow, log = recs[0].nodes[0], Path(recs[0].std_out)
    await _iterations(log, 5)
    pol = POLICY.model_copy(update={"save_before_requeue": POLICY.save_before_requeue.model_copy(
        update={"signal": "USR1"})})
    plan = Plan(action=Action.requeue_exclude_nodes, recommended=Action.requeue_exclude_nodes,
                runbook=RunbookName.straggler, rule="runbook:straggler", exclude_nodes=[slow], needs_approval=False)
    res, sched = await _runbook(ts_env, box.cfg, job, str(log), Category.straggler, pol, None, plan=plan)
    steps = "; ".join(f"{a.action}: {a.detail}" for a in res.actions)
    assert res.outcome == IncidentOutcome.recovered, f"{res.reason} | {steps}"
    assert "the job requeued itself" in steps and "held while set" in steps, steps
    calls = [c[0] for c in sched.mutating_calls]
    assert calls[0] == "signal_job" and calls.count("requeue") <= 1, sched.mutating_calls
    after = box.show(job)[0]
    assert slow in after.exc_nodes and after.state == "RUNNING" and slow not in after.nodes, after
    saved = int((tmp_path / "ckpt").read_text())
    assert res.saved_checkpoint == saved and res.verify.resumed_from == saved


async def test_self_requeued_job_restarted_on_the_slow_node_is_requeued_once_more_excluding_it(box, tmp_path):
    # the other nodes are taken (--exclusive: testbed nodes are shared otherwise), so Slurm restarts the self-requeued job on the slow node
    first = _self_requeuing_job(box, tmp_path)
    recs = await box.until(first, lambda rs: rs[0].state == "RUNNING" and rs[0].nodes, "running")
    slow, log = recs[0].nodes[0], Path(recs[0].std_out)
    others = sorted(n.name for n in await SlurmCLI.from_config(box.cfg).get_nodes() if n.name != slow)
    sleepers = [box.sbatch("sleep 600\n", "-w", n, "--exclusive", "-o", "/dev/null") for n in others]
    for s in sleepers:
        await box.until(s, lambda rs: rs[0].state == "RUNNING", f"sleeper {s} running")
    await _iterations(log, 5)
    subprocess.run(["scancel", "--signal=USR1", first], env=hs.slurm_env(box.cfg), check=True)
    await box.until(first, lambda rs: rs[0].restart_count == 1 and rs[0].state == "RUNNING"
                    and rs[0].nodes == [slow], "restarted on the slow node", timeout=90)
    for s in sleepers:
        subprocess.run(["scancel", s], env=hs.slurm_env(box.cfg), check=True)

    async def armed(job_id: str, after_s: float) -> int:
        return 1  # the release below is Revive's own; no fail-open process is needed here

    acts = RemediationActivities(SlurmCLI.from_config(box.cfg), arm_hold_release=armed)
    res = await ActivityEnvironment().run(acts.requeue_job, RequeueInput(
        incident_id="selfrq", job=JobIdentity(job_id=first, user="root", restart_count=0), exclude_nodes=[slow]))
    assert res.ok and res.changed and f"started on excluded {slow}" in res.detail, res
    after = await box.until(first, lambda rs: rs[0].state == "RUNNING" and rs[0].restart_count == 2,
                            "running again", timeout=90)
    assert slow in after[0].exc_nodes and slow not in after[0].nodes, after[0]
