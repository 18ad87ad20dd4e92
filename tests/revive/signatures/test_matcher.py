"""The matcher's own mechanics (revive/signatures/matcher.py), apart from what each catalog entry matches."""


def test_benign_entries_with_negated_classes_keep_the_raw_line_fast_path():
    """``[^-]`` is a class, not an anchor: benign NCCL INFO and fp16-overflow chatter is dropped before
    any prefix parsing (the scan's hot path); only a real ``^`` anchor needs the stripped body."""
    from revive.signatures.matcher import _anchored, default_matcher

    fast = {s.id for s in default_matcher()._benign}
    assert {"benign.nccl_info", "benign.fp16_overflow"} <= fast
    assert _anchored("^Thread") and _anchored("x|^y") and _anchored("(?:^|[ :])0%")
    assert not _anchored("a[^b]c") and not _anchored(r"a\^b") and not _anchored(r"[\]^]x")


def test_open_mpi_timestamp_output_prefix_gives_the_rank_the_stamp_and_the_nccl_host():
    """``mpirun --tag-output --timestamp-output`` (Horovod's horovodrun): a ctime stamp, then ``[job,rank]<stdout>:``."""
    from revive.attribution.timestamps import _parse_ts
    from revive.signatures.matcher import split_prefix
    body, meta = split_prefix("Mon May 24 06:43:04 2021[1,1]<stdout>:gpu-node-002:5377:5532 [0] NCCL INFO Connected all trees")
    assert body == "NCCL INFO Connected all trees"
    assert (meta.rank, meta.host, meta.ts_kind) == (1, "gpu-node-002", "mpirun")
    assert _parse_ts(meta.ts, meta.ts_kind, 1970).isoformat() == "2021-05-24T06:43:04+00:00"
    # a one-digit day is space-padded by ctime(3)
    assert _parse_ts(split_prefix("Tue Jun  1 00:00:09 2021[1,0]<stderr>:x")[1].ts, "mpirun", 1970).day == 1
