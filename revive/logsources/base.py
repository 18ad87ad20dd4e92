"""One interface for every place a job's log can live: local files, Loki, VictoriaLogs.

The contract is :class:`LogSource`. Everything else here is shared by the backends: the line
type (:class:`LogLine`), the stream selector (:class:`StreamSelector`), the error tree, label
quoting for LogQL/LogsQL, and the cursor that makes a poll-based reader exactly-once-ish
(:class:`StreamCursor`: position + boundary de-duplication + sequence numbers, JSON-able).

Error tree (all under :class:`revive.errors.ReviveError`)::

    LogSourceError            the source refused what we asked (bad query/selector): not retryable
    └── LogSourceUnavailable  the backend is down, unreachable, overloaded or answered junk: retryable
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from revive.errors import ReviveError
from revive.logline import LINE_CAP, cap_line

log = logging.getLogger("revive.logsources")

"""Characters kept of one line (head and tail: the error that ends a progress-bar line is at its end)."""

STATE_VERSION = 1


# ---- errors --------------------------------------------------------------------------------------
class LogSourceError(ReviveError):
    """The log backend refused the request (HTTP 4xx other than 429, a selector that cannot be
    rendered). Retrying the same request will not help: fix the configuration."""


class LogSourceUnavailable(LogSourceError):
    """The backend is down, unreachable, timed out, answered 5xx or a body that is not its API.

    Retryable: the caller backs off and calls ``read_new`` again; no line is lost, the cursor did
    not move past anything that was not returned. ``retry_after`` is the server's hint in seconds
    (``Retry-After``) when it gave one."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# ---- line and selector ---------------------------------------------------------------------------
_SURROGATES = re.compile("[\ud800-\udfff]")


