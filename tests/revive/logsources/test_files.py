"""FileLogSource: revive.tail.Follower's semantics behind the LogSource interface."""

from __future__ import annotations

import json
import os

import pytest

from revive.logsources import LINE_CAP, LogSource, LogSourceError, StreamSelector, from_config
from revive.logsources.files import FileLogSource


async def test_new_complete_lines_with_seq_and_labels(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("a\nb\npart")
    src = FileLogSource()
    assert isinstance(src, LogSource)
    sel = StreamSelector(job_id="1", path=str(log), labels={"host": "gpu01"})
    lines = await src.read_new(sel)
    assert [(ln.seq, ln.text, ln.ts) for ln in lines] == [(1, "a", None), (2, "b", None)]
    assert lines[0].labels == {"path": str(log), "host": "gpu01"}
    with log.open("a") as fh:
        fh.write("ial\nc\n")
    assert [(ln.seq, ln.text) for ln in await src.read_new(sel)] == [(3, "partial"), (4, "c")]
    assert await src.read_new(sel) == []


async def test_truncation_rereads_from_start_and_seq_keeps_growing(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("one\ntwo\n")
    src = FileLogSource()
    sel = StreamSelector(path=str(log))
    await src.read_new(sel)
    log.write_text("x\n")
    assert [(ln.seq, ln.text) for ln in await src.read_new(sel)] == [(3, "x")]
    os.replace(log, tmp_path / "old")
    log.write_text("new\n")
    assert [(ln.seq, ln.text) for ln in await src.read_new(sel)] == [(4, "new")]


async def test_huge_and_binary_lines(tmp_path):
    log = tmp_path / "job.out"
    log.write_bytes(b"x" * (LINE_CAP * 10) + b"CUDA error\n\xff\xfe\x00ok\r\n")
    lines = await FileLogSource().read_new(StreamSelector(path=str(log)))
    assert len(lines[0].text) == LINE_CAP and lines[0].text.endswith("CUDA error")
    assert lines[1].text == "\ufffd\ufffdok"


async def test_state_restore_no_duplicate_no_loss(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("1\n2\npar")
    sel = StreamSelector(path=str(log))
    a = FileLogSource()
    assert [ln.text for ln in await a.read_new(sel)] == ["1", "2"]
    saved = json.loads(json.dumps(a.state()))
    await a.close()
    with log.open("a") as fh:
        fh.write("tial\n3\n")
    b = FileLogSource()
    b.restore(saved)
    assert [(ln.seq, ln.text) for ln in await b.read_new(sel)] == [(3, "partial"), (4, "3")]


async def test_offsets_file_is_the_followers_cache(tmp_path):
    log, cache = tmp_path / "job.out", tmp_path / "offsets.json"
    log.write_text("a\nb\n")
    sel = StreamSelector(path=str(log))
    a = from_config({"backend": "file", "offsets_file": str(cache)}, cluster="c1")
    await a.read_new(sel)
    await a.close()  # saves the Follower's offsets
    with log.open("a") as fh:
        fh.write("c\n")
    b = from_config({"backend": "file", "offsets_file": str(cache)}, cluster="c1")
    assert [(ln.seq, ln.text) for ln in await b.read_new(sel)] == [(3, "c")]


async def test_missing_file_and_missing_path(tmp_path):
    src = FileLogSource()
    assert await src.read_new(StreamSelector(path=str(tmp_path / "nope"))) == []
    with pytest.raises(LogSourceError):
        await src.read_new(StreamSelector(job_id="1"))


def test_restore_skips_junk():
    src = FileLogSource()
    src.restore({"version": 1, "kind": "file", "files": {"/a": {"inode": "x"}, "/b": {"inode": 1, "offset": -1},
                                                         "/c": {"inode": 2, "offset": 5}}, "seq": {"/c": "zz"}})
    assert list(src.follower.states) == ["/c"]
    src.restore({"version": 1, "kind": "loki"})
    src.restore("nonsense")  # type: ignore[arg-type]
