from __future__ import annotations

import json

import httpx
import pytest

from revive.attribution.external import ExternalAttributionClient, external_attribution
from revive.models import EvidenceBundle

VERDICT = {"category": "gpu_hardware", "domain": "hardware", "culprit_nodes": ["node2"], "action": "drain_and_requeue"}
BUNDLE = EvidenceBundle(job_log="RuntimeError: CUDA error: unknown error")


def _handler(fast, slow):
    seen = []

    def handle(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        seen.append(body["pass"])
        assert body["bundle"]["job_log"] == BUNDLE.job_log
        r = fast if body["pass"] == "fast" else slow
        if isinstance(r, Exception):
            raise r
        return r
    return handle, seen


async def test_fast_then_slow_prefers_slow():
    slow = dict(VERDICT, explanation="slow")
    h, seen = _handler(httpx.Response(200, json=VERDICT), httpx.Response(200, json={"attribution": slow}))
    c = ExternalAttributionClient("http://svc/attribute", transport=httpx.MockTransport(h))
    v = await c.passes(BUNDLE)
    assert seen == ["fast", "slow"]
    assert v.fast.engine == "external:fast" and v.best.explanation == "slow"


async def test_slow_timeout_keeps_fast():
    h, _ = _handler(httpx.Response(200, json=VERDICT), httpx.ReadTimeout("slow"))
    c = ExternalAttributionClient("http://svc/attribute", transport=httpx.MockTransport(h))
    a = await c.attribute(BUNDLE)
    assert a is not None and a.culprit_nodes == ["node2"]


@pytest.mark.parametrize("fast,slow", [
    (httpx.ConnectError("refused"), httpx.ConnectError("refused")),
    (httpx.Response(500), httpx.Response(204)),
    (httpx.Response(200, text="not json"), httpx.Response(200, json={"category": "bogus"})),
])
async def test_errors_return_none_never_raise(fast, slow):
    h, _ = _handler(fast, slow)
    c = ExternalAttributionClient("http://svc/attribute", transport=httpx.MockTransport(h))
    v = await c.passes(BUNDLE)
    assert v.best is None and len(v.reasons) == 2


async def test_unreachable_service_returns_none():
    assert await external_attribution(BUNDLE, "http://127.0.0.1:9/none", fast_timeout_s=0.5, slow_timeout_s=0.5) is None


def test_sync_variant():
    h, seen = _handler(httpx.ReadTimeout("fast"), httpx.Response(200, json=VERDICT))
    c = ExternalAttributionClient("http://svc/attribute", sync_transport=httpx.MockTransport(h), token="t")
    assert c.attribute_sync(BUNDLE).category.value == "gpu_hardware"
    assert seen == ["fast", "slow"]
