"""Array task ids and dependencies: parsed from what Slurm 22.05 prints (records captured on the
local testbed: ``tests/data/slurm/show_job_array_and_dependents.txt`` holds a 9-task array with
throttle 2 — tasks 1 and 2 running, 3-9 pending as one record — a job whose ``afterok`` parent
failed, and one waiting on task 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from revive.models import JobRecord
from revive.scheduler.arrays import depends_on, expand_task_set, parse_dependency, parse_job_ref
from revive.scheduler.fake import FakeScheduler
from revive.scheduler.slurm_cli import parse_job_line
from revive.signals import SignalScope, normalize_signal, scancel_argv

LINES = (Path(__file__).resolve().parents[2] / "data" / "slurm" / "show_job_array_and_dependents.txt").read_text()


def test_array_tasks_are_addressed_by_array_job_and_task():
    recs = [parse_job_line(ln) for ln in LINES.splitlines()]
    assert [r.job_id for r in recs] == ["6_[3-9%2]", "6_2", "6_1", "5", "9"]
    task2 = recs[1]
    assert (task2.array_job_id, task2.array_task_id, task2.state) == ("6", "2", "RUNNING")
    assert task2.std_out == "/tmp/ckpt/arr-6_2.out"  # that task's own log
    assert recs[0].state == "PENDING" and recs[0].array_task_id == "3-9%2"
    assert recs[3].dependency == "afterok:4(failed)" and recs[3].reason == "DependencyNeverSatisfied"
    assert recs[4].dependency == "afterok:6_2(unfulfilled)"


@pytest.mark.parametrize("text,job,task", [("123", "123", None), ("123_4", "123", "4"), ("123_*", "123", "*"),
                                           ("123_[1-9%2]", "123", "[1-9%2]")])
def test_job_refs(text, job, task):
    ref = parse_job_ref(text)
    assert (ref.job, ref.task, str(ref)) == (job, task, text)


@pytest.mark.parametrize("bad", ["", "abc", "12_", "12_x", "12;rm -rf /", "1_[1-", "1_[5-2]", "9" * 20])
def test_bad_job_ids_are_refused(bad):
    with pytest.raises(ValueError):
        parse_job_ref(bad)


def test_task_sets_expand_with_steps_and_throttle():
    assert expand_task_set("[1-9:4%2]") == [1, 5, 9]
    assert expand_task_set("1-3,7") == [1, 2, 3, 7]
    with pytest.raises(ValueError):
        expand_task_set("[0-4000000]")


def test_dependency_terms_and_who_waits_on_a_task():
    deps = parse_dependency("afterok:6_2(unfulfilled)?afterany:77:78(failed)")
    assert [(d.kind, d.job, d.state, d.never) for d in deps] == [
        ("afterok", "6_2", "unfulfilled", False), ("afterany", "77", "failed", True), ("afterany", "78", "failed", True)]
    assert depends_on("afterok:6_2(unfulfilled)", "6_2") and not depends_on("afterok:6_2(unfulfilled)", "6_1")
    assert depends_on("afterok:6_*(unfulfilled)", "6_1") and depends_on("afterok:6(unfulfilled)", "6_1")
    assert depends_on("afterok:6_[1-3](unfulfilled)", "6_2")
    assert parse_dependency("(null)") == [] and parse_dependency("garbage((") == []


def test_save_signals_and_scancel_forms():
    assert normalize_signal("SIGUSR1") == "USR1" and normalize_signal(" term ") == "TERM"
    for bad in ("KILL", "SIGSTOP", "9", ""):
        with pytest.raises(ValueError):
            normalize_signal(bad)
    assert scancel_argv("6_2", "USR1", SignalScope.steps) == ["scancel", "--signal=USR1", "6_2"]
    assert scancel_argv("6_2", "SIGTERM", SignalScope.batch) == ["scancel", "--batch", "--signal=TERM", "6_2"]
    assert scancel_argv("7", "USR1", SignalScope.full) == ["scancel", "--full", "--signal=USR1", "7"]


async def test_fake_scheduler_records_signals_and_refuses_a_finished_job():
    from revive.errors import SchedulerCommandError

    seen = []
    sched = FakeScheduler(jobs=[JobRecord(job_id="6_2", state="RUNNING"), JobRecord(job_id="5", state="FAILED")])
    sched.on_signal["6_2"] = lambda sig, scope: seen.append((sig, scope))
    assert await sched.signal_job("6_2", "USR1") == ["scancel", "--signal=USR1", "6_2"]
    assert seen == [("USR1", "steps")] and sched.mutating_calls[0][0] == "signal_job"
    with pytest.raises(SchedulerCommandError):
        await sched.signal_job("5", "USR1")


def test_rest_records_of_array_tasks_use_the_same_address():
    from revive.scheduler.slurm_rest import job_from_rest

    task = job_from_rest({"job_id": 6, "array_job_id": 6, "array_task_id": 3, "job_state": "RUNNING",
                          "dependency": "afterok:5(unfulfilled)"})
    assert (task.job_id, task.array_job_id, task.array_task_id, task.dependency) == ("6_3", "6", "3",
                                                                                     "afterok:5(unfulfilled)")
    plain = job_from_rest({"job_id": 9, "array_job_id": 0, "array_task_id": None, "job_state": "PENDING"})
    assert (plain.job_id, plain.array_job_id) == ("9", None)


def test_rest_records_carry_the_end_time():
    from revive.scheduler.slurm_rest import job_from_rest

    j = job_from_rest({"job_id": 9, "job_state": "FAILED", "end_time": {"set": True, "number": 1796180367}})
    assert j.ended_at is not None and int(j.ended_at.timestamp()) == 1796180367


async def test_recording_scheduler_records_the_signal_before_sending_it():
    from revive.scheduler.fake import RecordingScheduler

    inner = FakeScheduler(jobs=[JobRecord(job_id="6_2", state="RUNNING")])
    rec = RecordingScheduler(inner)
    await rec.signal_job("6_2", "TERM", SignalScope.batch)
    assert rec.mutating_calls == [("signal_job", {"job_id": "6_2", "signal": "TERM", "scope": "batch"})]
    assert inner.mutating_calls[0][0] == "signal_job"
