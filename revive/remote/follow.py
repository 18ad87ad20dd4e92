"""Remote log follower: what many files on the login node gained since the last poll, read with
SFTP requests (``stat``, ``open``, ``read`` at an offset) over ONE multiplexed SSH connection.

Same line semantics as the local ``worker/tail.py`` Follower: complete lines only (a partial
last line waits for its newline), lines capped at 4096 bytes keeping head and tail, invalid UTF-8
replaced, NULs dropped, a trailing CR dropped, a missing file reads as nothing, a truncated or
replaced file is read again from the start (line numbers restart).

File identity. SFTP v3 (OpenSSH's sftp-server) reports no inode, so "same file" is checked by
content: every read starts ``ANCHOR`` bytes before the offset, and those bytes must be the ones
already read there. A file that shrank below the offset was truncated; one whose bytes before
the offset changed was replaced (rotated, or truncated and rewritten past the offset) -- both
are read again from 0. (The local follower's inode test misses a truncate-and-rewrite past the
offset between two polls; this one catches it unless the new text is byte-identical there.)

Connection. ``conn_factory()`` returns an asyncssh client connection (see
:func:`revive.remote.connector`); the follower owns it and its one SFTP session, shared by all
paths (SFTP requests are pipelined, so ``read_many`` reads many files at once). A dropped
connection is reopened once at once inside the same call; when that fails the call raises
:class:`~revive.remote.RemoteUnavailable` and further calls fail fast until the next attempt is
due (exponential backoff, ``backoff_initial_s`` doubling up to ``backoff_max_s``). State is only
advanced after a read completed, and nothing is awaited between advancing it and returning the
lines, so a reconnect never loses or repeats a line.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from revive.logline import LINE_CAP, cap_bytes, decode_line
from revive.remote import ConnFactory, HostKeyRejected, RemoteUnavailable

__all__ = ["RemoteFollower", "RemoteTailState", "FollowBatch", "LINE_CAP", "MAX_READ", "ANCHOR"]

MAX_READ = 8 * 1024 * 1024
"""Bytes read per poll per file; a faster-growing log is caught up over several polls."""
ANCHOR = 64
"""Bytes before the offset that are read again to check the file is still the same file."""
_PARTIAL_CAP = LINE_CAP * 4

Line = tuple[int, str]


@dataclass
class RemoteTailState:
    path: str
    offset: int = 0
    """Bytes consumed (complete lines and the partial line)."""
    anchor: bytes = b""
    """The last ≤ ANCHOR bytes before ``offset``."""
    partial: bytes = b""
    line_no: int = 0
    line_offset: int = 0
    """Offset just past the last complete line (what ``save`` records)."""
    line_anchor: bytes = b""
    """The last ≤ ANCHOR bytes before ``line_offset``."""
    mtime: int | None = None
    size: int = 0
    checked_at: float = 0.0
    """``time.monotonic()`` of the last poll that reached the file (or found it missing): a
    silence detector must not count the time the link was down as the job being silent."""
    resets: int = 0
    """How many times the file was found truncated or replaced."""

    def reset(self) -> None:
        self.offset, self.anchor, self.partial, self.line_no = 0, b"", b"", 0
        self.line_offset, self.line_anchor, self.mtime, self.size = 0, b"", None, 0
        self.resets += 1


class FollowBatch(NamedTuple):
    lines: dict[str, list[Line]]
    """New lines per path that was read (a path that could not be read is absent)."""
    error: RemoteUnavailable | None
    """Set when the connection failed for some paths (they were not advanced)."""


def _split(st: RemoteTailState, new: bytes) -> list[Line]:
    """Advance ``st`` over ``new`` (bytes at ``st.offset``) and return the complete lines."""
    pos0 = st.offset
    nl = new.rfind(b"\n")
    if nl >= 0:
        st.line_offset = pos0 + nl + 1
        st.line_anchor = (st.anchor + new[: nl + 1])[-ANCHOR:]
    st.offset += len(new)
    st.anchor = (st.anchor + new)[-ANCHOR:]
    data = st.partial + new
    parts = data.split(b"\n")
    st.partial = parts.pop()
    if len(st.partial) > _PARTIAL_CAP:  # a huge line without newline: keep its head and its tail
        st.partial = cap_bytes(st.partial, LINE_CAP * 2)
    out = []
    for raw in parts:
        st.line_no += 1
        raw = cap_bytes(raw, 4 * LINE_CAP)  # bounded before decoding; decode_line caps to LINE_CAP
        out.append((st.line_no, decode_line(raw)))
    return out


def _is_file_error(e: BaseException) -> bool:
    """An SFTP status about this one file (missing, permission, is a directory), not the link."""
    import asyncssh

    return isinstance(e, asyncssh.SFTPError) and not isinstance(
        e, (asyncssh.SFTPConnectionLost, asyncssh.SFTPNoConnection))


def _is_link_error(e: BaseException) -> bool:
    import asyncssh

    return isinstance(e, (OSError, EOFError, asyncio.TimeoutError, asyncssh.Error)) and not _is_file_error(e)


@dataclass
class _Link:
    conn: Any
    sftp: Any
    gen: int


class RemoteFollower:
    """Follows many remote files over one SSH connection.

    ``await read_new(path)`` → the complete new lines of ``path`` as ``(line number, text)``;
    ``await read_many(paths)`` reads them concurrently; ``await close()`` at the end.
    Raises :class:`~revive.remote.RemoteUnavailable` (and its :class:`HostKeyRejected`) only.
    """

    def __init__(
        self,
        conn_factory: ConnFactory,
        *,
        name: str | None = None,
        op_timeout_s: float = 30.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        max_read: int = MAX_READ,
        offsets_file: str | os.PathLike[str] | None = None,
        cluster: str = "local",
    ) -> None:
        self._factory = conn_factory
        if name:
            self.name = name
        else:  # typed local: `name or getattr(...)` would infer the default as `str | None` from `name`
            label: str = getattr(conn_factory, "label", "login")
            self.name = label
        self.op_timeout_s = op_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.max_read = max_read
        self.offsets_file = Path(offsets_file) if offsets_file else None
        self.cluster = cluster
        self.states: dict[str, RemoteTailState] = {}
        self.connects = 0
        """Successful connections so far (1 + reconnects)."""
        self.last_error: str | None = None
        self._link: _Link | None = None
        self._gen = 0
        self._lock = asyncio.Lock()
        self._path_locks: dict[str, asyncio.Lock] = {}
        self._failures = 0
        self._retry_at = 0.0
        self._load()

    # ---------------------------------------------------------------- connection --
    async def _get_link(self) -> _Link:
        link = self._link
        if link is not None and not link.conn.is_closed():
            return link
        async with self._lock:
            link = self._link
            if link is not None and not link.conn.is_closed():
                return link
            if link is not None:
                self._drop(link.gen, "connection closed")
            now = time.monotonic()
            if now < self._retry_at:
                wait = self._retry_at - now
                raise RemoteUnavailable(
                    f"ssh {self.name}: unavailable ({self.last_error}); next attempt in {wait:.1f}s",
                    self.name, wait)
            conn = None
            try:
                conn = await asyncio.wait_for(self._factory(), self.op_timeout_s)
                sftp = await asyncio.wait_for(conn.start_sftp_client(), self.op_timeout_s)
            except Exception as e:
                if conn is not None:
                    conn.close()
                self._failures += 1
                delay = self.backoff_initial_s * 2 ** min(self._failures - 1, 30) * random.uniform(0.9, 1.1)
                delay = min(self.backoff_max_s, delay)
                self._retry_at = time.monotonic() + delay
                msg = str(e) if isinstance(e, RemoteUnavailable) else f"ssh {self.name}: {type(e).__name__}: {e}"
                self.last_error = msg
                if isinstance(e, RemoteUnavailable):
                    e.retry_after_s = delay
                    raise
                raise RemoteUnavailable(msg, self.name, delay) from None
            except BaseException:  # cancelled: leave no half-open connection behind
                if conn is not None:
                    conn.close()
                raise
            self._failures, self._retry_at, self.last_error = 0, 0.0, None
            self._gen += 1
            self.connects += 1
            self._link = _Link(conn, sftp, self._gen)
            return self._link

    def _drop(self, gen: int, why: str) -> None:
        link = self._link
        if link is None or link.gen != gen:
            return  # someone already replaced it
        self._link = None
        self.last_error = why
        try:
            link.sftp.exit()
        except Exception:  # noqa: BLE001
            pass
        link.conn.close()

    async def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            try:
                link.sftp.exit()
            except Exception:  # noqa: BLE001
                pass
            link.conn.close()
            try:
                await asyncio.wait_for(link.conn.wait_closed(), 5)
            except (TimeoutError, OSError):
                pass

    async def __aenter__(self) -> RemoteFollower:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # --------------------------------------------------------------------- reads --
    async def read_new(self, path: str) -> list[Line]:
        """New complete lines of the remote ``path``. Missing or unreadable file → ``[]``."""
        lock = self._path_locks.setdefault(path, asyncio.Lock())
        async with lock:
            st = self.states.setdefault(path, RemoteTailState(path=path))
            for attempt in (0, 1):
                link = await self._get_link()
                try:
                    return await self._read(link.sftp, st)
                except Exception as e:
                    if not _is_link_error(e):
                        raise
                    self._drop(link.gen, f"{type(e).__name__}: {e}")
                    if attempt == 1:
                        raise RemoteUnavailable(
                            f"ssh {self.name}: connection lost while reading {path!r}: {self.last_error}",
                            self.name) from None
            raise AssertionError("unreachable")

    async def read_many(self, paths: list[str]) -> FollowBatch:
        """Read many paths at once over the one SFTP session; never loses what was read."""
        results = await asyncio.gather(*(self.read_new(p) for p in paths), return_exceptions=True)
        lines: dict[str, list[Line]] = {}
        error: RemoteUnavailable | None = None
        for p, r in zip(paths, results, strict=False):
            if isinstance(r, RemoteUnavailable):
                error = error if isinstance(error, HostKeyRejected) else r
            elif isinstance(r, BaseException):
                raise r
            else:
                lines[p] = r
        return FollowBatch(lines, error)

    async def read_tail(self, path: str, max_bytes: int = 1024 * 1024) -> tuple[bytes, int]:
        """The last ``max_bytes`` of ``path`` and its size (the remote ``read_tail`` of
        ``activities/evidence.py``). Raises ``FileNotFoundError``/``PermissionError``/``OSError``
        for the file, :class:`RemoteUnavailable` for the link."""
        import asyncssh

        for attempt in (0, 1):
            link = await self._get_link()
            try:
                sftp, t = link.sftp, self.op_timeout_s
                async with await asyncio.wait_for(sftp.open(path, "rb"), t) as f:
                    size = (await asyncio.wait_for(f.stat(), t)).size or 0
                    start = max(0, size - max_bytes)
                    data = await asyncio.wait_for(f.read(size - start, start), t) if size > start else b""
                return data, size
            except asyncssh.SFTPNoSuchFile as e:
                raise FileNotFoundError(2, e.reason, path) from None
            except asyncssh.SFTPPermissionDenied as e:
                raise PermissionError(13, e.reason, path) from None
            except Exception as e:
                if _is_file_error(e):
                    raise OSError(5, getattr(e, "reason", str(e)), path) from None
                if not _is_link_error(e):
                    raise
                self._drop(link.gen, f"{type(e).__name__}: {e}")
                if attempt == 1:
                    raise RemoteUnavailable(f"ssh {self.name}: connection lost while reading {path!r}: "
                                            f"{self.last_error}", self.name) from None
        raise AssertionError("unreachable")

    async def _read(self, sftp: Any, st: RemoteTailState) -> list[Line]:
        t = self.op_timeout_s
        for _ in range(3):  # a replaced file is re-read from 0 at once (bounded)
            try:
                attrs = await asyncio.wait_for(sftp.stat(st.path), t)
            except Exception as e:
                if _is_file_error(e):
                    st.checked_at = time.monotonic()
                    return []  # missing / no permission: like the local follower
                raise
            size = attrs.size or 0
            mtime = attrs.mtime
            if size < st.offset:  # truncated
                st.reset()
                continue
            if size == st.offset and (mtime == st.mtime or st.offset == 0):
                st.checked_at = time.monotonic()
                return []
            start = st.offset - len(st.anchor)
            want = len(st.anchor) + min(self.max_read, size - st.offset)
            try:
                async with await asyncio.wait_for(sftp.open(st.path, "rb"), t) as f:
                    data = await asyncio.wait_for(f.read(want, start), t) if want else b""
            except Exception as e:
                if _is_file_error(e):
                    return []
                raise
            # ---- no await below this line: the state advances together with the return ----
            st.checked_at = time.monotonic()
            if data[: len(st.anchor)] != st.anchor:  # shorter, or other bytes: not the same file
                st.reset()
                continue
            st.mtime, st.size = mtime, size
            new = data[len(st.anchor):]
            if not new:
                return []
            return _split(st, new)
        return []

    # ------------------------------------------------------------------- offsets --
    def _key(self, path: str) -> str:
        return f"{self.cluster}|{self.name}|{path}"

    def _load(self) -> None:
        if not self.offsets_file or not self.offsets_file.exists():
            return
        try:
            data = json.loads(self.offsets_file.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError):
            return  # a broken cache means re-reading, never a crash
        prefix = f"{self.cluster}|{self.name}|"
        for key, v in (data.items() if isinstance(data, dict) else ()):
            if not isinstance(key, str) or not key.startswith(prefix):
                continue
            try:
                path = key[len(prefix):]
                off, line_no, anchor = int(v["offset"]), int(v["line_no"]), bytes.fromhex(v["anchor"])
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
                continue
            if off < 0 or line_no < 0 or len(anchor) > min(off, ANCHOR):
                continue
            self.states[path] = RemoteTailState(path=path, offset=off, anchor=anchor, line_no=line_no,
                                                line_offset=off, line_anchor=anchor)

    def save(self) -> None:
        """Record (offset past the last complete line, line number, anchor) per path."""
        if not self.offsets_file:
            return
        data = {}
        if self.offsets_file.exists():
            try:
                old = json.loads(self.offsets_file.read_text(encoding="utf-8", errors="replace"))
                data = {k: v for k, v in old.items()
                        if not k.startswith(f"{self.cluster}|{self.name}|")} if isinstance(old, dict) else {}
            except (OSError, ValueError, AttributeError):
                data = {}
        for p, s in self.states.items():
            data[self._key(p)] = {"offset": s.line_offset, "line_no": s.line_no, "anchor": s.line_anchor.hex()}
        tmp = self.offsets_file.with_suffix(".tmp")
        try:
            self.offsets_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.offsets_file)
        except OSError:
            pass
