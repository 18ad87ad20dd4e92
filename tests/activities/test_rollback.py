"""Issue #9 item 7: a person approved resuming from the checkpoint before the suspect one. The
activity performs each layout's reversible step on real files (``LocalRunner``: argv only), records
it, and ``undo_rollback`` restores the directory byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.rollback import RollbackActivities, load_record, undo_rollback
from revive.models import JobIdentity, JobRecord, LoopVerdict, RollbackInput
from revive.rollback import RollbackRefused, plan_rollback
from revive.scheduler.fake import FakeScheduler
from revive.scheduler.runners import LocalRunner


def snapshot(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): (p.read_text() if p.is_file() else "<dir>") for p in sorted(d.rglob("*"))}


def setup(tmp_path: Path, comment: str | None, command: str | None) -> tuple[RollbackActivities, Path]:
    sched = FakeScheduler(jobs=[JobRecord(job_id="7", name="train", user="alice", state="FAILED",
                                          comment=comment, command=command)])
    root = tmp_path / "state" / "rollback"
    return RollbackActivities(sched, LocalRunner(), root), root


def inp(profile: str, suspect: int, previous: int) -> RollbackInput:
    return RollbackInput(incident_id="local-7-a1", cluster="local", job=JobIdentity(job_id="7", user="alice"),
                         verdict=LoopVerdict(suspect=suspect, previous=previous, profile=profile), approved_by="ops")


async def test_megatron_tracker_rewritten_to_the_previous_iteration_and_undone(tmp_path):
    save = tmp_path / "ckpt"
    for it in ("iter_0001000", "iter_0002000"):
        (save / it).mkdir(parents=True)
        (save / it / "model.pt").write_text(it)
    (save / "latest_checkpointed_iteration.txt").write_text("2000")
    before = snapshot(save)
    rb, root = setup(tmp_path, None, f"/x/pretrain_gpt.sh --save {save} --load {save}")
    res = await rb.rollback_checkpoint(inp("megatron", 2000, 1000))
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "1000\n"
    assert (save / "latest_checkpointed_iteration.txt.revive-local-7-a1").read_text() == "2000"
    assert res.changed and "revive checkpoint undo local-7-a1" in res.detail
    assert all(a[0] in ("cp", "tee") for a in res.commands), res.commands
    rec = load_record(root, "local-7-a1")
    assert rec and rec.completed and rec.approved_by == "ops" and len(rec.done) == 2
    again = await rb.rollback_checkpoint(inp("megatron", 2000, 1000))  # a retried activity
    assert not again.changed and (save / "latest_checkpointed_iteration.txt").read_text() == "1000\n"
    await undo_rollback(LocalRunner(), root, "local-7-a1")
    assert snapshot(save) == before
    with pytest.raises(RollbackRefused, match="already undone"):
        await undo_rollback(LocalRunner(), root, "local-7-a1")


async def test_deepspeed_latest_tag_keeps_its_form(tmp_path):
    save = tmp_path / "ds"
    for it in ("global_step300", "global_step600"):
        (save / it).mkdir(parents=True)
    (save / "latest").write_text("global_step600")
    rb, _root = setup(tmp_path, json.dumps({"revive": {"checkpoint_dir": str(save)}}), "/x/train.sh")
    await rb.rollback_checkpoint(inp("deepspeed", 600, 300))
    assert (save / "latest").read_text() == "global_step300\n"


async def test_hf_checkpoint_moved_aside_from_the_output_dir_and_back(tmp_path):
    out = tmp_path / "hf"
    for n in (10, 20):
        (out / f"checkpoint-{n}").mkdir(parents=True)
        (out / f"checkpoint-{n}" / "trainer_state.json").write_text(str(n))
    before = snapshot(out)
    rb, root = setup(tmp_path, None, f"/x/train.sbatch --output_dir {out}")
    await rb.rollback_checkpoint(inp("hf_trainer", 20, 10))
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-10", "checkpoint-20.revive-suspect"]
    await undo_rollback(LocalRunner(), root, "local-7-a1")
    assert snapshot(out) == before


async def test_lightning_moves_the_newest_hpc_ckpt_and_last_aside(tmp_path):
    d = tmp_path / "pl"
    d.mkdir()
    for n in ("hpc_ckpt_1.ckpt", "hpc_ckpt_2.ckpt", "last.ckpt", "epoch=0-step=10.ckpt"):
        (d / n).write_text(n)
    rb, _root = setup(tmp_path, None, f"/x/train.sbatch --default_root_dir={d}")
    await rb.rollback_checkpoint(inp("lightning", 20, 10))
    assert sorted(p.name for p in d.iterdir()) == ["epoch=0-step=10.ckpt", "hpc_ckpt_1.ckpt",
                                                   "hpc_ckpt_2.ckpt.revive-suspect", "last.ckpt.revive-suspect"]


async def test_a_directory_that_does_not_hold_the_suspect_is_refused_and_untouched(tmp_path):
    save = tmp_path / "ckpt"
    (save / "iter_0001000").mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text("3000")  # moved on since the verdict
    before = snapshot(save)
    rb, root = setup(tmp_path, None, f"/x/pretrain_gpt.sh --save {save}")
    with pytest.raises(ApplicationError, match="not checkpoint 2000") as e:
        await rb.rollback_checkpoint(inp("megatron", 2000, 1000))
    assert e.value.type == "RollbackRefused" and e.value.non_retryable
    assert snapshot(save) == before and load_record(root, "local-7-a1") is None


async def test_an_existing_aside_name_is_never_overwritten(tmp_path):
    out = tmp_path / "hf"
    for n in ("checkpoint-10", "checkpoint-20", "checkpoint-20.revive-suspect"):
        (out / n).mkdir(parents=True)
    rb, _root = setup(tmp_path, None, f"/x/train.sbatch --output_dir {out}")
    with pytest.raises(ApplicationError, match="already exists"):
        await rb.rollback_checkpoint(inp("hf_trainer", 20, 10))
    assert (out / "checkpoint-20").is_dir()


def test_unsafe_input_is_refused_by_the_planner():
    with pytest.raises(RollbackRefused):
        plan_rollback("hf_trainer", None, "relative/dir", ["checkpoint-1", "checkpoint-2"], None, 2, 1, "i")
    with pytest.raises(RollbackRefused):
        plan_rollback("hf_trainer", None, "/a/../etc", ["checkpoint-1", "checkpoint-2"], None, 2, 1, "i")
    with pytest.raises(RollbackRefused, match="not before"):
        plan_rollback("hf_trainer", None, "/a", ["checkpoint-1", "checkpoint-2"], None, 1, 2, "i")
    with pytest.raises(RollbackRefused, match="no reversible step"):
        plan_rollback("torchtitan", None, "/a", ["step-1"], None, 2, 1, "i")
