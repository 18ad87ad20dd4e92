"""Blocking work off the worker's event loop.

Every activity is a coroutine on one event loop that also sends heartbeats and polls tasks, so CPU-
or file-heavy work (attribution, reading megabytes of log, fsync) runs in a thread through
``run_blocking``, which heartbeats while it waits. (CPython switches threads every 5 ms, so the
loop keeps running even while the thread computes.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")

HEARTBEAT_EVERY_S = 5.0
"""Seconds between heartbeats while a blocking call runs."""


async def run_blocking(fn: Callable[..., T], *args: object, every_s: float | None = None) -> T:
    """Run ``fn(*args)`` in a thread; heartbeat every ``every_s`` seconds until it returns.
    Re-raises what ``fn`` raises. Outside an activity (tests), just runs it in the thread."""
    every = HEARTBEAT_EVERY_S if every_s is None else every_s
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    in_activity = activity.in_activity()
    while True:
        done, _ = await asyncio.wait({task}, timeout=every)
        if done:
            return task.result()
        if in_activity:
            activity.heartbeat("working")


async def with_heartbeats(coro: Awaitable[T], every_s: float | None = None) -> T:
    """Await ``coro`` while heartbeating every ``every_s`` seconds (act steps have a short heartbeat
    timeout, so a killed worker's step is retried within seconds). Re-raises what ``coro`` raises."""
    every = HEARTBEAT_EVERY_S if every_s is None else every_s
    task = asyncio.ensure_future(coro)
    in_activity = activity.in_activity()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            if in_activity:
                activity.heartbeat("acting")
    finally:
        if not task.done():
            task.cancel()
