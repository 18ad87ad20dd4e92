"""The matcher's own mechanics (revive/signatures/matcher.py), apart from what each catalog entry matches."""


def test_benign_entries_with_negated_classes_keep_the_raw_line_fast_path():
    """``[^-]`` is a class, not an anchor: benign NCCL INFO and fp16-overflow chatter is dropped before
    any prefix parsing (the scan's hot path); only a real ``^`` anchor needs the stripped body."""
    from revive.signatures.matcher import _anchored, default_matcher

    fast = {s.id for s in default_matcher()._benign}
    assert {"benign.nccl_info", "benign.fp16_overflow"} <= fast
    assert _anchored("^Thread") and _anchored("x|^y") and _anchored("(?:^|[ :])0%")
    assert not _anchored("a[^b]c") and not _anchored(r"a\^b") and not _anchored(r"[\]^]x")
