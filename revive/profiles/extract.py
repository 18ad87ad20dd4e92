"""Pure extraction of training progress from log lines, driven by profiles (no I/O).

Per line: one combined literal prefilter (all profiles' literals) rejects most lines with a
single regex search; a line that passes is split on ``\\r`` (tqdm redraws), stripped of ANSI
escapes and the usual prefixes (``[rank3]:``, ``0: `` from ``srun -l``, ``[default0]:``,
``[rank R host H]``, ISO / ``[2024-05-01 10:00:00,123]`` timestamps, ``host [stdout]``), then one
RE2 set match finds which profile patterns match and only the first (profile order, then kind
order ``KINDS``) runs again to extract its named groups.

Public API::

    ProgressExtractor(profiles=None)          # None: the built-in profiles.yaml
        .events(line) -> list[Event]           # every event on the line (tqdm: last update only)
        .classify(line) -> Event | None        # the line's last event
    summarize(lines, profiles=None) -> ProgressSummary
    detect_profile(lines, profiles=None) -> list[str]
    Event kinds: Iteration, CheckpointSaving, CheckpointSaved, CheckpointLoading,
                 CheckpointLoaded, RunStart, Requeued, Metrics

Units: seconds everywhere (``step_time_s``, ``cadence_s``); ``*_ms`` groups are converted.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import re2
from pydantic import BaseModel, Field

from revive.logline import log_int
from revive.profiles.model import KINDS, Profile, ProfileSet

MAX_LINE = 8192
"""Lines longer than this are read on their first and last MAX_LINE characters."""


# ----------------------------------------------------------------------------- events
@dataclass(slots=True, kw_only=True)
class Event:
    """What one log line said. ``ts`` comes from the line's own timestamp (None when absent);
    ``rank``/``host`` from its prefix; ``profile`` is the id of the profile that matched."""

    kind: ClassVar[str] = "event"
    profile: str
    ts: datetime | None = None
    rank: int | None = None
    host: str | None = None


@dataclass(slots=True, kw_only=True)
class Iteration(Event):
    """A progress line. ``iter``: the framework's step counter (Lightning: batch within ``epoch``);
    ``total``: planned steps when printed; ``step_time_s``: seconds per step as printed (``*_ms``
    and ``it/s`` converted); ``throughput``: the framework's own unit (tokens/s, TFLOP/s...)."""

    kind: ClassVar[str] = "iteration"
    iter: int
    total: int | None = None
    step_time_s: float | None = None
    loss: float | None = None
    throughput: float | None = None
    epoch: float | None = None
    batch: int | None = None
    batches: int | None = None


@dataclass(slots=True, kw_only=True)
class _Checkpoint(Event):
    iter: int | None = None
    """Step of the checkpoint; None when the line does not say (see ``inferred``)."""
    epoch: float | None = None
    inferred: bool = False
    """True when ``iter`` was filled in by ``summarize`` (last iteration / matching save or load)."""


@dataclass(slots=True, kw_only=True)
class CheckpointSaving(_Checkpoint):
    kind: ClassVar[str] = "checkpoint_saving"


@dataclass(slots=True, kw_only=True)
class CheckpointSaved(_Checkpoint):
    kind: ClassVar[str] = "checkpoint_saved"


@dataclass(slots=True, kw_only=True)
class CheckpointLoading(_Checkpoint):
    kind: ClassVar[str] = "checkpoint_loading"


@dataclass(slots=True, kw_only=True)
class CheckpointLoaded(_Checkpoint):
    kind: ClassVar[str] = "checkpoint_loaded"


@dataclass(slots=True, kw_only=True)
class RunStart(Event):
    """A line printed once per launch: an attempt boundary. ``restart``: Slurm restart count when
    the line carries it (Revive's demo ``=== attempt restart=N``)."""

    kind: ClassVar[str] = "run_start"
    restart: int | None = None


@dataclass(slots=True, kw_only=True)
class Requeued(Event):
    """The framework requeued its own Slurm job (Lightning auto-requeue)."""

    kind: ClassVar[str] = "requeue"
    job_id: str | None = None


@dataclass(slots=True, kw_only=True)
class Metrics(Event):
    """Loss without a step number (HF Trainer log dicts); ``epoch`` may be fractional."""

    kind: ClassVar[str] = "metrics"
    loss: float | None = None
    epoch: float | None = None


