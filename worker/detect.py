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

from revive.logline import LINE_CAP, cap_bytes, cap_line, decode_line, log_int
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
        if PROFILE_BAR in text or PROFILE_METRICS in text:
            self._feed_profile(text, now)
            return
        m = PROGRESS_RE.match(text)
        if m is not None:
            iteration = int(m.group("it"))
            rank = int(m.group("rank"))
            comp, step_s = m.group("compute"), m.group("step")
            try:
                step = float(step_s) if step_s else None
                if comp:
                    float(comp)
            except ValueError:  # a garbled number ("20.3.1"): no progress line, and no state change
                return
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
        rank = last.rank if last.rank is not None else 0
        self.last_by_rank[f"rank {rank}"] = text.rsplit("\r", 1)[-1][:1024]
        if self._min_rank is None or rank < self._min_rank:
            # a bar counts as its rank's line (rank 0 when unranked) for "whose step times are kept",
            # as in last_by_rank: a later rank-6 line must not take the baseline from rank 0's bar
            self._min_rank = rank
        self._alive(now)

    def _alive(self, now: float) -> None:
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
                try:
                    step = float(step_b) if step_b else None
                    if comp:
                        float(comp)
                except ValueError:  # as feed: a garbled number is no progress line
                    continue
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


_TRACKER_LITERALS = (b"=== attempt restart=", b"checkpoint at iteration", PROFILE_BAR.encode(), PROFILE_METRICS.encode())
"""The lines ``AttemptTracker.feed`` acts on other than progress lines contain one of these."""


def root_literals() -> list[str]:
    """The prefilter literals of the catalog's signatures that can give ``root_hit`` a verdict: role
    ``root``, or any role with a resolver (``Matcher._make``: an Xid/SXid resolution may make the
    match root). A line with none of them gets None from ``root_hit`` (``Matcher.match`` only returns
    signatures with one of their literals on the line)."""
    from revive.signatures.matcher import default_matcher

    sigs = default_matcher().signatures
    return sorted({lit for s in sigs if s.role == "root" or s.resolver for lit in s.prefilter})



def _tracker_reads(text: str) -> bool:
    """Whether ``AttemptTracker.feed`` may act on ``text``: progress (demo or a profile's bar or log
    dict), an attempt marker. A catalog line without any of these is inert to the tracker."""
    return ("iteration" in text or text.startswith("=== attempt restart=")
            or PROFILE_BAR in text or PROFILE_METRICS in text)


_LONG_BLOCK = LINE_CAP // 2
_SUMMARY_MIN = 4096
"""Runs shorter than this (bytes) take the per-line loop: the summary's fixed cost is not worth it."""
_BULK_MIN = _SUMMARY_MIN
"""Runs of at least this many bytes try ``ChunkScanner._bulk``."""
_WINDOW_MIN = 1 << 16
"""The smallest tail window (bytes) ``_bulk`` tries before the run's whole length."""
_LEAD = 4096
"""Bytes at the start of a chunk in which ``ChunkScanner._lead`` looks for gated lines."""
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


# ----------------------------------------------------------------------------- bulk (tail) summary
# A run of lines that are each either a *canonical* demo progress line or a *quiet* line is fed by
# ``ChunkScanner._bulk`` with RE2 passes over the whole run and Python only on its tail. Both
# languages are deliberately narrow (anything else takes the older paths), so that what ``feed``
# does with each line follows from the regex alone:
# - canonical: examples/train.py's format with no freedom where PROGRESS_RE's lazy groups could
#   land elsewhere: rank and iteration without leading zeros (one int per spelling), numbers that
#   ``float`` always takes, printable ASCII; no "checkpoint"/profile literal can fit in it, and it
#   holds "[rank " and "] iteration " exactly once each.
# - quiet: no "itera" and no "[rank " in it (so no "iteration": ``feed`` ignores the line, and
#   "[rank 0 host " counts rank 0's canonical lines). Any other bytes (non-ASCII, CR) are fine.
_NAT_B = rb"(?:0|[1-9]\d*)"
_NUM_B = rb"\d+(?:\.\d+)?"
_STAMP_B = rb"\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?"


