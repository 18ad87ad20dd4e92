"""Detect stage (pure): job-log lines and job-state changes → triggers.

``AttemptTracker`` follows one job's log across attempts and answers three questions:
- did a line open an incident (a root signature from the catalog, in the current attempt)?
- is the attempt hung (no progress line for max(k × median step interval, floor) seconds, the clock
  starting at the attempt's first progress line and paused while a checkpoint is being saved)?
- what was the last checkpoint and the last progress line per rank (evidence for the incident)?

Times are passed in (``now`` as a monotonic float in seconds), so tests drive the clock.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from revive.logline import LINE_CAP, cap_bytes, cap_line, decode_line
from revive.progress import GENERIC_PROGRESS_RE, PROGRESS_RE, parse_attempt, parse_checkpoint, parse_ts

MAX_STEP_INTERVAL_S = 6 * 3600.0
"""A gap between progress stamps above this is a clock jump (or a bogus stamp), not a step time."""

CHECKPOINT_PAUSE_MAX_S = 1800.0
"""A checkpoint save pauses the hang clock for at most this long (a save stuck on a frozen file
system is itself a hang)."""



def _parse_stamp(stamp: str) -> datetime | None:
    """``revive.progress.parse_ts`` for a stamp its ``TS_RE`` already matched."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass
class LineHit:
    line_no: int
    text: str
    signature_id: str
    category: str


