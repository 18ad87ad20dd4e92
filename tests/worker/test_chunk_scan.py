"""The monitor's chunk scan (``ChunkScanner`` over ``Follower.read_chunk``) sees exactly what the
per-line path (``Follower.read_new`` + feed/root_hit on every line) sees: same hits, same line
numbers, same tracker state, whatever the chunk boundaries."""

from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path

import pytest

from revive.logline import LINE_CAP
from revive.tail import Follower
from worker.detect import AttemptTracker, ChunkScanner, default_scanner, root_hit

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = sorted(p for p in DATA.rglob("*.log") if p.stat().st_size < 2_000_000)

EDGE = (
    b"=== attempt restart=0 2026-11-29T00:00:00+00:00\n"
    b"2026-11-29T00:00:01+00:00 [rank 0 host n1] iteration 1/9 | loss 1 | compute_ms 1 | step_time_ms 2\n"
    b"prefix === attempt restart=5 not at the start\n"
    b"x CUDA er\x00ror: unknown error\n"  # decode_line drops NULs
    + b"y" * ((LINE_CAP - 9) // 2 - len("OSError:")) + b"OSError:" + b"z" * LINE_CAP + b"\n"  # cap joins ": "
    + b"\xff\xfe RuntimeError: CUDA error: unknown error\r\n"
    b"2026-11-29T00:00:02+00:00 [rank 0 host n1] saving checkpoint at iteration 1\n"
    b"2026-11-29T00:00:09+00:00 [rank 0 host n1] saved checkpoint at iteration 1\n"
    b"NCCL INFO chatter\nno newline at the end"
)


def _per_line(chunks: list[bytes], path: Path) -> tuple[list, dict]:
    path.write_bytes(b"")
    f, t, hits = Follower(), AttemptTracker(), []
    for i, c in enumerate(chunks):
        with path.open("ab") as fh:
            fh.write(c)
        for n, text in f.read_new(str(path)):
            t.feed(text, float(i))
            h = root_hit(n, text)
            if h:
                hits.append((h.line_no, h.signature_id, h.text, t.attempt))
    return hits, asdict(t)


def _chunked(chunks: list[bytes], path: Path, sc: ChunkScanner) -> tuple[list, dict]:
    path.write_bytes(b"")
    f, t, hits = Follower(), AttemptTracker(), []
    for i, c in enumerate(chunks):
        with path.open("ab") as fh:
            fh.write(c)
        got = f.read_chunk(str(path))
        if got is None:
            continue
        for n, text in sc.lines(got[1], got[0]):
            t.feed(text, float(i))
            h = root_hit(n, text)
            if h:
                hits.append((h.line_no, h.signature_id, h.text, t.attempt))
    return hits, asdict(t)


def _split(data: bytes, rnd: random.Random) -> list[bytes]:
    cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, 7))) if len(data) > 1 else []
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@pytest.mark.parametrize("log", LOGS, ids=lambda p: str(p.relative_to(DATA)))
def test_chunk_scan_equals_per_line_on_the_corpus(log, tmp_path):
    data = log.read_bytes()
    rnd = random.Random(log.name)
    for chunks in ([data], _split(data, rnd)):
        a = _per_line(chunks, tmp_path / "a.log")
        b = _chunked(chunks, tmp_path / "b.log", default_scanner())
        assert a == b


def test_chunk_scan_equals_per_line_on_edge_cases(tmp_path):
    rnd = random.Random(1)
    for chunks in ([EDGE], _split(EDGE, rnd), _split(EDGE, rnd), [EDGE[i:i + 1] for i in range(len(EDGE))][:400]):
        a = _per_line(chunks, tmp_path / "a.log")
        b = _chunked(chunks, tmp_path / "b.log", default_scanner())
        assert a == b
    hits, _ = _per_line([EDGE], tmp_path / "c.log")
    assert hits  # the edge cases do open incidents


def test_scanner_skips_lines_that_change_nothing():
    data = b"plain noise\n" * 1000 + b"[rank1]: RuntimeError: CUDA error: unknown error\n" + b"more noise\n" * 10
    assert [n for n, _ in default_scanner().lines(data, 1)] == [1001]
