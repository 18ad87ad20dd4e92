"""What the real frameworks printed (``tests/data/progress/*/real_*``, recorded from
``examples/hf`` and ``examples/lightning`` runs; see SOURCES.md) and what the profiles extract from it,
plus the checkpoints those jobs leave on disk (``revive.profiles.disk``)."""

from __future__ import annotations

import json
from pathlib import Path

from revive.profiles import Iteration, ProgressExtractor, summarize
from revive.profiles.disk import checkpoint_dirs, comment_checkpoint_dir, newest_checkpoint

DATA = Path(__file__).resolve().parents[2] / "data" / "progress"


def lines(rel: str) -> list[str]:
    return (DATA / rel).read_text(encoding="utf-8").split("\n")


def iterations(rel: str) -> list[Iteration]:
    ex = ProgressExtractor()
    return [ev for line in lines(rel) for ev in ex.events(line) if isinstance(ev, Iteration)]


def test_hf_trainer_default_output_is_a_tqdm_bar_and_log_dicts_with_no_checkpoint_line():
    s = summarize(lines("hf_trainer/real_slurm_5.23.0.log"))
    assert s.last_iteration == 30 and s.total == 30  # max_steps=30: every step seen, 1..30
    its = [e.iter for e in iterations("hf_trainer/real_slurm_5.23.0.log")]
    assert set(range(1, 31)) <= set(its)
    assert s.cadence_s is not None and 0.1 < s.cadence_s < 2.0  # 4 samples × 0.05 s of loading + compute
    # the passive log level prints neither "Saving model checkpoint" nor a load line: the folders tell
    assert s.checkpoints_saved == [] and not any(a.loaded for a in s.attempts)


def test_hf_trainer_resumed_run_jumps_from_zero_to_the_step_after_its_checkpoint():
    its = [e.iter for e in iterations("hf_trainer/real_resume_5.23.0.log")]
    assert its[0] == 0 and its[1] == 26  # resume_from_checkpoint=checkpoint-25, max_steps=32
    assert its[-1] == 32


def test_lightning_bar_counts_batches_per_epoch_and_the_profile_turns_them_into_global_steps():
    its = iterations("lightning/real_slurm_2.6.6.log")
    assert {e.profile for e in its} == {"lightning"}
    # 2 ranks × 3 batches an epoch, max_steps=30; ModelCheckpoint wrote step=10, 20, 30
    assert max(e.iter for e in its) == 30
    ends = {e.epoch: e.iter for e in its if e.batch == e.batches}
    assert ends[3.0] == 12 and ends[9.0] == 30
    assert all(e.batches == 3 and 0 <= e.batch <= 3 for e in its)


def test_newest_checkpoint_reads_the_framework_folders_named_on_the_command_line(tmp_path):
    hf = tmp_path / "hf"
    for n in ("checkpoint-10", "checkpoint-20", "checkpoint-5", "runs", "tmp-checkpoint-30"):
        (hf / n).mkdir(parents=True)
    pl = tmp_path / "pl"
    pl.mkdir()
    for n in ("epoch=3-step=10.ckpt", "epoch=6-step=20.ckpt", "last.ckpt", "hpc_ckpt_7.ckpt"):
        (pl / n).write_bytes(b"")
    assert newest_checkpoint(f"/x/train.sbatch --output-dir {hf} --max-steps 30") == (20, "hf_trainer")
    assert newest_checkpoint(f"/x/train.sbatch --ckpt-dir={pl}") == (20, "lightning")
    assert checkpoint_dirs(f"a --save {hf} --ckpt-dir {pl} --output-dir --foo") == [str(hf), str(pl)]


def test_newest_checkpoint_is_none_for_missing_dirs_and_bad_commands(tmp_path):
    assert newest_checkpoint(None) is None
    assert newest_checkpoint("train.sbatch 'unterminated") is None
    assert newest_checkpoint(f"train.sbatch --output-dir {tmp_path / 'nope'}") is None
    assert newest_checkpoint(f"train.sbatch --output-dir {tmp_path}") is None  # empty
    assert newest_checkpoint("train.sbatch --output-dir") is None


def test_hf_checkpoint_dir_named_in_the_comment_json_under_the_opt_in_key(tmp_path):
    """A job whose script takes no --output_dir argument (the path is in a config file) names its
    checkpoint folder in its --comment, under the opt-in key's object."""
    hf = tmp_path / "hf"
    for n in ("checkpoint-40", "checkpoint-80"):
        (hf / n).mkdir(parents=True)
    comment = json.dumps({"revive": {"policy": "default", "checkpoint_dir": str(hf)}})
    assert newest_checkpoint("/x/train.sbatch --config run.yaml", comment=comment) == (80, "hf_trainer")
    assert comment_checkpoint_dir(json.dumps({"ml": {"checkpoint_dir": str(hf)}}), "ml") == str(hf)
    assert newest_checkpoint("/x/train.sbatch", comment=json.dumps({"other": {"checkpoint_dir": str(hf)}})) is None


def test_a_bad_comment_names_no_checkpoint_dir():
    for bad in (None, "", "not json", "[1]", '{"revive": "x"}', '{"revive": {"checkpoint_dir": 3}}',
                '{"revive": {"checkpoint_dir": "relative/path"}}', '{"revive": {"checkpoint_dir": "/a\\u0000b"}}',
                json.dumps({"revive": {"checkpoint_dir": "/" + "a" * 9000}})):
        assert comment_checkpoint_dir(bad) is None, bad
