"""Webhook notifier: Slack-compatible and generic JSON.

Events: ``approval_needed``, ``stopped``, ``breaker_tripped``, ``recovered``, ``not_recovered``.

Webhook URL formats (``policy.notify.webhooks``):

- ``slack:https://hooks.slack.com/...`` or any URL on ``hooks.slack.com`` → Slack-compatible body
  ``{"text": "<one readable message>"}`` (also accepted by Mattermost, Rocket.Chat, Teams
  workflows …);
- ``json:https://...`` or any other URL → the event itself as JSON (``NotifyEvent`` fields).

Delivery is bounded: each URL gets ``1 + retries`` attempts, each with ``timeout_s`` seconds for
the whole request, with a short backoff between attempts; retried on connection errors, timeouts,
HTTP 429 and 5xx, never on other 4xx. ``send`` never raises: a dead webhook never blocks recovery.
URLs are redacted (``scheme://host[:port]/…``) in results and logs, because webhook URLs carry
secrets.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import httpx

from revive.models import Delivery, NotifyEvent, NotifyResult

log = logging.getLogger(__name__)

_TITLES = {
    "approval_needed": ":raising_hand: Approval needed",
    "stopped": ":octagonal_sign: Stopped retrying",
    "breaker_tripped": ":rotating_light: Drain circuit breaker tripped",
    "recovered": ":white_check_mark: Recovered",
    "not_recovered": ":x: Not recovered",
    "unverified": ":grey_question: Recovery not verifiable (log matches no progress profile)",
    "node_resumed": ":white_check_mark: Node returned to service",
    "node_check_failed": ":x: Node health check failed (stays drained)",
}


def redact(url: str) -> str:
    """``https://hooks.slack.com/services/T/B/X`` → ``https://hooks.slack.com/…``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}/…"
    except ValueError:
        return "<invalid url>"


def target(spec: str) -> tuple[str, str]:
    """Split a webhook spec into ``(format, url)``; format is ``slack`` or ``json``."""
    for fmt in ("slack", "json"):
        if spec.startswith(fmt + ":") and not spec.startswith(fmt + "://"):
            return fmt, spec[len(fmt) + 1 :]
    host = (urlsplit(spec).hostname or "").lower()
    return ("slack" if host == "hooks.slack.com" else "json"), spec


def slack_text(ev: NotifyEvent) -> str:
    """The human message used for Slack-compatible webhooks."""
    lines = [f"{_TITLES.get(ev.kind, ev.kind)}: incident {ev.incident_id}"]
    where = ", ".join(x for x in (f"cluster {ev.cluster}" if ev.cluster else "",
                                  f"job {ev.job_id}" if ev.job_id else "") if x)
    if where:
        lines[0] += f" ({where})"
    if ev.summary:
        lines.append(ev.summary)
    if ev.rule:
        lines.append(f"rule: {ev.rule}")
    if ev.nodes:
        lines.append("nodes: " + ", ".join(ev.nodes))
    for k, v in ev.detail.items():
        lines.append(f"{k}: {v}")
    if ev.link:
        lines.append(ev.link)
    return "\n".join(lines)


def body_for(fmt: str, ev: NotifyEvent) -> dict[str, object]:
    """The JSON body for a format (``slack`` → ``{"text": …}``, else the event)."""
    if fmt == "slack":
        return {"text": slack_text(ev)}
    return ev.model_dump(mode="json")


async def _deliver(
    client: httpx.AsyncClient, index: int, spec: str, ev: NotifyEvent, timeout_s: float,
    retries: int, backoff_s: float,
) -> Delivery:
    fmt, url = target(spec)
    d = Delivery(index=index, url=redact(url), ok=False)
    body = body_for(fmt, ev)
    for attempt in range(1 + retries):
        d.attempts = attempt + 1
        try:
            resp = await asyncio.wait_for(client.post(url, json=body), timeout=timeout_s)
            d.status_code = resp.status_code
            if 200 <= resp.status_code < 300:
                d.ok, d.error = True, None
                return d
            d.error = f"HTTP {resp.status_code}"
            if resp.status_code != 429 and resp.status_code < 500:
                return d  # a client error will not fix itself
        except (TimeoutError, httpx.TimeoutException):
            d.error = f"timeout after {timeout_s:g}s"
        except httpx.HTTPError as e:
            d.error = f"{type(e).__name__}: {e}"[:300]
        except Exception as e:  # noqa: BLE001 — never raise out of the notifier
            d.error = f"{type(e).__name__}: {e}"[:300]
            return d
        if attempt < retries:
            await asyncio.sleep(backoff_s * (2**attempt))
    log.warning("webhook %s failed after %d attempts: %s", d.url, d.attempts, d.error)
    return d


async def send(
    webhooks: list[str],
    event: NotifyEvent,
    timeout_s: float = 5.0,
    retries: int = 2,
    backoff_s: float = 0.5,
) -> NotifyResult:
    """Post ``event`` to every webhook concurrently; never raises.

    Worst-case duration ≈ ``(1 + retries) × timeout_s + backoff_s × (2**retries − 1)`` seconds.
    Returns a ``NotifyResult`` with one ``Delivery`` per webhook, in list order.
    """
    if not webhooks:
        return NotifyResult()
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), follow_redirects=False) as c:
            deliveries = await asyncio.gather(
                *(_deliver(c, i, w, event, timeout_s, retries, backoff_s) for i, w in enumerate(webhooks))
            )
        return NotifyResult(deliveries=list(deliveries))
    except Exception as e:  # noqa: BLE001
        return NotifyResult(deliveries=[
            Delivery(index=i, url=redact(target(w)[1]), ok=False, error=f"{type(e).__name__}: {e}"[:300])
            for i, w in enumerate(webhooks)
        ])