def _canon_line(rank: bytes, it: bytes) -> bytes:
    """A canonical progress line (with its newline) whose rank matches ``rank`` and iteration ``it``."""
    return (_STAMP_B + rb" \[rank " + rank + rb" host [\x21-\x5c\x5e-\x7e]+\] iteration " + it
            + rb"/\d+ \| loss (?:-?\d+(?:\.\d+)?|-?nan|-?inf) \| compute_ms " + _NUM_B
            + rb" \| step_time_ms " + _NUM_B + rb"\n")


# a quiet line, from the automaton of the two words: outside a partial word any byte but "i", "[" and
# the newline; a partial word ("i", "it", "ite", "iter" / "[", "[r", … "[rank") is followed by the
# start of another one, by a byte that ends it (not its next letter), or by the end of the line
_PARTIAL_B = rb"(?:i(?:t(?:e(?:r)?)?)?|\[(?:r(?:a(?:n(?:k)?)?)?)?)"
_PARTIAL_END_B = (rb"(?:i(?:[^ti\[\n]|t[^ei\[\n]|te[^ri\[\n]|ter[^ai\[\n])"
                  rb"|\[(?:[^ri\[\n]|r[^ai\[\n]|ra[^ni\[\n]|ran[^ki\[\n]|rank[^ i\[\n]))")
_QUIET_LINE_B = rb"(?:[^i\[\n]|" + _PARTIAL_B + rb"*" + _PARTIAL_END_B + rb")*" + _PARTIAL_B + rb"*\n"


def _run_pattern(rank: bytes | None, it: bytes | None) -> bytes:
    """Whole lines, each canonical (rank ~ ``rank``, iteration ~ ``it``) or quiet; quiet only for None."""
    if rank is None or it is None:
        return rb"(?:" + _QUIET_LINE_B + rb")*"
    return rb"(?:" + _canon_line(rank, it) + rb"|" + _QUIET_LINE_B + rb")*"


def _at_most(v: bytes) -> bytes:
    """A regex for the decimal numbers (no leading zero) ≤ ``v`` (digits, no leading zero)."""
    n = len(v)
    alts = [rb"0|[1-9]\d{0,%d}" % (n - 2)] if n > 1 else []
    for i in range(n):
        d, lo = v[i] - 48, (1 if i == 0 and n > 1 else 0)
        if d > lo:
            alts.append(v[:i] + b"[%d-%d]" % (lo, d - 1) + rb"\d" * (n - i - 1))
    alts.append(v)
    return rb"(?:" + b"|".join(alts) + rb")"


def _rank_set(ranks: set[bytes]) -> bytes:
    """A regex for exactly these rank spellings (``0..R-1`` as a range)."""
    if len(ranks) > 1 and ranks == {b"%d" % i for i in range(len(ranks))}:
        return _at_most(b"%d" % (len(ranks) - 1))
    return rb"(?:" + b"|".join(sorted(ranks)) + rb")"


_RANK0_STEP_B = re.compile(rb"\[rank 0 host [^\n]* step_time_ms (" + _NUM_B + rb")\n")
"""In such a run: rank 0's step_time_ms, one per rank-0 line (quiet lines hold no "[rank ")."""
_DIGITS_B = re.compile(rb"\d+")
_ITER1_B = re.compile(rb"\] iteration (\d+)/")
"""In such a run: each canonical line's iteration (one "] iteration " per line, none in quiet lines)."""
_STEP_HEAD, _STEP_MAX, _STEP_DROP = 20, 2000, 1000
"""``step_ms`` keeps its first 20 entries; past 2,000 entries, entries [20:1020] are dropped."""
_GAPS_KEEP = 200
"""``step_intervals`` keeps the last 200 gaps."""


def _extend_steps(step_ms: list[float], new: list[bytes]) -> None:
    """``step_ms.append(float(x))`` and the trim past 2,000 (``AttemptTracker.feed``) for each of
    ``new`` in order, converting only the values kept. The trim drops the oldest 1,000 entries after
    the head, so the list is always ``full[:20] + full[-(length - 20):]`` of everything appended,
    and its length follows from the count alone: 1001 + (total − 2001) mod 1000 once past 2,000."""
    n0, total = len(step_ms), len(step_ms) + len(new)
    if total <= _STEP_MAX:
        step_ms.extend(map(float, new))
        return
    final = _STEP_MAX - _STEP_DROP + 1 + (total - _STEP_MAX - 1) % _STEP_DROP
    cut = total - (final - _STEP_HEAD)  # index, in everything appended, of the first tail entry kept (> 20)
    head = step_ms[:_STEP_HEAD] + [float(x) for x in new[:max(0, _STEP_HEAD - n0)]]
    tail = step_ms[cut:] + [float(x) for x in new[max(0, cut - n0):]]
    step_ms[:] = head + tail


