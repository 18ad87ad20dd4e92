"""The monitor's chunk scan (``ChunkScanner`` over ``Follower.read_chunk``) sees exactly what the
per-line path (``Follower.read_new`` + feed/root_hit on every line) sees: same hits, same line
numbers, same tracker state, whatever the chunk boundaries."""

from __future__ import annotations

import random
import re
from dataclasses import asdict
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from revive.logline import LINE_CAP
from revive.progress import parse_attempt, parse_checkpoint, parse_progress
from revive.tail import Follower
from worker import detect
from worker.detect import (
    MAX_STEP_INTERVAL_S,
    PROFILE_BAR,
    PROFILE_METRICS,
    AttemptTracker,
    ChunkScanner,
    default_scanner,
    root_hit,
)


class RefTracker(AttemptTracker):
    """``AttemptTracker.feed`` as it was before the fast path (every parser on every line)."""

    def feed(self, text: str, now: float) -> None:
        """Update progress state from one line (attempt markers, progress, checkpoints)."""
        a = parse_attempt(text)
        if a is not None:
            if not self.attempt_seen or a != self.attempt:
                self.new_attempt(a)
            return
        ck = parse_checkpoint(text)
        if ck:
            kind, it = ck
            if kind == "saving":
                self.saving_since_mono = now
            elif kind == "saved":
                self.checkpoint = it
                if self.saving_since_mono is not None:
                    self.paused_s += now - self.saving_since_mono
                    self.saving_since_mono = None
            elif kind == "resumed":
                self.checkpoint = it
            return
        if PROFILE_BAR in text or PROFILE_METRICS in text:  # a framework's bar or HF log dict
            self._feed_profile(text, now)
            return
        p = parse_progress(text)
        if p is None:
            return
        if p.rank is not None:
            self.last_by_rank[f"rank {p.rank}"] = text[:1024]
            if p.rank == min(int(k.split()[1]) for k in self.last_by_rank) and p.step_ms is not None:
                self.step_ms.append(p.step_ms)
                if len(self.step_ms) > 2000:
                    del self.step_ms[20:1020]  # keep the baseline (head) and the recent steps
        ts = p.timestamp
        if ts is not None and ts.tzinfo is None:  # ranks may mix naive and zoned stamps
            ts = ts.replace(tzinfo=UTC)
        if self.last_iteration is None or p.iteration > self.last_iteration:
            if ts and self._prev_ts and ts > self._prev_ts:
                gap = (ts - self._prev_ts).total_seconds()
                if gap <= MAX_STEP_INTERVAL_S:
                    self.step_intervals.append(gap)
                    self.step_intervals = self.step_intervals[-200:]
            if ts:
                self._prev_ts = ts
            self.last_iteration = p.iteration
            self.last_progress_ts = p.timestamp
        if self.first_progress_mono is None:
            self.first_progress_mono = now
        self.last_progress_mono = now
        self.paused_s = 0.0

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = sorted(p for p in DATA.rglob("*.log") if p.stat().st_size < 2_000_000)

