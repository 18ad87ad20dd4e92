"""Optional external attribution service client.

The service receives the evidence bundle as JSON and answers with an ``Attribution``. Revive calls
it twice: a fast pass (short timeout) and a slow pass (long timeout, e.g. an LLM stage). Its verdict
is recorded beside Revive's own; it never blocks or overrides the guards. Any network, HTTP or
payload problem returns ``None`` with a logged reason — this module never raises for those.

Request:  POST <url>  {"pass": "fast"|"slow", "bundle": <EvidenceBundle JSON>, "revive": <Attribution|null>}
Response: 200 with an Attribution JSON object (or {"attribution": {...}}); 204 = no verdict.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import httpx
from pydantic import ValidationError

from revive.models import Attribution, EvidenceBundle

log = logging.getLogger(__name__)


@dataclass
class ExternalVerdicts:
    fast: Attribution | None = None
    slow: Attribution | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def best(self) -> Attribution | None:
        return self.slow or self.fast


def _parse(resp: httpx.Response, which: str, reasons: list[str]) -> Attribution | None:
    if resp.status_code == 204:
        reasons.append(f"{which}: no verdict (204)")
        return None
    if resp.status_code != 200:
        reasons.append(f"{which}: HTTP {resp.status_code}")
        return None
    try:
        data = resp.json()
        if isinstance(data, dict) and isinstance(data.get("attribution"), dict):
            data = data["attribution"]
        att = Attribution.model_validate(data)
    except (ValueError, ValidationError) as exc:
        reasons.append(f"{which}: invalid payload: {str(exc)[:200]}")
        return None
    if not att.engine or att.engine == "revive-rules":
        att.engine = f"external:{which}"
    return att


class ExternalAttributionClient:
    def __init__(self, url: str, *, fast_timeout_s: float = 5.0, slow_timeout_s: float = 120.0,
                 token: str | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 sync_transport: httpx.BaseTransport | None = None) -> None:
        self.url = url
        self.fast_timeout_s = fast_timeout_s
        self.slow_timeout_s = slow_timeout_s
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._transport = transport
        self._sync_transport = sync_transport

    def _body(self, which: str, bundle: EvidenceBundle, revive: Attribution | None) -> dict:
        return {"pass": which, "bundle": bundle.model_dump(mode="json"),
                "revive": revive.model_dump(mode="json") if revive else None}

    async def passes(self, bundle: EvidenceBundle, revive: Attribution | None = None) -> ExternalVerdicts:
        out = ExternalVerdicts()
        try:
            async with httpx.AsyncClient(transport=self._transport, headers=self.headers) as client:
                for which, timeout in (("fast", self.fast_timeout_s), ("slow", self.slow_timeout_s)):
                    try:
                        resp = await client.post(self.url, json=self._body(which, bundle, revive), timeout=timeout)
                    except httpx.TimeoutException:
                        out.reasons.append(f"{which}: timed out after {timeout}s")
                        continue
                    except httpx.HTTPError as exc:
                        out.reasons.append(f"{which}: {type(exc).__name__}: {exc}")
                        continue
                    setattr(out, which, _parse(resp, which, out.reasons))
        except Exception as exc:  # never raise to the workflow
            out.reasons.append(f"client error: {type(exc).__name__}: {exc}")
        for r in out.reasons:
            log.warning("external attribution %s: %s", self.url, r)
        return out

    async def attribute(self, bundle: EvidenceBundle, revive: Attribution | None = None) -> Attribution | None:
        """The slow pass's verdict when it has one, else the fast pass's, else None."""
        return (await self.passes(bundle, revive)).best

    def passes_sync(self, bundle: EvidenceBundle, revive: Attribution | None = None) -> ExternalVerdicts:
        out = ExternalVerdicts()
        try:
            with httpx.Client(transport=self._sync_transport, headers=self.headers) as client:
                for which, timeout in (("fast", self.fast_timeout_s), ("slow", self.slow_timeout_s)):
                    try:
                        resp = client.post(self.url, json=self._body(which, bundle, revive), timeout=timeout)
                    except httpx.TimeoutException:
                        out.reasons.append(f"{which}: timed out after {timeout}s")
                        continue
                    except httpx.HTTPError as exc:
                        out.reasons.append(f"{which}: {type(exc).__name__}: {exc}")
                        continue
                    setattr(out, which, _parse(resp, which, out.reasons))
        except Exception as exc:
            out.reasons.append(f"client error: {type(exc).__name__}: {exc}")
        for r in out.reasons:
            log.warning("external attribution %s: %s", self.url, r)
        return out

    def attribute_sync(self, bundle: EvidenceBundle, revive: Attribution | None = None) -> Attribution | None:
        return self.passes_sync(bundle, revive).best


async def external_attribution(bundle: EvidenceBundle, url: str, *, fast_timeout_s: float = 5.0,
                               slow_timeout_s: float = 120.0, token: str | None = None,
                               revive: Attribution | None = None) -> Attribution | None:
    """Convenience wrapper: one call, returns the service's Attribution or None."""
    return await ExternalAttributionClient(url, fast_timeout_s=fast_timeout_s, slow_timeout_s=slow_timeout_s,
                                           token=token).attribute(bundle, revive)
