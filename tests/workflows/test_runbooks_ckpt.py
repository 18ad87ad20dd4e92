"""Runbooks on the time-skipping server: save before requeue, bad-checkpoint loops, dependents.

The production worker runs the runbook child workflows directly, with the real activities over a
FakeScheduler (which records every mutating call) and real log files; only the visibility-backed
incident history is replaced (the Java test server has no visibility)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio import activity

from activities.rollback import load_record
from revive.decide.budgets import JobIncidentHistory, PriorIncident
from revive.models import (
    Action,
    Category,
    IncidentHistoryInput,
    IncidentOutcome,
    JobIdentity,
    JobRecord,
    LoopVerdict,
    Plan,
    RunbookInput,
    RunbookName,
    RunbookResult,
)
from revive.policy import RecoveryPolicy
from runbooks import RUNBOOKS
from tests.helpers.builders import T0, fake_cluster, job_log, resume_lines
from tests.helpers.ckpt_logs import LIGHTNING_SAVED, bad_checkpoint_log, lightning_log
from worker.main import build_worker, rollback_dir

pytestmark = pytest.mark.temporal

JOB = JobIdentity(job_id="7", user="root", name="train", restart_count=0)
JOB1 = JOB.model_copy(update={"restart_count": 1})
PRIORS: list[PriorIncident] = []


@activity.defn(name="incident_history")
async def fake_history(inp: IncidentHistoryInput) -> JobIncidentHistory:
    return JobIncidentHistory(prior=list(PRIORS))


def _plan(runbook: RunbookName, exclude: list[str] | None = None) -> Plan:
    action = {RunbookName.straggler: Action.requeue_exclude_nodes}.get(runbook, Action.restart_in_place)
    return Plan(action=action, recommended=action, runbook=runbook, rule=f"runbook:{runbook}",
                exclude_nodes=exclude or [], needs_approval=False)


def _input(log, runbook: RunbookName, category: Category, policy: RecoveryPolicy, **kw) -> RunbookInput:
    job = kw.pop("job", JOB)
    return RunbookInput(incident_id=f"fake-7-a{job.restart_count}-{uuid.uuid4().hex[:6]}", cluster="fake", job=job,
                        plan=_plan(runbook, kw.pop("exclude", None)), category=category, log_path=str(log),
                        attempt=job.restart_count, checkpoint_iteration=kw.pop("checkpoint", 20), policy=policy, **kw)


async def _run(env, sched, cfg, inp: RunbookInput, during=None) -> RunbookResult:
    tq = f"tq-{uuid.uuid4()}"
    async with build_worker(env.client, cfg, sched, task_queue=tq, replace=[fake_history]):
        h = await env.client.start_workflow(RUNBOOKS[inp.plan.runbook].run, inp, id=f"rb-{inp.incident_id}",
                                            task_queue=tq)
        side = asyncio.create_task(during()) if during else None
        res = await h.result()
        if side:
            side.cancel()
        return res


async def _after_requeue(sched, log, text: str, base: int = 0) -> None:
    """The requeued attempt's lines appear once the job was requeued (as on a real cluster)."""
    while (await sched.get_job("7")).restart_count <= base:
        await asyncio.sleep(0.05)
    with log.open("a") as f:
        f.write(text)


POLICY = dict(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})


async def test_straggler_saves_on_sigusr1_then_requeues_without_the_slow_node(ts_env, tmp_path):
    """A straggler whose policy names USR1: the job saves at iteration 41 on the signal (no 30-minute
    wait for the next checkpoint), then requeuehold → ExcNodeList=node2 → release, resumed from 41."""
    sched, cfg, log = fake_cluster(tmp_path, "straggler")

    def handler(sig: str, scope: str) -> None:  # the job's own USR1 trap
        with log.open("a") as f:
            f.write(f"{(T0 + timedelta(seconds=42)).isoformat()} [rank 0 host node1] saved checkpoint at iteration 41\n")

    sched.on_signal["7"] = handler
    pol = RecoveryPolicy(**POLICY, save_before_requeue={"signal": "SIGUSR1", "timeout": 30})
    inp = _input(log, RunbookName.straggler, Category.straggler, pol, exclude=["node2"], checkpoint=40)
    res = await _run(ts_env, sched, cfg, inp, during=lambda: _after_requeue(sched, log, resume_lines(41)))
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert res.saved_checkpoint == 41 and res.verify.resumed_from == 41
    assert [c[0] for c in sched.mutating_calls] == ["signal_job", "requeue", "update_job", "release"]
    assert sched.mutating_calls[0][1] == {"job_id": "7", "signal": "USR1", "scope": "steps"}
    assert sched.jobs["7"].exc_nodes == ["node2"]
    assert [a.action.value for a in res.actions][:2] == ["signal", "wait_for_checkpoint"]
    assert "checkpoint 41" in res.actions[1].detail