@dataclass
class AttemptTracker:
    k: float = 5.0
    floor_s: float = 60.0
    attempt: int = 0
    attempt_seen: bool = False
    first_progress_mono: float | None = None
    last_progress_mono: float | None = None
    last_progress_ts: datetime | None = None
    last_iteration: int | None = None
    saving_since_mono: float | None = None
    paused_s: float = 0.0
    checkpoint: int | None = None
    step_intervals: list[float] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    """Step times of the attempt (``step_time_ms`` of the lowest rank printing it), in ms."""
    last_by_rank: dict[str, str] = field(default_factory=dict)
    _prev_ts: datetime | None = None
    _min_rank: int | None = None
    """The lowest rank in ``last_by_rank`` (kept instead of recomputed per line)."""
    _baseline: tuple[list[float], float] | None = None
    """Cached median of the step-time baseline (``slowed``)."""

    def new_attempt(self, n: int) -> None:
        keep_ckpt = self.checkpoint
        self.__init__(k=self.k, floor_s=self.floor_s)  # type: ignore[misc]
        self.attempt, self.attempt_seen, self.checkpoint = n, True, keep_ckpt

    def feed(self, text: str, now: float) -> None:
        """Update progress state from one line (attempt markers, progress, checkpoints).

        Same result as parsing each line with ``revive.progress`` (``parse_attempt``,
        ``parse_checkpoint``, ``parse_progress``), with the cheap checks first: the timestamp is
        parsed only for a line that advances the iteration (the only place it is used)."""
        if text.startswith("=== attempt restart="):
            a = parse_attempt(text)
            if a is not None:
                if not self.attempt_seen or a != self.attempt:
                    self.new_attempt(a)
                return
        if "checkpoint at iteration" in text:
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
        m = PROGRESS_RE.match(text)
        if m is not None:
            iteration = int(m.group("it"))
            rank = int(m.group("rank"))
            comp, step_s = m.group("compute"), m.group("step")
            step = float(step_s) if step_s else None
            if comp:
                float(comp)  # parse_progress raises on a malformed number before any state changes
            self.last_by_rank[f"rank {rank}"] = text[:1024]
            mr = self._min_rank
            if mr is None or rank < mr:
                mr = self._min_rank = rank
            if rank == mr and step is not None:
                self.step_ms.append(step)
                if len(self.step_ms) > 2000:
                    del self.step_ms[20:1020]  # keep the baseline (head) and the recent steps
        else:
            if "iteration" not in text or "checkpoint" in text:
                return
            g = GENERIC_PROGRESS_RE.search(text)
            if g is None:
                return
            iteration = int(g.group("it"))
        if self.last_iteration is None or iteration > self.last_iteration:
            self._advance(iteration, text, m.group("ts") if m is not None else None)
        if self.first_progress_mono is None:
            self.first_progress_mono = now
        self.last_progress_mono = now
        self.paused_s = 0.0

    def _advance(self, iteration: int, text: str, stamp: str | None = None) -> None:
        """A new highest iteration: record it, its stamp, and the step interval since the last one.
        ``stamp``: the line's leading ISO stamp when a caller's regex already matched it (what
        ``parse_ts(text)`` would match), saving the stamp regex."""
        raw_ts = parse_ts(text) if stamp is None else _parse_stamp(stamp)
        ts = raw_ts
        if ts is not None and ts.tzinfo is None:  # ranks may mix naive and zoned stamps
            ts = ts.replace(tzinfo=UTC)
        if ts and self._prev_ts and ts > self._prev_ts:
            gap = (ts - self._prev_ts).total_seconds()
            if gap <= MAX_STEP_INTERVAL_S:
                self.step_intervals.append(gap)
                if len(self.step_intervals) > 200:
                    del self.step_intervals[:-200]
        if ts:
            self._prev_ts = ts
        self.last_iteration = iteration
        self.last_progress_ts = raw_ts

    def feed_progress(self, found: list[tuple[bytes, bytes, bytes, bytes, bytes, bytes]], now: float) -> None:
        """``feed`` for a run of demo-format progress lines, all at ``now``, already matched:
        (line, stamp, rank, iteration, compute_ms, step_time_ms) bytes per line (``ChunkScanner``)."""
        last: dict[int, bytes] = {}
        mr = self._min_rank
        step_ms = self.step_ms
        seen = False
        try:
            for line, ts_b, rank_b, it_b, comp, step_b in found:
                iteration, rank = int(it_b), int(rank_b)
                step = float(step_b) if step_b else None
                if comp:
                    float(comp)  # as feed: a malformed number raises before the line changes anything
                last[rank] = line
                if mr is None or rank < mr:
                    mr = self._min_rank = rank
                if rank == mr and step is not None:
                    step_ms.append(step)
                    if len(step_ms) > 2000:
                        del step_ms[20:1020]
                if self.last_iteration is None or iteration > self.last_iteration:
                    self._advance(iteration, "", ts_b.decode("ascii"))
                seen = True
        finally:
            for rank, line in last.items():
                self.last_by_rank[f"rank {rank}"] = line.decode("ascii")[:1024]
            if seen:
                if self.first_progress_mono is None:
                    self.first_progress_mono = now
                self.last_progress_mono = now
                self.paused_s = 0.0

    def threshold_s(self) -> float:
        """max(k × median step interval, floor), in seconds."""
        med = statistics.median(self.step_intervals) if self.step_intervals else 0.0
        return max(self.k * med, self.floor_s)

    def silent_for(self, now: float) -> float:
        """Seconds since the last progress line, not counting checkpoint saving."""
        if self.last_progress_mono is None:
            return 0.0
        saving = min(now - self.saving_since_mono, CHECKPOINT_PAUSE_MAX_S) if self.saving_since_mono is not None else 0.0
        paused = self.paused_s + saving
        return max(0.0, now - self.last_progress_mono - paused)

    def slowed(self, pct: float = 5.0, n: int = 10, baseline_n: int = 10) -> bool:
        """Sustained slowdown: the last ``n`` steps all ≥ (1 + pct/100) × the attempt's baseline
        (median of its first ``baseline_n`` steps after a 2-step warm-up)."""
        s = self.step_ms
        if len(s) < 2 + baseline_n + n:
            return False
        head = s[2:2 + baseline_n]
        if self._baseline is None or self._baseline[0] != head:  # the head never changes within an attempt
            self._baseline = (head, statistics.median(head))
        base = self._baseline[1]
        return base > 0 and all(x >= base * (1 + pct / 100) for x in s[-n:])

    def hung(self, now: float) -> bool:
        if self.first_progress_mono is None:
            return False
        silent = self.silent_for(now)
        # the threshold is never below the floor: no median needed while silent ≤ floor (every pass, every job)
        return silent > self.floor_s and silent > self.threshold_s()


ROOT_CACHE_SIZE = 4096
"""Lines (of at most ``ROOT_CACHE_TEXT`` characters) whose ``root_hit`` verdict is remembered: logs
repeat the same chatter (NCCL INFO from every rank, the same warning each step) many times."""
ROOT_CACHE_TEXT = 512
_root_cache: dict[str, tuple[str, str] | None] = {}
_root_cache_owner: list[Any] = [None]