EDGE = (
    b"=== attempt restart=0 2026-11-29T00:00:00+00:00\n"
    b"2026-11-29T00:00:01+00:00 [rank 0 host n1] iteration 1/9 | loss 1 | compute_ms 1 | step_time_ms 2\n"
    b"prefix === attempt restart=5 not at the start\n"
    b"x CUDA er\x00ror: unknown error\n"  # decode_line drops NULs
    + b"y" * ((LINE_CAP - 9) // 2 - len("OSError:")) + b"OSError:" + b"z" * LINE_CAP + b"\n"  # cap joins ": "
    + b"\xff\xfe RuntimeError: CUDA error: unknown error\r\n"
    b"2026-11-29T00:00:02+00:00 [rank 0 host n1] saving checkpoint at iteration 1\n"
    b"2026-11-29T00:00:09+00:00 [rank 0 host n1] saved checkpoint at iteration 1\n"
    b"NCCL INFO chatter\nno newline at the end"
)


def _per_line(chunks: list[bytes], path: Path) -> tuple[list, dict]:
    path.write_bytes(b"")
    f, t, hits = Follower(), RefTracker(), []
    for i, c in enumerate(chunks):
        with path.open("ab") as fh:
            fh.write(c)
        for n, text in f.read_new(str(path)):
            t.feed(text, float(i))
            h = root_hit(n, text)
            if h:
                hits.append((h.line_no, h.signature_id, h.text, t.attempt))
    return hits, _state(t)


def _state(t: AttemptTracker) -> dict:
    d = asdict(t)
    d.pop("_min_rank")
    d.pop("_baseline")
    return d


def _chunked(chunks: list[bytes], path: Path, sc: ChunkScanner) -> tuple[list, dict]:
    path.write_bytes(b"")
    f, t, hits = Follower(), AttemptTracker(), []
    for i, c in enumerate(chunks):
        with path.open("ab") as fh:
            fh.write(c)
        got = f.read_chunk(str(path))
        if got is None:
            continue
        for n, text in sc.feed(t, got[1], got[0], float(i)):
            h = root_hit(n, text)
            if h:
                hits.append((h.line_no, h.signature_id, h.text, t.attempt))
    return hits, _state(t)


def _scanned(chunks: list[bytes], path: Path, sc: ChunkScanner) -> tuple[list, dict]:
    """``scan`` (line selection only) + ``feed`` per selected line."""
    path.write_bytes(b"")
    f, t, hits = Follower(), AttemptTracker(), []
    for i, c in enumerate(chunks):
        with path.open("ab") as fh:
            fh.write(c)
        got = f.read_chunk(str(path))
        if got is None:
            continue
        for n, text, may_be_root in sc.scan(got[1], got[0]):
            t.feed(text, float(i))
            h = root_hit(n, text) if may_be_root else None
            if h:
                hits.append((h.line_no, h.signature_id, h.text, t.attempt))
    return hits, _state(t)


def _split(data: bytes, rnd: random.Random) -> list[bytes]:
    cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, 7))) if len(data) > 1 else []
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@pytest.mark.parametrize("log", LOGS, ids=lambda p: str(p.relative_to(DATA)))
def test_chunk_scan_equals_per_line_on_the_corpus(log, tmp_path):
    data = log.read_bytes()
    rnd = random.Random(log.name)
    for chunks in ([data], _split(data, rnd)):
        a = _per_line(chunks, tmp_path / "a.log")
        b = _chunked(chunks, tmp_path / "b.log", default_scanner())
        assert a == b
        assert _scanned(chunks, tmp_path / "c.log", default_scanner()) == a


def test_chunk_scan_equals_per_line_on_edge_cases(tmp_path):
    rnd = random.Random(1)
    for chunks in ([EDGE], _split(EDGE, rnd), _split(EDGE, rnd), [EDGE[i:i + 1] for i in range(len(EDGE))][:400]):
        a = _per_line(chunks, tmp_path / "a.log")
        b = _chunked(chunks, tmp_path / "b.log", default_scanner())
        assert a == b
        assert _scanned(chunks, tmp_path / "c.log", default_scanner()) == a
    hits, _ = _per_line([EDGE], tmp_path / "c.log")
    assert hits  # the edge cases do open incidents


def test_scanner_skips_lines_that_change_nothing():
    data = b"plain noise\n" * 1000 + b"[rank1]: RuntimeError: CUDA error: unknown error\n" + b"more noise\n" * 10
    assert [n for n, _ in default_scanner().lines(data, 1)] == [1001]