_EVENT_CLASS: dict[str, type[Event]] = {
    "iteration": Iteration,
    "checkpoint_saving": CheckpointSaving,
    "checkpoint_saved": CheckpointSaved,
    "checkpoint_loading": CheckpointLoading,
    "checkpoint_loaded": CheckpointLoaded,
    "run_start": RunStart,
    "requeue": Requeued,
    "metrics": Metrics,
}


# ----------------------------------------------------------------------------- prefixes
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_PREFIX = re.compile(
    r"(?:(?P<srun>\d{1,6}): )"
    r"|(?:\[rank:? ?(?P<rank>\d+)\]:? ?)"
    r"|(?:\[default(?P<lrank>\d+)\]: ?)"
    r"|(?:\[rank (?P<rank2>\d+) host (?P<host>[\w.-]+)\] ?)"
    r"|(?:\[?(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]? ?)"
    r"|(?:(?P<host2>[\w.-]+) \[(?:stderr|stdout)\] )"
)
_TS_ISO = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
)
_TS_US = re.compile(r"(?<!\d)(\d\d)/(\d\d)/(\d{4}),? (\d\d):(\d\d):(\d\d)")
_TS_GLOG = re.compile(r"(?:^|[\s\]])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,9})")
_TS_HEAD = 160


def _frac(s: str | None) -> int:
    return int((s or "0")[:6].ljust(6, "0"))


def _tz(s: str | None) -> timezone | None:
    if not s:
        return None
    if s == "Z":
        return UTC
    sign = -1 if s[0] == "-" else 1
    hh, mm = int(s[1:3]), int(s[-2:])
    return timezone(sign * timedelta(hours=hh, minutes=mm))


def parse_timestamp(text: str) -> datetime | None:
    """The first timestamp in ``text``: ISO-8601 (``T`` or space, ``.``/``,`` fraction, optional
    zone), ``MM/DD/YYYY HH:MM:SS`` (HF example scripts) or glog/absl ``I0501 10:00:00.123`` (no
    year: year 2000 is used, so only differences are meaningful). None when absent or invalid."""
    try:
        m = _TS_ISO.search(text)
        if m:
            y, mo, d, h, mi, s, f, z = m.groups()
            return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), _frac(f), tzinfo=_tz(z))
        m = _TS_US.search(text)
        if m:
            mo, d, y, h, mi, s = m.groups()
            return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s))
        m = _TS_GLOG.search(text)
        if m:
            mo, d, h, mi, s, f = m.groups()
            return datetime(2000, int(mo), int(d), int(h), int(mi), int(s), _frac(f))
    except ValueError:
        return None
    return None


def split_line_prefix(segment: str) -> tuple[str, int | None, str | None, datetime | None]:
    """``(body, rank, host, ts)`` of one line segment: ANSI escapes removed, known prefixes
    stripped (up to six, any order); ``ts`` is the prefix's timestamp (None when the prefix has
    none: the extractor then looks in the body before the matched text)."""
    if "\x1b" in segment:
        segment = _ANSI.sub("", segment)
    segment = segment.lstrip()
    rank: int | None = None
    host: str | None = None
    ts_text: str | None = None
    pos = 0
    for _ in range(6):
        m = _PREFIX.match(segment, pos)
        if not m or m.end() == pos:
            break
        g = m.groupdict()
        r = g["rank"] or g["rank2"] or g["srun"]
        if r is not None and rank is None:
            rank = log_int(r)
        if g["lrank"] is not None and rank is None:
            rank = log_int(g["lrank"])
        host = host or g["host"] or g["host2"]
        if g["ts"] and ts_text is None:
            ts_text = g["ts"]
        pos = m.end()
    body = segment[pos:].strip()
    return body, rank, host, (parse_timestamp(ts_text) if ts_text else None)


