"""Detect stage on real framework output (``tests/data/progress/*/real_*``): the HF Trainer's and
Lightning's own progress bars drive the hang clock and its window, with no Revive marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.detect import AttemptTracker, ChunkScanner

DATA = Path(__file__).resolve().parents[1] / "data" / "progress"
REAL = ["hf_trainer/real_slurm_5.23.0.log", "lightning/real_slurm_2.6.6.log"]


def feed_lines(t: AttemptTracker, rel: str, now: float = 0.0) -> None:
    for line in (DATA / rel).read_bytes().decode("utf-8", "replace").split("\n"):
        t.feed(line, now)


@pytest.mark.parametrize("rel", REAL)
def test_framework_bars_are_progress_and_the_window_comes_from_their_rate(rel):
    t = AttemptTracker(k=5, floor_s=0.5)
    feed_lines(t, rel)
    assert t.last_iteration == 30  # HF: tqdm N/max_steps; Lightning: epoch × batches + batch
    assert t.first_progress_mono == 0.0 and t.step_intervals
    # the bars print ~0.2-0.4 s per step (rate it/s): k × median is the window, above this floor
    assert 5 * 0.1 < t.threshold_s() < 5 * 1.0
    assert not t.hung(t.threshold_s() - 0.1) and t.hung(t.threshold_s() + 0.1)
    assert any("%|" in v for v in t.last_by_rank.values())


@pytest.mark.parametrize("rel", REAL)
def test_chunk_scan_feeds_framework_bars_like_the_per_line_path(rel):
    data = (DATA / rel).read_bytes()
    data = data[: data.rfind(b"\n") + 1]
    a, b = AttemptTracker(k=5, floor_s=1), AttemptTracker(k=5, floor_s=1)
    feed_lines(a, rel, 3.0)
    list(ChunkScanner().feed(b, data, 1, 3.0))
    assert (a.last_iteration, a.step_intervals, a.last_progress_mono) == (b.last_iteration, b.step_intervals,
                                                                          b.last_progress_mono)


def test_a_stalled_bar_line_is_not_new_progress_for_the_step_window():
    t = AttemptTracker(k=5, floor_s=2)
    bar = "Epoch 2:  33%|███▎      | 1/3 [00:00<00:00,  4.00it/s, train_loss=1.0]"
    t.feed(bar, 0.0)
    t.feed(bar, 1.0)  # the same step again (a redraw): the clock restarts, the interval list does not grow
    assert t.last_iteration == 7 and t.step_intervals == [0.25]
    assert t.silent_for(4.0) == 3.0
    t.feed("Epoch 2:  33%|███▎      | 1/3 [00:00<00:00,  nonsense", 5.0)  # no event: changes nothing
    assert t.silent_for(6.0) == 5.0


def test_hf_log_dicts_keep_the_hang_clock_running_between_bar_bursts():
    # under srun the bar (stderr) arrives in bursts; the log dicts (stdout) arrive per step
    t = AttemptTracker(k=5, floor_s=10)
    t.feed("  0%|          | 11/100000 [00:05<18:22:20,  1.51it/s]", 0.0)
    t.feed("{'loss': '1.384', 'grad_norm': '0.4502', 'learning_rate': '0.001', 'epoch': '0.02'}", 8.0)
    assert t.last_iteration == 11 and t.silent_for(12.0) == 4.0 and not t.hung(12.0)
    assert t.hung(18.5)
    t2 = AttemptTracker(k=5, floor_s=10)
    t2.feed("{'loss': '1.384', 'epoch': '0.02'}", 1.0)  # a log dict alone starts the clock too
    assert t2.first_progress_mono == 1.0 and t2.last_iteration is None