async def test_save_that_never_comes_is_recorded_and_the_requeue_goes_on(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "straggler")
    pol = RecoveryPolicy(**POLICY, save_before_requeue={"signal": "USR1", "timeout": 3})
    inp = _input(log, RunbookName.straggler, Category.straggler, pol, exclude=["node2"], checkpoint=40)
    res = await _run(ts_env, sched, cfg, inp, during=lambda: _after_requeue(sched, log, resume_lines(40)))
    assert res.saved_checkpoint is None
    save = next(a for a in res.actions if a.action.value == "wait_for_checkpoint")
    assert not save.ok and "none" in save.detail and "requeueing without it" in save.detail
    assert [c[0] for c in sched.mutating_calls] == ["signal_job", "requeue", "update_job", "release"]


async def test_lightning_requeues_itself_after_its_save_and_revive_does_not_requeue_again(ts_env, tmp_path):
    """Lightning's USR1 handler saves hpc_ckpt_<N>.ckpt and runs `scontrol requeue` itself: Revive
    signals once and then only finds the job already requeued."""
    sched, cfg, log = fake_cluster(tmp_path, "hang")
    log.write_text(lightning_log())

    def lightning(sig: str, scope: str) -> None:
        with log.open("a") as f:
            f.write(LIGHTNING_SAVED)
        sched._set_job(sched.jobs["7"], state="PENDING", restart_count=1, nodes=[])  # its own scontrol requeue

    sched.on_signal["7"] = lightning
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 2, "poll_interval": 0.2})
    inp = _input(log, RunbookName.restart_in_place, Category.nccl_error, pol, checkpoint=None)
    res = await _run(ts_env, sched, cfg, inp)
    assert [c[0] for c in sched.mutating_calls] == ["signal_job"], sched.calls
    assert sched.jobs["7"].restart_count == 1  # one requeue: Lightning's
    requeue = next(a for a in res.actions if a.action.value == "requeue")
    assert not requeue.changed and "already requeued" in requeue.detail
    assert "requeued itself" in next(a for a in res.actions if a.action.value == "wait_for_checkpoint").detail


def _lightning_straggler(tmp_path, restarts_onto: list[str] | None):
    """A Lightning job slowed by node2: on USR1 it saves and runs `scontrol requeue` itself; with
    ``restarts_onto`` Slurm starts the new attempt there before Revive can set the exclusion."""
    sched, cfg, log = fake_cluster(tmp_path, "straggler")
    log.write_text(lightning_log())

    def lightning(sig: str, scope: str) -> None:
        with log.open("a") as f:
            f.write(LIGHTNING_SAVED)
        job = sched.jobs["7"]
        if restarts_onto is None:
            sched._set_job(job, state="PENDING", reason="BeginTime", restart_count=1, nodes=[])
        else:
            sched._set_job(job, state="RUNNING", restart_count=1, nodes=restarts_onto)

    sched.on_signal["7"] = lightning
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 2, "poll_interval": 0.2})
    inp = _input(log, RunbookName.straggler, Category.straggler, pol, exclude=["node2"], checkpoint=None)
    return sched, cfg, inp


