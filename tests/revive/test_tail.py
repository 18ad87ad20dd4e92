"""Log follower: offsets cache, truncation, replacement, partial and huge lines."""

from __future__ import annotations

import os

from revive.tail import LINE_CAP, Follower


def test_reads_only_new_complete_lines_and_survives_a_lost_cache(tmp_path):
    log, cache = tmp_path / "job.out", tmp_path / "offsets.json"
    log.write_text("a\nb\npart")
    f = Follower(offsets_file=cache, cluster="c")
    assert f.read_new(str(log)) == [(1, "a"), (2, "b")]
    with log.open("a") as fh:
        fh.write("ial\nc\n")
    assert f.read_new(str(log)) == [(3, "partial"), (4, "c")]
    f.save()
    assert Follower(offsets_file=cache, cluster="c").read_new(str(log)) == []
    cache.write_text("{not json")
    assert [x for _, x in Follower(offsets_file=cache, cluster="c").read_new(str(log))] == ["a", "b", "partial", "c"]


def test_truncated_or_replaced_file_is_read_from_the_start(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("one\ntwo\n")
    f = Follower()
    f.read_new(str(log))
    log.write_text("x\n")  # truncated
    assert f.read_new(str(log)) == [(1, "x")]
    os.replace(tmp_path / "job.out", tmp_path / "old")
    (tmp_path / "job.out").write_text("new\n")  # new inode
    assert f.read_new(str(log)) == [(1, "new")]


def test_huge_lines_are_capped_and_binary_is_replaced(tmp_path):
    log = tmp_path / "job.out"
    log.write_bytes(b"x" * (LINE_CAP * 10) + b"\n\xff\xfe\x00ok\n")
    lines = Follower().read_new(str(log))
    assert len(lines[0][1]) == LINE_CAP
    assert lines[1][1].endswith("ok") and "\x00" not in lines[1][1]


def test_missing_file_is_empty(tmp_path):
    assert Follower().read_new(str(tmp_path / "nope")) == []


def _history(tmp_path, prefetch: bool) -> list:
    """A log's life (appends, a partial line, truncation, replacement by a new file, deletion) seen
    by read_chunk, optionally after a threaded prefetch of every pass."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"")
    f, seen = Follower(), []
    steps = [
        lambda: a.write_bytes(b"one\ntwo\npart"),
        lambda: a.open("ab").write(b"ial\nthree\n"),
        lambda: a.write_bytes(b"x\n"),  # truncated
        lambda: (a.unlink(), a.write_bytes(b"new file\nsecond\n")),  # replaced: another inode
        lambda: a.unlink(),  # gone
        lambda: a.write_bytes(b"back\n"),
    ]
    for step in steps:
        step()
        b.write_bytes(b.read_bytes() + b"b line\n" if b.exists() else b"b line\n")
        if prefetch:
            f.prefetch([str(a), str(b), str(tmp_path / "never.log")], threads=3)
        seen.append((f.read_chunk(str(a)), f.read_chunk(str(b))))
    return seen


def test_prefetch_on_threads_reads_what_read_chunk_alone_reads(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    alone = _history(tmp_path / "x", prefetch=False)
    fetched = _history(tmp_path / "y", prefetch=True)
    assert fetched == alone
    assert alone[0][0] == (1, b"one\ntwo\n") and alone[2][0] == (1, b"x\n") and alone[4][0] is None


def test_a_prefetched_read_for_an_older_offset_is_not_used(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"1\n")
    f = Follower()
    f.prefetch([str(p)])
    assert f.read_chunk(str(p)) == (1, b"1\n")
    f.prefetch([str(p)])  # nothing new: no read made
    p.open("ab").write(b"2\n")
    f.prefetch([str(p)])
    f.states[str(p)].offset = 0  # the state moved since the prefetch (re-read from the start)
    f.states[str(p)].line_no = 0
    assert f.read_chunk(str(p)) == (1, b"1\n2\n")  # read afresh, not the prefetched b"2\n"