def _gaps(records: list[tuple[int, bytes]], prev: datetime | None = None) -> tuple[
        list[float], datetime | None, datetime | None]:
    """``AttemptTracker._advance`` over ``records`` ((iteration, stamp) of the lines that raise the
    highest iteration, in order) from the previous stamp ``prev`` (aware): (the step intervals
    appended, in s; the last parsed stamp, aware; the last record's own stamp as parsed)."""
    gaps: list[float] = []
    raw: datetime | None = None
    for _it, stamp in records:
        raw = ts = _parse_stamp(stamp.decode("ascii"))
        if ts is not None and ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        if ts is not None:
            if prev is not None and ts > prev:
                gap = (ts - prev).total_seconds()
                if gap <= MAX_STEP_INTERVAL_S:
                    gaps.append(gap)
            prev = ts
    return gaps, prev, raw


def _evict(cache: dict[Any, Any], per_chunk: Any, keep: int = 2) -> None:
    """Drop the oldest entries of ``cache`` for which ``per_chunk(key)`` (a head's bound, new each
    chunk) beyond the newest ``keep``; entries that last across chunks stay (a few rank sets)."""
    old = [k for k in cache if per_chunk(k)][:-keep]
    for k in old:
        del cache[k]
    if len(cache) > 16:  # rank sets that came and went
        for k in list(cache)[:-16]:
            del cache[k]