def root_hit(line_no: int, text: str) -> LineHit | None:
    """The first catalog match with role ``root`` on this line, or None (benign and cascade lines
    never open an incident). The verdict (signature id and category, or none) of a short line is
    cached per text (the matcher is pure), at most ``ROOT_CACHE_SIZE`` lines, oldest dropped first."""
    from revive.signatures.matcher import default_matcher

    matcher = default_matcher()
    if _root_cache_owner[0] is not matcher:  # another catalog (tests swap it): forget the verdicts
        _root_cache.clear()
        _root_cache_owner[0] = matcher
    short = len(text) <= ROOT_CACHE_TEXT
    if short and text in _root_cache:
        got = _root_cache[text]
    else:
        got = next(((m.id, str(m.category)) for m in matcher.match(text) if m.role == "root"), None)
        if short:
            if len(_root_cache) >= ROOT_CACHE_SIZE:
                del _root_cache[next(iter(_root_cache))]
            _root_cache[text] = got
    if got is None:
        return None
    return LineHit(line_no=line_no, text=cap_line(text), signature_id=got[0], category=got[1])


def fault_family(category: str) -> str:
    """Coarse family for the incident id (one incident per job attempt and family)."""
    fam = {
        "gpu_hardware": "gpu", "gpu_memory_ecc": "gpu", "nvlink": "gpu", "cuda_error": "gpu",
        "nccl_error": "comm", "hang": "hang", "straggler": "slow", "node_failure": "node",
        "oom_gpu": "oom", "oom_host": "oom", "io_error": "io", "app_bug": "app",
        "timeout": "limit", "preempted": "limit",
    }
    return fam.get(category, "crash")


# ----------------------------------------------------------------------------- chunk scan
PROGRESS_LITERALS = ("iteration", "=== attempt restart=")
"""Every line ``AttemptTracker.feed`` acts on contains one of these (attempt markers, checkpoint
and progress lines all do); a line with none of them and no catalog literal changes nothing."""

_LONG_BLOCK = LINE_CAP // 2
_SUMMARY_MIN = 4096
"""Runs shorter than this (bytes) take the per-line loop: the summary's fixed cost is not worth it."""
_PRINTABLE = bytes([9, 10, *range(0x20, 0x7F)])
_PROGRESS_B = re.compile(
    rb"(?m)^((\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?)[ \t]+\[rank (\d+) host [^\]\s]+\][ \t]+"
    rb"iteration (\d+)/\d+(?:.*?compute_ms ([\d.]+))?(?:.*?step_time_ms ([\d.]+))?.*)")
"""``revive.progress.PROGRESS_RE`` over bytes, one match per line (whole line, stamp, rank,
iteration, compute_ms, step_time_ms). On printable ASCII (and tab) it matches exactly where the str pattern
does: there ``\\s`` within a line is ``[ \\t]``."""

_DEMO_LINE = (rb"\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?[ \t]+\[rank \d+ host [\x21-\x5c\x5e-\x7e]+\][ \t]+"
              rb"iteration \d+/\d+[\t\x20-\x7e]*\n")
_DEMO_RUN = re.compile(rb"(?:" + _DEMO_LINE + rb")*")
"""A buffer of whole lines, each a demo-format progress line (``_PROGRESS_B``'s prefix) of printable
ASCII and tab only. Checked with RE2 (one linear-time DFA pass, no per-line Python) when available."""
_ITER_B = re.compile(rb"\][ \t]+iteration (\d+)/")
"""In a demo line the first ``]`` closes ``[rank R host H]``: one match per line unless the rest of
the line repeats the pattern (then the summary path is not taken)."""
_RANK_B = re.compile(rb"\[rank (\d+) host ")
_RANK0_B = re.compile(rb"\[rank 0 host [^\]\s]+\][ \t]+iteration \d+/\d+(?:.*?compute_ms ([\d.]+))?"
                      rb"(?:.*?step_time_ms ([\d.]+))?")
"""``_PROGRESS_B``'s compute_ms/step_time_ms groups, for rank 0's lines only."""