def _progress_mix(seed: int) -> bytes:
    """Ranks appearing out of order, iterations going back, naive and zoned stamps, Megatron lines,
    checkpoints, attempts, clock jumps, noise."""
    rnd = random.Random(seed)
    out = []
    it = 0
    for _ in range(3000):
        r = rnd.random()
        it += rnd.choice((0, 0, 1, 1, 1, -2))
        rank = rnd.choice((3, 2, 1, 0, 5)) if it < 20 else rnd.randrange(8)
        sec = max(it, 0) % 60
        zone = rnd.choice(("+00:00", "Z", ""))
        year = "9999" if rnd.random() < 0.002 else "2026"
        if r < 0.6:
            step = rnd.choice((f"{20 + rnd.random():.1f}", f"{30 + rnd.random():.1f}"))
            out.append(f"{year}-11-29T00:{it % 60:02d}:{sec:02d}.5{zone} [rank {rank} host n{rank}] iteration {it}/99 "
                       f"| loss 1 | compute_ms 3 | step_time_ms {step}")
        elif r < 0.65:
            out.append(f"2026-11-29T00:00:{sec:02d} [rank {rank} host n1] iteration {it}/99 | loss 1")
        elif r < 0.7:
            out.append(f" iteration      {it}/     500 | consumed samples: 12 | elapsed time per iteration (ms): 812.3 |")
        elif r < 0.73:
            out.append(f"2026-11-29T00:00:{sec:02d}+00:00 [rank 0 host n1] "
                       f"{rnd.choice(('saving', 'saved', 'resumed from'))} checkpoint at iteration {it}")
        elif r < 0.735:
            out.append(f"=== attempt restart={rnd.randrange(3)} 2026-11-29T00:00:00+00:00")
        elif r < 0.74:
            out.append("[rank1]: RuntimeError: CUDA error: unknown error")
        elif r < 0.75:
            out.append("iteration checkpoint 5/7 no progress")
        else:
            out.append(rnd.choice(("noise", "NCCL INFO x", "epoch 3 iteration", "x\r", "")))
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("seed", range(6))
def test_fast_feed_equals_the_parsers_on_progress_mixes(seed, tmp_path):
    data = _progress_mix(seed)
    rnd = random.Random(seed)
    for chunks in ([data], _split(data, rnd)):
        a = _per_line(chunks, tmp_path / "a.log")
        b = _chunked(chunks, tmp_path / "b.log", default_scanner())
        assert a == b
        assert _scanned(chunks, tmp_path / "c.log", default_scanner()) == a


def test_runs_of_demo_progress_lines_take_the_bulk_path(tmp_path, monkeypatch):
    calls = []
    real = AttemptTracker.feed_progress

    def spy(self, found, now):
        calls.append(len(found))
        return real(self, found, now)

    monkeypatch.setattr(AttemptTracker, "feed_progress", spy)
    data = _progress_mix(0)
    sc = ChunkScanner()
    b = _chunked([data], tmp_path / "b.log", sc)
    assert sum(calls) + sc.summarised > 200  # many demo lines went through a bulk path …
    a = _per_line([data], tmp_path / "a.log")
    assert a == b  # … with the same result


