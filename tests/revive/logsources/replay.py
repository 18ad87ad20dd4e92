"""Replays recorded responses (tests/data/logsources/) through ``httpx.MockTransport``.

Each exchange names the request the client must send (method, path, the query parameters or
form fields that matter) and the response to give. A request that differs, or one too many,
fails the test: the cassettes pin the cursor arithmetic (start/end of every query)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx

DATA = Path(__file__).resolve().parents[2] / "data" / "logsources"


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def response_of(spec: dict[str, Any], request: httpx.Request) -> httpx.Response:
    if "error" in spec:
        if spec["error"] == "ConnectError":
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if spec["error"] == "ReadTimeout":
            raise httpx.ReadTimeout("timed out", request=request)
        raise AssertionError(f"unknown simulated error {spec['error']}")
    if "body" in spec:
        content = json.dumps(spec["body"]).encode()
    elif "body_b64" in spec:
        content = base64.b64decode(spec["body_b64"])
    else:
        content = spec.get("body_text", "").encode("utf-8", "surrogatepass")
    return httpx.Response(spec.get("status", 200), headers=spec.get("headers", {}), content=content)


class Clock:
    """Injected wall clock (ns) and monotonic clock (s)."""

    def __init__(self, now_ns: int = 0, mono: float = 0.0) -> None:
        self.now_ns = now_ns
        self.mono = mono

    def ns(self) -> int:
        return self.now_ns

    def monotonic(self) -> float:
        return self.mono


class Replay:
    def __init__(self) -> None:
        self.pending: deque[dict[str, Any]] = deque()
        self.requests: list[httpx.Request] = []
        self.extra: dict[str, Any] = {}
        """path → callable(request) for paths served outside the queue (tails)."""

    def expect(self, exchanges: list[dict[str, Any]]) -> None:
        self.pending.extend(exchanges)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path in self.extra:
            return await self.extra[request.url.path](request)
        if not self.pending:
            raise AssertionError(f"unexpected request: {request.method} {request.url}")
        ex = self.pending.popleft()
        want = ex["request"]
        assert request.method == want["method"], (request.method, want)
        assert request.url.path == want["path"], (request.url.path, want)
        if "params" in want:
            got = dict(request.url.params)
            for k, v in want["params"].items():
                assert got.get(k) == v, f"param {k}: got {got.get(k)!r}, want {v!r}"
        if "form" in want:
            got = dict(parse_qsl((await request.aread()).decode()))
            for k, v in want["form"].items():
                assert got.get(k) == v, f"form field {k}: got {got.get(k)!r}, want {v!r}"
        return response_of(ex["response"], request)


async def until(pred, timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
