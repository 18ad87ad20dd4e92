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
from typing import Any

from revive.logline import LINE_CAP, cap_bytes, cap_line, decode_line
from revive.progress import GENERIC_PROGRESS_RE, PROGRESS_RE, parse_attempt, parse_checkpoint, parse_ts

MAX_STEP_INTERVAL_S = 6 * 3600.0
"""A gap between progress stamps above this is a clock jump (or a bogus stamp), not a step time."""

CHECKPOINT_PAUSE_MAX_S = 1800.0
"""A checkpoint save pauses the hang clock for at most this long (a save stuck on a frozen file
system is itself a hang)."""



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
        if PROFILE_BAR in text or PROFILE_METRICS in text:
            self._feed_profile(text, now)
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
            self._advance(iteration, text)
        if self.first_progress_mono is None:
            self.first_progress_mono = now
        self.last_progress_mono = now
        self.paused_s = 0.0

    def _feed_profile(self, text: str, now: float) -> None:
        """A progress-bar line of a framework profile (``revive/profiles/profiles.yaml``: tqdm, HF
        Trainer, Lightning): its last ``Iteration`` event counts as a progress line. Such lines carry
        no timestamp, so the step interval is the bar's own rate (``s/it`` or ``1/(it/s)``)."""
        from revive.profiles.extract import Iteration, Metrics, default_extractor

        last = None
        alive = False
        for ev in default_extractor().events(text):
            if isinstance(ev, Iteration):
                last = ev
            elif isinstance(ev, Metrics):
                alive = True
        if last is None:
            if alive:  # HF's per-step log dict (stdout): a step finished, though it names no step
                self._alive(now)
            return
        if self.last_iteration is None or last.iter > self.last_iteration:
            step = last.step_time_s
            if step is not None and 0 < step <= MAX_STEP_INTERVAL_S:
                self.step_intervals.append(step)
                if len(self.step_intervals) > 200:
                    del self.step_intervals[:-200]
            self.last_iteration = last.iter
        self.last_by_rank[f"rank {last.rank if last.rank is not None else 0}"] = text.rsplit("\r", 1)[-1][:1024]
        self._alive(now)

    def _alive(self, now: float) -> None:
        if self.first_progress_mono is None:
            self.first_progress_mono = now
        self.last_progress_mono = now
        self.paused_s = 0.0

    def _advance(self, iteration: int, text: str) -> None:
        """A new highest iteration: record it, its stamp, and the step interval since the last one."""
        raw_ts = parse_ts(text)
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

    def feed_progress(self, found: list[tuple[bytes, bytes, bytes, bytes, bytes]], now: float) -> None:
        """``feed`` for a run of demo-format progress lines, all at ``now``, already matched:
        (line, rank, iteration, compute_ms, step_time_ms) bytes per line (``ChunkScanner``)."""
        last: dict[int, bytes] = {}
        mr = self._min_rank
        step_ms = self.step_ms
        seen = False
        try:
            for line, rank_b, it_b, comp, step_b in found:
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
                    self._advance(iteration, line.decode("ascii"))
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


def root_hit(line_no: int, text: str) -> LineHit | None:
    """The first catalog match with role ``root`` on this line, or None (benign and cascade lines
    never open an incident)."""
    from revive.signatures.matcher import default_matcher

    for m in default_matcher().match(text):
        if m.role == "root":
            return LineHit(line_no=line_no, text=cap_line(text), signature_id=m.id, category=str(m.category))
    return None


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
PROFILE_BAR = "%|"
"""The literal of the profiles' progress-bar lines (tqdm's ``l_bar`` ends in ``%|``): such a line goes
to the profile extractor (``AttemptTracker._feed_profile``)."""

PROFILE_METRICS = "{'loss': "
"""The literal of HF Trainer's log dicts (``ProgressCallback.on_log`` → ``tqdm.write``: stdout, one
line per ``logging_steps``). Under srun the bar (stderr, ``\\r`` only) reaches the log in bursts when
srun's buffer for it fills, while these lines arrive per step: they keep the hang clock honest."""

PROGRESS_LITERALS = ("iteration", "=== attempt restart=", PROFILE_BAR, PROFILE_METRICS)
"""Every line ``AttemptTracker.feed`` acts on contains one of these (attempt markers, checkpoint
and progress lines all do); a line with none of them and no catalog literal changes nothing."""

_LONG_BLOCK = LINE_CAP // 2
_PRINTABLE = bytes([9, 10, *range(0x20, 0x7F)])
_PROGRESS_B = re.compile(
    rb"(?m)^((?:\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?)[ \t]+\[rank (\d+) host [^\]\s]+\][ \t]+"
    rb"iteration (\d+)/\d+(?:.*?compute_ms ([\d.]+))?(?:.*?step_time_ms ([\d.]+))?.*)")
"""``revive.progress.PROGRESS_RE`` over bytes, one match per line (whole line, rank, iteration,
compute_ms, step_time_ms). On printable ASCII (and tab) it matches exactly where the str pattern
does: there ``\\s`` within a line is ``[ \\t]``."""


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
        try:
            import re2

            self.gate = re2.compile(alt)
        except Exception:  # pragma: no cover - re2 is a dependency; same results with re
            self.gate = re.compile(alt)

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
        text) of each line that may open an incident (has a catalog literal), right after feeding
        it: the same as ``t.feed`` on every line and ``root_hit`` on each. Runs of demo-format
        progress lines between such lines are fed in bulk (``AttemptTracker.feed_progress``)."""
        if b"\x00" in data or self._has_long_line(data):
            for n, text, _ in self.scan(data, first_line_no):
                t.feed(text, now)
                yield n, text
            return
        roots = self._catalog_lines(data)
        special = dict(roots)
        special.update(self._literal_lines(data, b"=== attempt restart="))
        special.update(self._literal_lines(data, b"checkpoint at iteration"))
        special.update(self._literal_lines(data, PROFILE_BAR.encode()))
        special.update(self._literal_lines(data, PROFILE_METRICS.encode()))
        count = data.count
        pos, line_no = 0, first_line_no
        for ls in sorted(special) if len(special) > 1 else special:
            le = special[ls]
            if ls > pos:
                self._feed_run(t, data, pos, ls, now)
            line_no += count(b"\n", pos, ls)
            text = self._text(data, ls, le)
            t.feed(text, now)
            if ls in roots:
                yield line_no, text
            line_no += 1
            pos = le + 1
        if pos < len(data):
            self._feed_run(t, data, pos, len(data), now)

    def _feed_run(self, t: AttemptTracker, data: bytes, a: int, b: int, now: float) -> None:
        """Feed the lines of ``data[a:b]`` (no catalog literal, attempt marker or checkpoint)."""
        k = data.count(b"iteration", a, b)
        if k == 0:
            return
        if not data[a:b].translate(None, _PRINTABLE):  # printable ASCII only: bytes regex == str regex
            found = _PROGRESS_B.findall(data, a, b)
            if len(found) == k:  # every line with "iteration" is a demo progress line
                t.feed_progress(found, now)
                return
        for ls, le in self._literal_lines(data, b"iteration", a, b).items():
            t.feed(self._text(data, ls, le), now)

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