def _busy_log(n: int = 6000, ranks: int = 16, first_rank: int = 0, tail=None, nccl_every: int = 40) -> bytes:
    """A busy multi-rank job: demo progress lines, NCCL INFO chatter (a catalog literal, ignored by
    the tracker) every ``nccl_every`` lines, ranks rotating from ``first_rank``; ``tail(i)`` may
    append text to line ``i``."""
    out = ["=== attempt restart=0 2026-11-29T00:00:00+00:00"]
    for i in range(n):
        r = (first_rank + i) % ranks
        if i % nccl_every == nccl_every - 1:
            out.append(f"gpu-node-{r:03d}:4429:4429 [{r % 8}] NCCL INFO Channel 06/0 : {r}[{r % 8}] -> {r + 1} via P2P/IPC")
            continue
        step = 20.0 + (i % 7) / 10 + (5 if i > n // 2 else 0)
        line = (f"2026-11-29T00:{i // 600 % 60:02d}:{i // 10 % 60:02d}.{i % 10}00+00:00 [rank {r} host n{r // 8}] "
                f"iteration {i // ranks}/100000 | loss 0.5 | compute_ms 9.9 | step_time_ms {step:.1f}")
        out.append(line + (tail(i) if tail else ""))
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("pieces", [1, 5])
def test_a_busy_log_is_summarised_with_the_per_line_result(pieces, tmp_path):
    """The NCCL chatter between progress lines (no root literal: not even gated) does not split the
    run: the whole stretch goes through the bulk path (Python only on its tail) and the tracker
    ends exactly as the per-line path leaves it: rank 0's step times in order (trimmed past
    2,000), the step intervals, last line per rank."""
    data = _busy_log(n=12_000, ranks=4)
    chunks = _split(data, random.Random(pieces)) if pieces > 1 else [data]
    sc = ChunkScanner()
    b = _chunked(chunks, tmp_path / "b.log", sc)
    assert sc.bulk_bytes > len(data) // 2
    a = _per_line(chunks, tmp_path / "a.log")
    assert a == b
    assert 1000 < len(b[1]["step_ms"]) <= 2000 and len(b[1]["last_by_rank"]) == 4  # trimmed once
    assert len(b[1]["step_intervals"]) == 200


@pytest.mark.parametrize("case", ["leading_zero_rank", "lowest_rank_not_0", "second_iteration_in_tail",
                                  "rank_0_quoted_in_tail", "iterations_going_back", "noise_line"])
def test_runs_the_summary_is_not_exact_for_take_the_per_line_loop(case, tmp_path):
    tails = {
        "second_iteration_in_tail": lambda i: " [x] iteration 7/9" if i == 3000 else "",
        "rank_0_quoted_in_tail": lambda i: " see [rank 0 host n0] iteration 1/2" if i == 3001 else "",
    }
    if case == "leading_zero_rank":
        data = _busy_log().replace(b"[rank 0 host n0] iteration 300/", b"[rank 00 host n0] iteration 300/")
    elif case == "lowest_rank_not_0":
        data = _busy_log(first_rank=3)
    elif case == "iterations_going_back":
        data = _busy_log().replace(b"iteration 200/", b"iteration 9/")
    elif case == "noise_line":
        data = _busy_log().replace(b"[rank 5 host n0] iteration 100/", b"[rank 5 host n0] iter 100/")
    else:
        data = _busy_log(tail=tails[case])
    sc = ChunkScanner()
    b = _chunked([data], tmp_path / "b.log", sc)
    a = _per_line([data], tmp_path / "a.log")
    assert a == b
    if case != "iterations_going_back":  # going back is exact in the summary too
        assert sc.summarised < 6000 and sc.bulk_bytes == 0  # the run with the odd line went line by line


def test_a_garbled_step_time_is_no_progress_line_and_the_xid_after_it_is_still_seen(tmp_path):
    # the bad-input probe (2026-12-02): "step_time_ms 20.3.1" raised out of the chunk scan, and the
    # Xid on the next line, already past the follower's offset, was never yielded
    xid = b"[Mon Dec  1 10:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    bad = _busy_log().replace(b"step_time_ms 20.3\n", b"step_time_ms 20.3.1\n" + xid, 1)
    assert bad.count(xid) == 1
    a = _per_line([bad], tmp_path / "a.log")
    for sc in (ChunkScanner(), ChunkScanner()):
        assert _chunked([bad], tmp_path / "b.log", sc) == a
    assert [(h[0], h[1]) for h in a[0]] == [(6, "xid.event")]
    small = b"".join(bad.splitlines(keepends=True)[:60])  # feed_progress (a run under the summary's size)
    assert _chunked([small], tmp_path / "c.log", ChunkScanner()) == _per_line([small], tmp_path / "d.log")


def test_a_stamp_that_is_not_a_date_counts_as_no_stamp_on_every_path(tmp_path):
    """Month 13 matches the stamp pattern but is no date: no step interval from that line, and
    ``last_progress_ts`` None, whether the line went per line, through feed_progress or the summary."""
    bad = b"2026-13-29T00:00:09+00:00 [rank 0 host n0] iteration 999999/100000 | loss 0.5 | step_time_ms 20.0\n"
    canonical = bad.replace(b"| step_time_ms", b"| compute_ms 9.9 | step_time_ms")  # the bulk path's format
    for line in (bad, canonical):
        for data in (_busy_log(n=200, ranks=2) + line,  # small: feed_progress
                     _busy_log(n=3000, ranks=2) + line + _busy_log(n=3000, ranks=2).split(b"\n", 1)[1],
                     _busy_log(n=3000, ranks=2) + line):  # the last record: the bulk path's window
            sc = ChunkScanner()
            b = _chunked([data], tmp_path / "b.log", sc)
            a = _per_line([data], tmp_path / "a.log")
            assert a == b
            assert b[1]["last_iteration"] == 999999
    assert b[1]["last_progress_ts"] is None and sc.bulk_bytes > 0


# ----------------------------------------------------------------------------- the bulk (tail) path
def _compiled(pattern: bytes):
    re2 = pytest.importorskip("re2")
    opts = re2.Options()
    opts.encoding = re2.Options.Encoding.LATIN1
    return re2.compile(pattern, options=opts), re.compile(pattern)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(list(b"itera[nk \xff\rx")), max_size=24).map(bytes))