def clean_text(raw: str | bytes) -> str:
    """Normalise one log line: invalid UTF-8 (or lone surrogates from JSON ``\\ud800`` escapes)
    becomes U+FFFD, NUL is removed, a trailing newline/CR is stripped, and a line longer than
    :data:`LINE_CAP` characters keeps its head and its tail (``revive.logline.cap_line``: exactly
    ``LINE_CAP`` characters). Idempotent."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        text = bytes(raw).decode("utf-8", errors="replace")
    else:
        text = str(raw)
        if _SURROGATES.search(text):
            text = _SURROGATES.sub("\ufffd", text)
    text = text.replace("\x00", "").rstrip("\r\n")
    return cap_line(text, LINE_CAP)


@dataclass(frozen=True)
class LogLine:
    """One line of a job's log, as every backend returns it.

    ``seq``: 1, 2, 3, ... per stream (per :class:`StreamSelector`) in delivery order; it survives
    ``state()``/``restore()`` and never repeats. For files it equals the line number until the file
    is first truncated or rotated. ``text``: normalised by :func:`clean_text`. ``ts``: the
    backend's timestamp (UTC, microsecond precision), ``None`` for files. ``labels``: the stream's
    labels as the backend reports them (Loki stream labels, VictoriaLogs ``_stream`` fields plus
    plain fields; ``{"path": ...}`` for files).
    """

    seq: int
    text: str
    ts: datetime | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", clean_text(self.text))
        if self.ts is not None:
            ts = self.ts if self.ts.tzinfo else self.ts.replace(tzinfo=UTC)
            object.__setattr__(self, "ts", ts.astimezone(UTC))


class StreamSelector(BaseModel):
    """Which log a reader follows: one watched job (and optionally its hosts, its StdOut path,
    any extra labels). Backends render it into their own query (see ``docs/logsources.md``):

    - files: ``path`` (required);
    - Loki / VictoriaLogs: the configured label template with ``{job_id}``, ``{path}``, ``{hosts}``
      and ``{<label name>}`` placeholders, plus each entry of ``labels`` as an exact matcher.

    ``since`` is where the very first read starts (the job's start time); without it a backend
    looks back its configured ``lookback_s``. It is not part of the stream's identity (:meth:`key`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str = ""
    hosts: tuple[str, ...] = ()
    path: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    since: datetime | None = None

    def key(self) -> str:
        """Stable identity of the stream: the key of its cursor in ``state()``."""
        return json.dumps({"job_id": self.job_id, "hosts": sorted(self.hosts), "path": self.path,
                           "labels": dict(sorted(self.labels.items()))}, sort_keys=True, ensure_ascii=False)


# ---- the protocol --------------------------------------------------------------------------------
@runtime_checkable
class LogSource(Protocol):
    """Contract every log backend implements (files, Loki, VictoriaLogs).

    ``async read_new(sel) -> list[LogLine]``
        The lines of stream ``sel`` that arrived since the previous call for the same stream
        (the same :meth:`StreamSelector.key`), oldest first by backend timestamp within one call,
        each exactly once across calls (duplicates at the cursor boundary, in overlapping pages,
        or replayed after a reconnect are dropped). The first call for a stream starts at
        ``sel.since`` (or the backend's look-back). An empty list means nothing new, or the
        backend asked us to slow down (HTTP 429: the source backs off on its own until the
        ``Retry-After`` delay has passed and returns ``[]`` meanwhile, after returning whatever it
        had already fetched). Lines are capped at 4096 characters (head and tail kept), NUL
        removed, invalid UTF-8 replaced.

        Raises :class:`LogSourceUnavailable` (retryable; ``retry_after`` in seconds when known)
        when the backend is down, unreachable, timed out, answered 5xx or junk: nothing is lost,
        the next successful call returns what was missed. Raises :class:`LogSourceError` (not
        retryable) when the backend rejects the query (4xx) or the selector cannot be rendered.
        Never raises anything else for backend trouble (``httpx`` errors are converted).

    ``async close()``
        Stops follow tasks and closes connections this source opened (never a client passed in).
        Idempotent.

    ``state() -> dict`` / ``restore(state)``
        Cursor persistence. ``state()`` is JSON-serialisable (``json.dumps`` works as is) and
        small (per stream: a position in ns, a sequence number, the hashes at the boundary).
        ``restore()`` accepts what ``state()`` of the same backend kind returned, skips entries it
        cannot read (a broken cache costs a re-read, never a crash), and makes the next
        ``read_new`` continue with no line lost and none repeated.
    """

    async def read_new(self, sel: StreamSelector) -> list[LogLine]: ...

    async def close(self) -> None: ...

    def state(self) -> dict[str, Any]: ...

    def restore(self, state: Mapping[str, Any]) -> None: ...


# ---- query-language quoting ----------------------------------------------------------------------
def quote_string(value: str) -> str:
    """A double-quoted string literal that LogQL and LogsQL both read back as ``value``.

    Both languages decode double-quoted strings with Go's rules (``strconv.Unquote``): backslash
    and double quote are escaped, control characters are written as ``\\xNN`` (or ``\\n``,
    ``\\t``, ``\\r``), everything else is kept as UTF-8. Nothing in ``value`` can close the
    string, so a job id like ``1"} or {job=~".+`` stays one label value."""
    out = ['"']
    for ch in _SURROGATES.sub("\ufffd", value):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def regex_escape_re2(value: str) -> str:
    """Escape a literal for RE2 (Loki and VictoriaLogs ``=~`` matchers, fully anchored there)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", value)


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render_matchers(template: Mapping[str, str], sel: StreamSelector, name_re: re.Pattern[str]) -> str:
    """``{name="value", ...}`` from a label template and a selector (shared by Loki and VictoriaLogs).

    A template value may contain ``{job_id}``, ``{path}`` or ``{<label>}`` (from ``sel.labels``);
    a value that is exactly ``{hosts}`` becomes ``name=~"h1|h2"`` (left out when ``sel.hosts`` is
    empty). Labels of ``sel.labels`` that the template does not use are added as exact matchers.
    A placeholder whose value is empty or unknown raises :class:`LogSourceError` (an empty value
    would match every stream that lacks the label)."""
    used: set[str] = set()
    parts: list[str] = []
    values = {"job_id": sel.job_id, "path": sel.path or "", **sel.labels}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        used.add(name)
        v = values.get(name)
        if not v:
            raise LogSourceError(f"log selector: placeholder {{{name}}} has no value for this stream")
        return v

    for name, tmpl in template.items():
        if not name_re.fullmatch(name):
            raise LogSourceError(f"log selector: invalid label name {name!r}")
        if tmpl == "{hosts}":
            if sel.hosts:
                parts.append(f"{name}=~{quote_string('|'.join(regex_escape_re2(h) for h in sel.hosts))}")
            continue
        parts.append(f"{name}={quote_string(_PLACEHOLDER.sub(sub, tmpl))}")
    for name, v in sorted(sel.labels.items()):
        if name in used or name in template:
            continue
        if not name_re.fullmatch(name):
            raise LogSourceError(f"log selector: invalid label name {name!r}")
        parts.append(f"{name}={quote_string(v)}")
    if not parts:
        raise LogSourceError("log selector: the label template renders no matcher")
    return "{" + ", ".join(parts) + "}"


# ---- cursor --------------------------------------------------------------------------------------
@dataclass
class Entry:
    """One raw backend entry before it becomes a :class:`LogLine`."""

    ts_ns: int
    line: str
    labels: dict[str, str]
    stream_key: str = ""
    """What identifies the stream for de-duplication (canonical labels); derived when empty."""

    def __post_init__(self) -> None:
        if not self.stream_key:
            self.stream_key = json.dumps(self.labels, sort_keys=True, ensure_ascii=False)

    def digest(self) -> str:
        h = hashlib.blake2b(digest_size=12)
        h.update(self.stream_key.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        h.update(self.line.encode("utf-8", "surrogatepass"))
        return f"{self.ts_ns}:{h.hexdigest()}"


def ns_to_datetime(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // 1_000_000_000, UTC).replace(microsecond=(ns % 1_000_000_000) // 1000)


def datetime_to_ns(dt: datetime) -> int:
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


@dataclass
class StreamCursor:
    """Where one stream's reader stands.

    ``pos_ns``: the next query starts here (inclusive; minus the reorder window). Every entry with
    a timestamp below ``pos_ns - reorder_ns`` has been delivered (or is older than the window and
    will never be). ``seen``: digests ``"<ts_ns>:<hash of stream and line>"`` of delivered entries
    with ``ts >= pos_ns - reorder_ns``: a re-read of the boundary drops them. ``seq``: the last
    sequence number handed out."""

    pos_ns: int | None = None
    seq: int = 0
    seen: dict[str, int] = field(default_factory=dict)
    late_dropped: int = 0
    stuck_skips: int = 0

    def accept(self, entries: Iterable[Entry], reorder_ns: int, *,
               older_ok: set[tuple[str, int]] | None = None) -> list[LogLine]:
        """Entries → new :class:`LogLine`s: merged by timestamp (stable), de-duplicated against
        ``seen`` and among themselves, late ones (below the window) dropped, except the
        (stream_key, ts_ns) pairs in ``older_ok`` (entries a tail reported dropped, fetched
        again). Does not move ``pos_ns`` (see :meth:`advance`)."""
        floor = None if self.pos_ns is None else self.pos_ns - reorder_ns
        out: list[LogLine] = []
        for e in sorted(entries, key=lambda e: e.ts_ns):
            if floor is not None and e.ts_ns < floor and not (older_ok and (e.stream_key, e.ts_ns) in older_ok):
                self.late_dropped += 1
                continue
            d = e.digest()
            if d in self.seen:
                continue
            self.seen[d] = e.ts_ns
            self.seq += 1
            out.append(LogLine(seq=self.seq, text=e.line, ts=ns_to_datetime(e.ts_ns), labels=dict(e.labels)))
        return out

    def advance(self, pos_ns: int, reorder_ns: int) -> None:
        """Move the position forward (never back) and forget digests below the window."""
        if self.pos_ns is None or pos_ns > self.pos_ns:
            self.pos_ns = pos_ns
        floor = self.pos_ns - reorder_ns
        if any(ts < floor for ts in self.seen.values()):
            self.seen = {d: ts for d, ts in self.seen.items() if ts >= floor}

    def to_json(self) -> dict[str, Any]:
        return {"pos_ns": self.pos_ns, "seq": self.seq, "seen": sorted(self.seen)}

    @classmethod
    def from_json(cls, v: Any) -> StreamCursor:
        if not isinstance(v, Mapping):
            raise ValueError("cursor is not an object")
        pos = v.get("pos_ns")
        seq = int(v.get("seq", 0))
        if pos is not None:
            pos = int(pos)
        if seq < 0 or (pos is not None and pos < 0):
            raise ValueError("negative cursor")
        seen: dict[str, int] = {}
        for d in v.get("seen", ()):
            if isinstance(d, str) and ":" in d:
                seen[d] = int(d.split(":", 1)[0])
        return cls(pos_ns=pos, seq=seq, seen=seen)


def cursors_state(kind: str, cursors: Mapping[str, StreamCursor]) -> dict[str, Any]:
    return {"version": STATE_VERSION, "kind": kind, "streams": {k: c.to_json() for k, c in cursors.items()}}


def cursors_restore(kind: str, state: Mapping[str, Any]) -> dict[str, StreamCursor]:
    """Cursors from ``state``; a foreign or broken state yields what can be read (maybe nothing)."""
    out: dict[str, StreamCursor] = {}
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION or state.get("kind") != kind:
        if state:
            log.warning("log source state of another kind/version ignored (a re-read from the look-back)")
        return out
    streams = state.get("streams")
    for k, v in (streams.items() if isinstance(streams, Mapping) else ()):
        try:
            out[str(k)] = StreamCursor.from_json(v)
        except (ValueError, TypeError, OverflowError):
            continue
    return out


# ---- HTTP helpers shared by the HTTP backends ----------------------------------------------------
def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` (delta seconds or an HTTP date) → seconds from now, ``None`` when absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return max(0.0, dt.timestamp() - (time.time() if now is None else now))


class TokenFile:
    """A bearer token read from a file, re-read when the file changes (rotation without restart)."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path).expanduser() if path else None
        self._mtime: float | None = None
        self._token: str | None = None

    def header(self) -> dict[str, str]:
        if self.path is None:
            return {}
        try:
            st = self.path.stat()
            if st.st_mtime != self._mtime or self._token is None:
                self._token = self.path.read_text(encoding="utf-8", errors="replace").strip()
                self._mtime = st.st_mtime
        except OSError as e:
            raise LogSourceUnavailable(f"cannot read token file {self.path}: {e.strerror}") from e
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}


