"""Local (or shared-file-system) log files behind the :class:`~revive.logsources.base.LogSource` interface.

A thin adapter over :class:`revive.tail.Follower`, which keeps its semantics: offsets by path and
inode, partial last lines kept until their newline, lines capped at 4 KB (head and tail), a
truncated or replaced file read again from the start, at most 8 MiB per poll. The selector's
``path`` names the file. ``seq`` counts lines delivered per path (it equals the line number until
the file is first truncated or rotated; after that it keeps growing while the Follower's line
numbers restart).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from revive.logsources.base import STATE_VERSION, LogLine, LogSourceError, StreamSelector, log
from revive.tail import Follower, TailState


class FileLogSource:
    """:class:`~revive.logsources.base.LogSource` over files; ``read_new`` never raises for a
    missing or unreadable file (it returns [] like the Follower), only for a selector without
    ``path`` (:class:`~revive.logsources.base.LogSourceError`)."""

    kind = "file"

    def __init__(self, follower: Follower | None = None, *, offsets_file: str | Path | None = None,
                 cluster: str = "local") -> None:
        self.follower = follower or Follower(offsets_file=Path(offsets_file) if offsets_file else None,
                                             cluster=cluster)
        self._seq: dict[str, int] = {}
        self._lock = asyncio.Lock()

    async def read_new(self, sel: StreamSelector) -> list[LogLine]:
        if not sel.path:
            raise LogSourceError("file log source: the selector has no path")
        path = sel.path
        async with self._lock:  # the Follower is not thread-safe; reads run off the event loop
            rows = await asyncio.to_thread(self.follower.read_new, path)
        if path not in self._seq:
            # first read of this path in this process: continue the numbering from the Follower's
            # own line counter (restored from its offsets file) when no state() was restored
            self._seq[path] = max(0, (rows[0][0] - 1) if rows else self._line_no(path))
        labels = {"path": path, **sel.labels}
        out = []
        for _line_no, text in rows:
            self._seq[path] += 1
            out.append(LogLine(seq=self._seq[path], text=text, ts=None, labels=dict(labels)))
        return out

    def _line_no(self, path: str) -> int:
        st = self.follower.states.get(path)
        return st.line_no if st else 0

    async def close(self) -> None:
        await asyncio.to_thread(self.follower.save)

    def state(self) -> dict[str, Any]:
        files = {p: {"inode": s.inode, "offset": s.offset - len(s.partial), "line_no": s.line_no}
                 for p, s in self.follower.states.items()}
        return {"version": STATE_VERSION, "kind": self.kind, "files": files, "seq": dict(self._seq)}

    def restore(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION or state.get("kind") != self.kind:
            if state:
                log.warning("file log source: state of another kind/version ignored")
            return
        files = state.get("files")
        for path, v in (files.items() if isinstance(files, Mapping) else ()):
            try:
                ts = TailState(path=str(path), inode=int(v["inode"]), offset=int(v["offset"]),
                               line_no=int(v.get("line_no", 0)))
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                continue
            if ts.offset >= 0 and ts.line_no >= 0:
                self.follower.states[ts.path] = ts
        seq = state.get("seq")
        for path, n in (seq.items() if isinstance(seq, Mapping) else ()):
            try:
                if int(n) >= 0:
                    self._seq[str(path)] = int(n)
            except (TypeError, ValueError, OverflowError):
                continue