def test_the_quiet_line_pattern_is_exactly_no_itera_and_no_rank(line):
    """``_QUIET_LINE_B`` (built from the two words' automaton) accepts a line iff it holds neither
    "itera" nor "[rank " — in RE2 (one byte per character) and in ``re`` alike."""
    want = b"itera" not in line and b"[rank " not in line
    for rx in _compiled(detect._QUIET_LINE_B):
        assert (rx.fullmatch(line + b"\n") is not None) == want


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**7), st.integers(0, 10**7), st.booleans())
def test_at_most_is_the_numeric_order(v, x, zero):
    spelled = (b"0" if zero else b"") + b"%d" % x  # a leading zero never matches (not canonical)
    for rx in _compiled(detect._at_most(b"%d" % v)):
        assert (rx.fullmatch(spelled) is not None) == (x <= v and (not zero or spelled == b"00"[:1]))


@pytest.mark.parametrize("ranks", [{b"0"}, {b"0", b"1", b"2"}, {b"0", b"2", b"10"}, {b"%d" % i for i in range(100)}])
def test_rank_set_spells_exactly_the_ranks(ranks):
    for rx in _compiled(detect._rank_set(ranks)):
        assert {b"%d" % i for i in range(200) if rx.fullmatch(b"%d" % i)} == ranks


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2000), st.integers(0, 6000))
def test_extend_steps_equals_appending_one_by_one(n0, k):
    ref: list[float] = []
    for i in range(n0):  # a list as feed leaves it
        ref.append(float(i))
        if len(ref) > 2000:
            del ref[20:1020]
    got = list(ref)
    new = [b"%d.5" % (n0 + i) for i in range(k)]
    for x in new:
        ref.append(float(x))
        if len(ref) > 2000:
            del ref[20:1020]
    detect._extend_steps(got, new)
    assert got == ref


def _bench_like(n: int, ranks: int = 64, nccl_every: int = 50) -> bytes:
    """benchmarks/bench_detect.py's log: 64 ranks, NCCL INFO chatter every 50th line, a warning."""
    out = ["=== attempt restart=0 2026-11-29T00:00:00+00:00"]
    for i in range(n):
        r = i % ranks
        t = f"2026-11-29T{i // 360000 % 24:02d}:{i // 6000 % 60:02d}:{i // 100 % 60:02d}.{i % 100:02d}0+00:00"
        if i % nccl_every == 7:
            out.append(f"gpu-node-{r:03d}:4429:4429 [{r % 8}] NCCL INFO Channel 06/0 : {r}[{r % 8}] -> {r + 1} via P2P/IPC")
        elif i % 997 == 3:
            out.append("[W socket.cpp:601] [c10d] The client socket has failed to connect to [gpu-node-037]:22456 "
                       "(errno: 22 - Invalid argument).")
        else:
            out.append(f"{t} [rank {r} host node{r // 8}] iteration {i // ranks}/100000 | loss 0.5 | "
                       f"compute_ms 9.9 | step_time_ms {20 + i % 13 / 10:.1f}")
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("pieces", [1, 3])
def test_the_bench_log_goes_through_the_bulk_path_with_the_per_line_result(pieces, tmp_path):
    data = _bench_like(60_000)
    chunks = _split(data, random.Random(pieces))[:pieces] if pieces > 1 else [data]
    if pieces > 1:
        chunks[-1] = data[sum(map(len, chunks[:-1])):]
    sc = ChunkScanner()
    b = _chunked(chunks, tmp_path / "b.log", sc)
    assert sc.bulk_bytes > len(data) * 3 // 4  # as one run per chunk (after the marker)
    a = _per_line(chunks, tmp_path / "a.log")
    assert a == b and not b[0]
    assert len(b[1]["step_intervals"]) == 200 and len(b[1]["last_by_rank"]) == 64