class ChunkScanner:
    """Picks, in one pass over a buffer of whole lines, the lines the detect stage must look at.

    One combined alternation (RE2 when available) of the literals that can open an incident (the
    prefilter literals of the catalog's root signatures and of those a resolver may make root) and
    of the tracker's own literals (attempt marker, checkpoint, profile bar and log dict) runs over
    the new bytes of a log; only the lines it hits are decoded one by one (``AttemptTracker.feed``,
    and ``root_hit`` for the lines with a root literal). The stretches between them hold only
    progress lines and lines both would ignore; they are fed in bulk (``_feed_run``). So the result
    is the same as feeding every line. Buffers where the byte-level gate could disagree with the
    per-line path (a NUL byte, which ``decode_line`` drops, or a line longer than ``LINE_CAP``
    bytes, which capping rewrites) are handed over line by line.
    """

    def __init__(self, literals: list[str] | None = None) -> None:
        if literals is None:
            literals = root_literals()
        lits = sorted(set(literals), key=len, reverse=True)
        alt = b"|".join(re.escape(x.encode()) for x in lits)
        tracker = b"|".join(re.escape(x) for x in _TRACKER_LITERALS)
        self.gate: Any
        self.lines_gate: Any
        self.demo_run: Any
        self._run_quiet: Any
        try:
            import re2

            self._re2: Any = re2
            self.gate = re2.compile(alt)
            self.lines_gate = re2.compile(alt + b"|" + tracker if lits else tracker)
            self.demo_run = re2.compile(_DEMO_RUN.pattern)
            self._gate_alt = alt + b"|" + tracker if lits else tracker
        except Exception:  # pragma: no cover - re2 is a dependency; same results with re
            self._re2 = None
            self.gate = re.compile(alt)
            self.lines_gate = re.compile(alt + b"|" + tracker if lits else tracker)
            self.demo_run = _DEMO_RUN
        self._run_quiet = self._compile_run(None, None)
        self._heads: dict[bytes, Any] = {}
        """Compiled head patterns (``_head_pattern``), a few, oldest dropped first."""
        self._sets: dict[tuple[bytes | None, bytes | None], Any] = {}
        """Compiled RE2 Sets (``_set_ok``): the window's and a few heads'."""
        self._window = _WINDOW_MIN
        """Tail bytes the last bulk summary needed (where the next one starts looking)."""
        self.summarised = 0
        """Lines fed through the summary path (``_summarise``), for tests and benchmarks."""
        self.bulk_bytes = 0
        """Bytes of runs fed through the bulk path (``_bulk``), for tests and benchmarks."""
        self._whole_tries = 0
        self._whole_misses: dict[int, int] = {}
        """id(tracker) → chunks in a row whose rest was not one run (``_whole_hint``). Speed only."""

    def _compile_run(self, rank: bytes | None, it: bytes | None) -> Any:
        """``_run_pattern`` compiled (RE2, one byte per character), for ``fullmatch(data, pos, endpos)``."""
        pat = _run_pattern(rank, it)
        if self._re2 is None:  # pragma: no cover
            return re.compile(pat)
        opts = self._re2.Options()
        opts.encoding = self._re2.Options.Encoding.LATIN1
        opts.max_mem = 16 << 20
        return self._re2.compile(pat, options=opts)

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

    @staticmethod
    def _gated(gate: Any, data: bytes) -> Iterator[tuple[int, int]]:
        """(line start, line end) of every line of ``data`` that ``gate`` hits, one search per such line."""
        search, find, rfind, n, pos = gate.search, data.find, data.rfind, len(data), 0
        while pos < n:
            m = search(data, pos)
            if m is None:
                return
            hit = m.start()
            ls = rfind(b"\n", pos, hit) + 1 or pos
            le = find(b"\n", hit)
            if le < 0:
                le = n
            yield ls, le
            pos = le + 1

    def _catalog_lines(self, data: bytes) -> dict[int, int]:
        """Line start → line end of every line with a root literal (one gate call per such line)."""
        return dict(self._gated(self.gate, data))

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

    def _special_lines(self, data: bytes) -> dict[int, tuple[int, bool]]:
        """Line start → (line end, has a root literal) of every line ``lines_gate`` hits (a root or
        tracker literal), one gate call per such line."""
        root = self.gate.search
        return {ls: (le, root(data, ls, le) is not None) for ls, le in self._gated(self.lines_gate, data)}

    def feed(self, t: AttemptTracker, data: bytes, first_line_no: int, now: float) -> Iterator[tuple[int, str]]:
        """Feed ``t`` every line of ``data`` (whole lines) and yield, in order, (line number,
        text) of each line that may open an incident (has a root literal, ``root_literals``): the
        same tracker state and the same ``root_hit`` verdicts as ``t.feed`` and ``root_hit`` on
        every line. The stretches between the lines the gate hits are fed in bulk (``_feed_run``);
        a yielded line with neither "iteration" nor an attempt marker (``feed`` ignores it) does
        not split the run around it, so when it is yielded ``t`` may already hold later progress
        lines of the same run. ``t.attempt`` is always the yielded line's own attempt (markers
        split runs). Line numbers are counted only up to the lines yielded."""
        if b"\x00" in data or self._has_long_line(data):
            for n, text, _ in self.scan(data, first_line_no):
                t.feed(text, now)
                yield n, text
            return
        start = 0
        if len(data) >= 2 * _BULK_MIN and self._whole_hint(t):  # the chunk as one run, after its leading gated lines
            start = self._lead(data)
            if start:
                yield from self._feed_gated(t, data[:start], first_line_no, now)
                first_line_no += data.count(b"\n", 0, start)
            if self._bulk(t, data, start, len(data), now, whole=True):
                return  # no root or tracker literal in the rest: nothing more to yield
        yield from self._feed_gated(t, data[start:] if start else data, first_line_no, now)

    def _lead(self, data: bytes) -> int:
        """The end (after its newline) of the last line with a gate literal in the first
        ``_LEAD`` bytes of ``data``, or 0: what ``feed`` passes through the gate before trying the
        rest as one run (the first chunk of an attempt starts with its marker)."""
        cut, end = 0, min(len(data), _LEAD)
        m = self.lines_gate.search(data, 0, end)
        while m is not None:
            cut = data.find(b"\n", m.start()) + 1 or len(data)
            m = self.lines_gate.search(data, cut, end) if cut < end else None
        return cut

    def _feed_gated(self, t: AttemptTracker, data: bytes, first_line_no: int, now: float) -> Iterator[tuple[int, str]]:
        """``feed`` through the gate: its lines one by one, the stretches between them in bulk."""
        special = self._special_lines(data)
        count = data.count
        pos, counted, line_no = 0, 0, first_line_no  # line_no: the number of the line at byte `counted`
        segs: list[tuple[int, int]] = []  # progress stretches not yet fed (one run across inert lines)
        held: list[tuple[int, str]] = []  # inert root-literal lines, yielded once the run around them is fed
        for ls in sorted(special) if len(special) > 1 else special:
            le, root = special[ls]
            if ls > pos:
                segs.append((pos, ls))
            text = self._text(data, ls, le)
            if root:
                line_no += count(b"\n", counted, ls)
                counted = ls
            if root and not _tracker_reads(text):
                held.append((line_no, text))  # t.feed(text) would change nothing
            else:
                self._feed_runs(t, data, segs, now)
                segs = []
                yield from held
                held = []
                t.feed(text, now)
                if root:
                    yield line_no, text
            pos = le + 1
        if pos < len(data):
            segs.append((pos, len(data)))
        self._feed_runs(t, data, segs, now)
        yield from held

    def _feed_runs(self, t: AttemptTracker, data: bytes, segs: list[tuple[int, int]], now: float) -> None:
        """Feed the stretches ``segs`` of ``data`` (only lines ``feed`` ignores lie between them):
        one run when the bulk paths take it, else ``_feed_run`` on each."""
        if len(segs) > 1:
            run = b"".join([data[a:b] for a, b in segs])
            if len(run) >= _SUMMARY_MIN and b"iteration" in run and (
                    self._bulk(t, run, 0, len(run), now) or self._summarise(t, run, now)):
                return
        for a, b in segs:  # stretch by stretch: an odd line then costs only its own stretch the bulk path
            self._feed_run(t, data, a, b, now)

    def _feed_run(self, t: AttemptTracker, data: bytes, a: int, b: int, now: float) -> None:
        """Feed the lines of ``data[a:b]`` (no root literal, attempt marker, checkpoint or profile
        line): ``_bulk``, else ``_summarise``, else ``feed_progress``, else line by line."""
        if b - a >= _BULK_MIN and self._bulk(t, data, a, b, now):
            return
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
        batch: list[Any] = []  # consecutive demo progress lines, fed together
        for ls, le in self._literal_lines(data, b"iteration", a, b).items():
            m = _PROGRESS_B.match(data, ls, le)
            if m is not None and not data[ls:le].translate(None, _PRINTABLE):  # as above, for one line
                batch.append(m.groups())
                continue
            if batch:
                t.feed_progress(batch, now)
                batch = []
            t.feed(self._text(data, ls, le), now)
        if batch:
            t.feed_progress(batch, now)

    def _whole_hint(self, t: AttemptTracker) -> bool:
        """Whether to try the chunk as one run first (``_bulk(whole=True)``): yes unless the last two
        tries for this tracker found a gate literal or an odd line (then once every 16 chunks). A
        miss costs one RE2 pass; the answer changes only the speed."""
        self._whole_tries += 1
        return self._whole_misses.get(id(t), 0) < 2 or self._whole_tries % 16 == 0

    def _bulk(self, t: AttemptTracker, data: bytes, a: int, b: int, now: float, whole: bool = False) -> bool:
        """``feed`` on every line of ``data[a:b]`` (whole lines, none the gate hits) with RE2 passes
        over the run and Python only on its tail, or False (nothing changed) when the run is not one
        this path is exact for: every line canonical or quiet (``_run_pattern``), the lowest rank
        already 0 (or the run's first progress line rank 0), ``step_ms`` as ``feed`` leaves it.

        The run splits into a head and a tail window (``_tail``); the state after it depends only on
        the tail, given what one RE2 pass proves about the head (its ranks all appear in the tail,
        its iterations are all ≤ its last one, ``_head_pattern``) and rank 0's step times
        (``_RANK0_STEP_B``, every line: ``_extend_steps`` keeps what ``feed`` keeps).

        ``whole``: ``data[a:b]`` has not been through the gate; the pass over the head then also
        proves that it holds no gate literal (one RE2 ``Set`` pass, ``_set_ok``), and the window
        is checked for them the same way, so the run is one the gate would have left whole."""
        if whole:
            ok = self._bulk_checked(t, data, a, b, now, whole)
            misses = self._whole_misses
            if len(misses) > 4096:  # ids of trackers long gone
                misses.clear()
            misses[id(t)] = 0 if ok else misses.get(id(t), 0) + 1
            return ok
        return self._bulk_checked(t, data, a, b, now, whole)

    def _bulk_checked(self, t: AttemptTracker, data: bytes, a: int, b: int, now: float, whole: bool) -> bool:
        """``_bulk``'s work (same arguments)."""
        if b - a < _BULK_MIN:
            return False
        mr = t._min_rank
        if data[b - 1:b] != b"\n" or (mr is not None and mr != 0) or len(t.step_ms) > _STEP_MAX:
            return False
        first = data.find(b"] iteration ", a, b)
        if first < 0:
            return False  # no progress line: the legacy path finds that out cheaper
        if mr is None:  # the first progress line sets the lowest rank: it must be 0 (validated below)
            ls = data.rfind(b"\n", a, first) + 1 or a
            if data.find(b"[rank 0 host ", ls, first) < 0:
                return False
        size = max(_WINDOW_MIN, min(self._window, (b - a) // 2))
        while True:
            w = data.rfind(b"\n", a, b - size) + 1 if b - size > a else 0
            last_try = w <= a
            if last_try:  # the window is the whole run (no head)
                w = a
            got = self._tail(t, data, a, w, b, whole)
            if not isinstance(got, int):
                break
            if last_try:  # pragma: no cover - a window without head takes any number of gaps
                return False
            # too few gaps in the window: grow it to what the gaps seen so far suggest
            size = max(size * 5 // 4, size * (_GAPS_KEEP + 16) // got * 9 // 8) if got else 4 * size
        if got is None:
            return False
        last, gaps, prev, last_it, last_ts, used = got
        self._window = max(_WINDOW_MIN, used + used // 16)
        _extend_steps(t.step_ms, _RANK0_STEP_B.findall(data, a, b))
        lbr = t.last_by_rank
        for r_b, line in last.items():
            lbr[f"rank {int(r_b)}"] = line
        t.step_intervals[:] = gaps[-_GAPS_KEEP:]
        t._prev_ts, t.last_iteration, t.last_progress_ts = prev, last_it, last_ts
        t._min_rank = 0
        if t.first_progress_mono is None:
            t.first_progress_mono = now
        t.last_progress_mono = now
        t.paused_s = 0.0
        self.bulk_bytes += b - a
        return True

    def _tail(self, t: AttemptTracker, data: bytes, a: int, w: int, b: int, whole: bool = False) -> Any:
        """The tail window ``data[w:b]`` of the run ``data[a:b]`` (``a ≤ w``, line starts; ``w == a``:
        no head, the window's records continue the tracker's own stamps and gaps): the
        number of gaps it gave when too few (a longer window may do), None when the run is not one
        ``_bulk`` is exact for, else (rank spelling → its last line, step intervals, ``_prev_ts``,
        ``last_iteration``, ``last_progress_ts``, bytes of the window used) as ``feed`` on every line
        of the run would leave them.

        Exact because the head's effect on them is nil: every rank of the head has a later line in
        the window (so the window holds each rank's last line); the head's highest iteration is its
        last progress line's ``v`` (all ≤ ``v``), so the records (lines raising the highest
        iteration) of the window are the same as after the whole head; ``_advance`` keeps 200 gaps
        and each gap needs only the previous record's stamp, so once the window's records give 200
        gaps without the head (``_gaps`` from no stamp) the head's gaps and stamps are gone.
        Canonical lines hold "] iteration N/" once (quiet lines none), so ``find`` locates the first
        line of an iteration, and "[rank R host " once, so ``rfind`` a rank's last line."""
        window_ranks = self._window_ranks(t, data, w, b, whole)
        if window_ranks is None:
            return None
        its = _ITER1_B.findall(data, w, b)
        if not its:
            return 0
        peak = -1 if t.last_iteration is None else t.last_iteration
        hit = data.rfind(b"] iteration ", a, w) if w > a else -1
        v = None
        if hit >= 0:
            m = _DIGITS_B.match(data, hit + 12)
            if m is None:
                return None
            v = m.group()
            peak = max(peak, int(v))
        n = len(its)
        first_of = dict(zip(reversed(its), range(n - 1, -1, -1), strict=True))  # iteration → its first line
        recs: list[tuple[int, bytes]] = []  # (iteration, spelling) of the window's records, in order
        for i in sorted(first_of.values()):  # only a spelling's first line can raise the highest iteration
            it = int(its[i])
            if it > peak:
                recs.append((it, its[i]))
                peak = it
        if w == a:  # no head: every record, from the tracker's own last stamp
            records, start = self._stamps(data, recs, w, b)
            gaps, prev, last_ts = _gaps(records, t._prev_ts)
            gaps, prev = t.step_intervals + gaps, prev if records else t._prev_ts
            if not records:
                last_ts = t.last_progress_ts
        else:
            for k in sorted({min(_GAPS_KEEP + 8, len(recs)), min(1024, len(recs)), len(recs)}):
                records, start = self._stamps(data, recs[-k:], w, b)  # the shortest suffix giving 200 gaps
                gaps, prev, last_ts = _gaps(records)
                if len(gaps) >= _GAPS_KEEP:
                    break
            else:
                return len(gaps)
        last = {r: self._last_line(data, b"[rank " + r + b" host ", w, b) for r in window_ranks}
        if w > a and not self._head_ok(window_ranks, v, data, a, w, whole):
            return None
        return last, gaps, prev, recs[-1][0] if recs else t.last_iteration, last_ts, b - start

    def _window_ranks(self, t: AttemptTracker, data: bytes, w: int, b: int, whole: bool) -> set[bytes] | None:
        """The ranks (spellings) of the window ``data[w:b]`` once it is checked canonical-or-quiet
        (and, when ``whole``, free of gate literals), or None. They are read from its last few lines
        (``_recent``), the rest of the window being checked to hold no other rank; else from all."""
        u = data.rfind(b"\n", w, b - self._recent(t)) + 1 if b - self._recent(t) > w else w
        if not self._valid(_NAT_B, data, max(u, w), b, whole):
            return None
        ranks = set(_RANK_B.findall(data, max(u, w), b))
        if u <= w or (len(ranks) <= 4096 and self._valid(_rank_set(ranks), data, w, u, whole)):
            return ranks
        if not self._valid(_NAT_B, data, w, u, whole):  # a rank of the window's start is not in its last lines
            return None
        return ranks | set(_RANK_B.findall(data, w, u))

    @staticmethod
    def _recent(t: AttemptTracker) -> int:
        """Bytes at the end of a window whose ranks are likely all of the window's: a few lines per
        rank the tracker knows (at least 64 KiB)."""
        return max(_WINDOW_MIN, 512 * len(t.last_by_rank))

    def _valid(self, rank_re: bytes, data: bytes, a: int, b: int, whole: bool) -> bool:
        """Whether ``data[a:b]`` is canonical lines with ranks ~ ``rank_re`` (any iteration) and quiet
        lines (and, when ``whole``, holds no gate literal)."""
        if whole:
            return self._set_ok(rank_re, _NAT_B, data, a, b)
        rx = self._heads.get(rank_re + b" " + _NAT_B)
        if rx is None:
            rx = self._head_pattern_compile(rank_re, _NAT_B)
        return rx.fullmatch(data, a, b) is not None

    @staticmethod
    def _stamps(data: bytes, recs: list[tuple[int, bytes]], w: int, b: int) -> tuple[list[tuple[int, bytes]], int]:
        """(iteration, stamp) of the first canonical line of each of ``recs`` (iteration, spelling; in
        the order of their lines in ``data[w:b]``), and the start of the first such line."""
        out: list[tuple[int, bytes]] = []
        find, rfind, pos, start = data.find, data.rfind, w, b
        for it, spelled in recs:
            pos = find(b"] iteration " + spelled + b"/", pos, b)
            ls = rfind(b"\n", w, pos) + 1 or w
            start = min(start, ls)
            out.append((it, data[ls:find(b" ", ls, pos)]))
        return out, start

    @staticmethod
    def _last_line(data: bytes, needle: bytes, w: int, b: int) -> str:
        """The last line of ``data[w:b]`` holding ``needle``, decoded (ASCII), at most 1,024 characters."""
        pos = data.rfind(needle, w, b)
        ls = data.rfind(b"\n", w, pos) + 1 or w
        return data[ls:data.find(b"\n", pos, b)].decode("ascii")[:1024]

    def _head_ok(self, ranks: set[bytes], v: bytes | None, data: bytes, a: int, w: int, whole: bool) -> bool:
        """Whether the head ``data[a:w]`` is canonical and quiet lines with ranks in ``ranks`` and
        iterations ≤ ``v`` (None: quiet lines only), and, when ``whole``, no gate literal."""
        if len(ranks) > 4096:
            return False
        if whole:
            return self._set_ok(_rank_set(ranks) if v is not None else None,
                                _at_most(v) if v is not None else None, data, a, w)
        head = self._head_pattern(ranks, v)
        return head is not None and head.fullmatch(data, a, w) is not None

    def _set_ok(self, rank_re: bytes | None, it_re: bytes | None, data: bytes, a: int, w: int) -> bool:
        """Whether ``data[a:w]`` matches ``_run_pattern(rank_re, it_re)`` and holds no gate literal,
        in one RE2 ``Set`` pass (both patterns run in one DFA; the window's Set is kept). False when
        unsure (no RE2, a DFA out of memory: ``Match`` then answers None)."""
        if self._re2 is None:  # pragma: no cover - re2 is a dependency
            return False
        key = (rank_re, it_re)
        st = self._sets.get(key)
        if st is None:
            opts = self._re2.Options()
            opts.encoding = self._re2.Options.Encoding.LATIN1
            opts.max_mem = 32 << 20
            st = self._re2.Set.FullMatchSet(opts)
            st.Add(rb"(?s).*(?:" + self._gate_alt + rb").*")  # 0: some gate literal
            st.Add(_run_pattern(rank_re, it_re))  # 1: canonical and quiet lines
            st.Compile()
            self._sets[key] = st
            _evict(self._sets, lambda k: k[1] != _NAT_B)
        return bool(st.Match(memoryview(data)[a:w]) == [1])

    def _head_pattern(self, ranks: set[bytes], v: bytes | None) -> Any:
        """``_run_pattern`` for a head whose ranks are ``ranks`` and iterations ≤ ``v`` (None: no
        progress line in the head), compiled, a few kept."""
        if v is None:
            return self._run_quiet
        rank_re, it_re = _rank_set(ranks), _at_most(v)
        return self._heads.get(rank_re + b" " + it_re) or self._head_pattern_compile(rank_re, it_re)

    def _head_pattern_compile(self, rank_re: bytes, it_re: bytes) -> Any:
        """``_compile_run(rank_re, it_re)``, kept in ``_heads``."""
        got = self._heads[rank_re + b" " + it_re] = self._compile_run(rank_re, it_re)
        _evict(self._heads, lambda k: not k.endswith(b" " + _NAT_B))
        return got

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
    return log_int(last.group(1).decode("ascii")) if last else None  # raw tail: no line cap, junk digits


RESTORE_SKEW_S = 300.0
"""A last progress stamp this many seconds before the attempt's start is a wrong clock, not a hang."""


def restore_clock(t: AttemptTracker, now: float, wall: datetime, started: datetime | None = None) -> None:
    """After re-reading an attempt's lines at ``now`` (monotonic s), move the hang clock back to the
    attempt's last progress line: ``last_progress_mono`` = ``now`` − (``wall`` − its stamp), so a
    restarted monitor sees a job that hung before the restart as silent for as long as it really
    was. Lines without stamps, or stamped without a zone (whose offset to ``wall`` is a guess), or
    stamped more than ``RESTORE_SKEW_S`` before the attempt ``started`` (a node's wrong clock, a
    garbled stamp: year 1), leave the clock at ``now`` (silence counts from the re-read)."""
    ts = t.last_progress_ts
    if ts is None or ts.tzinfo is None or t.last_progress_mono is None:
        return
    if started is not None and (started - ts).total_seconds() > RESTORE_SKEW_S:
        return
    age = (wall - ts).total_seconds()
    if age <= 0:
        return
    t.last_progress_mono = now - age
    if t.first_progress_mono is None or t.first_progress_mono > t.last_progress_mono:
        t.first_progress_mono = t.last_progress_mono