async def test_lightning_straggler_that_requeued_itself_is_held_while_the_slow_node_is_excluded(ts_env, tmp_path):
    """The self-requeued job is eligible again within seconds: Revive holds it, sets
    ExcNodeList=node2, releases — no second requeue, and no window for Slurm to pick node2."""
    sched, cfg, inp = _lightning_straggler(tmp_path, restarts_onto=None)
    res = await _run(ts_env, sched, cfg, inp)
    assert [c[0] for c in sched.mutating_calls] == ["signal_job", "hold", "update_job", "release"], sched.calls
    assert sched.mutating_calls[2][1]["ExcNodeList"] == "node2"
    job = sched.jobs["7"]
    assert job.restart_count == 1 and job.exc_nodes == ["node2"] and not job.hold
    requeue = next(a for a in res.actions if a.action.value == "requeue")
    assert requeue.changed and "held while set" in requeue.detail


async def test_lightning_straggler_restarted_on_the_slow_node_before_the_exclusion_is_requeued_once_more(
        ts_env, tmp_path):
    """Slurm started the self-requeued attempt on node2 again before the exclusion (22.05 refuses
    ExcNodeList on a running job): that attempt is requeued once more, held, excluded, released."""
    sched, cfg, inp = _lightning_straggler(tmp_path, restarts_onto=["node1", "node2"])
    res = await _run(ts_env, sched, cfg, inp)
    assert [c[0] for c in sched.mutating_calls] == ["signal_job", "requeue", "update_job", "release"], sched.calls
    assert sched.mutating_calls[1][1] == {"job_id": "7", "hold": True}
    job = sched.jobs["7"]
    assert job.restart_count == 2 and job.exc_nodes == ["node2"]
    requeue = next(a for a in res.actions if a.action.value == "requeue")
    assert "started on excluded node2 before the exclusion was set" in requeue.detail


async def test_hang_is_not_signalled_by_default(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "hang")
    log.write_text(lightning_log())
    inp = _input(log, RunbookName.hang, Category.hang, RecoveryPolicy(mode="auto", verify={"timeout": 1}))
    await _run(ts_env, sched, cfg, inp)
    assert [c[0] for c in sched.mutating_calls] == ["requeue"]


def _failed_with_dependent(tmp_path, log_text: str, restarts: int = 0):
    sched, cfg, log = fake_cluster(tmp_path, "segfault")
    log.write_text(log_text)
    sched._set_job(sched.jobs["7"], restart_count=restarts)
    sched.add_job(JobRecord(job_id="8", name="eval", user="root", state="PENDING", reason="DependencyNeverSatisfied",
                            dependency="afterok:7(failed)"))
    return sched, cfg, log


async def test_second_failure_right_after_resuming_from_20_escalates_checkpoint_20_suspect(ts_env, tmp_path):
    """Attempt 1 (restart count 1) resumed from 20 and crashed two iterations later, like attempt 0."""
    sched, cfg, log = _failed_with_dependent(tmp_path, bad_checkpoint_log(), restarts=1)
    PRIORS[:] = [PriorIncident(incident_id="fake-7-a0-first", job_id="7", attempt=0, category=Category.crash,
                               executed=Action.restart_in_place, outcome=IncidentOutcome.recovered,
                               checkpoint_iteration=20)]
    try:
        inp = _input(log, RunbookName.restart_in_place, Category.crash, RecoveryPolicy(**POLICY), checkpoint=20,
                     job=JOB1)
        res = await _run(ts_env, sched, cfg, inp)
    finally:
        PRIORS.clear()
    assert res.outcome == IncidentOutcome.escalated and res.suspect_checkpoint == 20
    assert res.reason.startswith("checkpoint 20 suspect") and "resume from checkpoint 10" in res.reason
    assert sched.mutating_calls == []  # nothing requeued onto 20, nothing rewritten
    assert res.dependents == ["8"] and "dependents never start: 8" in res.reason


async def test_a_different_root_cause_is_not_a_checkpoint_loop(ts_env, tmp_path):
    sched, cfg, log = _failed_with_dependent(tmp_path, bad_checkpoint_log(), restarts=1)
    PRIORS[:] = [PriorIncident(incident_id="fake-7-a0-first", job_id="7", attempt=0, category=Category.oom_host,
                               executed=Action.restart_in_place, checkpoint_iteration=20)]
    try:
        inp = _input(log, RunbookName.restart_in_place, Category.crash, RecoveryPolicy(**POLICY), checkpoint=20,
                     job=JOB1)
        res = await _run(ts_env, sched, cfg, inp, during=lambda: _after_requeue(
            sched, log, resume_lines(20).replace("restart=1", "restart=2"), base=1))
    finally:
        PRIORS.clear()
    assert res.suspect_checkpoint is None and "not a repeat" in res.diagnostics["bad_checkpoint"]
    assert [c[0] for c in sched.mutating_calls][0] == "requeue"


