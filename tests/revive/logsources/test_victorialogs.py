"""VictoriaLogs client against recorded responses (JSON lines, see tests/data/logsources/SOURCES.md)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from urllib.parse import parse_qsl

import httpx
import pytest

from revive.logsources import LogSource, LogSourceError, LogSourceUnavailable, StreamSelector, clean_text
from revive.logsources.victorialogs import (
    VictoriaLogsSource,
    format_rfc3339_ns,
    logsql_stream_filter,
    parse_rfc3339_ns,
    parse_stream_labels,
)
from tests.revive.logsources.replay import Clock, Replay, load, until

FOLLOW = load("victorialogs/query_follow.json")
TAIL = load("victorialogs/tail_reconnect.json")


def selector() -> StreamSelector:
    s = FOLLOW["selector"]
    return StreamSelector(job_id=s["job_id"], since=datetime.fromtimestamp(int(s["since_ns"]) // 10**9, UTC))


def source(replay: Replay, clock: Clock, **kw) -> VictoriaLogsSource:
    cfg = FOLLOW["config"]
    args = dict(limit=cfg["limit"], settle_s=cfg["settle_s"], max_window_s=cfg["max_window_s"],
                account_id=cfg["account_id"], project_id=cfg["project_id"], transport=replay.transport(),
                clock_ns=clock.ns, monotonic=clock.monotonic)
    args.update(kw)
    return VictoriaLogsSource("http://vl.test:9428", FOLLOW["template"], **args)


def expected(texts):
    return [clean_text(FOLLOW["huge"]) if t == "<HUGE>" else clean_text(FOLLOW["junk"]) if t == "<JUNK>" else t
            for t in texts]


async def run(src, replay, clock, polls, sel):
    got = []
    for p in polls:
        clock.now_ns = int(p["now_ns"])
        clock.mono = p.get("mono", clock.mono)
        replay.expect(p["exchanges"])
        if "expect_error" in p:
            err = LogSourceUnavailable if p["expect_error"] == "LogSourceUnavailable" else LogSourceError
            with pytest.raises(err) as ei:
                await src.read_new(sel)
            if err is LogSourceError:
                assert not isinstance(ei.value, LogSourceUnavailable)
        else:
            lines = await src.read_new(sel)
            assert [ln.text for ln in lines] == expected(p["expect"]), p["name"]
            got += lines
        assert not replay.pending, f"{p['name']}: requests not made"
    return got


async def test_long_follow_replay():
    replay, clock = Replay(), Clock()
    src = source(replay, clock)
    assert isinstance(src, LogSource)
    lines = await run(src, replay, clock, FOLLOW["polls"], selector())
    assert [ln.seq for ln in lines] == list(range(1, len(lines) + 1))
    first = lines[0]
    assert first.ts == datetime(2023, 11, 14, 22, 13, 21, 123456, tzinfo=UTC)
    assert first.labels == {"host": "gpu01", "slurm_job_id": "4242", "level": "info"}
    huge = next(ln for ln in lines if ln.text.startswith("step 900"))
    assert len(huge.text) == 4096 and huge.text.endswith("was encountered")
    assert src.malformed == 1  # the non-JSON line was skipped, not fatal
    for r in replay.requests:
        assert r.headers["AccountID"] == "12" and r.headers["ProjectID"] == "34"
        assert r.headers["content-type"].startswith("application/x-www-form-urlencoded")
    await src.close()


@pytest.mark.parametrize("split", [i for i, p in enumerate(FOLLOW["polls"]) if i and p["exchanges"]])
async def test_state_restore_across_restart(split):
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


def test_state_of_another_backend_is_ignored():
    replay, clock = Replay(), Clock()
    src = source(replay, clock)
    src.restore({"version": 1, "kind": "loki", "streams": {selector().key(): {"pos_ns": 5, "seq": 3}}})
    assert src.state()["streams"] == {}


def test_query_shape_and_quoting():
    src = VictoriaLogsSource("http://vl", {"slurm_job_id": "{job_id}", "host": "{hosts}"}, limit=500)
    sel = StreamSelector(job_id='42"} OR _time:1y | delete x', hosts=("gpu01", "gpu.02"))
    q = src.build_query(sel, 1_700_000_000_123_456_789, 1_700_000_060 * 10**9)
    assert q == ('{slurm_job_id="42\\"} OR _time:1y | delete x", host=~"gpu01|gpu\\\\.02"} '
                 "_time:[2023-11-14T22:13:20.123456789Z, 2023-11-14T22:14:20.000000000Z) | sort by (_time) limit 500")
    with pytest.raises(LogSourceError):
        logsql_stream_filter({"slurm_job_id": "{job_id}"}, StreamSelector())
    assert logsql_stream_filter({"kubernetes.pod_name": "{job_id}"}, StreamSelector(job_id="p")) == \
        '{kubernetes.pod_name="p"}'


def test_time_and_stream_parsing():
    assert parse_rfc3339_ns("2023-01-01T13:32:13Z") == 1672579933 * 10**9
    assert parse_rfc3339_ns("2023-01-01T13:32:13.5Z") == 1672579933 * 10**9 + 500_000_000
    assert parse_rfc3339_ns("2023-01-01T15:32:13.000000001+02:00") == 1672579933 * 10**9 + 1
    assert format_rfc3339_ns(1672579933 * 10**9 + 1) == "2023-01-01T13:32:13.000000001Z"
    with pytest.raises(ValueError):
        parse_rfc3339_ns("yesterday")
    assert parse_stream_labels('{host="n1",job="a\\"b",x="1,2"}') == {"host": "n1", "job": 'a"b', "x": "1,2"}
    assert parse_stream_labels("{}") == {}


async def test_html_from_a_proxy_is_unavailable():
    def handler(request):
        return httpx.Response(200, headers={"Content-Type": "text/html"}, content=b"<html>502</html>")

    src = VictoriaLogsSource("http://vl", {"j": "{job_id}"}, transport=httpx.MockTransport(handler))
    with pytest.raises(LogSourceUnavailable):
        await src.read_new(StreamSelector(job_id="1"))


async def test_timeout_is_unavailable():
    def handler(request):
        raise httpx.ReadTimeout("timed out", request=request)

    src = VictoriaLogsSource("http://vl", {"j": "{job_id}"}, transport=httpx.MockTransport(handler))
    with pytest.raises(LogSourceUnavailable):
        await src.read_new(StreamSelector(job_id="1"))


# ---- follow mode: /select/logsql/tail (streamed JSON lines) -----------------------------------------
async def test_tail_replay_with_end_of_stream_and_reconnect():
    replay = Replay()
    tails: list[dict[str, str]] = []
    hold = asyncio.Event()

    async def tail(request: httpx.Request) -> httpx.Response:
        idx = len(tails)
        tails.append(dict(parse_qsl((await request.aread()).decode())))
        c = TAIL["connections"][idx] if idx < len(TAIL["connections"]) else {"chunks": [], "then": "hold"}

        async def body():
            for ch in c["chunks"]:
                yield ch.encode()
                await asyncio.sleep(0)
            if c["then"] == "hold":
                await hold.wait()

        return httpx.Response(200, headers={"Content-Type": "application/x-ndjson"}, content=body())

    replay.extra["/select/logsql/tail"] = tail
    gate = asyncio.Event()

    async def gated_sleep(d):
        await gate.wait()

    clock = Clock(now_ns=1_700_000_010 * 10**9)
    src = VictoriaLogsSource("http://vl.test:9428", FOLLOW["template"], transport=replay.transport(), limit=100,
                             follow=True, clock_ns=clock.ns, monotonic=clock.monotonic, sleep=gated_sleep)
    sel = selector()
    got = []
    replay.expect([TAIL["catch_up"]])
    got += await src.read_new(sel)  # catch-up with /select/logsql/query, then the tail starts
    await until(lambda: src.stats(sel)["reconnects"] == 1, what="first tail response to end")
    assert tails[0]["query"] == '{slurm_job_id="4242"}'
    assert tails[0]["start_offset"] == TAIL["connections"][0]["expect_start_offset"]
    assert src.stats(sel)["queued"] == 3  # t2 arrived split across two chunks
    clock.now_ns = int(TAIL["while_down"]["now_ns"])
    replay.expect([TAIL["while_down"]])
    got += await src.read_new(sel)  # tail down: a query fills in; the queued copies are dropped
    assert not replay.pending
    gate.set()
    await until(lambda: src.stats(sel)["queued"] == 4, what="second tail response")
    assert tails[1]["start_offset"] == TAIL["connections"][1]["expect_start_offset"]
    got += await src.read_new(sel)
    assert [ln.text for ln in got] == TAIL["expect"]
    assert [ln.seq for ln in got] == list(range(1, len(got) + 1))
    hold.set()
    await src.close()
