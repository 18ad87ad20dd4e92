"""Log follower: reads what a file gained since the last poll (polling, ≤ 0.5 s).

Offsets live in a small JSON file keyed by cluster, path and inode. It is a cache: losing it only
means re-reading a log from the start, which incident dedupe makes safe. A truncated or replaced
file (size below the offset, or a new inode) is read again from the start. Partial last lines are
kept until their newline arrives; lines are capped (head and tail, ``revive.logline``); invalid UTF-8 is replaced.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from revive.logline import LINE_CAP, cap_bytes, decode_line

MAX_READ = 8 * 1024 * 1024
"""Bytes read per poll per file; a faster-growing log is caught up over several polls."""
PREFETCH_THREADS = 8
"""Threads ``Follower.prefetch`` stats and reads files on (the syscalls release the GIL)."""


@dataclass
class TailState:
    path: str
    inode: int = 0
    offset: int = 0
    partial: bytes = b""
    line_no: int = 0


@dataclass
class Follower:
    """Follows many files; ``read_new(path)`` returns the complete new lines with line numbers."""

    offsets_file: Path | None = None
    cluster: str = "local"
    states: dict[str, TailState] = field(default_factory=dict)
    _prefetched: dict[str, tuple[tuple[int, int], os.stat_result, bytes | None]] = field(
        default_factory=dict, repr=False)
    """path → ((inode, offset) the read was made for, stat, bytes or None), from ``prefetch``."""

    def __post_init__(self) -> None:
        if self.offsets_file and self.offsets_file.exists():
            try:
                data = json.loads(self.offsets_file.read_text(encoding="utf-8", errors="replace"))
            except (OSError, ValueError):
                data = {}  # a broken cache means re-reading, never a crash
            for key, v in (data.items() if isinstance(data, dict) else ()):
                try:  # entry by entry: one bad entry costs a re-read of that file only
                    c, path, inode = key.split("|", 2)
                    st = TailState(path=path, inode=int(inode), offset=int(v["offset"]),
                                   line_no=int(v.get("line_no", 0)))
                except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
                    continue
                if c == self.cluster and st.offset >= 0 and st.line_no >= 0:
                    self.states[path] = st

    def read_new(self, path: str) -> list[tuple[int, str]]:
        """New complete lines of ``path`` as (1-based line number, text). Missing file → []."""
        got = self.read_chunk(path)
        if got is None:
            return []
        first, data = got
        parts = data.split(b"\n")
        parts.pop()  # the chunk ends with a newline
        return [(first + i, decode_line(cap_bytes(raw, 4 * LINE_CAP))) for i, raw in enumerate(parts)]

    def read_chunk(self, path: str, st_hint: os.stat_result | None = None) -> tuple[int, bytes] | None:
        """New complete lines of ``path`` as one buffer: (line number of its first line, bytes
        ending with a newline), or None when nothing complete arrived (or the file is missing).
        Lines are raw: callers decode and cap them (``revive.logline``) as ``read_new`` does.
        ``st_hint``: a fresh ``os.stat`` of ``path`` the caller already has (saves the syscall).
        Uses the stat and bytes ``prefetch`` read for ``path``, when there are some."""
        st = self.states.get(path)
        if st is None:
            st = self.states[path] = TailState(path=path)
        pre = self._prefetched.pop(path, None)
        if pre is not None and pre[0] == (st.inode, st.offset):
            s, data = pre[1], pre[2]
        else:
            try:
                s = st_hint if st_hint is not None else os.stat(path)
            except OSError:
                return None
            data = self._read(path, s, st.inode, st.offset)
        if s.st_ino != st.inode or s.st_size < st.offset:
            st.inode, st.offset, st.partial, st.line_no = s.st_ino, 0, b"", 0
        if not data:
            return None
        st.offset += len(data)
        if st.partial:
            data = st.partial + data
        cut = data.rfind(b"\n") + 1
        st.partial = data[cut:]
        if len(st.partial) > LINE_CAP * 4:  # a huge line without newline: keep its head and its tail
            st.partial = cap_bytes(st.partial, LINE_CAP * 2)
        if cut == 0:
            return None
        chunk = data[:cut] if cut < len(data) else data
        first = st.line_no + 1
        st.line_no += chunk.count(b"\n")
        return first, chunk

    @staticmethod
    def _read(path: str, s: os.stat_result, inode: int, offset: int) -> bytes | None:
        """The bytes ``read_chunk`` takes from ``path`` given its stat ``s`` and the state's inode
        and offset (from 0 for a new or truncated file); None for nothing new or an OSError."""
        if s.st_ino != inode or s.st_size < offset:
            offset = 0
        if s.st_size == offset:
            return None
        try:  # os.pread: no Python file object per read (the monitor reads thousands of logs a pass)
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.pread(fd, min(MAX_READ, s.st_size - offset), offset)
            finally:
                os.close(fd)
        except OSError:
            return None

    def prefetch(self, paths: list[str], threads: int = PREFETCH_THREADS) -> int:
        """``stat`` and read the new bytes of ``paths`` on ``threads`` threads at once, so one slow
        file-system call (a busy ext4 journal, a network file system) does not hold up the others;
        the next ``read_chunk(path)`` uses what was read (the file as it was then). Blocking: run
        it off the event loop (``asyncio.to_thread``). Returns how many files had new bytes.
        Call it only while nothing else uses this follower (it reads the offsets)."""
        self._prefetched.clear()  # reads a previous pass made for files nobody read since
        jobs = [(p, st.inode, st.offset) if (st := self.states.get(p)) else (p, 0, 0) for p in dict.fromkeys(paths)]

        def one(job: tuple[str, int, int]) -> tuple[str, tuple[tuple[int, int], os.stat_result, bytes | None]] | None:
            p, inode, offset = job
            try:
                s = os.stat(p)
            except OSError:
                return None
            return p, ((inode, offset), s, self._read(p, s, inode, offset))

        got = 0
        with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="revive-tail") as ex:
            for r in ex.map(one, jobs, chunksize=max(1, len(jobs) // (4 * max(1, threads)))):
                if r is not None:
                    self._prefetched[r[0]] = r[1]
                    got += r[1][2] is not None
        return got

    def save(self) -> None:
        if not self.offsets_file:
            return
        data = {f"{self.cluster}|{p}|{s.inode}": {"offset": s.offset - len(s.partial), "line_no": s.line_no}
                for p, s in self.states.items()}
        tmp = self.offsets_file.with_suffix(".tmp")
        try:
            self.offsets_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.offsets_file)
        except OSError:
            pass
