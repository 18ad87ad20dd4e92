"""Writes the replay cassettes under loki/ and victorialogs/ (run: python tests/data/logsources/generate.py).

No Loki or VictoriaLogs server was reachable when these were made: every body is written to the
documented response shape (SOURCES.md cites the pages), and every expected request parameter
(start/end/limit/query) is written down by hand from the cursor rules in docs/logsources.md, so a
replay test fails when the client asks for anything else. Edit the scenarios here, not the JSON.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
S = 1_000_000_000
T = 1_700_000_000 * S  # 2023-11-14T22:13:20Z

STATS = {  # the documented statistics object (values as a small query returns them)
    "ingester": {"compressedBytes": 0, "decompressedBytes": 0, "decompressedLines": 0, "headChunkBytes": 312,
                 "headChunkLines": 3, "totalBatches": 1, "totalChunksMatched": 1, "totalDuplicates": 0,
                 "totalLinesSent": 3, "totalReached": 1},
    "store": {"compressedBytes": 0, "decompressedBytes": 0, "decompressedLines": 0, "chunksDownloadTime": 0,
              "totalChunksRef": 0, "totalChunksDownloaded": 0, "totalDuplicates": 0},
    "summary": {"bytesProcessedPerSecond": 48250, "execTime": 0.006466, "linesProcessedPerSecond": 463,
                "queueTime": 0.000221, "totalBytesProcessed": 312, "totalLinesProcessed": 3},
}

G1 = {"job": "slurm", "slurm_job_id": "4242", "host": "gpu01", "filename": "/shared/logs/4242.out"}
G2 = {"job": "slurm", "slurm_job_id": "4242", "host": "gpu02", "filename": "/shared/logs/4242.out"}
LOKI_QUERY = '{job="slurm", slurm_job_id="4242", host=~"gpu01|gpu02"}'

HUGE = "step 900 " + "=" * 9000 + "> RuntimeError: CUDA error: an illegal memory access was encountered"
JUNK = "\u0000\u0000NCCL WARN \u001b[31mtimeout\u001b[0m \udcff\udcfe rank 3"


def loki_body(*streams):
    return {"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": labels, "values": [[str(ts), line] for ts, line in values]} for labels, values in streams
    ], "stats": STATS}}


def loki_req(start, end, limit=5, query=LOKI_QUERY):
    return {"method": "GET", "path": "/loki/api/v1/query_range",
            "params": {"query": query, "start": str(start), "end": str(end), "limit": str(limit),
                       "direction": "forward"}}


def ok(body):
    return {"status": 200, "headers": {"Content-Type": "application/json; charset=utf-8"}, "body": body}


def loki_follow():
    polls = []

    def poll(name, now, exchanges, expect=None, error=None, mono=None):
        p = {"name": name, "now_ns": str(now), "exchanges": exchanges}
        if mono is not None:
            p["mono"] = mono
        if error:
            p["expect_error"] = error
        else:
            p["expect"] = expect
        polls.append(p)

    poll("first read from the job start: two streams merged by timestamp", T + 10 * S, [
        {"request": loki_req(T, T + 10 * S), "response": ok(loki_body(
            (G1, [(T + 1 * S, "step 1 loss 2.000"), (T + 3 * S, "step 2 loss 1.900")]),
            (G2, [(T + 2 * S, "gpu02: NCCL INFO comm 0x1 rank 1 nranks 2")])))}],
        ["step 1 loss 2.000", "gpu02: NCCL INFO comm 0x1 rank 1 nranks 2", "step 2 loss 1.900"])
    poll("nothing new: only the entry at the cursor (inclusive start) comes back", T + 20 * S, [
        {"request": loki_req(T + 3 * S, T + 20 * S), "response": ok(loki_body(
            (G1, [(T + 3 * S, "step 2 loss 1.900")])))}], [])
    poll("a new line at the boundary timestamp is kept, the old one dropped", T + 30 * S, [
        {"request": loki_req(T + 3 * S, T + 30 * S), "response": ok(loki_body(
            (G1, [(T + 3 * S, "step 2 loss 1.900"), (T + 3 * S, "step 2 grad-norm 0.31")]),
            (G2, [(T + 25 * S, "gpu02: step 3 done")])))}],
        ["step 2 grad-norm 0.31", "gpu02: step 3 done"])
    poll("a gap: nothing for 70 s (the cursor settles to end - 30 s)", T + 100 * S, [
        {"request": loki_req(T + 25 * S, T + 100 * S), "response": ok(loki_body())}], [])
    poll("out of order: interleaved streams, one stream's values unsorted", T + 110 * S, [
        {"request": loki_req(T + 70 * S, T + 110 * S), "response": ok(loki_body(
            (G2, [(T + 105 * S, "b: gpu02 step 5")]),
            (G1, [(T + 108 * S, "c: gpu01 step 6"), (T + 101 * S, "a: gpu01 step 4")])))}],
        ["a: gpu01 step 4", "b: gpu02 step 5", "c: gpu01 step 6"])
    poll("pagination: a full page (limit 5) continues from its last timestamp", T + 120 * S, [
        {"request": loki_req(T + 108 * S, T + 120 * S), "response": ok(loki_body(
            (G1, [(T + 108 * S, "c: gpu01 step 6"), (T + 109 * S, "d"), (T + 111 * S, "f")]),
            (G2, [(T + 110 * S, "e"), (T + 111 * S, "g")])))},
        {"request": loki_req(T + 111 * S, T + 120 * S), "response": ok(loki_body(
            (G1, [(T + 111 * S, "f"), (T + 111 * S, "h: cut off by the limit at the same ns")]),
            (G2, [(T + 111 * S, "g"), (T + 115 * S, "i")])))}],
        ["d", "e", "f", "g", "h: cut off by the limit at the same ns", "i"])
    poll("429 on the second page: the first page is returned, then back off (Retry-After: 7)", T + 130 * S, [
        {"request": loki_req(T + 115 * S, T + 130 * S), "response": ok(loki_body(
            (G1, [(T + 116 * S, "j"), (T + 117 * S, "k"), (T + 118 * S, "l"), (T + 119 * S, "m"),
                  (T + 120 * S, "n")])))},
        {"request": loki_req(T + 120 * S, T + 130 * S),
         "response": {"status": 429, "headers": {"Retry-After": "7", "Content-Type": "text/plain; charset=utf-8"},
                      "body_text": "too many outstanding requests\n"}}],
        ["j", "k", "l", "m", "n"], mono=100.0)
    poll("inside the back-off: no request at all", T + 132 * S, [], [], mono=101.0)
    poll("after the back-off: resumes at the cursor", T + 140 * S, [
        {"request": loki_req(T + 120 * S, T + 140 * S), "response": ok(loki_body(
            (G1, [(T + 120 * S, "n"), (T + 125 * S, "o")])))}], ["o"], mono=108.0)
    poll("dead server: connection refused", T + 145 * S, [
        {"request": loki_req(T + 125 * S, T + 145 * S), "response": {"error": "ConnectError"}}],
        error="LogSourceUnavailable", mono=109.0)
    poll("querier restarting: 503", T + 150 * S, [
        {"request": loki_req(T + 125 * S, T + 150 * S),
         "response": {"status": 503, "headers": {"Retry-After": "2", "Content-Type": "text/plain"},
                      "body_text": "upstream connect error or disconnect/reset before headers\n"}}],
        error="LogSourceUnavailable", mono=110.0)
    poll("a proxy answers 200 with an HTML page", T + 155 * S, [
        {"request": loki_req(T + 125 * S, T + 155 * S),
         "response": {"status": 200, "headers": {"Content-Type": "text/html"},
                      "body_text": "<html><body>Bad gateway</body></html>"}}],
        error="LogSourceUnavailable", mono=111.0)
    poll("recovery: nothing missed; a huge line and binary junk", T + 160 * S, [
        {"request": loki_req(T + 125 * S, T + 160 * S), "response": ok(loki_body(
            (G1, [(T + 126 * S, HUGE)]), (G2, [(T + 150 * S, JUNK)])))}],
        ["<HUGE>", "<JUNK>"], mono=112.0)
    poll("raw invalid UTF-8 bytes inside the JSON body are replaced", T + 170 * S, [
        {"request": loki_req(T + 150 * S, T + 170 * S),
         "response": {"status": 200, "headers": {"Content-Type": "application/json"},
                      "body_b64": base64.b64encode(
                          json.dumps(loki_body((G1, [(T + 160 * S, "XXBADXX Xid 79")]))).encode()
                          .replace(b"XXBADXX", b"\xff\xfe\xc3")).decode()}}],
        ["\ufffd\ufffd\ufffd Xid 79"], mono=113.0)
    return {"about": "Loki query_range follow: cursor, boundary de-dup, gaps, out-of-order, pagination, "
                     "429, dead server, junk. Shapes: SOURCES.md.",
            "selector": {"job_id": "4242", "hosts": ["gpu01", "gpu02"], "since_ns": str(T)},
            "template": {"job": "slurm", "slurm_job_id": "{job_id}", "host": "{hosts}"},
            "config": {"limit": 5, "settle_s": 30, "max_window_s": 3600, "tenant": "hpc-prod"},
            "huge": HUGE, "junk": JUNK, "polls": polls}


def loki_tail():
    def msg(streams, dropped=()):
        return {"streams": [{"stream": labels, "values": [[str(ts), line] for ts, line in values]}
                            for labels, values in streams],
                "dropped_entries": [{"labels": labels, "timestamp": str(ts)} for labels, ts in dropped]}
    return {
        "about": "Loki /loki/api/v1/tail WebSocket messages (documented streamed shape), two connections: "
                 "the first is dropped by the server, the second replays the boundary.",
        "connections": [
            {"expect_params": {"start": str(T - 7 * S), "limit": "100", "delay_for": "0"},
             "messages": [
                 msg([(G1, [(T + 3 * S, "step 2 loss 1.900"), (T + 4 * S, "step 3 loss 1.800")])]),
                 msg([(G2, [(T + 5 * S, "gpu02: step 3")])], dropped=[(G1, T + 4 * S + 500)]),
                 msg([(G1, [(T + 6 * S, "step 4 loss 1.700")])]),
             ],
             "then": "drop"},
            {"expect_params": {"start": str(T - 4 * S), "limit": "100", "delay_for": "0"},
             "messages": [  # the server replays everything since start; only the last two are new
                 msg([(G1, [(T + 1 * S, "step 1 loss 2.000"), (T + 3 * S, "step 2 loss 1.900"),
                            (T + 4 * S, "step 3 loss 1.800"),
                            (T + 4 * S + 500, "step 3 ckpt saved (dropped by the tail)"),
                            (T + 6 * S, "step 4 loss 1.700"), (T + 7 * S, "step 5 loss 1.650")]),
                      (G2, [(T + 5 * S, "gpu02: step 3"), (T + 7 * S, "gpu02: step 5")])]),
             ],
             "then": "hold"},
        ],
        "catch_up": {"request": {**loki_req(T, T + 10 * S, limit=100)}, "response": ok(loki_body(
            (G1, [(T + 1 * S, "step 1 loss 2.000"), (T + 3 * S, "step 2 loss 1.900")])))},
        "backfill": {"request": {**loki_req(T + 4 * S + 500, T + 4 * S + 501, limit=100)}, "response": ok(loki_body(
            (G1, [(T + 4 * S + 500, "step 3 ckpt saved (dropped by the tail)")]),
            (G2, [(T + 4 * S + 500, "gpu02: not dropped, delivered by the tail: must not appear")])))},
        "while_down": {"now_ns": str(T + 12 * S), "request": loki_req(T + 6 * S, T + 12 * S, limit=100),
                       "response": ok(loki_body((G1, [(T + 6 * S, "step 4 loss 1.700")])))},
        "expect": ["step 1 loss 2.000", "step 2 loss 1.900", "step 3 loss 1.800",
                   "step 3 ckpt saved (dropped by the tail)", "gpu02: step 3", "step 4 loss 1.700",
                   "step 5 loss 1.650", "gpu02: step 5"],
    }


# ---- VictoriaLogs ------------------------------------------------------------------------------
def rfc(ns):
    from datetime import UTC, datetime
    s, f = divmod(ns, S)
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{f:09d}Z"


VL_STREAM = '{slurm_job_id="4242"}'
V1 = '{host="gpu01",slurm_job_id="4242"}'
V2 = '{host="gpu02",slurm_job_id="4242"}'
VID = {V1: "0000000000000000e934a84adb05276890d7f7bfcadabe92", V2: "00000000000000004bd1e2bb5c7d4b1a6dd42d0a1e1d4f03"}


def vl_line(stream, ts, msg, **fields):
    obj = {"_msg": msg, "_stream": stream, "_stream_id": VID[stream], "_time": rfc(ts)}
    obj.update(fields)
    return json.dumps(dict(sorted(obj.items())), separators=(",", ":"))


def vl_req(start, end, limit=4):
    return {"method": "POST", "path": "/select/logsql/query",
            "form": {"query": f"{VL_STREAM} _time:[{rfc(start)}, {rfc(end)}) | sort by (_time) limit {limit}"}}


def vl_ok(*lines):
    return {"status": 200, "headers": {"Content-Type": "application/stream+json"},
            "body_text": "".join(line + "\n" for line in lines)}


def vl_follow():
    polls = []

    def poll(name, now, exchanges, expect=None, error=None, mono=None):
        p = {"name": name, "now_ns": str(now), "exchanges": exchanges}
        if mono is not None:
            p["mono"] = mono
        if error:
            p["expect_error"] = error
        else:
            p["expect"] = expect
        polls.append(p)

    poll("first read: two streams, sorted by _time (ns precision)", T + 10 * S, [
        {"request": vl_req(T, T + 10 * S), "response": vl_ok(
            vl_line(V1, T + 1 * S + 123456789, "step 1 loss 2.000", level="info"),
            vl_line(V2, T + 2 * S, "gpu02 ready"),
            vl_line(V1, T + 3 * S, "step 2 loss 1.900"))}],
        ["step 1 loss 2.000", "gpu02 ready", "step 2 loss 1.900"])
    poll("boundary: the entry at the cursor is dropped, a new one at the same _time kept", T + 20 * S, [
        {"request": vl_req(T + 3 * S, T + 20 * S), "response": vl_ok(
            vl_line(V1, T + 3 * S, "step 2 loss 1.900"), vl_line(V2, T + 3 * S, "gpu02 step 2"))}],
        ["gpu02 step 2"])
    poll("pagination at the limit (4): continue from the last _time", T + 30 * S, [
        {"request": vl_req(T + 3 * S, T + 30 * S), "response": vl_ok(
            vl_line(V1, T + 3 * S, "step 2 loss 1.900"), vl_line(V1, T + 11 * S, "a"),
            vl_line(V2, T + 12 * S, "b"), vl_line(V1, T + 13 * S, "c"))},
        {"request": vl_req(T + 13 * S, T + 30 * S), "response": vl_ok(
            vl_line(V1, T + 13 * S, "c"), vl_line(V2, T + 13 * S, "d: same _time as c"),
            vl_line(V1, T + 20 * S, "e"))}],
        ["a", "b", "c", "d: same _time as c", "e"])
    poll("gap of 100 s: empty body", T + 130 * S, [
        {"request": vl_req(T + 20 * S, T + 130 * S), "response": vl_ok()}], [])
    poll("429 with Retry-After: 3", T + 140 * S, [
        {"request": vl_req(T + 100 * S, T + 140 * S),
         "response": {"status": 429, "headers": {"Retry-After": "3"}, "body_text": "too many concurrent requests\n"}}],
        [], mono=50.0)
    poll("inside the back-off: no request", T + 141 * S, [], [], mono=52.0)
    poll("dead server", T + 145 * S, [
        {"request": vl_req(T + 100 * S, T + 145 * S), "response": {"error": "ConnectError"}}],
        error="LogSourceUnavailable", mono=54.0)
    poll("recovery with junk: a non-JSON line is skipped, huge and binary lines normalised", T + 150 * S, [
        {"request": vl_req(T + 100 * S, T + 150 * S), "response": vl_ok(
            vl_line(V1, T + 141 * S, HUGE), "this is not json {", vl_line(V2, T + 142 * S, JUNK),
            vl_line(V1, T + 143 * S, "out of order within the body: sorted by us"))}],
        ["<HUGE>", "<JUNK>", "out of order within the body: sorted by us"], mono=55.0)
    # the body above is in order; make one deliberately out of order
    polls[-1]["exchanges"][0]["response"] = vl_ok(
        vl_line(V1, T + 143 * S, "out of order within the body: sorted by us"),
        vl_line(V1, T + 141 * S, HUGE), "this is not json {", vl_line(V2, T + 142 * S, JUNK))
    poll("400: a query VictoriaLogs cannot parse is not retryable", T + 160 * S, [
        {"request": vl_req(T + 143 * S, T + 160 * S),
         "response": {"status": 400, "headers": {"Content-Type": "text/plain"},
                      "body_text": "cannot parse query: unexpected token\n"}}],
        error="LogSourceError", mono=56.0)
    return {"about": "VictoriaLogs /select/logsql/query follow (JSON lines). Shapes: SOURCES.md.",
            "selector": {"job_id": "4242", "since_ns": str(T)},
            "template": {"slurm_job_id": "{job_id}"},
            "config": {"limit": 4, "settle_s": 30, "max_window_s": 3600, "account_id": "12", "project_id": "34"},
            "huge": HUGE, "junk": JUNK, "polls": polls}


def vl_tail():
    return {
        "about": "VictoriaLogs /select/logsql/tail: streamed JSON lines, split across chunks; the first "
                 "response ends (dropped), the second starts with start_offset from the cursor.",
        "connections": [
            {"chunks": [vl_line(V1, T + 11 * S, "t1") + "\n" + vl_line(V2, T + 12 * S, "t2")[:30],
                        vl_line(V2, T + 12 * S, "t2")[30:] + "\n", vl_line(V1, T + 13 * S, "t3") + "\n"],
             "expect_start_offset": "18000ms", "then": "end"},
            {"chunks": [vl_line(V1, T + 11 * S, "t1") + "\n" + vl_line(V2, T + 12 * S, "t2") + "\n",
                        vl_line(V1, T + 13 * S, "t3") + "\n" + vl_line(V1, T + 14 * S, "t4") + "\n"],
             "expect_start_offset": "17000ms", "then": "hold"},
        ],
        "catch_up": {"request": vl_req(T, T + 10 * S, limit=100), "response": vl_ok(
            vl_line(V1, T + 1 * S, "c1"), vl_line(V1, T + 2 * S, "c2"))},
        "while_down": {"now_ns": str(T + 20 * S), "request": vl_req(T + 2 * S, T + 20 * S, limit=100),
                       "response": vl_ok(vl_line(V1, T + 2 * S, "c2"), vl_line(V1, T + 11 * S, "t1"),
                                         vl_line(V2, T + 12 * S, "t2"), vl_line(V1, T + 13 * S, "t3"))},
        "expect": ["c1", "c2", "t1", "t2", "t3", "t4"],
    }


def main():
    out = {"loki/query_range_follow.json": loki_follow(), "loki/tail_reconnect.json": loki_tail(),
           "victorialogs/query_follow.json": vl_follow(), "victorialogs/tail_reconnect.json": vl_tail()}
    for name, doc in out.items():
        (HERE / name).write_text(json.dumps(doc, indent=1, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