def test_the_gate_passes_over_lines_that_cannot_open_an_incident():
    """Only lines with a root literal (or one a resolver may make root: Xid) are yielded; the NCCL
    INFO chatter (a benign signature's literal) and the c10d warning are not."""
    from revive.signatures.matcher import default_matcher

    lits = set(detect.root_literals())
    assert "NCCL INFO" not in lits
    assert all(lit in lits for s in default_matcher().signatures if s.resolver for lit in s.prefilter)
    lines = [b"gpu-node-001:1:1 [0] NCCL INFO Channel 06/0 : 1[1] -> 2 via P2P/IPC",
             b"[W socket.cpp:601] [c10d] The client socket has failed to connect",
             b"[rank1]: RuntimeError: CUDA error: unknown error",
             b"Nov 29 00:00:01 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."]
    data = b"\n".join(lines) + b"\n"
    got = [n for n, _ in ChunkScanner().feed(AttemptTracker(), data, 1, 0.0)]
    assert got == [3, 4]
    assert [i + 1 for i, x in enumerate(lines) if root_hit(i + 1, x.decode())] == [3, 4]


_ODD = ("leading_zero_rank", "iteration_back", "tail", "quiet_rank", "quiet_itera", "crlf", "non_ascii", "root",
        "marker", "checkpoint", "long", "month_13", "naive", "no_compute", "nul", "megatron", "profile", "tab")


def _odd_line(kind: str, i: int, rnd: random.Random) -> str:
    stamp = f"2026-11-29T01:{i // 600 % 60:02d}:{i // 10 % 60:02d}.{i % 10}00+00:00"
    r = rnd.randrange(8)
    return {
        "leading_zero_rank": f"{stamp} [rank 0{r} host n0] iteration {i // 8}/9 | loss 1 | compute_ms 1 | step_time_ms 2",
        "iteration_back": f"{stamp} [rank {r} host n0] iteration {max(0, i // 8 - 50)}/9 | loss 1 | compute_ms 1 | step_time_ms 2",
        "tail": f"{stamp} [rank {r} host n0] iteration {i // 8}/9 | loss 1 | compute_ms 1 | step_time_ms 2 | x",
        "quiet_rank": "[rank 3 host n1] loss scale halved",
        "quiet_itera": "iterable dataset exhausted",
        "crlf": f"{stamp} [rank {r} host n0] iteration {i // 8}/9 | loss 1 | compute_ms 1 | step_time_ms 2\r",
        "non_ascii": "température ok \xff",
        "root": "[rank1]: RuntimeError: CUDA error: unknown error",
        "marker": f"=== attempt restart={rnd.randrange(2)} 2026-11-29T00:00:00+00:00",
        "checkpoint": f"{stamp} [rank 0 host n0] saved checkpoint at iteration {i // 8}",
        "long": "y" * (LINE_CAP + 10),
        "month_13": f"2026-13-29T00:00:00+00:00 [rank {r} host n0] iteration {i // 8 + 1}/9 | loss 1 | compute_ms 1 | step_time_ms 2",
        "naive": f"2026-11-29T01:00:{i % 60:02d} [rank {r} host n0] iteration {i // 8 + 1}/9 | loss 1 | compute_ms 1 | step_time_ms 2",
        "no_compute": f"{stamp} [rank {r} host n0] iteration {i // 8}/9 | loss 1 | step_time_ms 2",
        "nul": "x\x00y",
        "megatron": f" iteration      {i // 8}/     500 | consumed samples: 12 | elapsed time per iteration (ms): 812.3 |",
        "profile": f"  5%|▌         | {i // 8}/1000 [00:05<00:50,  2.00it/s]",
        "tab": f"{stamp}\t[rank {r} host n0]\titeration {i // 8}/9 | loss 1 | compute_ms 1 | step_time_ms 2",
    }[kind]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.integers(1, 12), st.integers(2000, 7000),
       st.lists(st.tuples(st.sampled_from(_ODD), st.floats(0, 1)), max_size=4), st.integers(1, 4))