class ChunkScanner:
    """Picks, in one pass over a buffer of whole lines, the lines the detect stage must look at.

    One combined alternation (RE2 when available) of the catalog's prefilter literals runs over the
    new bytes of a log, and ``bytes.find`` looks for ``PROGRESS_LITERALS``; only the lines they hit
    are decoded and handed to Python (``AttemptTracker.feed``, and ``root_hit`` for the lines with a
    catalog literal). Every other line would have been a
    no-op for both, so the result is the same as feeding every line. Buffers where the byte-level
    gate could disagree with the per-line path (a NUL byte, which ``decode_line`` drops, or a line
    longer than ``LINE_CAP`` bytes, which capping rewrites) are handed over line by line.
    """

    def __init__(self, literals: list[str] | None = None) -> None:
        if literals is None:
            from revive.signatures.matcher import default_matcher

            literals = list(default_matcher().literals)
        lits = sorted(set(literals), key=len, reverse=True)
        alt = b"|".join(re.escape(x.encode()) for x in lits)
        self.gate: Any
        self.demo_run: Any
        try:
            import re2

            self.gate = re2.compile(alt)
            self.demo_run = re2.compile(_DEMO_RUN.pattern)
        except Exception:  # pragma: no cover - re2 is a dependency; same results with re
            self.gate = re.compile(alt)
            self.demo_run = _DEMO_RUN
        self.summarised = 0
        """Lines fed through the summary path (``_summarise``), for tests and benchmarks."""

    @staticmethod
    def _has_long_line(data: bytes) -> bool:
        # a line longer than LINE_CAP covers a whole aligned block of LINE_CAP/2 bytes
        n = len(data)
        for p in range(0, n - _LONG_BLOCK + 1, _LONG_BLOCK):
            if data.find(b"\n", p, p + _LONG_BLOCK) < 0:
                ls = data.rfind(b"\n", 0, p) + 1
                le = data.find(b"\n", p)
                if (n if le < 0 else le) - ls > LINE_CAP:
                    return True
        return False

    def _catalog_lines(self, data: bytes) -> dict[int, int]:
        """Line start → line end of every line with a catalog literal (one gate call per such line)."""
        out: dict[int, int] = {}
        search, find, rfind, n, pos = self.gate.search, data.find, data.rfind, len(data), 0
        while pos < n:
            m = search(data, pos)
            if m is None:
                break
            hit = m.start()
            ls = rfind(b"\n", pos, hit) + 1 or pos
            le = find(b"\n", hit)
            if le < 0:
                le = n
            out[ls] = le
            pos = le + 1
        return out

    @staticmethod
    def _literal_lines(data: bytes, lit: bytes, start: int = 0, end: int | None = None) -> dict[int, int]:
        """Line start → line end of every line of ``data[start:end]`` containing ``lit`` (``start``
        is a line start; ``end`` a line end or the buffer's end)."""
        out: dict[int, int] = {}
        n = len(data) if end is None else end
        find, rfind, pos = data.find, data.rfind, start
        while True:
            hit = find(lit, pos, n)
            if hit < 0:
                return out
            ls = rfind(b"\n", pos, hit) + 1 or pos
            le = find(b"\n", hit, n)
            if le < 0:
                le = n
            out[ls] = le
            pos = le + 1

    @staticmethod
    def _text(data: bytes, ls: int, le: int) -> str:
        # what decode_line does, for a line with no NUL and at most LINE_CAP bytes (no cap)
        text = data[ls:le].decode("utf-8", "replace")
        return text.rstrip("\r") if text.endswith("\r") else text

    def feed(self, t: AttemptTracker, data: bytes, first_line_no: int, now: float) -> Iterator[tuple[int, str]]:
        """Feed ``t`` every line of ``data`` (whole lines) and yield, in order, (line number,
        text) of each line that may open an incident (has a catalog literal): the same as
        ``t.feed`` on every line and ``root_hit`` on each. Runs of demo-format progress lines
        between such lines are fed in bulk (``AttemptTracker.feed_progress`` or ``_summarise``);
        a yielded line with neither "iteration" nor an attempt marker (``feed`` ignores it) does
        not split the run around it, so when it is yielded ``t`` may already hold later progress
        lines of the same run. ``t.attempt`` is always the yielded line's own attempt (markers split runs)."""
        if b"\x00" in data or self._has_long_line(data):
            for n, text, _ in self.scan(data, first_line_no):
                t.feed(text, now)
                yield n, text
            return
        roots = self._catalog_lines(data)
        special = dict(roots)
        special.update(self._literal_lines(data, b"=== attempt restart="))
        special.update(self._literal_lines(data, b"checkpoint at iteration"))
        count = data.count
        pos, line_no = 0, first_line_no
        segs: list[tuple[int, int]] = []  # progress stretches not yet fed (one run across inert lines)
        held: list[tuple[int, str]] = []  # inert catalog lines, yielded once the run around them is fed
        for ls in sorted(special) if len(special) > 1 else special:
            le = special[ls]
            if ls > pos:
                segs.append((pos, ls))
            line_no += count(b"\n", pos, ls)
            text = self._text(data, ls, le)
            if ls in roots and "iteration" not in text and not text.startswith("=== attempt restart="):
                held.append((line_no, text))  # t.feed(text) would change nothing
            else:
                self._feed_runs(t, data, segs, now)
                segs = []
                yield from held
                held = []
                t.feed(text, now)
                if ls in roots:
                    yield line_no, text
            line_no += 1
            pos = le + 1
        if pos < len(data):
            segs.append((pos, len(data)))
        self._feed_runs(t, data, segs, now)
        yield from held

    def _feed_runs(self, t: AttemptTracker, data: bytes, segs: list[tuple[int, int]], now: float) -> None:
        """Feed the stretches ``segs`` of ``data`` (only lines ``feed`` ignores lie between them):
        summarised as one run when ``_summarise`` takes it, else ``_feed_run`` on each."""
        if len(segs) > 1:
            run = b"".join([data[a:b] for a, b in segs])
            if len(run) >= _SUMMARY_MIN and b"iteration" in run and self._summarise(t, run, now):
                return
        for a, b in segs:  # stretch by stretch: an odd line then costs only its own stretch the bulk path
            self._feed_run(t, data, a, b, now)

    def _feed_run(self, t: AttemptTracker, data: bytes, a: int, b: int, now: float) -> None:
        """Feed the lines of ``data[a:b]`` (no catalog literal, attempt marker or checkpoint)."""
        k = data.count(b"iteration", a, b)
        if k == 0:
            return
        if b - a >= _SUMMARY_MIN and self._summarise(t, data if a == 0 and b == len(data) else data[a:b], now):
            return
        if not data[a:b].translate(None, _PRINTABLE):  # printable ASCII only: bytes regex == str regex
            found = _PROGRESS_B.findall(data, a, b)
            if len(found) == k:  # every line with "iteration" is a demo progress line
                t.feed_progress(found, now)
                return
        for ls, le in self._literal_lines(data, b"iteration", a, b).items():
            t.feed(self._text(data, ls, le), now)

    def _summarise(self, t: AttemptTracker, run: bytes, now: float) -> bool:
        """``feed_progress`` on the lines of ``run`` (whole lines) without a Python step per line, or False
        (nothing changed) when the run is not one this path is exact for.

        Taken when every line of the run is a demo progress line (``_DEMO_RUN``, one RE2 pass),
        each line has exactly one rank and one iteration match, the lowest rank is already 0 (or
        the run's first line is rank 0) and no rank is spelled with a leading zero, and no number
        could be one ``float`` refuses (no ``_ms .``, no ``..`` once digits are dropped: such a run
        takes the per-line loop, which raises where ``feed`` does). Then only these lines need Python: rank 0's
        (its step times, in order), the lines that raise the highest iteration (``_advance``) and
        each rank's last line (``last_by_rank``); the per-line work is C-level regex/bytes calls.
        Same resulting state as ``feed_progress`` on every line (tests/worker/test_chunk_scan.py)."""
        if run[-1:] != b"\n" or self.demo_run.fullmatch(run) is None:
            return False
        mr = t._min_rank
        if mr is not None and mr != 0:
            return False
        # conservative: a [\d.]+ that float refuses has two dots (".." once digits are dropped) or is a lone dot
        if b"_ms ." in run or b".." in run.translate(None, b"0123456789"):
            return False
        nl = run.count(b"\n")
        its = _ITER_B.findall(run)
        ranks = _RANK_B.findall(run)
        if len(its) != nl or len(ranks) != nl or (mr is None and ranks[0] != b"0"):
            return False
        last_of = dict(zip(ranks, range(nl), strict=True))  # rank as spelled → index of its last line
        if any(r[:1] == b"0" and len(r) > 1 for r in last_of):
            return False  # "rank 007": the rank-0 regex below would not see it
        zero = _RANK0_B.findall(run)
        if len(zero) != ranks.count(b"0"):
            return False
        steps = [float(st) for _c, st in zero if st]  # well formed (checked above); ints: lines ≤ LINE_CAP
        first_of = dict(zip(reversed(its), range(nl - 1, -1, -1), strict=True))  # iteration as spelled → first line
        lines = run.split(b"\n")
        # only the first line of a spelling can raise the highest iteration seen so far
        peak = -1 if t.last_iteration is None else t.last_iteration
        for i, it_b in sorted((i, b) for b, i in first_of.items()):
            it = int(it_b)
            if it > peak:
                t._advance(it, lines[i].decode("ascii"))
                peak = it
        t._min_rank = 0
        step_ms = t.step_ms
        for x in steps:
            step_ms.append(x)
            if len(step_ms) > 2000:
                del step_ms[20:1020]
        lbr = t.last_by_rank
        for r_b, i in last_of.items():
            lbr[f"rank {int(r_b)}"] = lines[i].decode("ascii")[:1024]
        if t.first_progress_mono is None:
            t.first_progress_mono = now
        t.last_progress_mono = now
        t.paused_s = 0.0
        self.summarised += nl
        return True

    def scan(self, data: bytes, first_line_no: int = 1) -> Iterator[tuple[int, str, bool]]:
        """(line number, decoded text, may_be_root) for the lines of ``data`` that can matter, in
        order. ``may_be_root`` is False for a line with no catalog literal (``root_hit`` → None)."""
        if b"\x00" in data or self._has_long_line(data):
            parts = data.split(b"\n")
            if parts and parts[-1] == b"":
                parts.pop()
            for i, raw in enumerate(parts):
                yield first_line_no + i, decode_line(cap_bytes(raw, 4 * LINE_CAP)), True
            return
        roots = self._catalog_lines(data)
        cand = dict(roots)
        for lit in PROGRESS_LITERALS:
            cand.update(self._literal_lines(data, lit.encode()))
        count = data.count
        pos, line_no = 0, first_line_no
        for ls in sorted(cand) if len(cand) > 1 else cand:
            le = cand[ls]
            line_no += count(b"\n", pos, ls)
            yield line_no, self._text(data, ls, le), ls in roots
            line_no += 1
            pos = le + 1

    def lines(self, data: bytes, first_line_no: int = 1) -> Iterator[tuple[int, str]]:
        """(line number, decoded text) of the lines of ``data`` that can matter, in order."""
        for n, text, _ in self.scan(data, first_line_no):
            yield n, text


