"""Parsers for the training-progress lines Revive watches (pure, no I/O).

Formats (Revive's example job, ``examples/train.py``; other frameworks plug in more patterns):

- attempt boundary, printed by the batch script: ``=== attempt restart=<N> <ISO time>``
- progress: ``<ISO time> [rank R host H] iteration N/M | loss L | compute_ms C | step_time_ms T``
- checkpoint: ``… saving checkpoint at iteration N`` then ``… saved checkpoint at iteration N``
- resume: ``… resumed from checkpoint at iteration N``

Also recognised as progress (no rank/host): Megatron ``iteration N/ M |`` lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from revive.logline import log_int

ATTEMPT_RE = re.compile(r"^=== attempt restart=(\d+)(?:\s+(\S+))?")
PROGRESS_RE = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?)\s+\[rank (?P<rank>\d+) host (?P<host>[^\]\s]+)\]\s+"
    r"iteration (?P<it>\d+)/(?P<total>\d+)(?:.*?compute_ms (?P<compute>[\d.]+))?(?:.*?step_time_ms (?P<step>[\d.]+))?"
)
GENERIC_PROGRESS_RE = re.compile(r"\biteration[:\s]+(?P<it>\d+)\s*/\s*(?P<total>\d+)")
SAVING_RE = re.compile(r"saving checkpoint at iteration\s+(\d+)")
SAVED_RE = re.compile(r"saved checkpoint at iteration\s+(\d+)")
RESUMED_RE = re.compile(r"resumed from checkpoint at iteration\s+(\d+)")
TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d\d:\d\d|Z)?)")


@dataclass(frozen=True)
class Progress:
    iteration: int
    total: int
    rank: int | None = None
    host: str | None = None
    timestamp: datetime | None = None
    compute_ms: float | None = None
    step_ms: float | None = None


def parse_ts(text: str) -> datetime | None:
    """Parse a leading ISO-8601 timestamp; ``None`` when absent or malformed."""
    m = TS_RE.match(text)
    if not m:
        return None
    try:
        return datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_attempt(line: str) -> int | None:
    """``=== attempt restart=N …`` → N."""
    m = ATTEMPT_RE.match(line)
    return log_int(m.group(1)) if m else None


def parse_progress(line: str) -> Progress | None:
    """A progress line → ``Progress``; anything else, or a progress line with a number ``int``/``float``
    refuse (``step_time_ms 20.3.1``, 5000 digits), → None."""
    m = PROGRESS_RE.match(line)
    if m:
        it, total, rank = log_int(m.group("it")), log_int(m.group("total")), log_int(m.group("rank"))
        if it is None or total is None or rank is None:  # a 5000-digit "iteration" is no progress
            return None
        try:
            compute = float(m.group("compute")) if m.group("compute") else None
            step = float(m.group("step")) if m.group("step") else None
        except ValueError:  # "step_time_ms 20.3.1": a garbled line is no progress (never an error)
            return None
        return Progress(iteration=it, total=total, rank=rank, host=m.group("host"), timestamp=parse_ts(line),
                        compute_ms=compute, step_ms=step)
    if "iteration" in line and "checkpoint" not in line:
        g = GENERIC_PROGRESS_RE.search(line)
        it, total = (log_int(g.group("it")), log_int(g.group("total"))) if g else (None, None)
        if it is not None and total is not None:
            return Progress(iteration=it, total=total, timestamp=parse_ts(line))
    return None


def parse_checkpoint(line: str) -> tuple[str, int] | None:
    """``('saving'|'saved'|'resumed', iteration)`` or None."""
    for kind, rx in (("saved", SAVED_RE), ("saving", SAVING_RE), ("resumed", RESUMED_RE)):
        m = rx.search(line)
        it = log_int(m.group(1)) if m else None
        if it is not None:
            return kind, it
    return None


@dataclass
class ResumeCheck:
    attempt: int | None = None
    resumed_from: int | None = None
    first_after: int | None = None
    first_after_at: datetime | None = None
    host_set: frozenset[str] = frozenset()


class ResumeTracker:
    """Incremental ``find_resume``: feed lines as they arrive (verify follows the log)."""

    def __init__(self, after_attempt: int) -> None:
        self.after_attempt = after_attempt
        self.res = ResumeCheck()
        self._current: int | None = None
        self._hosts: set[str] = set()

    def feed(self, line: str) -> None:
        res = self.res
        a = parse_attempt(line)
        if a is not None:
            self._current = a
            # a later attempt supersedes one that resumed but was requeued again (e.g. it started
            # on a node Revive then excluded): the current attempt is what must resume
            if a > self.after_attempt and (res.first_after is None or res.attempt is None or a > res.attempt):
                self.res = ResumeCheck(attempt=a)
                self._hosts = set()
            return
        if self._current is None or self._current <= self.after_attempt or res.first_after is not None:
            return
        ck = parse_checkpoint(line)
        if ck and ck[0] == "resumed":
            res.resumed_from = ck[1] if res.resumed_from is None else min(res.resumed_from, ck[1])
            return
        p = parse_progress(line)  # a garbled line ("compute_ms 1.2.3") is None: no progress
        if p is None:
            return
        if p.host:
            self._hosts.add(p.host)
        base = res.resumed_from if res.resumed_from is not None else 0
        if p.iteration > base and (res.resumed_from is not None or p.iteration > 0):
            res.first_after = p.iteration
            res.first_after_at = p.timestamp
            res.host_set = frozenset(self._hosts)


def find_resume(lines: list[str], after_attempt: int) -> ResumeCheck:
    """Scan a job log for the first attempt with restart count > ``after_attempt`` that printed
    ``resumed from checkpoint at iteration N`` and then a progress line with iteration > N.

    Returns what was found so far (``first_after`` None = not yet resumed past the checkpoint).
    """
    t = ResumeTracker(after_attempt)
    for line in lines:
        t.feed(line)
    return t.res


class ProfileResumeTracker:
    """"Training resumed", from any framework's own lines (``revive.profiles``), for lines written
    after the requeue (the caller feeds only those):

    - ``resumed_past_loaded_checkpoint``: the attempt printed that it loaded checkpoint K, then an
      iteration above K;
    - ``past_last_saved_checkpoint``: no load line (the framework does not print one), and an
      iteration above the last checkpoint saved before the fault;
    - ``fresh_start_progress``: no checkpoint existed, and the job made any progress.

    ``rule`` names the one that proved it (None: not yet); ``matched_profile`` is False while no
    line of the attempt matched any profile (verify then reports *unverified*, not a failure).
    """

    def __init__(self, checkpoint_iteration: int | None, extractor: object | None = None) -> None:
        from revive.profiles import load_builtin_profiles
        from revive.profiles.extract import ProgressExtractor

        self.checkpoint = checkpoint_iteration
        self.extractor = extractor if extractor is not None else ProgressExtractor(load_builtin_profiles())
        self.loaded: int | None = None
        self.rule: str | None = None
        self.first_after: int | None = None
        self.first_after_at: datetime | None = None
        self.matched_profile = False
        self.hosts: set[str] = set()

    def new_attempt(self) -> None:
        """The job was requeued again (e.g. its attempt started on a node Revive then excluded):
        forget that attempt's proof and hosts; the next attempt must prove the resume itself."""
        self.loaded = self.rule = self.first_after = self.first_after_at = None
        self.hosts = set()

    def seen(self, line: str) -> None:
        """A line from before the requeue: it only tells whether the log speaks a known profile."""
        if not self.matched_profile and self.extractor.events(line):  # type: ignore[attr-defined]
            self.matched_profile = True

    def feed(self, line: str) -> None:
        if self.rule is not None:
            return
        from revive.profiles.extract import CheckpointLoaded, Iteration

        for ev in self.extractor.events(line):  # type: ignore[attr-defined]
            self.matched_profile = True
            if isinstance(ev, CheckpointLoaded) and ev.iter is not None:
                self.loaded = ev.iter
            elif isinstance(ev, Iteration):
                if ev.host:
                    self.hosts.add(ev.host)
                if self.loaded is not None:
                    ok, rule = ev.iter > self.loaded, "resumed_past_loaded_checkpoint"
                elif self.checkpoint is not None:
                    ok, rule = ev.iter > self.checkpoint, "past_last_saved_checkpoint"
                else:
                    ok, rule = True, "fresh_start_progress"
                if ok:
                    self.rule, self.first_after, self.first_after_at = rule, ev.iter, ev.ts
                    return
