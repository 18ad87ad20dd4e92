"""Notify activity: post an event to the policy's webhooks (``revive.notify``).

Activity name: ``notify``. It never raises for a dead webhook: it returns a ``NotifyResult`` with
per-URL status, so a broken notifier never blocks recovery. Give it a ``start_to_close_timeout``
above ``(1 + retries) × timeout_s + backoff`` (e.g. 60 s for the defaults) and
``RetryPolicy(maximum_attempts=1)`` (retries are already inside). It heartbeats every
``activities.blocking.HEARTBEAT_EVERY_S`` while it sends, so a short ``heartbeat_timeout`` ends a
killed worker's notification within seconds (the incident goes on without it).
"""

from __future__ import annotations

from temporalio import activity

from activities.blocking import with_heartbeats
from revive import chaos
from revive.models import NotifyInput, NotifyResult
from revive.notify import send


@activity.defn(name="notify")
async def notify(inp: NotifyInput) -> NotifyResult:
    """Send ``inp.event`` to ``inp.webhooks``; never raises (per-URL status in the result)."""
    if inp.event.kind == "approval_needed":
        chaos.point(chaos.Point.await_approval)  # test-only kill point: inert unless REVIVE_CHAOS_HOOK names it
    res = await with_heartbeats(send(inp.webhooks, inp.event, inp.timeout_s, inp.retries, inp.backoff_s))
    for d in res.deliveries:
        if not d.ok:
            activity.logger.warning("webhook %s: %s after %d attempt(s)", d.url, d.error, d.attempts)
    return res
