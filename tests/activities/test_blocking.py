"""Blocking work runs off the worker's event loop: a CPU-heavy attribution heartbeats, and another
activity makes progress at the same time."""

from __future__ import annotations

import asyncio
import time

from temporalio.testing import ActivityEnvironment

from activities.attribution import AttributionActivities
from activities.blocking import run_blocking
from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, Trigger, TriggerKind


def _big_bundle(lines: int) -> EvidenceBundle:
    body = "\n".join(
        f"2026-11-30T10:{(i // 60) % 60:02d}:{i % 60:02d} [rank {i % 8} host node{i % 4}] iteration {i}/999999 | "
        f"loss 2.{i % 97:02d} | compute_ms 101.{i % 9} | step_time_ms 120.{i % 7}"
        + (" NCCL WARN NET/IB : Got completion from peer 10.0.0.7 with error 12" if i % 5000 == 4999 else "")
        for i in range(lines))
    return EvidenceBundle(trigger=Trigger(kind=TriggerKind.log_signature, at=time_now()), job_log=body)


def time_now():  # noqa: ANN201
    from datetime import UTC, datetime

    return datetime.now(UTC)


async def test_attribution_heartbeats_while_another_activity_progresses() -> None:
    bundle = _big_bundle(600_000)
    t0 = time.monotonic()
    attribute(bundle)  # how long the engine takes on this bundle, on this machine
    engine_s = time.monotonic() - t0
    assert engine_s > 0.5, f"bundle too small to show anything ({engine_s:.2f} s)"

    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *d: beats.append(d)
    ticks: list[float] = []

    async def other_activity() -> None:  # stands in for any other activity on the same loop
        while len(ticks) < 1000:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    other = asyncio.create_task(other_activity())
    acts = AttributionActivities()
    import activities.blocking as blocking

    old = blocking.HEARTBEAT_EVERY_S
    blocking.HEARTBEAT_EVERY_S = 0.2
    try:
        t0 = time.monotonic()
        got = await env.run(acts.attribute, bundle)
        t1 = time.monotonic()
    finally:
        blocking.HEARTBEAT_EVERY_S = old
        other.cancel()
    assert got.category.value == "nccl_error"
    during = [t for t in ticks if t0 <= t <= t1]
    # the other coroutine kept running at its 50 ms pace while the engine computed
    assert len(during) >= max(3, int((t1 - t0) / 0.05 * 0.3)), (len(during), t1 - t0)
    assert len(beats) >= 1, "no heartbeat while the engine ran"


async def test_run_blocking_reraises() -> None:
    def boom() -> None:
        raise ValueError("bad")

    try:
        await run_blocking(boom)
    except ValueError as e:
        assert str(e) == "bad"
    else:
        raise AssertionError("expected ValueError")