# ----------------------------------------------------------------------------- extractor
def _num(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return float(s)
    except ValueError:
        try:
            return float(s.replace(",", ""))
        except ValueError:
            return None


def _int(s: str | None) -> int | None:
    if not s:
        return None
    try:
        return int(s)
    except ValueError:
        try:
            return int(s.replace(",", ""))
        except ValueError:
            return None


MAX_PATTERNS = 512
SET_MAX_MEM = 64 << 20
"""Memory for the RE2 set that finds which patterns match a line (its DFA must not run out)."""


def _capture_engine(regex: str, trusted: bool, opts: Any) -> Any:
    """The compiled regex that extracts a matched line's groups: the stdlib engine for trusted
    profiles (RE2-valid patterns it also accepts; several times faster per call from Python),
    RE2 otherwise. Which patterns match at all is always decided by the RE2 set."""
    if trusted:
        try:
            return re.compile(regex, re.ASCII)  # RE2's \d \w \s \b are ASCII too
        except re.error:
            pass
    return re2.compile(regex, opts)


@dataclass
class _Pat:
    profile: Profile
    kind: str
    compiled: Any
    gate: frozenset[int]
    """Ids of the literals of which a line must hold one for this pattern to run."""


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (surrogateescape-decoded bytes)
        return text.encode("utf-8", "replace")


def _new_set(max_mem: int | None = None) -> Any:
    opts = re2.Options()
    opts.log_errors = False
    if max_mem:
        opts.max_mem = max_mem
    return re2.Set.SearchSet(opts)


class ProgressExtractor:
    """Classifies log lines into progress events using a ``ProfileSet`` (default: built-in).

    Cost per line: one RE2 set match over all literals (the combined prefilter). Lines that pass
    are split/stripped, matched once against the RE2 set of all patterns, and only the winning
    pattern is run again to read its groups.
    """

    def __init__(self, profiles: ProfileSet | Iterable[Profile] | None = None, max_line: int = MAX_LINE) -> None:
        if profiles is None:
            from revive.profiles import load_builtin_profiles

            profiles = load_builtin_profiles()
        self.profiles: list[Profile] = list(profiles.profiles if isinstance(profiles, ProfileSet) else profiles)
        self.max_line = max_line
        opts = re2.Options()
        opts.log_errors = False
        pat_set = _new_set(SET_MAX_MEM)
        lit_set = _new_set(SET_MAX_MEM)
        self._pats: list[_Pat] = []
        lit_ids: dict[str, int] = {}
        for prof in self.profiles:
            plits = tuple(prof.all_literals())
            for lit in plits:
                if lit not in lit_ids:
                    lit_ids[lit] = lit_set.Add(re2.escape(lit))
            for kind in KINDS:
                for spec in prof.patterns.get(kind, []):  # type: ignore[call-overload]
                    if len(self._pats) >= MAX_PATTERNS:
                        raise ValueError(f"more than {MAX_PATTERNS} patterns in one extractor")
                    idx = pat_set.Add(spec.regex)
                    assert idx == len(self._pats)
                    gate = frozenset(lit_ids[x] for x in (tuple(spec.literals) or plits))
                    self._pats.append(_Pat(prof, kind, _capture_engine(spec.regex, prof.trusted, opts), gate))
        self.literals = list(lit_ids)
        self._pat_match = self._lit_match = None
        if self._pats:
            pat_set.Compile()
            lit_set.Compile()
            # the wrapper's Set.Match encodes str each call; the inner set takes bytes directly
            self._pat_match = pat_set._set.Match
            self._lit_match = lit_set._set.Match
        self._keep = (pat_set, lit_set)

    # -- one line
    def classify(self, line: str | bytes) -> Event | None:
        """The line's last event (for a tqdm line: its last complete update), or None."""
        evs = self.events(line)
        return evs[-1] if evs else None

    def events(self, line: str | bytes) -> list[Event]:
        """Every event on ``line``, in order. A line holding several ``\\r``-separated tqdm updates
        yields only the last complete update's iteration (other segments' events are kept)."""
        if self._lit_match is None:
            return []
        if isinstance(line, (bytes, bytearray)):
            line = bytes(line).decode("utf-8", "replace")
        if len(line) > 2 * self.max_line:
            head, tail = line[: self.max_line], line[-self.max_line:]
            if "\r" in line:  # drop the pieces the cut went through
                hs, tl = head.split("\r"), tail.split("\r")
                segments = (hs[:-1] if len(hs) > 1 else [head]) + (tl[1:] if len(tl) > 1 else [tail])
            else:
                segments = [head, tail]
        elif "\r" in line:
            segments = line.split("\r")
        else:
            hits = self._lit_match(_utf8(line))
            return self._segment(line, hits) if hits else []
        # newest segment first: an older redraw of a bar already read (same literals) is skipped
        parts: list[list[Event]] = []
        seen_bars: set[tuple[int, ...]] = set()
        for seg in reversed(segments):
            if not seg or seg.isspace():
                continue
            hits = self._lit_match(_utf8(seg))
            if not hits:
                continue
            key = tuple(sorted(hits))
            if key in seen_bars:
                continue
            evs = self._segment(seg, hits)
            if any(isinstance(e, Iteration) for e in evs):
                seen_bars.add(key)
            if evs:
                parts.append(evs)
        out = [e for evs in reversed(parts) for e in evs]
        if sum(isinstance(e, Iteration) for e in out) > 1:
            # tqdm redraws: keep each profile's last (complete) update only
            last = {e.profile: n for n, e in enumerate(out) if isinstance(e, Iteration)}
            out = [e for n, e in enumerate(out) if not isinstance(e, Iteration) or last[e.profile] == n]
        return out

    def _segment(self, seg: str, hits: list[int], depth: int = 0) -> list[Event]:
        if len(seg) > self.max_line:
            seg = seg[: self.max_line]
        body, rank, host, ts = split_line_prefix(seg)
        if not body:
            return []
        ids = self._pat_match(_utf8(body))  # type: ignore[misc]
        if not ids:
            return []
        hit = set(hits)
        for idx in sorted(ids) if len(ids) > 1 else ids:
            pat = self._pats[idx]
            if pat.gate.isdisjoint(hit):  # a line must hold one of its profile's literals
                continue
            m = pat.compiled.search(body)
            if m is None:
                continue
            when = ts if ts is not None else (parse_timestamp(body[: min(m.start(), _TS_HEAD)]) if m.start() else None)
            ev = self._build(pat, m.groupdict(), when, rank, host)
            if ev is None:
                continue
            # a record glued after a tqdm update on the same line ("...3.33s/it][2021-.. step=2000")
            rest = body[m.end():]
            if depth == 0 and len(rest) > 8:
                more = self._lit_match(_utf8(rest))  # type: ignore[misc]
                if more:
                    return [ev, *self._segment(rest, more, depth + 1)]
            return [ev]
        return []

    @staticmethod
    def _build(pat: _Pat, g: dict[str, Any], ts: datetime | None, rank: int | None, host: str | None) -> Event | None:
        kind = pat.kind
        pid = pat.profile.id
        if kind == "iteration":
            it = _int(g["iter"])
            if it is None:
                return None
            get = g.get
            step = _num(get("step_time_s"))
            if step is None:
                ms = _num(get("step_time_ms"))
                if ms is not None:
                    step = ms / 1000.0
                else:
                    rate = _num(get("rate_it_s"))
                    step = 1.0 / rate if rate else None
            total, epoch, batch, batches = _int(get("total")), _num(get("epoch")), _int(get("batch")), _int(get("batches"))
            if pat.profile.step_from_epoch and epoch is not None and math.isfinite(epoch) and total:
                batch, batches, it = it, total, int(epoch) * total + it
            return Iteration(
                profile=pid, ts=ts, rank=rank, host=host, iter=it, total=total, step_time_s=step,
                loss=_num(get("loss")), throughput=_num(get("throughput")), epoch=epoch,
                batch=batch, batches=batches,
            )
        if kind.startswith("checkpoint_"):
            return _EVENT_CLASS[kind](  # type: ignore[call-arg]
                profile=pid, ts=ts, rank=rank, host=host, iter=_int(g.get("iter")), epoch=_num(g.get("epoch")))
        if kind == "run_start":
            return RunStart(profile=pid, ts=ts, rank=rank, host=host, restart=_int(g.get("restart")))
        if kind == "requeue":
            return Requeued(profile=pid, ts=ts, rank=rank, host=host, job_id=g.get("job_id"))
        if kind == "metrics":
            return Metrics(profile=pid, ts=ts, rank=rank, host=host, loss=_num(g.get("loss")), epoch=_num(g.get("epoch")))
        return None

    # -- many lines
    def scan(self, lines: Iterable[str | bytes]) -> Iterator[tuple[int, Event]]:
        """``(line index, event)`` for every event in ``lines``."""
        for i, line in enumerate(lines):
            for ev in self.events(line):
                yield i, ev

    def profile(self, profile_id: str) -> Profile | None:
        return next((p for p in self.profiles if p.id == profile_id), None)


# ----------------------------------------------------------------------------- summary
class CheckpointRecord(BaseModel):
    """One checkpoint save or load seen in the log. ``confirmed_by``: ``line`` (the framework
    printed it), ``progress`` (no completion line exists or none came, but training went on
    past it in the same attempt)."""

    iter: int | None
    line: int
    ts: datetime | None = None
    profile: str
    inferred: bool = False
    confirmed_by: str = "line"


class Attempt(BaseModel):
    """One launch of the job, from a run-start line (or the log's start) to the next."""

    index: int
    start_line: int | None = None
    """Line index of the run-start line; None for lines before the first one."""
    start_ts: datetime | None = None
    restart: int | None = None
    first_iteration: int | None = None
    last_iteration: int | None = None
    last_epoch: float | None = None
    iterations: int = 0
    first_progress_ts: datetime | None = None
    last_progress_ts: datetime | None = None
    loaded: CheckpointRecord | None = None
    """The checkpoint this attempt resumed from."""
    saved: list[CheckpointRecord] = Field(default_factory=list)
    progressed_past_load: bool | None = None
    """True when an iteration beyond the loaded checkpoint's step was seen in this attempt (the
    resume is verified); False when not (yet); None when nothing was loaded or its step is unknown."""


class ProgressSummary(BaseModel):
    """What a log says about training progress. Times are the lines' own timestamps; durations
    are seconds. ``cadence_s``: median seconds between successive new progress lines (from
    timestamps; when lines carry none, the median printed step time, ``cadence_source`` says which)."""

    lines: int
    matched: bool
    profiles: list[str] = Field(default_factory=list)
    """Profiles whose lines occur, most events first."""
    profile_events: dict[str, int] = Field(default_factory=dict)
    event_counts: dict[str, int] = Field(default_factory=dict)
    iterations_seen: int = 0
    first_iteration: int | None = None
    last_iteration: int | None = None
    total: int | None = None
    last_epoch: float | None = None
    last_loss: float | None = None
    last_progress_ts: datetime | None = None
    cadence_s: float | None = None
    cadence_source: str | None = None
    step_time_s: float | None = None
    """Median step time printed by the framework, seconds."""
    checkpoints_saving: list[int] = Field(default_factory=list)
    checkpoints_saved: list[int] = Field(default_factory=list)
    """Iterations of completed saves, in order, unique."""
    last_checkpoint_saved: int | None = None
    checkpoint_loaded: int | None = None
    """Iteration the last attempt that loaded a checkpoint resumed from."""
    checkpoints_loaded: list[int] = Field(default_factory=list)
    resumed: bool = False
    """The last attempt restored a checkpoint (its step may be unknown: ``checkpoint_loaded`` None)."""
    run_starts: int = 0
    attempts: list[Attempt] = Field(default_factory=list)
    requeued_by_framework: list[str] = Field(default_factory=list)
    note: str = ""

    def to_text(self) -> str:
        """A short human-readable report (what a CLI prints)."""
        if not self.matched:
            return f"{self.note}\n"
        out = [
            f"profiles: {', '.join(f'{p} ({self.profile_events[p]} events)' for p in self.profiles)}",
            f"lines: {self.lines}   events: {sum(self.event_counts.values())}   "
            f"run starts: {self.run_starts}   attempts: {len(self.attempts)}",
            f"iterations: {self.first_iteration} .. {self.last_iteration}"
            + (f" of {self.total}" if self.total else "") + f"   ({self.iterations_seen} progress lines)",
            f"cadence: {self.cadence_s:.3f} s ({self.cadence_source})" if self.cadence_s is not None else "cadence: unknown",
            f"checkpoints saved: {self.checkpoints_saved or 'none'}",
            f"checkpoint loaded: {self.checkpoint_loaded if self.checkpoint_loaded is not None else ('yes, step unknown' if self.resumed else 'none')}",
        ]
        for a in self.attempts:
            loaded = (a.loaded.iter if a.loaded.iter is not None else "?") if a.loaded else None
            out.append(
                f"  attempt {a.index}: start line {a.start_line} restart={a.restart} "
                f"iter {a.first_iteration}..{a.last_iteration} loaded={loaded} saved={[s.iter for s in a.saved]}"
            )
        if self.requeued_by_framework:
            out.append(f"framework requeued job: {', '.join(self.requeued_by_framework)}")
        if self.note:
            out.append(self.note)
        return "\n".join(out) + "\n"


def _naive_utc(ts: datetime) -> datetime:
    if not ts.tzinfo:
        return ts
    try:
        return ts.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:  # a stamp at the calendar's edge (9999-12-31T23:59:59-12:00): its wall time
        return ts.replace(tzinfo=None)


class _AttemptState:
    """Mutable per-attempt state while scanning (plain attributes: this is the hot loop)."""

    def __init__(self, index: int, start_line: int | None, ev: RunStart | None) -> None:
        self.index = index
        self.start_line = start_line
        self.start_ts = ev.ts if ev else None
        self.restart = ev.restart if ev else None
        self.first_iteration: int | None = None
        self.last_iteration: int | None = None
        self.last_epoch: float | None = None
        self.iterations = 0
        self.first_progress_ts: datetime | None = None
        self.last_progress_ts: datetime | None = None
        self.loaded: CheckpointRecord | None = None
        self.saved: list[CheckpointRecord] = []
        self.active = False
        self.progressed = False
        self.loads_since_progress = False
        self.last_key: tuple[float, int] | None = None
        self.last_key_ts: datetime | None = None
        self.pending_saves: list[CheckpointRecord] = []
        self.last_saving: CheckpointRecord | None = None
        self.pending_load: CheckpointRecord | None = None
        self.loaded_since_progress: CheckpointRecord | None = None

    def to_model(self, index: int) -> Attempt:
        return Attempt(
            index=index, start_line=self.start_line, start_ts=self.start_ts, restart=self.restart,
            first_iteration=self.first_iteration, last_iteration=self.last_iteration, last_epoch=self.last_epoch,
            iterations=self.iterations, first_progress_ts=self.first_progress_ts,
            last_progress_ts=self.last_progress_ts, loaded=self.loaded, saved=self.saved,
            progressed_past_load=(None if self.loaded is None or self.loaded.iter is None
                                  else self.last_iteration is not None and self.last_iteration > self.loaded.iter),
        )

    def pending_load_moved(self) -> CheckpointRecord | None:
        """Hand this attempt's most recent restore (made since its last progress) to the next one."""
        rec = self.loaded_since_progress
        if rec is not None and self.loaded is rec:
            self.loaded = None
        self.loaded_since_progress = None
        return rec


@functools.lru_cache(maxsize=1)
def default_extractor() -> ProgressExtractor:
    """A shared extractor over the built-in profiles (built once: compiling the sets takes ~20 ms)."""
    return ProgressExtractor()


def _extractor(profiles: ProgressExtractor | ProfileSet | Iterable[Profile] | None) -> ProgressExtractor:
    if profiles is None:
        return default_extractor()
    return profiles if isinstance(profiles, ProgressExtractor) else ProgressExtractor(profiles)


def summarize(
    lines: Iterable[str | bytes], profiles: ProgressExtractor | ProfileSet | Iterable[Profile] | None = None
) -> ProgressSummary:
    """Summarize a job log (an iterable of lines; bytes are decoded as UTF-8 with replacement).

    Attempt boundaries are run-start lines; consecutive run starts with nothing in between
    (several ranks printing the same banner) count as one. A save/load line without a step takes
    its step from the matching saving/loading line of the same attempt, or — for profiles with
    ``infer_checkpoint_iter`` — from the attempt's last iteration (``inferred=True``).
    """
    ex = _extractor(profiles)
    by_id = {p.id: p for p in ex.profiles}
    attempts: list[_AttemptState] = [_AttemptState(0, None, None)]
    counts: dict[str, int] = {}
    per_profile: dict[str, int] = {}
    cadences: list[float] = []
    step_times: list[float] = []
    saved_all: list[int] = []
    saving_all: list[int] = []
    loaded_all: list[int] = []
    requeued: list[str] = []
    summary_last: dict[str, Any] = {"iter": None, "first": None, "total": None, "epoch": None, "loss": None, "ts": None}
    iterations_seen = 0
    n_lines = 0

    def confirm_save(st: _AttemptState, rec: CheckpointRecord) -> None:
        if st.saved and st.saved[-1].iter == rec.iter and rec.iter is not None:
            return
        st.saved.append(rec)
        if rec.iter is not None and rec.iter not in saved_all:
            saved_all.append(rec.iter)

    for i, line in enumerate(lines):
        n_lines += 1
        for ev in ex.events(line):
            counts[ev.kind] = counts.get(ev.kind, 0) + 1
            per_profile[ev.profile] = per_profile.get(ev.profile, 0) + 1
            st = attempts[-1]
            prof = by_id.get(ev.profile)
            if isinstance(ev, RunStart):
                after_load = bool(prof and prof.run_start_after_load)
                if st.progressed or (st.loads_since_progress and st.start_line is not None and not after_load):
                    new = _AttemptState(len(attempts), i, ev)
                    if after_load and st.loads_since_progress:
                        # this launch's restore lines came just before its banner: move them
                        new.loaded, new.pending_load = st.pending_load_moved(), st.pending_load
                        st.pending_load = None
                        new.active = new.loads_since_progress = True
                    attempts.append(new)
                elif st.start_line is None:
                    st.start_line, st.start_ts, st.restart = i, ev.ts, ev.restart
                elif st.restart is None and ev.restart is not None:
                    st.restart = ev.restart
                continue
            if isinstance(ev, Requeued):
                if ev.job_id:
                    requeued.append(ev.job_id)
                continue
            if isinstance(ev, Metrics):
                if ev.loss is not None:
                    summary_last["loss"] = ev.loss
                continue
            st.active = True
            if isinstance(ev, Iteration):
                st.progressed, st.loads_since_progress = True, False
                iterations_seen += 1
                a = st
                key = (ev.epoch or 0.0, ev.iter)
                if a.first_iteration is None:
                    a.first_iteration = ev.iter
                    a.first_progress_ts = ev.ts
                if summary_last["first"] is None:
                    summary_last["first"] = ev.iter
                a.iterations += 1
                if st.last_key is None or key > st.last_key:
                    if ev.ts is not None and st.last_key_ts is not None and st.last_key is not None:
                        dt = (_naive_utc(ev.ts) - _naive_utc(st.last_key_ts)).total_seconds()
                        if dt >= 0:
                            cadences.append(dt)
                    st.last_key, st.last_key_ts = key, ev.ts
                    a.last_iteration = ev.iter
                    a.last_epoch = ev.epoch
                    summary_last.update(iter=ev.iter, epoch=ev.epoch)
                if ev.ts is not None:
                    a.last_progress_ts = ev.ts
                    summary_last["ts"] = ev.ts
                if ev.total is not None:
                    summary_last["total"] = ev.total
                if ev.loss is not None:
                    summary_last["loss"] = ev.loss
                if ev.step_time_s is not None:
                    step_times.append(ev.step_time_s)
                # saves awaiting confirmation by progress (synchronous savers), loads likewise
                if st.pending_saves:
                    for rec in st.pending_saves:
                        confirm_save(st, rec.model_copy(update={"confirmed_by": "progress"}))
                    st.pending_saves = []
                st.loaded_since_progress = None
                if st.pending_load is not None and a.loaded is None:
                    a.loaded = st.pending_load.model_copy(update={"confirmed_by": "progress"})
                    if a.loaded.iter is not None:
                        loaded_all.append(a.loaded.iter)
                    st.pending_load = None
                continue
            assert isinstance(ev, (CheckpointSaving, CheckpointSaved, CheckpointLoading, CheckpointLoaded))
            it, inferred = ev.iter, False
            if it is None:
                if isinstance(ev, CheckpointSaved) and st.last_saving is not None:
                    it, inferred = st.last_saving.iter, st.last_saving.inferred
                elif isinstance(ev, CheckpointLoaded) and st.pending_load is not None:
                    it, inferred = st.pending_load.iter, st.pending_load.inferred
                if it is None and prof is not None and prof.infer_checkpoint_iter and isinstance(
                    ev, (CheckpointSaving, CheckpointSaved)
                ):
                    it, inferred = st.last_iteration, st.last_iteration is not None
            rec = CheckpointRecord(iter=it, line=i, ts=ev.ts, profile=ev.profile, inferred=inferred)
            if isinstance(ev, (CheckpointSaving, CheckpointSaved)):
                st.progressed, st.loads_since_progress = True, False
                if st.pending_load is not None and st.loaded is None:  # saving again: it resumed
                    st.loaded = st.pending_load.model_copy(update={"confirmed_by": "progress"})
                    if st.loaded.iter is not None:
                        loaded_all.append(st.loaded.iter)
                    st.pending_load = None
                st.loaded_since_progress = None
            else:
                st.loads_since_progress = True
            if isinstance(ev, CheckpointSaving):
                st.last_saving = rec
                if it is not None and (not saving_all or saving_all[-1] != it):
                    saving_all.append(it)
                if prof is not None and prof.save_is_synchronous:
                    st.pending_saves.append(rec)
            elif isinstance(ev, CheckpointSaved):
                st.pending_saves = [r for r in st.pending_saves if r.iter != it]
                confirm_save(st, rec)
            elif isinstance(ev, CheckpointLoading):
                st.pending_load = rec
            elif isinstance(ev, CheckpointLoaded):
                st.pending_load = None
                if st.loaded is None or st.loaded.iter != it:
                    st.loaded = rec
                    st.loaded_since_progress = rec
                    if it is not None and (not loaded_all or loaded_all[-1] != it):
                        loaded_all.append(it)

    final = [s.to_model(n) for n, s in enumerate(x for x in attempts if x.active or x.start_line is not None)]
    ordered = sorted(per_profile, key=lambda p: (-per_profile[p], [x.id for x in ex.profiles].index(p)))
    matched = bool(per_profile)
    cadence_s, source = None, None
    if cadences:
        cadence_s, source = float(statistics.median(cadences)), "timestamps"
    elif step_times:
        cadence_s, source = float(statistics.median(step_times)), "step_time"
    loaded_attempts = [a.loaded.iter for a in final if a.loaded is not None]
    note = ""
    if not matched:
        note = (f"no training-progress profile matched any of {n_lines} lines "
                f"(known profiles: {', '.join(p.id for p in ex.profiles)})")
    elif iterations_seen == 0:
        note = "no iteration lines matched: progress (and hangs) cannot be judged from this log"
    return ProgressSummary(
        lines=n_lines,
        matched=matched,
        profiles=ordered,
        profile_events={p: per_profile[p] for p in ordered},
        event_counts=counts,
        iterations_seen=iterations_seen,
        first_iteration=summary_last["first"],
        last_iteration=summary_last["iter"],
        total=summary_last["total"],
        last_epoch=summary_last["epoch"],
        last_loss=summary_last["loss"],
        last_progress_ts=summary_last["ts"],
        cadence_s=cadence_s,
        cadence_source=source,
        step_time_s=float(statistics.median(step_times)) if step_times else None,
        checkpoints_saving=saving_all,
        checkpoints_saved=saved_all,
        last_checkpoint_saved=saved_all[-1] if saved_all else None,
        checkpoint_loaded=loaded_attempts[-1] if loaded_attempts else None,
        checkpoints_loaded=loaded_all,
        resumed=bool(final) and final[-1].loaded is not None,
        run_starts=sum(1 for a in final if a.start_line is not None),
        attempts=final,
        requeued_by_framework=requeued,
        note=note,
    )


def detect_profile(
    lines: Iterable[str | bytes],
    profiles: ProgressExtractor | ProfileSet | Iterable[Profile] | None = None,
    max_lines: int | None = None,
) -> list[str]:
    """Ids of the profiles whose lines occur in ``lines`` (first ``max_lines`` only, when given),
    most events first; [] when none do."""
    ex = _extractor(profiles)
    order = [p.id for p in ex.profiles]
    counts: dict[str, int] = {}
    for i, line in enumerate(lines):
        if max_lines is not None and i >= max_lines:
            break
        for ev in ex.events(line):
            counts[ev.profile] = counts.get(ev.profile, 0) + 1
    return sorted(counts, key=lambda p: (-counts[p], order.index(p)))


__all__ = [
    "Attempt", "CheckpointLoaded", "CheckpointLoading", "CheckpointRecord", "CheckpointSaved", "CheckpointSaving",
    "Event", "Iteration", "MAX_LINE", "Metrics", "ProgressExtractor", "ProgressSummary", "Requeued", "RunStart",
    "default_extractor", "detect_profile", "parse_timestamp", "split_line_prefix", "summarize",
]
