"""Loki client against recorded responses (documented JSON shapes, see tests/data/logsources/SOURCES.md)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from revive.errors import ReviveError
from revive.logsources import LogSource, LogSourceError, LogSourceUnavailable, StreamSelector, clean_text
from revive.logsources.loki import LokiLogSource, logql_selector
from tests.revive.logsources.replay import Clock, Replay, load, until

FOLLOW = load("loki/query_range_follow.json")
TEMPLATE = FOLLOW["template"]


def selector(cas=FOLLOW) -> StreamSelector:
    s = cas["selector"]
    since = datetime.fromtimestamp(int(s["since_ns"]) // 10**9, UTC)
    return StreamSelector(job_id=s["job_id"], hosts=tuple(s.get("hosts", ())), since=since)


def source(replay: Replay, clock: Clock, **kw) -> LokiLogSource:
    cfg = FOLLOW["config"]
    args = dict(limit=cfg["limit"], settle_s=cfg["settle_s"], max_window_s=cfg["max_window_s"],
                tenant=cfg["tenant"], transport=replay.transport(), clock_ns=clock.ns, monotonic=clock.monotonic)
    args.update(kw)
    return LokiLogSource("http://loki.test:3100", TEMPLATE, **args)


def expected(texts: list[str]) -> list[str]:
    return [clean_text(FOLLOW["huge"]) if t == "<HUGE>" else clean_text(FOLLOW["junk"]) if t == "<JUNK>" else t
            for t in texts]


async def run(src: LokiLogSource, replay: Replay, clock: Clock, polls, sel) -> list:
    got = []
    for p in polls:
        clock.now_ns = int(p["now_ns"])
        clock.mono = p.get("mono", clock.mono)
        replay.expect(p["exchanges"])
        if "expect_error" in p:
            with pytest.raises(LogSourceUnavailable if p["expect_error"] == "LogSourceUnavailable" else LogSourceError):
                await src.read_new(sel)
        else:
            lines = await src.read_new(sel)
            assert [ln.text for ln in lines] == expected(p["expect"]), p["name"]
            got += lines
        assert not replay.pending, f"{p['name']}: requests not made: {list(replay.pending)}"
    return got


async def test_long_follow_replay():
    replay, clock = Replay(), Clock()
    src = source(replay, clock)
    sel = selector()
    lines = await run(src, replay, clock, FOLLOW["polls"], sel)
    # exactly once, in order, numbered 1..n
    assert [ln.seq for ln in lines] == list(range(1, len(lines) + 1))
    assert len({(ln.ts, ln.text, tuple(sorted(ln.labels.items()))) for ln in lines}) == len(lines)
    first = lines[0]
    assert first.ts == datetime(2023, 11, 14, 22, 13, 21, tzinfo=UTC)
    assert first.labels["host"] == "gpu01" and first.labels["slurm_job_id"] == "4242"
    # every request carried the tenant
    assert all(r.headers["X-Scope-OrgID"] == "hpc-prod" for r in replay.requests)
    await src.close()


async def test_huge_and_binary_lines_are_normalised():
    replay, clock = Replay(), Clock()
    src = source(replay, clock)
    lines = await run(src, replay, clock, FOLLOW["polls"], selector())
    huge = next(ln for ln in lines if ln.text.startswith("step 900"))
    assert len(huge.text) == 4096 and huge.text.endswith("an illegal memory access was encountered")
    junk = next(ln for ln in lines if "NCCL WARN" in ln.text)
    assert "\x00" not in junk.text and "\ufffd" in junk.text
    junk.text.encode("utf-8")  # no lone surrogate survives
    bad = lines[-1]
    assert bad.text == "\ufffd\ufffd\ufffd Xid 79"


async def test_unavailable_carries_retry_after_and_is_a_revive_error():
    replay, clock = Replay(), Clock()
    src = source(replay, clock)
    polls = FOLLOW["polls"]
    i = next(i for i, p in enumerate(polls) if "503" in p["name"])
    await run(src, replay, clock, polls[:i], selector())
    clock.now_ns, clock.mono = int(polls[i]["now_ns"]), polls[i]["mono"]
    replay.expect(polls[i]["exchanges"])
    with pytest.raises(LogSourceUnavailable) as ei:
        await src.read_new(selector())
    assert ei.value.retry_after == 2.0
    assert isinstance(ei.value, ReviveError)


@pytest.mark.parametrize("split", [i for i, p in enumerate(FOLLOW["polls"]) if i and p["exchanges"]])
async def test_state_restore_across_restart(split):
    """Stop after ``split`` polls, persist state as JSON, start a new source: no line twice, none lost."""
    polls = FOLLOW["polls"]
    replay, clock = Replay(), Clock()
    a = source(replay, clock)
    before = await run(a, replay, clock, polls[:split], selector())
    saved = json.loads(json.dumps(a.state()))
    await a.close()
    b = source(replay, clock)
    b.restore(saved)
    after = await run(b, replay, clock, polls[split:], selector())
    texts = [ln.text for ln in before + after]
    assert texts == [t for p in polls if "expect" in p for t in expected(p["expect"])]
    assert [ln.seq for ln in before + after] == list(range(1, len(texts) + 1))


async def test_restore_tolerates_junk_state():
    replay, clock = Replay(), Clock()
    src = source(replay, clock)
    src.restore({"version": 1, "kind": "loki", "streams": {"x": "nonsense", "y": {"pos_ns": -5}}})
    src.restore({"version": 99})
    src.restore({"kind": "victorialogs", "version": 1, "streams": {}})
    p = FOLLOW["polls"][0]
    clock.now_ns = int(p["now_ns"])
    replay.expect(p["exchanges"])
    assert [ln.text for ln in await src.read_new(selector())] == p["expect"]


def test_label_values_are_quoted_no_injection():
    evil = '4242"} or {job=~".+'
    q = logql_selector({"job": "slurm", "slurm_job_id": "{job_id}"}, StreamSelector(job_id=evil))
    assert q == '{job="slurm", slurm_job_id="4242\\"} or {job=~\\".+"}'
    # the value decodes back to exactly the job id (the quoted form is also valid JSON here)
    assert json.loads(q[len('{job="slurm", slurm_job_id='):-1]) == evil
    q2 = logql_selector({"host": "{hosts}", "j": "{job_id}"},
                        StreamSelector(job_id="a\\b\nc", hosts=("gpu.01", 'x"|.*')))
    assert q2 == '{host=~"gpu\\\\.01|x\\"\\\\|\\\\.\\\\*", j="a\\\\b\\nc"}'


def test_selector_errors():
    with pytest.raises(LogSourceError):
        logql_selector({"slurm_job_id": "{job_id}"}, StreamSelector(job_id=""))  # would match every stream
    with pytest.raises(LogSourceError):
        logql_selector({"x": "{nope}"}, StreamSelector(job_id="1"))
    with pytest.raises(LogSourceError):
        logql_selector({"bad-name": "v"}, StreamSelector(job_id="1"))
    with pytest.raises(ValueError):
        LokiLogSource("http://x", {"bad-name": "{job_id}"})
    # free labels become exact matchers; {hosts} without hosts is left out
    q = logql_selector({"job": "slurm", "host": "{hosts}"}, StreamSelector(job_id="1", labels={"stream": "stderr"}))
    assert q == '{job="slurm", stream="stderr"}'


async def test_query_injection_reaches_the_wire_quoted():
    replay, clock = Replay(), Clock(now_ns=1_700_000_010 * 10**9)
    src = source(replay, clock)
    evil = StreamSelector(job_id='1"}|~"x', since=datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC))
    replay.expect([{"request": {"method": "GET", "path": "/loki/api/v1/query_range",
                                "params": {"query": '{job="slurm", slurm_job_id="1\\"}|~\\"x"}'}},
                    "response": {"status": 200, "body": {"status": "success", "data": {
                        "resultType": "streams", "result": [], "stats": {}}}}}])
    assert await src.read_new(evil) == []


async def test_tenant_and_rotating_token_file(tmp_path):
    tok = tmp_path / "loki.token"
    tok.write_text("first\n")
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("X-Scope-OrgID"), request.headers.get("Authorization")))
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "streams", "result": []}})

    src = LokiLogSource("http://loki.test", {"slurm_job_id": "{job_id}"}, tenant="team-a", token_file=str(tok),
                        transport=httpx.MockTransport(handler))
    sel = StreamSelector(job_id="7")
    await src.read_new(sel)
    tok.write_text("second\n")
    st = tok.stat()
    os.utime(tok, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    await src.read_new(sel)
    assert seen == [("team-a", "Bearer first"), ("team-a", "Bearer second")]
    await src.close()


async def test_matrix_result_is_a_query_error():
    def handler(request):
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})

    src = LokiLogSource("http://loki.test", {"slurm_job_id": "{job_id}"}, transport=httpx.MockTransport(handler))
    with pytest.raises(LogSourceError) as ei:
        await src.read_new(StreamSelector(job_id="7"))
    assert not isinstance(ei.value, LogSourceUnavailable)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_dead_loopback_server_then_recovery():
    """A real TCP port on 127.0.0.1: refused → LogSourceUnavailable; a server comes up → lines flow."""
    port = _free_port()
    src = LokiLogSource(f"http://127.0.0.1:{port}", {"slurm_job_id": "{job_id}"}, timeout_s=2)
    assert isinstance(src, LogSource)
    sel = StreamSelector(job_id="9", since=datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC))
    with pytest.raises(LogSourceUnavailable):
        await src.read_new(sel)
    body = json.dumps({"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"slurm_job_id": "9"}, "values": [["1700000001000000000", "back online"]]}]}}).encode()
    queries = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        queries.append(head.split(b" ")[1].decode())
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        lines = await src.read_new(sel)
        assert [ln.text for ln in lines] == ["back online"]
        params = dict(parse_qsl(urlsplit(queries[0]).query))
        assert params["query"] == '{slurm_job_id="9"}' and params["direction"] == "forward"
        assert params["start"] == "1700000000000000000"
        assert await src.read_new(sel) == []  # the same entry again at the cursor: dropped
    finally:
        server.close()
        await server.wait_closed()
        await src.close()


async def test_stuck_page_of_one_timestamp_makes_progress():
    """More than `limit` entries at one ns: step past it instead of looping forever."""
    t = 1_700_000_000 * 10**9
    calls = []

    def handler(request):
        calls.append(dict(request.url.params))
        start = int(request.url.params["start"])
        vals = [[str(t), f"same ns {i}"] for i in range(3)] if start <= t else []
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "streams", "result": [
            {"stream": {"a": "b"}, "values": vals}]}})

    src = LokiLogSource("http://loki.test", {"slurm_job_id": "{job_id}"}, transport=httpx.MockTransport(handler),
                        limit=3, clock_ns=lambda: t + 10 * 10**9)
    sel = StreamSelector(job_id="1", since=datetime.fromtimestamp(t // 10**9, UTC))
    lines = await src.read_new(sel)
    assert [ln.text for ln in lines] == ["same ns 0", "same ns 1", "same ns 2"]
    assert calls[1]["start"] == str(t + 1)
    assert src.stats(sel)["stuck_skips"] == 1


# ---- follow mode: /loki/api/v1/tail over a loopback WebSocket server -------------------------------
async def test_tail_replay_with_drop_and_reconnect():
    ws_server = pytest.importorskip("websockets.asyncio.server")
    cas = load("loki/tail_reconnect.json")
    conns = cas["connections"]
    params_seen: list[dict[str, str]] = []
    drop_first = asyncio.Event()

    async def handler(ws):
        idx = len(params_seen)
        params_seen.append(dict(parse_qsl(urlsplit(ws.request.path).query)))
        c = conns[idx] if idx < len(conns) else {"messages": [], "then": "hold"}
        for m in c["messages"]:
            await ws.send(json.dumps(m))
        if c["then"] == "drop":
            await drop_first.wait()
            ws.transport.abort()  # an abrupt TCP drop, no close frame
            return
        await ws.wait_closed()

    gate = asyncio.Event()
    sleeps: list[float] = []

    async def gated_sleep(d: float) -> None:
        sleeps.append(d)
        await gate.wait()

    async with ws_server.serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        replay = Replay()
        clock = Clock(now_ns=int(cas["catch_up"]["request"]["params"]["end"]))
        src = LokiLogSource(f"http://127.0.0.1:{port}", TEMPLATE, transport=replay.transport(), limit=100,
                            follow=True, clock_ns=clock.ns, monotonic=clock.monotonic, sleep=gated_sleep,
                            settle_s=30)
        sel = selector(FOLLOW)
        got = []
        # 1: catch up with query_range (the tail's look-back is best effort), then the tail starts
        replay.expect([cas["catch_up"]])
        got += await src.read_new(sel)
        await until(lambda: src.stats(sel)["queued"] == 4, what="first connection's messages")
        assert params_seen[0]["query"] == FOLLOW["polls"][0]["exchanges"][0]["request"]["params"]["query"]
        for k, v in conns[0]["expect_params"].items():
            assert params_seen[0][k] == v, k
        # 2: tail entries, plus the entry the server reported dropped, fetched with query_range
        replay.expect([cas["backfill"]])
        got += await src.read_new(sel)
        assert not replay.pending
        # 3: the server drops the connection; while reconnecting, read_new polls
        drop_first.set()
        await until(lambda: src.stats(sel)["reconnects"] == 1, what="drop noticed")
        assert not src.stats(sel)["connected"]
        clock.now_ns = int(cas["while_down"]["now_ns"])
        replay.expect([cas["while_down"]])
        got += await src.read_new(sel)
        assert not replay.pending
        # 4: reconnect from the newest timestamp received; the replayed boundary entry is dropped
        gate.set()
        await until(lambda: src.stats(sel)["queued"] == 8, what="second connection's messages")
        for k, v in conns[1]["expect_params"].items():
            assert params_seen[1][k] == v, k
        got += await src.read_new(sel)
        assert [ln.text for ln in got] == cas["expect"]
        assert [ln.seq for ln in got] == list(range(1, len(got) + 1))
        assert sleeps and sleeps[0] == 0.5
        await src.close()
        assert src.stats(sel)["connected"] is False


async def test_tail_to_dead_server_polls_and_raises_unavailable():
    pytest.importorskip("websockets")
    port = _free_port()

    async def no_sleep(d):
        await asyncio.sleep(0)

    def handler(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    src = LokiLogSource(f"http://127.0.0.1:{port}", TEMPLATE, transport=httpx.MockTransport(handler),
                        follow=True, sleep=no_sleep, reconnect_min_s=0.01)
    with pytest.raises(LogSourceUnavailable):
        await src.read_new(selector())  # the catch-up poll fails: nothing started yet
    await src.close()


async def test_tail_entry_of_another_stream_arriving_late_is_kept():
    """A tail interleaves streams independently: an older entry of stream B after a newer one of A."""
    pytest.importorskip("websockets")
    t = 1_700_000_000 * 10**9
    src = LokiLogSource("http://loki.test", TEMPLATE, follow=True, tail_reorder_s=10,
                        transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    sel = selector()
    st = src._stream(sel)
    st.task = asyncio.get_running_loop().create_task(asyncio.sleep(3600))  # a connected tail, driven by hand
    st.connected = True
    st.cursor.pos_ns = t

    def msg(labels, ts, line):
        return json.dumps({"streams": [{"stream": labels, "values": [[str(ts), line]]}], "dropped_entries": []})

    g1, g2 = {"host": "gpu01"}, {"host": "gpu02"}
    src._on_tail_message(st, msg(g1, t + 10 * 10**9, "A"))
    assert [ln.text for ln in await src.read_new(sel)] == ["A"]
    src._on_tail_message(st, msg(g2, t + 9 * 10**9, "B (older, other stream)"))
    src._on_tail_message(st, msg(g1, t + 10 * 10**9, "A"))  # a replay
    assert [ln.text for ln in await src.read_new(sel)] == ["B (older, other stream)"]
    src._on_tail_message(st, msg(g2, t - 1 * 10**9, "beyond the window"))
    assert await src.read_new(sel) == []
    assert src.stats(sel)["late_dropped"] == 1
    await src.close()


def test_values_with_structured_metadata_and_malformed_values():
    from revive.logsources.loki import parse_streams

    result = [{"stream": {"a": "1"}, "values": [
        ["1700000000000000001", "with metadata", {"structuredMetadata": {"trace_id": "x"}}],
        ["not-a-number", "bad ts"], ["1700000000000000002"], ["1700000000000000003", 42], "junk",
        ["1700000000000000004", "ok"]]}, "not a stream", {"stream": "junk", "values": [["5", "no labels"]]}]
    got = [(e.ts_ns, e.line, e.labels) for e in parse_streams(result, "t")]
    assert got == [(1700000000000000001, "with metadata", {"a": "1"}), (1700000000000000004, "ok", {"a": "1"}),
                   (5, "no labels", {})]