def test_random_busy_logs_the_bulk_path_equals_the_per_line_path(tmp_path_factory, seed, ranks, n, odd, pieces):
    """Busy logs (demo progress lines of ``ranks`` ranks, NCCL chatter) with a few odd lines
    anywhere — each a reason for the bulk path to refuse a run, or a line it must see — chunked at
    random: the same root hits and the same tracker state as every line through feed + root_hit."""
    rnd = random.Random(seed)
    base = _busy_log(n=n, ranks=ranks, nccl_every=rnd.choice((7, 40, 10**9))).decode().split("\n")
    for kind, where in odd:
        i = 1 + int(where * (len(base) - 2))
        base.insert(i, _odd_line(kind, i, rnd))
    data = "\n".join(base).encode()
    chunks = _split(data, rnd)[:pieces]
    chunks[-1] = data[sum(map(len, chunks[:-1])):]
    tmp = tmp_path_factory.mktemp("bulk")
    assert _per_line(chunks, tmp / "a.log") == _chunked(chunks, tmp / "b.log", ChunkScanner())


def test_small_chunks_go_through_the_bulk_path_without_a_head(tmp_path):
    """A poll's few kilobytes (fewer than 200 records) are one window with no head: its records
    continue the tracker's own stamps and gaps."""
    data = _busy_log(n=3000, ranks=8)
    chunks = [data[i:i + 9000] for i in range(0, len(data), 9000)]
    sc = ChunkScanner()
    b = _chunked(chunks, tmp_path / "b.log", sc)
    assert sc.bulk_bytes > len(data) // 2
    assert _per_line(chunks, tmp_path / "a.log") == b


@pytest.mark.parametrize("where", ["head", "window", "window_start"])
def test_a_rank_that_stopped_printing_keeps_its_last_line(where, tmp_path):
    """Rank 9 prints once, early (in the head: the head check refuses the run, which takes another
    path), late (in the window's last lines, which give its ranks) or at the start of the window
    (the check that the rest of the window has no other rank fails: its ranks are read from all of
    it): either way its line is the one ``last_by_rank`` keeps."""
    lines = _busy_log(n=20_000, ranks=8).decode().split("\n")
    at = {"head": 100, "window": len(lines) - 50, "window_start": len(lines) - 1000}[where]
    lines.insert(at, lines[at].split(" [rank ")[0] + " [rank 9 host m1] iteration 1/100000 | loss 0.5 | "
                 "compute_ms 9.9 | step_time_ms 20.0")
    data = "\n".join(lines).encode()
    sc = ChunkScanner()
    b = _chunked([data], tmp_path / "b.log", sc)
    assert _per_line([data], tmp_path / "a.log") == b
    assert b[1]["last_by_rank"]["rank 9"] == lines[at]
    assert (sc.bulk_bytes > 0) == (where != "head")


def test_root_lines_near_the_start_and_in_the_middle_are_yielded_with_their_numbers(tmp_path):
    """The chunk's leading gated lines (marker, a root line) go through the gate, the rest is tried
    as one run; a root line further on makes that try fail and the gate take the rest: both root
    lines come out, numbered as on the per-line path."""
    lines = _bench_like(30_000).decode().split("\n")
    lines.insert(2, "[rank1]: RuntimeError: CUDA error: unknown error")
    lines.insert(20_000, "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    data = "\n".join(lines).encode()
    sc = ChunkScanner()
    b = _chunked([data], tmp_path / "b.log", sc)
    a = _per_line([data], tmp_path / "a.log")
    assert a == b and [h[0] for h in b[0]] == [3, 20_001]
    assert sc.bulk_bytes > len(data) // 2  # the stretches around the second root line, in bulk


def test_a_bar_before_a_leading_zero_rank_keeps_the_bulk_path_equal_to_the_per_line_path(tmp_path):
    # found by the property test above (seed 0, one rank, a tqdm bar and a "[rank 06 …]" line at the
    # top): the bar counted as rank 0 for last_by_rank but not for whose step times are kept, so
    # feed kept rank 6's 2 ms step and the reference did not
    data = _busy_log(n=2000, ranks=1).decode().split("\n")
    data[1:1] = [_odd_line("profile", 1, random.Random(0)), _odd_line("leading_zero_rank", 2, random.Random(0))]
    chunk = "\n".join(data).encode()
    assert _per_line([chunk], tmp_path / "a.log") == _chunked([chunk], tmp_path / "b.log", ChunkScanner())