@functools.lru_cache(maxsize=1)
def default_scanner() -> ChunkScanner:
    return ChunkScanner()


# ----------------------------------------------------------------------------- attempt start
class AttemptRule(StrEnum):
    """Which rule found the first line of a job's current attempt in its log (``find_attempt_start``)."""

    marker = "marker"
    """Revive's own ``=== attempt restart=N <ISO time>`` line for this attempt (an optional extra:
    its N equals the scheduler's restart count and its time is not before the attempt's start)."""
    start_time = "start_time"
    """The first line whose leading timestamp is at or after the attempt's start (the scheduler's
    ``attempt_started_at``); undated lines right before it are left to the earlier attempt."""
    whole_log = "whole_log"
    """A first attempt (never restarted) whose whole log was read and carries no stamp: all of it."""
    new_lines = "new_lines"
    """Nothing tells the attempts apart (no marker, no stamps): only lines written from now on."""


@dataclass(frozen=True)
class AttemptStart:
    offset: int
    """Byte offset, within the buffer searched, of the attempt's first line (the buffer's length:
    none of its lines belong to the attempt)."""
    rule: AttemptRule


def _line_stamp(line: bytes) -> datetime | None:
    """The leading ISO-8601 stamp of a log line, aware (a stamp without zone is taken as UTC, as
    ``AttemptTracker`` does), or None."""
    if not line[:1].isdigit():
        return None
    ts = parse_ts(line[:48].decode("ascii", "replace"))
    if ts is not None and ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts


