"""Issue #9 item 6: a job that cannot be requeued is resubmitted; the jobs waiting on it are held
before the old job is cancelled (once slurmctld purges it, Slurm drops the dependency and they
would start), re-pointed at the new job id, then released — all in the resubmit's record.

``RemediationActivities`` against ``FakeScheduler`` (records every call)."""

from __future__ import annotations

import json
from pathlib import Path

from activities.jobspec import JobSpecActivities, spec_dir
from activities.remediation import DEPENDENTS_FILE, RemediationActivities
from revive.models import JobIdentity, JobRecord, RequeueInput, SaveJobSpecInput
from revive.scheduler.fake import FakeScheduler

SCRIPT = "#!/bin/bash\necho train\n"


async def _setup(tmp_path: Path, parent: JobRecord, *others: JobRecord) -> tuple[FakeScheduler, RemediationActivities]:
    sched = FakeScheduler(jobs=[parent, *others])
    sched.scripts[parent.job_id] = SCRIPT
    root = tmp_path / "jobspec"
    saved = await JobSpecActivities(sched, root).save_job_spec(
        SaveJobSpecInput(incident_id="inc-1", cluster="fake", job_id=parent.job_id))
    assert saved.saved, saved
    sched.calls.clear()
    return sched, RemediationActivities(sched, jobspec_dir=root)


def _inp(job_id: str) -> RequeueInput:
    return RequeueInput(incident_id="inc-1", job=JobIdentity(job_id=job_id, user="alice", name="train"))


async def test_no_requeue_parent_resubmitted_its_afterok_dependent_is_held_repointed_released(tmp_path):
    parent = JobRecord(job_id="7", name="train", user="alice", state="FAILED", requeue=False)
    child = JobRecord(job_id="8", name="eval", user="alice", state="PENDING",
                      dependency="afterok:7(failed)", reason="DependencyNeverSatisfied")
    other = JobRecord(job_id="9", name="x", user="bob", state="PENDING", dependency="afterok:5(unfulfilled)")
    sched, rm = await _setup(tmp_path, parent, child, other)
    res = await rm._requeue_job(_inp("7"))
    new = res.new_job_id
    assert res.action == "resubmit" and new
    # the hold comes before anything touches the parent; job 9 (waits on another job) is untouched
    assert [(c[0], c[1].get("job_id")) for c in sched.mutating_calls] == [
        ("hold", "8"), ("submit", None), ("update_job", "8"), ("release", "8")], sched.mutating_calls
    assert sched.mutating_calls[2][1]["Dependency"] == f"afterok:{new}"
    live = sched.jobs["8"]
    assert live.state == "PENDING" and not live.hold and live.dependency == f"afterok:{new}(unfulfilled)"
    assert ["scontrol", "hold", "8"] in res.commands and ["scontrol", "release", "8"] in res.commands
    assert f"re-pointed at job {new} and released: 8 (Dependency=afterok:{new})" in res.detail
    rec = json.loads((spec_dir(tmp_path / "jobspec", "inc-1") / DEPENDENTS_FILE).read_text())
    assert rec["old"] == "7" and rec["jobs"] == {"8": "afterok:7(failed)"}


async def test_a_retry_after_sbatch_finishes_the_repointing_and_never_submits_twice(tmp_path):
    parent = JobRecord(job_id="7", name="train", user="alice", state="FAILED", requeue=False)
    child = JobRecord(job_id="8", name="eval", user="alice", state="PENDING", dependency="afterok:7(failed)")
    sched, rm = await _setup(tmp_path, parent, child)
    first = await rm._requeue_job(_inp("7"))
    # the worker died after sbatch and before the release: the dependent is still held on the old id
    sched.jobs["8"] = sched.jobs["8"].model_copy(update={"hold": True, "dependency": "afterok:7(failed)"})
    sched.calls.clear()
    again = await rm._requeue_job(_inp("7"))
    assert again.new_job_id == first.new_job_id
    assert [c[0] for c in sched.mutating_calls] == ["update_job", "release"], sched.mutating_calls
    assert not sched.jobs["8"].hold


async def test_a_dependent_someone_else_held_is_repointed_but_stays_held(tmp_path):
    parent = JobRecord(job_id="7", name="train", user="alice", state="FAILED", requeue=False)
    child = JobRecord(job_id="8", name="eval", user="alice", state="PENDING", hold=True,
                      dependency="afterok:7(failed)?afterany:3(unfulfilled)")
    sched, rm = await _setup(tmp_path, parent, child)
    res = await rm._requeue_job(_inp("7"))
    assert [c[0] for c in sched.mutating_calls] == ["submit", "update_job"], sched.mutating_calls
    assert sched.mutating_calls[1][1]["Dependency"] == f"afterok:{res.new_job_id}?afterany:3"
    assert sched.jobs["8"].hold


async def test_a_resubmitted_array_task_stays_identifiable(tmp_path):
    task = JobRecord(job_id="123_4", name="train", user="alice", state="FAILED", requeue=False,
                     array_job_id="123", array_task_id="4")
    exact = JobRecord(job_id="130", name="eval4", user="alice", state="PENDING", dependency="afterok:123_4(failed)")
    whole = JobRecord(job_id="131", name="evalall", user="alice", state="PENDING",
                      dependency="afterok:123(unfulfilled)")
    sched, rm = await _setup(tmp_path, task, exact, whole)
    res = await rm._requeue_job(_inp("123_4"))
    new = res.new_job_id
    assert f"array task 123_4 (ArrayJobId 123, ArrayTaskId 4) is now job {new}" in res.detail
    assert sched.jobs["130"].dependency == f"afterok:{new}(unfulfilled)" and not sched.jobs["130"].hold
    # a wait on the whole array cannot be re-pointed at one job: held, and said so
    assert sched.jobs["131"].hold and "left held for a person" in res.detail and "131" in res.detail


async def test_no_dependents_no_holds(tmp_path):
    parent = JobRecord(job_id="7", name="train", user="alice", state="FAILED", requeue=False)
    sched, rm = await _setup(tmp_path, parent)
    res = await rm._requeue_job(_inp("7"))
    assert [c[0] for c in sched.mutating_calls] == ["submit"]
    assert "dependents" not in res.detail