async def test_requeued_parent_gets_its_afterok_dependent_waiting_again(ts_env, tmp_path):
    """Slurm 22.05 leaves a dependent of a FAILED parent at DependencyNeverSatisfied even after the
    parent is requeued (measured on the testbed): the runbook re-points it."""
    sched, cfg, log = _failed_with_dependent(tmp_path, job_log("segfault"))
    inp = _input(log, RunbookName.restart_in_place, Category.crash, RecoveryPolicy(**POLICY), checkpoint=10)
    res = await _run(ts_env, sched, cfg, inp, during=lambda: _after_requeue(sched, log, resume_lines(10)))
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert sched.mutating_calls == [("requeue", {"job_id": "7", "hold": False}),
                                    ("update_job", {"job_id": "8", "Dependency": "afterok:7"})]
    assert sched.jobs["8"].dependency == "afterok:7(unfulfilled)"
    assert any(a.action.value == "dependents" and a.changed for a in res.actions)


def _hf_dirs(tmp_path):
    out = tmp_path / "hf-out"
    for n in (10, 20):
        (out / f"checkpoint-{n}").mkdir(parents=True)
    return out


async def test_approved_rollback_moves_the_suspect_checkpoint_aside_then_requeues(ts_env, tmp_path):
    """A person approved resuming from checkpoint 10 instead of suspect 20 (HF layout): the runbook
    moves checkpoint-20 aside (recorded with its undo), requeues, and the job resumes from 10."""
    sched, cfg, log = _failed_with_dependent(tmp_path, bad_checkpoint_log(), restarts=1)
    out = _hf_dirs(tmp_path)
    sched._set_job(sched.jobs["7"], command=f"/x/train.sbatch --output_dir {out}")
    verdict = LoopVerdict(suspect=20, previous=10, profile="hf_trainer", proposal="resume from checkpoint 10",
                          detail="attempt 1 resumed from checkpoint 20 and failed")
    inp = _input(log, RunbookName.restart_in_place, Category.crash, RecoveryPolicy(**POLICY), checkpoint=10,
                 job=JOB1, rollback=verdict, rollback_approved_by="alice")
    res = await _run(ts_env, sched, cfg, inp, during=lambda: _after_requeue(sched, log, resume_lines(10).replace("restart=1", "restart=2"), base=1))
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-10", "checkpoint-20.revive-suspect"]
    rb = next(a for a in res.actions if a.action == "rollback_checkpoint")
    assert "approved by alice" in rb.detail and f"revive checkpoint undo {inp.incident_id}" in rb.detail
    assert [c[0] for c in sched.mutating_calls][:1] == ["requeue"]
    rec = load_record(rollback_dir(cfg), inp.incident_id)
    assert rec is not None and rec.completed and rec.plan.undo[0].dest == str(out / "checkpoint-20")


async def test_approved_rollback_that_cannot_be_done_escalates_and_requeues_nothing(ts_env, tmp_path):
    sched, cfg, log = _failed_with_dependent(tmp_path, bad_checkpoint_log(), restarts=1)
    out = tmp_path / "hf-out"
    (out / "checkpoint-20").mkdir(parents=True)  # checkpoint-10 was deleted since the verdict
    sched._set_job(sched.jobs["7"], command=f"/x/train.sbatch --output_dir {out}")
    verdict = LoopVerdict(suspect=20, previous=10, profile="hf_trainer", proposal="resume from checkpoint 10")
    inp = _input(log, RunbookName.restart_in_place, Category.crash, RecoveryPolicy(**POLICY), checkpoint=10,
                 job=JOB1, rollback=verdict)
    res = await _run(ts_env, sched, cfg, inp)
    assert res.outcome == IncidentOutcome.escalated and res.suspect_checkpoint == 20
    assert "checkpoint-10 not found" in res.reason
    assert sched.mutating_calls == [] and (out / "checkpoint-20").is_dir()