def find_attempt_start(data: bytes, attempt: int, started_at: datetime | None, whole: bool) -> AttemptStart:
    """Where attempt ``attempt`` (the scheduler's restart count) begins in ``data`` (a log's last
    bytes; ``whole``: the whole log, from byte 0). Rules, first that applies (``AttemptRule``):

    1. ``marker``: the last ``=== attempt restart=<attempt>`` line not stamped before ``started_at``
       (a resubmitted job writing to an old job's log prints restart=0 again, later);
    2. ``start_time``: the first line stamped at or after ``started_at`` (aware UTC, whole seconds
       as Slurm prints StartTime), found walking back from the end to the last line stamped before
       it (log lines are written in time order; only the attempt's lines are parsed); when lines are
       stamped but none that late, the attempt has printed nothing yet (offset = ``len(data)``);
    3. ``whole_log``: attempt 0, ``whole`` and no stamped line: offset 0;
    4. ``new_lines``: offset = ``len(data)``.

    Works for ``--open-mode=append`` (attempts follow each other in one file) and Slurm's default
    (the file truncated when the attempt starts: rule 1, 2 or 3 gives its first line). Pure."""
    n = len(data)
    head = b"=== attempt restart="
    marker: int | None = None
    hit = data.rfind(head)
    while hit >= 0:  # markers, last first (only marker lines are looked at)
        if hit == 0 or data[hit - 1] == 10:
            end = data.find(b"\n", hit)
            line = data[hit:n if end < 0 else end]
            if parse_attempt(line[:200].decode("ascii", "replace")) == attempt:
                parts = line.split()
                ts = _line_stamp(parts[2]) if len(parts) > 2 else None
                if started_at is None or ts is None or ts >= started_at:
                    marker = hit
                    break
        hit = data.rfind(head, 0, hit) if hit > 0 else -1
    if marker is not None:
        return AttemptStart(marker, AttemptRule.marker)
    if started_at is not None:
        # lines are written in time order: walk back from the end while lines are stamped at or
        # after the start (only the attempt's own lines and the first older one are parsed)
        first_late: int | None = None
        stamped = False
        end = n - 1 if n and data[n - 1] == 10 else n
        while end > 0:
            start = data.rfind(b"\n", 0, end) + 1
            ts = _line_stamp(data[start:end])
            if ts is not None:
                stamped = True
                if ts < started_at:
                    break
                first_late = start
            end = start - 1
        if first_late is not None:
            return AttemptStart(first_late, AttemptRule.start_time)
        if stamped:
            return AttemptStart(n, AttemptRule.start_time)
    if attempt == 0 and whole:
        return AttemptStart(0, AttemptRule.whole_log)
    return AttemptStart(n, AttemptRule.new_lines)


