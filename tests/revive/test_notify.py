"""Webhook notifier against a real local HTTP server (ok, slow, dead, 500, 400)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from temporalio.testing import ActivityEnvironment

from activities.notify import notify
from revive.models import NotifyInput
from revive.notify import NotifyEvent, redact, send, target


class _Handler(BaseHTTPRequestHandler):
    received: list[tuple[str, dict]] = []
    fail_500: dict[str, int] = {}

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.append((self.path, body))
        if self.path.startswith("/slow"):
            time.sleep(1.5)
        code = 200
        if self.path.startswith("/flaky") and type(self).fail_500.get(self.path, 0) > 0:
            type(self).fail_500[self.path] -= 1
            code = 500
        if self.path.startswith("/bad"):
            code = 400
        self.send_response(code)
        self.end_headers()
        try:
            self.wfile.write(b"ok")
        except OSError:
            pass

    def log_message(self, *a) -> None:  # type: ignore[no-untyped-def]
        pass


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # closed port: connection refused
    return f"http://127.0.0.1:{port}/hook"


EV = NotifyEvent(kind="breaker_tripped", incident_id="inc-1", cluster="c1", job_id="42",
                 summary="3 nodes would exceed 25% of partition gpu", rule="breaker:max_fraction",
                 nodes=["n1"])


async def test_slack_and_json_bodies(server) -> None:  # type: ignore[no-untyped-def]
    _Handler.received.clear()
    res = await send([f"slack:{server}/s1", f"json:{server}/j1", f"{server}/plain"], EV, timeout_s=2, retries=0)
    assert res.ok and [d.status_code for d in res.deliveries] == [200, 200, 200]
    got = dict(_Handler.received)
    assert set(got["/s1"]) == {"text"}
    assert "breaker" in got["/s1"]["text"].lower() and "inc-1" in got["/s1"]["text"] and "n1" in got["/s1"]["text"]
    assert got["/j1"]["kind"] == "breaker_tripped" and got["/j1"]["incident_id"] == "inc-1"
    assert got["/plain"]["rule"] == "breaker:max_fraction"


async def test_dead_slow_and_errors_never_raise(server) -> None:  # type: ignore[no-untyped-def]
    _Handler.fail_500["/flaky1"] = 1
    res = await send(
        [_dead_url(), f"{server}/slow", f"{server}/flaky1", f"{server}/bad", f"{server}/ok"],
        EV, timeout_s=0.5, retries=1, backoff_s=0.05,
    )
    dead, slow, flaky, bad, ok = res.deliveries
    assert not dead.ok and dead.attempts == 2 and "Connect" in (dead.error or "")
    assert not slow.ok and slow.attempts == 2 and "timeout" in (slow.error or "")
    assert flaky.ok and flaky.attempts == 2 and flaky.status_code == 200
    assert not bad.ok and bad.attempts == 1 and bad.status_code == 400  # 4xx is not retried
    assert ok.ok and ok.attempts == 1
    assert not res.ok
    # the bound (2 × 0.5 s + backoff, URLs in parallel) is timed in benchmarks/bench_bounds.py
    assert "/hook" not in dead.url  # redacted


async def test_activity_never_raises(server) -> None:  # type: ignore[no-untyped-def]
    env = ActivityEnvironment()
    res = await env.run(notify, NotifyInput(event=EV, webhooks=[_dead_url(), "not a url", f"{server}/ok"],
                                            timeout_s=0.5, retries=0))
    assert [d.ok for d in res.deliveries] == [False, False, True]
    empty = await env.run(notify, NotifyInput(event=EV))
    assert empty.deliveries == [] and empty.ok


def test_target_and_redact() -> None:
    assert target("https://hooks.slack.com/services/T/B/X") == ("slack", "https://hooks.slack.com/services/T/B/X")
    assert target("json:https://x.example/h") == ("json", "https://x.example/h")
    assert target("https://x.example/h")[0] == "json"
    assert redact("https://hooks.slack.com/services/T/B/SECRET") == "https://hooks.slack.com/…"
