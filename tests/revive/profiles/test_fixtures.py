"""Per-framework fixtures (tests/data/progress/<framework>/*.log, sources in SOURCES.md): the
extractor finds the iterations, checkpoints saved/loaded and run starts with the right numbers.

``public_*.log`` are excerpts recorded from public runs; ``formats*.log`` are lines composed from
the format strings in the framework's source (cited in profiles.yaml) for events no public
recording was found for."""

from __future__ import annotations

from pathlib import Path

import pytest

from revive.profiles import (
    CheckpointLoaded,
    CheckpointLoading,
    CheckpointSaved,
    CheckpointSaving,
    Iteration,
    ProgressExtractor,
    Requeued,
    RunStart,
    detect_profile,
    summarize,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "progress"


def read(rel: str) -> list[str]:
    # newline="" keeps the \r of tqdm redraws inside the lines, as a job log holds them
    with open(DATA / rel, encoding="utf-8", errors="replace", newline="") as f:
        return f.read().split("\n")


@pytest.fixture(scope="module")
def ex() -> ProgressExtractor:
    return ProgressExtractor()


def events(ex: ProgressExtractor, rel: str) -> list:
    return [e for line in read(rel) for e in ex.events(line)]


def iters(evs: list) -> list[int]:
    return [e.iter for e in evs if isinstance(e, Iteration)]


# ----------------------------------------------------------------------------- Megatron
def test_megatron_public_iterations(ex):
    evs = events(ex, "megatron/public_issue1570.log")
    its = [e for e in evs if isinstance(e, Iteration)]
    assert [e.iter for e in its] == [1, 2, 3]
    assert {e.total for e in its} == {10}
    assert [e.step_time_s for e in its] == pytest.approx([21.8479, 3.2866, 3.1824])
    assert its[0].loss == pytest.approx(11.86396)
    assert its[0].throughput == pytest.approx(4.5)
    assert its[0].ts is not None and its[0].ts.second == 17
    s = summarize(read("megatron/public_issue1570.log"))
    assert s.profiles == ["megatron"]
    assert (s.first_iteration, s.last_iteration, s.total) == (1, 3, 10)
    assert s.cadence_s == pytest.approx(3.0) and s.cadence_source == "timestamps"


def test_megatron_checkpoints_and_resume(ex):
    s = summarize(read("megatron/formats.log"))
    assert s.profiles == ["megatron"]
    assert s.run_starts == 1
    assert s.checkpoint_loaded == 100
    assert s.checkpoints_saving == [102, 103]  # 103: async save scheduled, never finalized
    assert s.checkpoints_saved == [102]
    assert (s.first_iteration, s.last_iteration) == (101, 103)
    evs = events(ex, "megatron/formats.log")
    assert all(e.rank == 0 for e in evs)  # "0: " srun -l prefix
    assert [type(e) for e in evs][:3] == [RunStart, CheckpointLoading, CheckpointLoaded]


# ----------------------------------------------------------------------------- NeMo 2
def test_nemo2_public_progress(ex):
    its = [e for e in events(ex, "nemo2/public_pr10128.log") if isinstance(e, Iteration)]
    assert [e.iter for e in its] == list(range(9))
    assert its[0].loss == pytest.approx(11.02) and its[-1].loss == pytest.approx(7.113)
    assert {(e.epoch, e.batches) for e in its} == {(0, 9)}
    its = [e for e in events(ex, "nemo2/public_bionemo740.log") if isinstance(e, Iteration)]
    assert [e.iter for e in its] == [120, 121, 122, 123, 124, 125]
    assert its[0].step_time_s == pytest.approx(0.03146)
    s = summarize(read("nemo2/public_bionemo740.log"))
    assert s.cadence_source == "step_time" and s.cadence_s == pytest.approx(0.03160, abs=1e-4)


def test_nemo2_checkpoints_and_lightning_restore():
    lines = read("nemo2/formats.log")
    s = summarize(lines)
    assert s.profiles == ["nemo2", "lightning"]
    assert detect_profile(lines) == ["nemo2", "lightning"]
    assert s.run_starts == 1 and len(s.attempts) == 1
    assert s.checkpoint_loaded == 99  # step=99 in the restored path
    assert s.checkpoints_saving == [149] and s.checkpoints_saved == [149]
    assert s.last_iteration == 150


# ----------------------------------------------------------------------------- Lightning
def test_lightning_public_tqdm(ex):
    its = [e for e in events(ex, "lightning/public_issue20542.log") if isinstance(e, Iteration)]
    # the bar counts batches within epoch 10 of 20000 batches; the profile's iter is the global step
    assert [e.batch for e in its] == [18625, 18626, 18626, 18627]
    assert [e.iter for e in its] == [218625, 218626, 218626, 218627]
    assert {(e.epoch, e.total, e.batches) for e in its} == {(10, 20000, 20000)}
    assert its[0].step_time_s == pytest.approx(1 / 0.90)
    its = [e for e in events(ex, "lightning/public_launcher55.log") if isinstance(e, Iteration)]
    assert [(e.iter, e.total, e.step_time_s) for e in its] == [(795, 77225, 41.36)]


def test_lightning_requeue_save_and_restore(ex):
    lines = read("lightning/formats.log")
    evs = [e for line in lines for e in ex.events(line)]
    assert [e.iter for e in evs if isinstance(e, Iteration)] == [300, 310]  # \r redraws: last one
    assert [e.iter for e in evs if isinstance(e, CheckpointSaving)] == [300, None]  # ModelCheckpoint, hpc
    assert [e.job_id for e in evs if isinstance(e, Requeued)] == ["4242"]
    s = summarize(lines)
    assert s.run_starts == 2 and len(s.attempts) == 2
    assert s.requeued_by_framework == ["4242"]
    assert s.resumed and s.checkpoint_loaded is None  # hpc_ckpt_1.ckpt: a counter, not a step
    assert s.attempts[1].first_iteration == 310


# ----------------------------------------------------------------------------- HF Trainer / Accelerate
def test_hf_public_logs(ex):
    s = summarize(read("hf_trainer/public_issue24313.log"))
    assert s.profiles == ["hf_trainer"] and s.run_starts == 1 and s.iterations_seen == 0
    assert "no iteration lines" in s.note
    s = summarize(read("hf_trainer/public_llamafactory1813.log"))
    assert s.checkpoint_loaded == 200000
    assert (s.first_iteration, s.total) == (0, 139495)
    # tmp-checkpoint-<random> carries no step: not counted as a save
    s = summarize(read("hf_trainer/public_issue36076.log"))
    assert s.checkpoints_saving == [] and s.last_iteration == 40 and s.total == 4500
    assert s.step_time_s == pytest.approx(3.84)


def test_hf_glued_tqdm_and_deepspeed_line(ex):
    lines = read("hf_trainer/public_issue14531.log")
    glued = next(line for line in lines if "step=2000" in line)
    evs = ex.events(glued)
    assert [(type(e).__name__, e.profile, e.iter) for e in evs] == [
        ("Iteration", "tqdm", 1999), ("Iteration", "deepspeed", 2000)]
    assert evs[0].ts is None and evs[1].ts is not None  # the timestamp belongs to the glued record
    s = summarize(lines)
    assert set(s.profiles) == {"hf_trainer", "tqdm", "deepspeed"}
    assert s.last_loss == pytest.approx(0.0)
    assert s.event_counts["metrics"] == 5


def test_hf_resume_save_tqdm_cr():
    s = summarize(read("hf_trainer/formats.log"))
    assert s.run_starts == 1
    assert s.checkpoint_loaded == 500
    assert s.checkpoints_saving == [600] and s.checkpoints_saved == [600]  # confirmed by progress
    assert s.attempts[0].saved[0].confirmed_by == "progress"
    assert s.first_iteration == 502  # the \r line's last complete update
    s5 = summarize(read("hf_trainer/formats_v5.log"))
    assert s5.checkpoint_loaded == 600 and s5.last_loss == pytest.approx(1.1)


def test_accelerate_save_load_state():
    s = summarize(read("accelerate/formats.log"))
    assert s.profiles[0] == "accelerate" and "tqdm" in s.profiles
    assert s.checkpoint_loaded == 200
    assert s.checkpoints_saved == [300]
    assert s.last_iteration == 300


# ----------------------------------------------------------------------------- torchtitan
def test_torchtitan_public_load_save(ex):
    lines = read("torchtitan/public_pr1287.log")
    evs = [e for line in lines for e in ex.events(line)]
    assert [e.iter for e in evs if isinstance(e, CheckpointLoading)] == [400]
    assert iters(evs) == [800, 810, 820]
    its = [e for e in evs if isinstance(e, Iteration)]
    assert its[0].loss == pytest.approx(4.7215) and its[0].throughput == 5847
    assert its[0].rank == 0
    s = summarize(lines)
    assert s.profiles == ["torchtitan"]
    assert s.checkpoint_loaded == 400
    assert s.checkpoints_saved == [800]
    rec = s.attempts[0].saved[0]
    assert rec.inferred  # "Saving the checkpoint" has no step: the last step logged before it
    assert s.cadence_s == pytest.approx((15.275 + 13.998) / 2)


def test_torchtitan_new_format_colors_and_validation(ex):
    assert iters(events(ex, "torchtitan/public_pr3393.log")) == list(range(22, 30))
    s = summarize(read("torchtitan/formats.log"))
    assert s.run_starts == 1
    assert s.checkpoint_loaded == 500  # from step-500 in the path
    assert s.iterations_seen == 2  # the ANSI-coloured line counts, "validate step:" does not
    assert s.checkpoints_saved == [520]


# ----------------------------------------------------------------------------- DeepSpeed
def test_deepspeed_public(ex):
    assert iters(events(ex, "deepspeed/public_issue1825.log")) == [40, 50, 60]
    s = summarize(read("deepspeed/public_issue1825.log"))
    assert s.cadence_s == pytest.approx((15.145 + 15.144) / 2, abs=1e-3)
    s = summarize(read("deepspeed/public_mmr2.log"))
    assert s.event_counts["run_start"] == 2 and s.run_starts == 1  # two ranks' banners: one launch


def test_deepspeed_checkpoints():
    s = summarize(read("deepspeed/formats.log"))
    assert s.checkpoint_loaded == 300 and s.checkpoints_loaded == [300]
    assert s.checkpoints_saving == [400] and s.checkpoints_saved == [400]
    assert (s.first_iteration, s.last_iteration) == (310, 410)
    assert s.step_time_s == pytest.approx(1.0)


# ----------------------------------------------------------------------------- JAX
def test_maxtext_public(ex):
    its = [e for e in events(ex, "maxtext/public_pr4847.log") if isinstance(e, Iteration)]
    assert [e.iter for e in its] == [1, 2, 3]
    assert [e.step_time_s for e in its] == pytest.approx([0.631, 10.228, 10.344])
    assert its[0].loss == pytest.approx(12.979) and its[0].throughput == pytest.approx(5688.282)
    s = summarize(read("maxtext/public_pr4847.log"))
    assert s.cadence_source == "timestamps"  # glog timestamps
    assert s.cadence_s == pytest.approx((10.587972 + 10.585549) / 2, abs=1e-3)


def test_maxtext_orbax_checkpoints():
    s = summarize(read("maxtext/formats.log"))
    assert s.profiles == ["maxtext", "orbax"]
    assert s.run_starts == 1
    assert s.checkpoint_loaded == 1000
    assert s.checkpoints_saving == [1002] and s.checkpoints_saved == [1002]
    s = summarize(read("orbax/public_goodput4.log"))
    assert s.checkpoints_saving == [19]
    s = summarize(read("orbax/formats.log"))
    assert s.checkpoints_saved == [200]


def test_t5x_checkpoints():
    s = summarize(read("t5x/formats.log"))
    assert s.run_starts == 1 and len(s.attempts) == 1  # restore lines come before the banner
    assert s.checkpoint_loaded == 5000  # confirmed by the save that followed
    assert s.checkpoints_saved == [6000]


# ----------------------------------------------------------------------------- Revive demo
def test_revive_demo_readme(ex):
    lines = read("revive_demo/public_readme.log")
    evs = [e for line in lines for e in ex.events(line)]
    assert [e.restart for e in evs if isinstance(e, RunStart)] == [0, 1]
    it0 = next(e for e in evs if isinstance(e, Iteration))
    assert (it0.iter, it0.total, it0.rank, it0.host) == (1, 1000, 0, "node1")
    assert it0.step_time_s == pytest.approx(0.5052) and it0.loss == pytest.approx(6.904333)
    assert [e.iter for e in evs if isinstance(e, CheckpointSaved)] == [10]
    assert [e.iter for e in evs if isinstance(e, CheckpointLoaded)] == [10]
    s = summarize(lines)
    assert s.profiles == ["revive_demo"]
    assert s.run_starts == 2 and [a.restart for a in s.attempts] == [0, 1]
    assert s.attempts[1].loaded.iter == 10 and s.attempts[1].first_iteration == 11
    assert s.checkpoints_saved == [10] and s.checkpoint_loaded == 10


def test_every_framework_directory_has_a_fixture():
    dirs = {p.name for p in DATA.iterdir() if p.is_dir()}
    assert {"megatron", "nemo2", "lightning", "hf_trainer", "accelerate", "torchtitan", "deepspeed",
            "maxtext", "orbax", "t5x", "revive_demo"} <= dirs
    sources = (DATA / "SOURCES.md").read_text(encoding="utf-8")
    for log in DATA.glob("*/*.log"):
        assert f"{log.parent.name}/{log.name}" in sources, f"{log} not cited in SOURCES.md"


def test_resume_verified_per_attempt():
    s = summarize(read("revive_demo/public_readme.log"))
    assert [a.progressed_past_load for a in s.attempts] == [None, True]
    s = summarize(read("torchtitan/public_pr1287.log"))
    assert s.attempts[0].progressed_past_load is True
    s = summarize(read("hf_trainer/public_llamafactory1813.log"))  # resumed at 200000, bar restarted at 0
    assert s.attempts[0].progressed_past_load is False
