"""Verify with any framework's own lines: the requeued attempt's progress past its checkpoint proves
the recovery (and names the rule); a log no profile understands is *unverified*, not a failure."""

from __future__ import annotations

import asyncio

from temporalio.testing import ActivityEnvironment

from activities.verification import VerificationActivities
from revive.models import JobIdentity, JobRecord, VerifyInput
from revive.scheduler.fake import FakeScheduler

OLD_MEGATRON = "".join(
    f"0:  [2026-11-30 09:{i // 60:02d}:{i % 60:02d}.000000] iteration {i:8d}/    1000 | consumed samples: {i * 32:12d} | "
    f"elapsed time per iteration (ms): 2000.0 | learning rate: 1.000000E-04 | lm loss: 3.5E+00 |\n"
    for i in range(30, 46))
NEW_MEGATRON = (
    "0:  loading distributed checkpoint from /lustre/ckpt/gpt at iteration 40\n"
    "0:   successfully loaded checkpoint from /lustre/ckpt/gpt [ t 1/2, gtp_remat 1/1, p 1/1 ] at iteration 40\n"
    "0:  [2026-11-30 10:00:05.000000] iteration       41/    1000 | consumed samples:         1312 | "
    "elapsed time per iteration (ms): 2000.0 | learning rate: 1.000000E-04 | lm loss: 3.5E+00 |\n")


def _job(tmp_path, restarts: int = 1) -> tuple[FakeScheduler, str]:
    log = tmp_path / "slurm-7.out"
    sched = FakeScheduler(cluster="c", jobs=[JobRecord(job_id="7", user="u", name="pretrain", state="RUNNING",
                                                       restart_count=restarts, nodes=["node1", "node3"],
                                                       std_out=str(log))])
    return sched, str(log)


async def _verify(sched, log, append: str, checkpoint: int | None, timeout_s: float = 3.0):
    vf = VerificationActivities(sched)
    inp = VerifyInput(incident_id="i", job=JobIdentity(job_id="7"), log_path=log, after_attempt=0,
                      checkpoint_iteration=checkpoint, timeout_s=timeout_s, poll_s=0.1, excluded_nodes=["node2"])

    async def writer() -> None:
        await asyncio.sleep(0.3)
        with open(log, "a") as f:
            f.write(append)

    w = asyncio.create_task(writer())
    try:
        return await ActivityEnvironment().run(vf.verify_progress, inp)
    finally:
        await w


async def test_megatron_resume_past_the_loaded_checkpoint(tmp_path) -> None:
    sched, log = _job(tmp_path)
    (tmp_path / "slurm-7.out").write_text(OLD_MEGATRON)  # the failed attempt reached 45 (appended log)
    v = await _verify(sched, log, NEW_MEGATRON, checkpoint=40)
    assert v.recovered and v.rule == "resumed_past_loaded_checkpoint"
    assert (v.resumed_from, v.first_iteration_after) == (40, 41)


async def test_old_attempts_lines_never_prove_a_resume(tmp_path) -> None:
    sched, log = _job(tmp_path)
    (tmp_path / "slurm-7.out").write_text(OLD_MEGATRON)
    v = await _verify(sched, log, "", checkpoint=40, timeout_s=1.0)  # nothing new: iterations 41-45 are old
    assert not v.recovered and not v.unverified


async def test_hf_tqdm_without_a_load_line_counts_past_the_last_saved_checkpoint(tmp_path) -> None:
    sched, log = _job(tmp_path)
    (tmp_path / "slurm-7.out").write_text(" 45%|████▌     | 450/1000 [15:00<18:20,  2.00s/it]\n")
    v = await _verify(sched, log, " 40%|████      | 400/1000 [00:00<?, ?it/s]\r 40%|████      | 401/1000 [00:02<19:58,  2.00s/it]\n",
                      checkpoint=400)
    assert v.recovered and v.rule == "past_last_saved_checkpoint" and v.first_iteration_after == 401


async def test_a_log_no_profile_understands_is_unverified(tmp_path) -> None:
    sched, log = _job(tmp_path)
    (tmp_path / "slurm-7.out").write_text("starting\n")
    v = await _verify(sched, log, "doing things\nstill doing things\n", checkpoint=None, timeout_s=1.0)
    assert not v.recovered and v.unverified and "matched no progress profile" in v.detail


async def test_an_attempt_on_an_excluded_node_requeued_once_more_does_not_prove_the_resume(tmp_path) -> None:
    """Attempt 1 resumed on node2, which Revive excludes (the job had requeued itself onto it);
    Revive requeues it once more; attempt 2 on node1,node3 resumes: that is the proof, at its time."""
    sched, log = _job(tmp_path)
    sched._set_job(sched.jobs["7"], nodes=["node1", "node2"])
    (tmp_path / "slurm-7.out").write_text(OLD_MEGATRON)
    later = NEW_MEGATRON.replace("10:00:05", "10:05:05")

    async def requeued_again() -> None:
        await asyncio.sleep(1.0)  # attempt 1 has proven progress on node2 by now
        sched._set_job(sched.jobs["7"], restart_count=2, nodes=["node1", "node3"])
        with open(log, "a") as f:
            f.write(later)

    again = asyncio.create_task(requeued_again())
    try:
        v = await _verify(sched, log, NEW_MEGATRON, checkpoint=40, timeout_s=4.0)
    finally:
        await again
    assert v.recovered and v.nodes == ["node1", "node3"]
    assert v.resumed_at is not None and v.resumed_at.minute == 5, v  # attempt 2's line, not attempt 1's
