"""Test-only fault hook for the chaos suite (``make chaos``, ``tests/chaos/``).

Inert unless ``REVIVE_CHAOS_HOOK`` is set. Activities and the monitor call :func:`point` (sync) or
:func:`apoint` (async) at named places; workflow code never does (it must stay deterministic).

Environment:

- ``REVIVE_CHAOS_HOOK=<point>[,<point>…]``: the points that fire (names in :class:`Point`);
- ``REVIVE_CHAOS_DIR=<dir>``: where the marker ``<dir>/<point>.fired`` is written (default: the
  current directory). A point fires at most once per marker dir: the marker is created with
  ``O_EXCL`` before acting, so a restarted process passes the point;
- ``REVIVE_CHAOS_ACTION=kill|pause`` (default ``kill``): ``kill`` SIGKILLs the calling process right
  after writing the marker; ``pause`` (``apoint`` only) waits until ``<dir>/<point>.go`` exists
  (the harness injects its fault meanwhile, e.g. stops slurmctld), at most
  ``REVIVE_CHAOS_PAUSE_S`` seconds (default 300).

The marker holds one JSON object: ``{"point", "pid", "unix_time", "action"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from enum import StrEnum
from pathlib import Path

ENV_HOOK = "REVIVE_CHAOS_HOOK"
ENV_DIR = "REVIVE_CHAOS_DIR"
ENV_ACTION = "REVIVE_CHAOS_ACTION"
ENV_PAUSE_S = "REVIVE_CHAOS_PAUSE_S"


class Point(StrEnum):
    """Named kill points. Worker side (activities) and monitor side."""

    gather = "gather"
    """start of ``gather_evidence`` (incident state ``gathering``)"""
    await_approval = "await-approval"
    """``notify`` for the ``approval_needed`` event (state ``awaiting_approval``; needs a webhook)"""
    before_drain = "before-drain"
    """``drain_nodes`` before its scontrol command"""
    after_drain = "after-drain"
    """``drain_nodes`` after the drain was issued, before the activity completes"""
    before_requeue = "before-requeue"
    """``requeue_job`` start: between the drain and the requeue"""
    after_requeue = "after-requeue"
    """``requeue_job`` after the requeue was issued, before the activity completes"""
    verify = "verify"
    """start of ``verify_progress`` (state ``acting``, runbook verifying)"""
    monitor_opened = "monitor-opened"
    """monitor: right after it started an incident workflow (before the requeue)"""
    monitor_new_attempt = "monitor-new-attempt"
    """monitor: when it first sees a job's restart count go up (after the requeue)"""


def _armed(name: str) -> Path | None:
    want = os.environ.get(ENV_HOOK)
    if not want or name not in {w.strip() for w in want.split(",")}:
        return None
    d = Path(os.environ.get(ENV_DIR) or ".")
    marker = d / f"{name}.fired"
    action = os.environ.get(ENV_ACTION, "kill")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return None  # fired already (this process restarted): pass
    except OSError:
        return None  # no marker dir: never kill blindly
    with os.fdopen(fd, "w") as f:
        json.dump({"point": name, "pid": os.getpid(), "unix_time": time.time(), "action": action}, f)
    return marker


def point(name: str) -> None:
    """Kill the process at ``name`` if the hook names it (once per marker dir); else nothing."""
    if _armed(name) is not None and os.environ.get(ENV_ACTION, "kill") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


async def apoint(name: str) -> None:
    """As :func:`point`; with ``REVIVE_CHAOS_ACTION=pause`` waits (asynchronously, so heartbeats go
    on) for ``<dir>/<name>.go``, at most ``REVIVE_CHAOS_PAUSE_S`` s."""
    marker = _armed(name)
    if marker is None:
        return
    if os.environ.get(ENV_ACTION, "kill") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    go = marker.with_suffix(".go")
    deadline = time.monotonic() + float(os.environ.get(ENV_PAUSE_S, "300"))
    while not go.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
