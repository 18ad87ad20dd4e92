"""Stage: timestamps — parse the stamps log lines carry, roll syslog years, and find silent hangs
from the log's own cadence (offline)."""

from __future__ import annotations

import re
import statistics
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from revive.logline import LINE_CAP as MAX_TEXT
from revive.models import (
    EvidenceBundle,
)
from revive.signatures.matcher import split_prefix

if TYPE_CHECKING:
    from revive.attribution.collect import _Ctx

_MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)}



def _ref_year(bundle: EvidenceBundle) -> int:
    for cand in (bundle.trigger.at if bundle.trigger else None,
                 bundle.job.start_time if bundle.job else None,
                 bundle.job.submit_time if bundle.job else None):
        if cand is not None:
            return cand.year
    m = re.search(r"\b(20\d\d)-\d\d-\d\d[T ]", bundle.job_log[:200000])
    return int(m.group(1)) if m else 1970


def _parse_ts(ts: str | None, kind: str | None, year: int) -> datetime | None:
    if not ts:
        return None
    try:
        if kind in ("iso", "bracket_ts"):
            s = ts.replace(",", ".").replace("_", "T").replace(" ", "T", 1)
            if s.endswith("Z"):
                s = s[:-1] + "+00:00"
            if "." in s:
                head, _, tail = s.partition(".")
                digits = re.match(r"\d*", tail).group(0)  # type: ignore[union-attr]  # \d* always matches
                s = head + "." + digits[:6].ljust(6, "0") + tail[len(digits):]
            d = datetime.fromisoformat(s)
            return d if d.tzinfo else d.replace(tzinfo=UTC)
        if kind == "syslog":
            mon, day, clock = ts.split()[:3]
            hh, mm, ss = clock.split(":")
            sec = float(ss)
            return datetime(year, _MONTHS[mon], int(day), int(hh), int(mm), int(sec),
                            int((sec % 1) * 1e6), tzinfo=UTC)
        if kind == "mpirun":  # ctime(3): "Mon May 24 06:43:04 2021" (the year is its own)
            d = datetime.strptime(" ".join(ts.split()), "%a %b %d %H:%M:%S %Y")
            return d.replace(tzinfo=UTC)
        if kind == "glog":
            md, clock = ts.split()
            month, mday = (int(md[:-2]), int(md[-2:]))
            hh, mm, ss = clock.split(":")
            whole, _, frac = ss.partition(".")
            return datetime(year, month, mday, int(hh), int(mm), int(whole),
                            int((frac or "0")[:6].ljust(6, "0")), tzinfo=UTC)
    except (ValueError, KeyError, AttributeError, IndexError, OverflowError):
        return None
    return None


def _roll_year(ts: datetime, ctx: _Ctx) -> datetime:
    """Syslog stamps carry no year: one stamped more than half a year away from the incident's
    reference time belongs to the neighbouring year (a job that started on Dec 31 and died on Jan 1)."""
    b = ctx.bundle
    ref = ctx.attempt_start or (b.trigger.at if b.trigger else None) or (b.job.start_time if b.job else None)
    if ref is None:
        return ts
    if ref.tzinfo is None:
        ref = ref.replace(tzinfo=UTC)
    try:
        if ts < ref - timedelta(days=183):
            return ts.replace(year=ts.year + 1)
        if ts > ref + timedelta(days=183):
            return ts.replace(year=ts.year - 1)
    except (ValueError, OverflowError):  # Feb 29; stamps at the edge of the calendar
        pass
    return ts



_SILENT_FACTOR = 20
_SILENT_MIN_S = 600.0


def _silent_hang(ctx: _Ctx) -> str:
    """A run that made progress and then printed no progress for far longer than its own cadence,
    with no error: a hang. Offline evidence: the log's own timestamps (progress cadence vs the gap
    to the last stamped line or the job's end), or a job that was cancelled (not at its time limit)
    while the log still ends in progress."""
    b = ctx.bundle
    if not ctx.progress_idx:
        return ""
    lines = ctx.lines
    stamps: list[datetime] = []
    last_prog_ts: datetime | None = None
    prog = set(ctx.progress_idx)
    end_ts: datetime | None = None
    for i in range(ctx.tail_start, len(lines)):
        raw = lines[i][:MAX_TEXT]
        if not raw.strip():
            continue
        _, meta = split_prefix(raw)
        ts = _parse_ts(meta.ts, meta.ts_kind, ctx.ref_year)
        if ts is None:
            c = re.search(r"CANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", raw)
            ts = _parse_ts(c.group(1), "iso", ctx.ref_year) if c else None
        if ts is None:
            continue
        end_ts = ts
        if i in prog:
            stamps.append(ts)
            last_prog_ts = ts
    if last_prog_ts is not None and end_ts is not None and len(stamps) >= 3:
        gaps = [(y - x).total_seconds() for x, y in zip(stamps, stamps[1:], strict=False) if y > x]
        if gaps:
            cadence = statistics.median(gaps)
            gap = (end_ts - last_prog_ts).total_seconds()
            if gap > max(_SILENT_FACTOR * cadence, _SILENT_MIN_S):
                return (f"progress lines came every ~{cadence:g}s, then none for {gap:.0f}s "
                        f"(last at {last_prog_ts.isoformat()}) with no error")
    state = (b.job.state.value if b.job and hasattr(b.job.state, "value") else str(b.job.state if b.job else "")).upper()
    if state.startswith("CANCELLED") and "TIME LIMIT" not in b.job_log[-4000:]:
        tail = [i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()][:3]
        if any(i in prog for i in tail):
            return "the job was cancelled while its log still ended in progress lines, with no error"
    return ""


def _prev_attempt_stalled(ctx: _Ctx) -> str:
    """Rule 3ae: the previous attempt (``ctx.prev_attempt``) also went silent, with no Python error.

    Its progress lines' stamps give a cadence (>= 3 stamped progress lines); its end is the window's
    restart marker stamp (``ctx.attempt_start``) or its own last stamped line. A gap from its last
    progress line to that end above max(``_SILENT_FACTOR`` x cadence, ``_SILENT_MIN_S``) is a stall;
    a ``Traceback`` in that attempt means it failed differently. Returns why, or ""."""
    if not ctx.prev_attempt or any("Traceback (most recent call last)" in x for x in ctx.prev_attempt):
        return ""
    stamps: list[datetime] = []
    end_ts = ctx.attempt_start
    last_ts: datetime | None = None
    for raw in ctx.prev_attempt:
        body, meta = split_prefix(raw[:MAX_TEXT])
        ts = _parse_ts(meta.ts, meta.ts_kind, ctx.ref_year)
        if ts is None:
            continue
        last_ts = ts
        if ctx.matcher.progress_of(body)[0]:
            stamps.append(ts)
    end_ts = end_ts or last_ts
    if len(stamps) < 3 or end_ts is None:
        return ""
    gaps = [(y - x).total_seconds() for x, y in zip(stamps, stamps[1:], strict=False) if y > x]
    if not gaps:
        return ""
    cadence = statistics.median(gaps)
    gap = (end_ts - stamps[-1]).total_seconds()
    if gap > max(_SILENT_FACTOR * cadence, _SILENT_MIN_S):
        return f"the previous attempt stalled the same way (no progress for {gap:.0f}s after a ~{cadence:g}s cadence)"
    return ""
