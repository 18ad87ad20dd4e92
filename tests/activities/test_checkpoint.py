"""Checkpoint activities against the FakeScheduler (it records every mutating call) and real log
files: save before requeue, bad-checkpoint loops, array tasks and dependents."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.checkpoint import CheckpointActivities
from activities.remediation import RemediationActivities
from revive.models import (
    DependentsInput,
    JobIdentity,
    JobRecord,
    LoopCheckInput,
    SavePlan,
    SavePlanInput,
    SignalJobInput,
    WaitSaveInput,
)
from revive.scheduler.fake import FakeScheduler
from revive.signals import SignalScope
from tests.helpers.ckpt_logs import LIGHTNING_SAVED, attempt, bad_checkpoint_log, crash, lightning_log

JOB = JobIdentity(job_id="7", user="root", name="train", restart_count=0)
JOB1 = JOB.model_copy(update={"restart_count": 1})
"""The incident of attempt 1 (the job's restart count when it failed again)."""


def _sched(state: str = "RUNNING", **kw) -> FakeScheduler:
    return FakeScheduler(jobs=[JobRecord(job_id="7", name="train", user="root", state=state, nodes=["node1", "node2"],
                                         requeue=True, **kw)])


# ---- save before requeue ------------------------------------------------------------------------

async def test_lightning_job_is_planned_for_sigusr1_to_its_steps(tmp_path):
    log = tmp_path / "train-7.out"
    log.write_text(lightning_log())
    plan = await CheckpointActivities(_sched()).plan_save(SavePlanInput(incident_id="i", job=JOB, log_path=str(log)))
    assert (plan.signal, plan.scope, plan.profile, plan.requeues_itself) == ("USR1", SignalScope.steps, "lightning", True)
    assert plan.log_offset == log.stat().st_size


async def test_demo_job_has_no_save_signal_unless_the_policy_names_one(tmp_path):
    log = tmp_path / "train-7.out"
    log.write_text("\n".join(attempt(0, 1, 5)) + "\n")
    ck = CheckpointActivities(_sched())
    plan = await ck.plan_save(SavePlanInput(incident_id="i", job=JOB, log_path=str(log)))
    assert plan.signal is None and "names none" in plan.reason
    plan = await ck.plan_save(SavePlanInput(incident_id="i", job=JOB, log_path=str(log), signal="USR1",
                                            scope=SignalScope.batch))
    assert (plan.signal, plan.scope, plan.profile) == ("USR1", SignalScope.batch, "revive_demo")


async def test_a_job_that_already_ended_is_not_signalled(tmp_path):
    plan = await CheckpointActivities(_sched("FAILED")).plan_save(SavePlanInput(incident_id="i", job=JOB, log_path=None))
    assert plan.signal is None and "FAILED" in plan.reason


async def test_saved_line_after_the_signal_names_the_checkpoint(tmp_path):
    log = tmp_path / "train-7.out"
    log.write_text("\n".join(attempt(0, 1, 25, saves=(10, 20))) + "\n")
    plan = SavePlan(signal="USR1", profile="revive_demo", log_offset=log.stat().st_size)

    async def job_saves() -> None:
        await asyncio.sleep(0.3)
        with log.open("a") as f:
            f.write("2026-11-29T15:05:00+00:00 [rank 0 host node1] saved checkpoint at iteration 26\n")

    writer = asyncio.create_task(job_saves())
    got = await ActivityEnvironment().run(CheckpointActivities(_sched()).wait_for_save, WaitSaveInput(
        incident_id="i", job=JOB, log_path=str(log), plan=plan, after_iteration=20, timeout_s=5, poll_s=0.1))
    await writer
    assert got.saved and got.iteration == 26 and got.proof == "log_line" and not got.requeued_by_job


async def test_an_old_saved_line_before_the_signal_does_not_count(tmp_path):
    log = tmp_path / "train-7.out"
    log.write_text("\n".join(attempt(0, 1, 25, saves=(10, 20))) + "\n")
    plan = SavePlan(signal="USR1", profile="revive_demo", log_offset=log.stat().st_size)
    got = await ActivityEnvironment().run(CheckpointActivities(_sched()).wait_for_save, WaitSaveInput(
        incident_id="i", job=JOB, log_path=str(log), plan=plan, after_iteration=None, timeout_s=0.5, poll_s=0.1))
    assert not got.saved and "no save within" in got.detail


async def test_lightning_saves_and_requeues_itself_once(tmp_path):
    """Lightning prints 'Handling auto-requeue signal' (the inline hpc_ckpt save) and then requeues
    itself: the save is proved and the self-requeue seen, so Revive will not requeue again."""
    log = tmp_path / "train-7.out"
    log.write_text(lightning_log())
    sched = _sched()
    plan = SavePlan(signal="USR1", profile="lightning", requeues_itself=True, log_offset=log.stat().st_size)

    async def lightning_handler() -> None:
        await asyncio.sleep(0.3)
        with log.open("a") as f:
            f.write(LIGHTNING_SAVED)
        sched._set_job(sched.jobs["7"], state="PENDING", restart_count=1, nodes=[])

    writer = asyncio.create_task(lightning_handler())
    got = await ActivityEnvironment().run(CheckpointActivities(sched).wait_for_save, WaitSaveInput(
        incident_id="i", job=JOB, log_path=str(log), plan=plan, timeout_s=5, poll_s=0.1))
    await writer
    assert got.saved and got.requeued_by_job and "requeued itself" in got.detail


async def test_a_new_checkpoint_file_proves_the_save(tmp_path):
    ckdir = tmp_path / "ckpt"
    ckdir.mkdir()
    sched = _sched(comment=json.dumps({"revive": {"checkpoint_dir": str(ckdir)}}))
    log = tmp_path / "train-7.out"
    log.write_text(lightning_log())
    plan = await CheckpointActivities(sched).plan_save(SavePlanInput(incident_id="i", job=JOB, log_path=str(log)))
    assert plan.checkpoint_dir == str(ckdir)
    plan = plan.model_copy(update={"requeues_itself": False})

    async def save() -> None:
        await asyncio.sleep(0.3)
        (ckdir / "hpc_ckpt_3.ckpt").write_bytes(b"x")

    writer = asyncio.create_task(save())
    got = await ActivityEnvironment().run(CheckpointActivities(sched).wait_for_save, WaitSaveInput(
        incident_id="i", job=JOB, log_path=str(log), plan=plan, timeout_s=5, poll_s=0.1))
    await writer
    assert got.saved and got.proof == "new_file" and got.path.endswith("hpc_ckpt_3.ckpt") and got.iteration == 3


async def test_signal_job_sends_scancel_signal_to_the_running_attempt_only():
    sched = _sched()
    rm = RemediationActivities(sched)
    r = await rm.signal_job(SignalJobInput(incident_id="i", job=JOB, signal="USR1", scope=SignalScope.full))
    assert r.changed and r.commands == [["scancel", "--full", "--signal=USR1", "7"]]
    assert sched.mutating_calls == [("signal_job", {"job_id": "7", "signal": "USR1", "scope": "full"})]
    sched._set_job(sched.jobs["7"], state="PENDING", restart_count=1)
    r = await rm.signal_job(SignalJobInput(incident_id="i", job=JOB, signal="USR1"))
    assert not r.changed and len(sched.mutating_calls) == 1


async def test_a_kill_signal_is_refused_not_sent():
    sched = _sched()
    with pytest.raises(ApplicationError) as e:
        await RemediationActivities(sched).signal_job(SignalJobInput(incident_id="i", job=JOB, signal="KILL"))
    assert e.value.type == "BadSignal" and e.value.non_retryable


# ---- bad-checkpoint loops -------------------------------------------------------------------------

async def test_resuming_twice_onto_checkpoint_20_and_failing_makes_it_suspect(tmp_path):
    log = tmp_path / "train-7.out"
    log.write_text(bad_checkpoint_log())
    v = await CheckpointActivities(_sched("FAILED")).checkpoint_loop(LoopCheckInput(
        incident_id="i", cluster="fake", job=JOB1, log_path=str(log), category="crash", checkpoint_iteration=20))
    assert v.suspect == 20 and v.previous == 10 and v.profile == "revive_demo"
    assert "resume from checkpoint 10" in v.proposal and "undo" in v.proposal


async def test_only_the_failed_attempt_counts_not_the_one_already_running(tmp_path):
    """Attempt 0 failed (restart count 0); attempt 1 already resumed from 20 and runs: no loop."""
    log = tmp_path / "train-7.out"
    log.write_text("\n".join(attempt(0, 1, 25, saves=(10, 20)) + crash() + attempt(1, 21, 22, resumed=20)) + "\n")
    v = await CheckpointActivities(_sched("RUNNING")).checkpoint_loop(LoopCheckInput(
        incident_id="i", cluster="fake", job=JOB, log_path=str(log), category="crash"))
    assert v.suspect is None and "did not resume" in v.detail
    v = await CheckpointActivities(_sched("FAILED")).checkpoint_loop(LoopCheckInput(
        incident_id="i", cluster="fake", job=JOB.model_copy(update={"restart_count": 1}), log_path=str(log),
        category="crash"))
    assert v.suspect == 20


async def test_an_attempt_that_saved_a_newer_checkpoint_is_not_a_loop(tmp_path):
    log = tmp_path / "train-7.out"
    log.write_text("\n".join(attempt(0, 1, 25, saves=(10, 20)) + crash()
                             + attempt(1, 21, 32, saves=(30,), resumed=20) + crash()) + "\n")
    v = await CheckpointActivities(_sched("FAILED")).checkpoint_loop(LoopCheckInput(
        incident_id="i", cluster="fake", job=JOB1, log_path=str(log), category="crash"))
    assert v.suspect is None and "saved checkpoint 30" in v.detail


async def test_far_past_the_checkpoint_is_not_right_after_resuming(tmp_path):
    log = tmp_path / "train-7.out"
    log.write_text("\n".join(attempt(0, 1, 25, saves=(10, 20)) + crash()
                             + attempt(1, 21, 60, resumed=20) + crash()) + "\n")
    v = await CheckpointActivities(_sched("FAILED")).checkpoint_loop(LoopCheckInput(
        incident_id="i", cluster="fake", job=JOB1, log_path=str(log), category="crash", within_iterations=20))
    assert v.suspect is None and "40 iterations past" in v.detail


async def test_megatron_layout_proposes_the_tracker_file_step(tmp_path):
    def it(n: int) -> str:
        return (f" [2026-11-29 15:04:{n:02d}] iteration       {n}/    1000 | consumed samples: {n * 8} | "
                f"elapsed time per iteration (ms): 812.3 | lm loss: 2.3E+00 |")
    lines = ["> initializing torch distributed ...", it(9), "saving checkpoint at iteration       10 to /ckpt",
             "  successfully saved checkpoint from iteration       10 to /ckpt", it(11),
             "saving checkpoint at iteration       20 to /ckpt",
             "  successfully saved checkpoint from iteration       20 to /ckpt", it(21), "Segmentation fault",
             "> initializing torch distributed ...",
             "  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 20", it(21), "Segmentation fault"]
    log = tmp_path / "megatron.out"
    log.write_text("\n".join(lines) + "\n")
    v = await CheckpointActivities(_sched("FAILED")).checkpoint_loop(LoopCheckInput(
        incident_id="i", cluster="fake", job=JOB, log_path=str(log), category="crash"))
    assert v.suspect == 20 and v.previous == 10 and v.profile == "megatron"
    assert "latest_checkpointed_iteration.txt" in v.proposal and "'10'" in v.proposal


async def test_unreadable_or_unknown_logs_are_no_verdict(tmp_path):
    ck = CheckpointActivities(_sched("FAILED"))
    v = await ck.checkpoint_loop(LoopCheckInput(incident_id="i", cluster="fake", job=JOB,
                                                log_path=str(tmp_path / "missing.out"), category="crash"))
    assert v.suspect is None and "no log" in v.detail
    (tmp_path / "junk.out").write_bytes(b"\xff\xfe garbage\n" * 10)
    v = await ck.checkpoint_loop(LoopCheckInput(incident_id="i", cluster="fake", job=JOB,
                                                log_path=str(tmp_path / "junk.out"), category="crash"))
    assert v.suspect is None


# ---- dependents ------------------------------------------------------------------------------------

def _chain() -> FakeScheduler:
    return FakeScheduler(jobs=[
        JobRecord(job_id="7", name="train", user="root", state="FAILED", requeue=True),
        JobRecord(job_id="8", name="eval", user="root", state="PENDING", reason="DependencyNeverSatisfied",
                  dependency="afterok:7(failed)"),
        JobRecord(job_id="9", name="other", user="root", state="PENDING", reason="Dependency",
                  dependency="afterok:77(unfulfilled)"),
        JobRecord(job_id="12_3", name="sweep", user="root", state="PENDING", reason="Dependency",
                  dependency="afterany:7(unfulfilled)", array_job_id="12", array_task_id="3"),
    ])


async def test_dependents_of_a_stopped_job_are_listed():
    deps = await CheckpointActivities(_chain()).job_dependents(DependentsInput(job_id="7"))
    assert [(d.job_id, d.reason) for d in deps] == [("8", "DependencyNeverSatisfied"), ("12_3", "Dependency")]


async def test_requeued_parent_makes_the_failed_dependency_wait_again():
    sched = _chain()
    r = await RemediationActivities(sched).rewait_dependents(DependentsInput(job_id="7"))
    assert r.changed and r.commands == [["scontrol", "update", "JobId=8", "Dependency=afterok:7"]]
    assert sched.mutating_calls == [("update_job", {"job_id": "8", "Dependency": "afterok:7"})]
