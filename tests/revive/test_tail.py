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