_CKPT_B = re.compile(rb"(?:saved|resumed from) checkpoint at iteration\s+(\d+)")


def last_checkpoint(data: bytes) -> int | None:
    """The iteration of the last ``saved checkpoint at iteration N`` / ``resumed from checkpoint at
    iteration N`` line in ``data`` (earlier attempts' lines, for a tracker rebuilt after them)."""
    last = None
    for m in _CKPT_B.finditer(data):
        last = m
    return int(last.group(1)) if last else None


def restore_clock(t: AttemptTracker, now: float, wall: datetime) -> None:
    """After re-reading an attempt's lines at ``now`` (monotonic s), move the hang clock back to the
    attempt's last progress line: ``last_progress_mono`` = ``now`` − (``wall`` − its stamp), so a
    restarted monitor sees a job that hung before the restart as silent for as long as it really
    was. Lines without stamps, or stamped without a zone (whose offset to ``wall`` is a guess),
    leave the clock at ``now`` (silence counts from the re-read)."""
    ts = t.last_progress_ts
    if ts is None or ts.tzinfo is None or t.last_progress_mono is None:
        return
    age = (wall - ts).total_seconds()
    if age <= 0:
        return
    t.last_progress_mono = now - age
    if t.first_progress_mono is None or t.first_progress_mono > t.last_progress_mono:
        t.first_progress_mono = t.last_progress_mono
