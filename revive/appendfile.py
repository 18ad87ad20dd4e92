"""One durable append: the audit log, node checks and resumes, pinned SSH host keys.

``append_line(path, text)`` creates the parent folders, appends ``text`` (one or more whole lines)
with ``O_APPEND`` (a single ``write``: concurrent appenders never interleave within it on a local
file system) and ``fsync``s before returning, so a record counted after the call is on disk.
Raises ``OSError``. Blocking: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import os
from pathlib import Path


def append_line(path: str | Path, text: str, mode: int = 0o640) -> None:
    """Append ``text`` to ``path`` (created with ``mode`` when absent) and fsync it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
