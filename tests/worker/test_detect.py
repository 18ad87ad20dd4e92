"""Detect stage: progress tracking, hang window, root signatures (pure; the clock is passed in)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from worker.detect import AttemptTracker, fault_family, root_hit

T0 = datetime(2026, 11, 29, 15, 0, tzinfo=UTC)


def prog(it: int, t: datetime, rank: int = 0) -> str:
    return f"{t.isoformat()} [rank {rank} host node1] iteration {it}/100 | loss 1.0 | compute_ms 5.0 | step_time_ms 10.0"


def test_hang_threshold_is_k_times_median_step_with_a_floor():
    t = AttemptTracker(k=5, floor_s=60)
    t.feed("=== attempt restart=0 2026-11-29T15:00:00+00:00", 0)
    for i in range(1, 11):
        t.feed(prog(i, T0 + timedelta(seconds=20 * i)), float(i))
    assert t.threshold_s() == 100.0  # 5 × 20 s median beats the 60 s floor
    assert not t.hung(10 + 99) and t.hung(10 + 101)
    fast = AttemptTracker(k=5, floor_s=60)
    for i in range(1, 11):
        fast.feed(prog(i, T0 + timedelta(seconds=i)), float(i))
    assert fast.threshold_s() == 60.0


def test_clock_starts_at_first_progress_and_pauses_while_saving_a_checkpoint():
    t = AttemptTracker(k=5, floor_s=10)
    t.feed("=== attempt restart=0 x", 0)
    assert not t.hung(1000)  # no progress yet: the clock has not started
    t.feed(prog(1, T0), 0)
    t.feed("2026-11-29T15:00:01+00:00 [rank 0 host node1] saving checkpoint at iteration 1", 1)
    assert not t.hung(30)  # 29 s of saving do not count
    t.feed("2026-11-29T15:00:31+00:00 [rank 0 host node1] saved checkpoint at iteration 1", 31)
    assert t.checkpoint == 1
    assert not t.hung(35) and t.hung(42)


def test_new_attempt_resets_progress_but_keeps_the_checkpoint():
    t = AttemptTracker(k=5, floor_s=10)
    t.feed("=== attempt restart=0 x", 0)
    t.feed(prog(1, T0), 0)
    t.feed("x [rank 0 host node1] saved checkpoint at iteration 1", 0)
    t.feed("=== attempt restart=1 y", 5)
    assert t.attempt == 1 and t.checkpoint == 1 and t.first_progress_mono is None


def test_iteration_going_backwards_and_garbage_lines_do_not_break_tracking():
    t = AttemptTracker()
    t.feed(prog(5, T0), 0)
    t.feed(prog(3, T0 - timedelta(seconds=100)), 1)
    t.feed("\x00\xff garbage ␀ " * 100, 2)
    assert t.last_iteration == 5


def test_root_hit_ignores_benign_noise_and_names_real_roots():
    assert root_hit(1, "gpu-node-007:44295:44295 [4] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB") is None
    assert root_hit(1, prog(3, T0)) is None
    h = root_hit(7, "[rank1]: RuntimeError: CUDA error: unknown error")
    assert h is not None and h.line_no == 7
    assert fault_family(h.category) == "gpu"
    assert fault_family("hang") == "hang" and fault_family("whatever") == "crash"


def test_slowed_and_hung_shortcuts_keep_their_answers():
    t = AttemptTracker(k=5, floor_s=60)
    t.feed("=== attempt restart=0 x", 0)
    for i in range(1, 23):
        step = 20.0 if i <= 12 else 22.0
        t.feed(f"{(T0 + timedelta(seconds=i)).isoformat()} [rank 0 host n1] iteration {i}/99 | loss 1 | "
               f"compute_ms 1 | step_time_ms {step}", float(i))
    assert t.slowed()  # 10 steps 10 % above the 20 ms baseline
    t.step_ms[2:12] = [30.0] * 10  # a different baseline is noticed (no stale cache)
    assert not t.slowed()
    assert not t.hung(22 + 59) and t.hung(22 + 61)


def test_a_checkpoint_line_with_a_5000_digit_iteration_is_no_checkpoint():
    # the bad-input probe: the monitor reads the raw log tail (no line cap) on every pass until the
    # job is located; int() of 5000 digits raised there and blinded the pass
    from worker.detect import last_checkpoint

    junk = b"saved checkpoint at iteration " + b"9" * 5000 + b"\n"
    assert last_checkpoint(b"saved checkpoint at iteration 40\n" + junk) is None
    assert last_checkpoint(junk + b"saved checkpoint at iteration 40\n") == 40


def test_a_last_progress_stamp_far_before_the_attempt_started_does_not_restore_a_hang():
    from datetime import UTC, datetime, timedelta

    from worker.detect import AttemptTracker, restore_clock

    wall = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
    for stamp, silent in ((datetime(1, 1, 1, tzinfo=UTC), 0.0), (wall - timedelta(minutes=5), 300.0)):
        t = AttemptTracker()
        t.last_progress_ts, t.last_progress_mono, t.first_progress_mono = stamp, 1000.0, 1000.0
        restore_clock(t, 1000.0, wall, started=wall - timedelta(hours=1))
        assert t.silent_for(1000.0) == silent  # year 1 is a wrong clock; 5 min ago is real silence
