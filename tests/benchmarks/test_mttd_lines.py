"""``bench_mttd``'s summary lines: the combined ``BENCH mttd`` line and issue #13's three figures
(``mttd`` = detect, ``action``, ``mttr``) alone, from the same runs; ``nan`` where no run has a stamp."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_mttd  # noqa: E402


def _parse(lines: list[str]) -> dict[str, dict[str, str]]:
    return {ln.split()[1]: dict(kv.split("=", 1) for kv in ln.split()[2:]) for ln in lines}


def test_three_recoveries_and_one_that_never_acted():
    rows = [
        {"outcome": "recovered", "detect": 0.2, "action": 1.5, "resume": 10.0},
        {"outcome": "recovered", "detect": 0.4, "action": 1.9, "resume": 11.0},
        {"outcome": "recovered", "detect": 0.3, "action": 1.7, "resume": 10.5},
        {"outcome": "timeout", "detect": 0.5, "action": None, "resume": None},
    ]
    b = _parse(bench_mttd.summary_lines("xid79", rows, "0.42"))
    assert b["mttd"]["runs"] == "4" and b["mttd"]["ok"] == "3"
    assert (b["mttd"]["p50_s"], b["mttd"]["p99_s"]) == (b["mttd"]["detect_p50_s"], b["mttd"]["detect_p99_s"])
    assert (b["mttd"]["detect_p50_s"], b["mttd"]["detect_p99_s"]) == ("0.40", "0.50")
    assert b["action"] == {"fault": "xid79", "runs": "4", "p50_s": "1.70", "p99_s": "1.90", "load": "0.42"}
    assert b["mttr"] == {"fault": "xid79", "runs": "4", "p50_s": "10.50", "p99_s": "11.00", "load": "0.42"}
    assert b["action"]["p50_s"] == b["mttd"]["action_p50_s"] and b["mttr"]["p99_s"] == b["mttd"]["resume_p99_s"]


def test_no_run_with_a_stamp_reads_nan():
    b = _parse(bench_mttd.summary_lines("hang", [{"outcome": "timeout", "detect": None}], "1.0"))
    assert b["action"]["p50_s"] == "nan" and b["mttr"]["p99_s"] == "nan" and b["mttd"]["ok"] == "0"
