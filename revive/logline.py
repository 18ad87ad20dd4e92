"""One policy for a log line Revive keeps or matches: decode, clean, and cap it.

A line longer than the cap keeps its head and its tail, joined by ``CUT_MARK``: the error that
ends a long line (a progress bar redrawn with ``\\r`` and then a traceback's last line, a JSON blob
with the message at the end) is in its tail, and what printed it is in its head. Every place that
stores or shows a line (the monitor's follower, the evidence window, attribution events, triggers,
case files) uses ``cap_line``; matchers look at ``match_window`` (a wider head + tail).

Units: characters for ``str``, bytes for ``bytes``.
"""

from __future__ import annotations

LINE_CAP = 4096
"""Characters kept of one line (head + ``CUT_MARK`` + tail)."""
MATCH_CAP = 2 * LINE_CAP
"""Characters of one line that signature matching looks at (head + tail)."""
CUT_MARK = " …[cut]… "


def cap_line(text: str, cap: int = LINE_CAP) -> str:
    """``text`` if it fits in ``cap`` characters, else its head and tail joined by ``CUT_MARK``
    (the result is exactly ``cap`` characters long)."""
    if len(text) <= cap:
        return text
    room = cap - len(CUT_MARK)
    head = room // 2
    return text[:head] + CUT_MARK + text[len(text) - (room - head):]


def match_window(text: str) -> str:
    """What signature matching reads of one line: the line, or its first and last ``LINE_CAP``
    characters joined by a newline (so no regex matches across the cut)."""
    if len(text) <= MATCH_CAP:
        return text
    return text[:LINE_CAP] + "\n" + text[-LINE_CAP:]


def cap_bytes(raw: bytes, cap: int = LINE_CAP) -> bytes:
    """The byte form of ``cap_line`` (for followers that cap before decoding)."""
    if len(raw) <= cap:
        return raw
    mark = CUT_MARK.encode()
    room = cap - len(mark)
    head = room // 2
    return raw[:head] + mark + raw[len(raw) - (room - head):]


def decode_line(raw: bytes, cap: int = LINE_CAP) -> str:
    """Bytes of one line → text: invalid UTF-8 replaced, NULs and a trailing ``\\r`` dropped, capped."""
    return cap_line(raw.decode("utf-8", errors="replace").replace("\x00", "").rstrip("\r"), cap)


MAX_INT_DIGITS = 4000
"""Longest run of digits ``log_int`` converts (Python refuses ``int()`` of more than 4300 digits)."""


def log_int(digits: str | None) -> int | None:
    """A number printed in a log line (``\\d+`` a regex captured) → int; None when absent, longer
    than ``MAX_INT_DIGITS`` digits (junk: ``int()`` would raise), or not digits only (no sign,
    space or ``_``, which ``int()`` would take)."""
    if not digits or len(digits) > MAX_INT_DIGITS or not digits.isdigit():
        return None
    try:
        return int(digits)
    except ValueError:
        return None
