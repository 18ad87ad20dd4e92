"""The matcher on junk lines: a verdict or nothing, never an exception (the live monitor calls it
on every line; robustness pass of 2026-12-02)."""

from __future__ import annotations

import pytest

from revive.logline import log_int
from revive.signatures.matcher import default_matcher, split_prefix
from revive.signatures.xid import resolve_xid

BIG = "9" * 5000


@pytest.mark.parametrize("line", [
    f"[rank{BIG}]: RuntimeError: CUDA error: unknown error",
    f"[rank: {BIG}] RuntimeError: CUDA error: unknown error",
    f"[default{BIG}]: RuntimeError: CUDA error: unknown error",
    f"host1 [stderr] [Rank {BIG}] RuntimeError: CUDA error: unknown error",
    f"kernel: NVRM: Xid (PCI:0000:3b:00): {BIG}, GPU has fallen off the bus.",
    f"nvidia-nvswitch0: SXid (PCI:0000:05:00.0): {BIG}, Fatal, Link 32 LTSSM Fault Up",
])
def test_a_5000_digit_number_is_no_crash(line):
    # was: ValueError "Exceeds the limit (4300 digits) for integer string conversion" from
    # split_prefix (ranks) and the Xid/SXid resolvers: a line of the right shape raised out of
    # match(), i.e. out of the monitor's root_hit and the engine
    split_prefix(line)
    for m in default_matcher().match(line, include_benign=True):
        assert m.id


def test_an_xid_code_too_long_to_be_one_is_the_catalog_default_not_a_crash():
    (m,) = [x for x in default_matcher().match(f"NVRM: Xid (PCI:0000:3b:00): {BIG}, x") if x.id == "xid.event"]
    assert (m.category.value, m.action.value) == ("gpu_hardware", "drain_and_requeue")
    assert resolve_xid(45, f"caused by previous Xid {BIG}").effective_code == 45


def test_lone_surrogates_are_matched_as_replacement_characters():
    # was: UnicodeEncodeError from RE2 (it takes UTF-8) for a line holding "\udcff"
    # (a JSON escape in trigger/bundle files)
    line = "[rank1]: RuntimeError: CUDA error: unknown error \udcff"
    assert [m.id for m in default_matcher().match(line)] == ["cuda.unknown_error"]
    assert default_matcher().gate(line)
    assert default_matcher().progress_of("iteration 5/10 \udcff step_time_ms 20")[0] in (True, False)


def test_log_int():
    assert log_int("42") == 42 and log_int("007") == 7
    assert log_int(BIG) is None and log_int("") is None and log_int(None) is None
    assert log_int("-1") is None and log_int(" 1") is None and log_int("1_0") is None and log_int("²") is None


def test_the_pdsh_prefix_is_linear_on_a_long_word_with_digits():
    # was: "[\w.-]*\d[\w.-]*" backtracked quadratically: 0.3 s for one 8 KB line of
    # "a2026-01-01a2026-01-01…" (the engine matches up to 8 KB of each line; a log of them: minutes)
    import time

    line = ("a2026-01-01" * 800)[:8000] + " RuntimeError: CUDA error: unknown error"
    t0 = time.perf_counter()
    for _ in range(5):
        split_prefix(line)
    assert time.perf_counter() - t0 < 0.25
    assert split_prefix("gpu-node-003: RuntimeError: x")[1].extra["pdsh_host"] == "gpu-node-003"
    assert "pdsh_host" not in split_prefix("node: RuntimeError: x")[1].extra  # a host needs a digit


def test_a_cann_error_code_at_the_start_of_a_line_is_the_message_not_a_pdsh_host():
    body, meta = split_prefix("EI0002: The wait execution of the Notify register times out.")
    assert body.startswith("EI0002: ") and "pdsh_host" not in meta.extra
    assert split_prefix("EE1002: 2024-09-03-16:50:00.041.231 Stream synchronize timeout.")[0].startswith("EE1002")
    # a host whose name merely starts like one keeps its prefix
    assert split_prefix("EI0002a: RuntimeError: x")[1].extra["pdsh_host"] == "EI0002a"