class RateLimited(Exception):
    """Internal: the backend answered 429; ``delay`` seconds to wait."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"rate limited for {delay:.1f} s")
        self.delay = delay


def check_response(status: int, headers: Mapping[str, str], body: bytes, what: str, default_backoff_s: float) -> None:
    """Map an HTTP status to the error tree (2xx passes)."""
    if 200 <= status < 300:
        return
    snippet = body[:300].decode("utf-8", "replace").strip()
    if status == 429:
        ra = parse_retry_after(headers.get("retry-after"))
        raise RateLimited(ra if ra is not None else default_backoff_s)
    if status >= 500 or status in (401, 403, 408):
        # 401/403: a token being rotated looks like this too; the caller backs off and retries
        raise LogSourceUnavailable(f"{what}: HTTP {status}: {snippet}", parse_retry_after(headers.get("retry-after")))
    raise LogSourceError(f"{what}: HTTP {status}: {snippet}")


Sleep = Callable[[float], Any]


@dataclass
class StreamState:
    """Per-stream bookkeeping of an HTTP backend: the cursor plus back-off and follow-mode state."""

    sel: StreamSelector
    cursor: StreamCursor = field(default_factory=StreamCursor)
    backoff_until: float = 0.0
    """``monotonic`` time before which ``read_new`` returns [] without asking (429)."""
    queue: list[Entry] = field(default_factory=list)
    """Follow mode: entries received from the tail and not yet returned."""
    rx_pos_ns: int | None = None
    """Follow mode: newest timestamp received (reconnects start there)."""
    dropped: set[tuple[str, int]] = field(default_factory=set)
    """Follow mode: (stream_key, ts_ns) the server said it dropped: back-filled by a range query."""
    task: asyncio.Task[None] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    connected: bool = False
    reconnects: int = 0
    last_error: str | None = None


class HttpLogSource:
    """Shared engine of the HTTP backends (Loki, VictoriaLogs): polling with a cursor, pagination
    at the limit, windows over long gaps, 429 back-off, and the optional follow mode (a tail
    connection per stream feeding a queue, reconnected with exponential back-off, with range
    queries filling whatever the tail could not deliver).

    Subclasses implement ``_query(sel, start_ns, end_ns) -> list[Entry]`` (at most ``limit``
    entries, the oldest first, ``start`` inclusive, ``end`` exclusive) and
    ``_tail_once(st, start_ns)`` (one tail connection: push entries into ``st.queue`` until the
    server closes; raise on failure)."""

    kind = "http"

    def __init__(self, *, limit: int = 1000, max_pages: int = 20, lookback_s: float = 3600.0,
                 max_window_s: float = 3600.0, settle_s: float = 30.0, reorder_window_s: float = 0.0,
                 follow: bool = False, backoff_s: float = 5.0, reconnect_min_s: float = 0.5,
                 reconnect_max_s: float = 30.0, max_queue: int = 100_000, tail_reorder_s: float = 10.0,
                 clock_ns: Callable[[], int] = time.time_ns, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Sleep = asyncio.sleep) -> None:
        if limit < 1 or max_pages < 1:
            raise ValueError("limit and max_pages must be ≥ 1")
        self.limit = limit
        self.max_pages = max_pages
        self.lookback_ns = int(lookback_s * 1e9)
        self.max_window_ns = max(1, int(max_window_s * 1e9))
        self.settle_ns = int(settle_s * 1e9)
        self.reorder_ns = int(reorder_window_s * 1e9)
        self.follow = follow
        self._keep_ns = max(self.reorder_ns, int(tail_reorder_s * 1e9)) if follow else self.reorder_ns
        """How far below the position digests are kept (and late entries accepted): the reorder
        window, widened in follow mode to ``tail_reorder_s``."""
        self.backoff_s = backoff_s
        self.reconnect_min_s = reconnect_min_s
        self.reconnect_max_s = reconnect_max_s
        self.max_queue = max_queue
        self._clock_ns = clock_ns
        self._mono = monotonic
        self._sleep = sleep
        self._streams: dict[str, StreamState] = {}
        self._restored: dict[str, StreamCursor] = {}
        self._closed = False

    # ---- subclass hooks ----------------------------------------------------------------------
    async def _query(self, sel: StreamSelector, start_ns: int, end_ns: int) -> list[Entry]:
        raise NotImplementedError

    async def _tail_once(self, st: StreamState, start_ns: int) -> None:
        raise NotImplementedError

    async def _aclose_transport(self) -> None:
        pass

    # ---- LogSource ---------------------------------------------------------------------------
    async def read_new(self, sel: StreamSelector) -> list[LogLine]:
        if self._closed:
            raise LogSourceError("log source is closed")
        st = self._stream(sel)
        async with st.lock:  # one reader per stream at a time: the cursor is not shared safely
            if not self.follow:
                return await self._poll(st)
            return await self._read_follow(st)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [st.task for st in self._streams.values() if st.task]
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        await self._aclose_transport()

    def state(self) -> dict[str, Any]:
        cursors = dict(self._restored)
        cursors.update({k: st.cursor for k, st in self._streams.items()})
        return cursors_state(self.kind, cursors)

    def restore(self, state: Mapping[str, Any]) -> None:
        self._restored = cursors_restore(self.kind, state)
        for k, st in self._streams.items():
            if k in self._restored:
                st.cursor = self._restored.pop(k)

    def stats(self, sel: StreamSelector) -> dict[str, Any]:
        """Counters for one stream (for logs/metrics): late drops, same-timestamp skips, reconnects."""
        st = self._stream(sel)
        return {"seq": st.cursor.seq, "pos_ns": st.cursor.pos_ns, "late_dropped": st.cursor.late_dropped,
                "stuck_skips": st.cursor.stuck_skips, "reconnects": st.reconnects, "connected": st.connected,
                "queued": len(st.queue), "last_error": st.last_error}

    # ---- polling -----------------------------------------------------------------------------
    def _stream(self, sel: StreamSelector) -> StreamState:
        k = sel.key()
        st = self._streams.get(k)
        if st is None:
            restored = self._restored.pop(k, None)
            st = StreamState(sel=sel, cursor=restored or StreamCursor())
            self._streams[k] = st
        return st

    def _now_ns(self) -> int:
        return int(self._clock_ns())

    async def _poll(self, st: StreamState) -> list[LogLine]:
        if self._mono() < st.backoff_until:
            return []
        c = st.cursor
        end = self._now_ns()
        if c.pos_ns is None:
            c.pos_ns = datetime_to_ns(st.sel.since) if st.sel.since else max(0, end - self.lookback_ns)
        start = max(0, c.pos_ns - self.reorder_ns)
        out: list[LogLine] = []
        for _ in range(self.max_pages):
            wend = min(end, start + self.max_window_ns)
            if wend <= start:
                break
            try:
                entries = await self._query(st.sel, start, wend)
            except RateLimited as e:
                st.backoff_until = self._mono() + e.delay
                log.info("log source rate limited: backing off %.1f s", e.delay)
                break
            except LogSourceUnavailable:
                if out:  # return what we have; the next call meets the error again
                    break
                raise
            out += c.accept(entries, self._keep_ns)
            if len(entries) >= self.limit:
                last = max(e.ts_ns for e in entries)
                if last <= start:
                    # more than `limit` entries share one timestamp: step past it (the rest is lost)
                    c.stuck_skips += 1
                    log.warning("more than %d log entries at one timestamp (%d): skipping past it",
                                self.limit, last)
                    last = start + 1
                c.advance(last, self._keep_ns)
                start = last
                continue
            newest = max((e.ts_ns for e in entries), default=c.pos_ns)
            c.advance(max(newest, min(wend, end - self.settle_ns)), self._keep_ns)
            if wend >= end:
                break
            start = wend
        return out

    # ---- follow mode -------------------------------------------------------------------------
    async def _read_follow(self, st: StreamState) -> list[LogLine]:
        out: list[LogLine] = []
        tail_down = st.task is None or (not st.connected and st.last_error is not None)
        if tail_down:
            # first call (catch up with range queries: the tail's look-back is best effort) or the
            # tail is reconnecting: poll so that nothing waits for the tail to come back
            out += await self._poll(st)
        if st.task is None:
            st.task = asyncio.get_running_loop().create_task(self._tail_loop(st))
        backfill: list[Entry] = []
        wanted: set[tuple[str, int]] = set()
        if st.dropped and self._mono() >= st.backoff_until:
            lo = min(ts for _, ts in st.dropped)
            hi = max(ts for _, ts in st.dropped) + 1
            try:
                wanted = set(st.dropped)
                backfill = [e for e in await self._query_all(st.sel, lo, hi) if (e.stream_key, e.ts_ns) in wanted]
                st.dropped.clear()
            except RateLimited as e:
                st.backoff_until = self._mono() + e.delay
            except LogSourceUnavailable:
                if not out and not st.queue:
                    raise
        entries, st.queue = st.queue, []
        if entries or backfill:
            # a tail delivers streams independently: an entry of one stream may arrive after a
            # newer entry of another. The follow window (_keep_ns) tolerates that and keeps the
            # digests a reconnect (which starts _keep_ns before the newest entry) replays.
            out += st.cursor.accept(entries + backfill, self._keep_ns, older_ok=wanted)
            if entries:
                st.cursor.advance(max(e.ts_ns for e in entries), self._keep_ns)
        return out

    async def _query_all(self, sel: StreamSelector, lo: int, hi: int) -> list[Entry]:
        got: list[Entry] = []
        start = lo
        for _ in range(self.max_pages):
            page = await self._query(sel, start, hi)
            got += page
            if len(page) < self.limit:
                break
            start = max(start + 1, max(e.ts_ns for e in page))
        return got

    def _push(self, st: StreamState, entries: list[Entry]) -> None:
        if not entries:
            return
        st.queue.extend(entries)
        if len(st.queue) > self.max_queue:  # nobody reads: keep the newest, the range query has the rest
            cut = len(st.queue) - self.max_queue
            st.dropped.update((e.stream_key, e.ts_ns) for e in st.queue[:cut])
            del st.queue[:cut]
        newest = max(e.ts_ns for e in entries)
        if st.rx_pos_ns is None or newest > st.rx_pos_ns:
            st.rx_pos_ns = newest

    async def _tail_loop(self, st: StreamState) -> None:
        delay = self.reconnect_min_s
        while not self._closed:
            start = max(st.cursor.pos_ns or 0, st.rx_pos_ns or 0)
            start = max(0, start - self._keep_ns)
            was_connected = False
            try:
                await self._tail_once(st, start)
                was_connected = st.connected
                st.last_error = "tail closed by the server"
            except asyncio.CancelledError:
                st.connected = False
                raise
            except Exception as e:  # any failure means: reconnect later
                was_connected = st.connected
                st.last_error = f"{type(e).__name__}: {e}"
                if isinstance(e, RateLimited):
                    delay = max(delay, e.delay)
            st.connected = False
            st.reconnects += 1
            if was_connected:
                delay = self.reconnect_min_s
            log.info("log tail disconnected (%s); reconnecting in %.1f s", st.last_error, delay)
            await self._sleep(delay)
            delay = min(self.reconnect_max_s, delay * 2)
