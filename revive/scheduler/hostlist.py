"""Slurm hostlist expressions: ``node[1-3,5]`` ⇄ ``["node1", "node2", "node3", "node5"]``.

Pure functions, no I/O. Supports zero padding (``gpu-node-[001-003]``), several bracket groups
per name (``rack[1-2]-n[1-2]``, expanded as a cartesian product), comma-separated lists at the top
level (``node1,gpu[1-2]``), and Slurm's ``(null)`` / empty string for "no nodes".
"""

from __future__ import annotations

import re

__all__ = ["expand_hostlist", "compress_hostlist"]

_MAX_HOSTS = 1_000_000


def _split_top_level(expr: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_range_set(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"empty range in hostlist {expr!r}")
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise ValueError(f"bad range {item!r} in hostlist {expr!r}")
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is None:
            out.append(lo_s)
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise ValueError(f"descending range {item!r} in hostlist {expr!r}")
        if hi - lo >= _MAX_HOSTS:
            raise ValueError(f"range {item!r} too large in hostlist {expr!r}")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_one(pattern: str, expr: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", pattern)
    if not m:
        return [pattern]
    prefix, suffix = pattern[: m.start()], pattern[m.end() :]
    result: list[str] = []
    for value in _expand_range_set(m.group(1), expr):
        result.extend(_expand_one(prefix + value + suffix, expr))
        if len(result) > _MAX_HOSTS:
            raise ValueError(f"hostlist {expr!r} expands to too many hosts")
    return result


def expand_hostlist(expr: str | None) -> list[str]:
    """``"node[1-3,5]"`` → ``["node1", "node2", "node3", "node5"]``.

    ``None``, ``""`` and ``"(null)"`` give ``[]``. Order is preserved; duplicates are dropped.
    Raises ``ValueError`` on malformed input.
    """
    if expr is None:
        return []
    expr = expr.strip()
    if not expr or expr == "(null)":
        return []
    seen: dict[str, None] = {}
    for part in _split_top_level(expr):
        for host in _expand_one(part, expr):
            seen.setdefault(host, None)
    return list(seen)


def _format_ranges(nums: list[tuple[int, str]]) -> str:
    # nums: sorted unique (value, original text); consecutive values with the same width merge
    chunks: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while (
            j + 1 < len(nums)
            and nums[j + 1][0] == nums[j][0] + 1
        ):
            j += 1
        chunks.append(nums[i][1] if i == j else f"{nums[i][1]}-{nums[j][1]}")
        i = j + 1
    return ",".join(chunks)


def compress_hostlist(hosts: list[str]) -> str:
    """``["node1", "node2", "node3", "node5"]`` → ``"node[1-3,5]"``.

    Hosts are grouped by their prefix before the trailing number (and by digit width when the
    number is zero padded); a group of one stays a plain name. Groups keep first-seen order.
    ``expand_hostlist(compress_hostlist(h)) == sorted-within-group(h)``.
    """
    parsed: list[tuple[str, str] | None] = []
    padded_prefixes: set[str] = set()
    for h in hosts:
        m = re.fullmatch(r"(.*?)(\d+)", h)
        if m is None:
            parsed.append(None)
            continue
        parsed.append((m.group(1), m.group(2)))
        if len(m.group(2)) > 1 and m.group(2).startswith("0"):
            padded_prefixes.add(m.group(1))
    groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
    plain: dict[str, None] = {}
    order: list[tuple[str, str | tuple[str, int]]] = []
    for h, pd in zip(hosts, parsed, strict=True):
        if pd is None:
            if h not in plain:
                plain[h] = None
                order.append(("plain", h))
            continue
        prefix, digits = pd
        # zero-padded names (gpu-node-001) only merge with names of the same width
        key = (prefix, len(digits) if prefix in padded_prefixes else 0)
        if key not in groups:
            groups[key] = []
            order.append(("group", key))
        groups[key].append((int(digits), digits))
    out: list[str] = []
    for _kind, item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        nums = sorted(set(groups[(prefix, width)]))
        if len(nums) == 1:
            out.append(prefix + nums[0][1])
        else:
            out.append(f"{prefix}[{_format_ranges(nums)}]")
    return ",".join(out)
