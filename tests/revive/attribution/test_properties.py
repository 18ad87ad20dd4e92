"""Property tests: odd input never raises, and stays bounded in time and memory."""

from __future__ import annotations

import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from revive.attribution.cases import load_case
from revive.attribution.engine import attribute
from revive.models import Attribution, EvidenceBundle, JobRecord, Trigger
from revive.signatures.matcher import default_matcher, split_prefix

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCARY = [
    "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "[rank3]: RuntimeError: CUDA error: unknown error",
    "srun: error: Node failure on node7",
    "[rank1]: KeyError: 'x'",
    "NCCL INFO Channel 00/0",
    "iteration 5/10 | step_time_ms 25.0",
    "=== attempt restart=1 2026-11-29T15:04:00+00:00",
    "Root Cause (first observed failure):",
    "  rank      : 4 (local_rank: 4)",
    "[rank2]:[E1129 10:10:00.0 ProcessGroupNCCL.cpp:1664] [PG 0 Rank 2] Exception (either an error or timeout) "
    "detected by watchdog at work: 5, last enqueued NCCL work: 5, last completed NCCL work: 4.",
]


def _check(a: Attribution) -> None:
    assert isinstance(a, Attribution)
    assert 0.0 <= a.confidence <= 1.0
    if a.action.value == "drain_and_requeue":
        assert a.domain.value == "hardware" or (
            a.root_event is not None and a.root_event.signature_id == "storage.hung_task" and a.culprit_nodes)


@FAST
@given(st.binary(max_size=4000))
def test_random_bytes_as_case_file(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("c") / "job.log"
    p.write_bytes(data)
    _check(attribute(load_case(p)))
    _check(attribute(load_case(p.parent)))


@FAST
@given(st.lists(st.one_of(st.text(max_size=200), st.sampled_from(SCARY)), max_size=60))
def test_random_text_lines_with_scary_lines(lines):
    text = "\n".join(lines)
    _check(attribute(EvidenceBundle(job_log=text, kernel_logs={"": lines[:5], "n1": lines[5:10]},
                                    job=JobRecord(job_id="1", nodes=["n1", "n2"]))))
    for line in lines:
        default_matcher().match(line)
        split_prefix(line)


@FAST
@given(st.lists(st.sampled_from(SCARY), max_size=30), st.lists(st.sampled_from(
    ["\x1b[31m", "\x1b[0m", "\x1b[1;32m", "\r", "\x1b[2K", "\x1b]0;t\x07"]), max_size=5))
def test_ansi_escapes(lines, esc):
    text = "\n".join("".join(esc) + line + "".join(reversed(esc)) for line in lines)
    _check(attribute(EvidenceBundle(job_log=text)))


def test_ansi_colored_error_still_matches():
    got = default_matcher().match("\x1b[31m[rank3]: RuntimeError: CUDA error: unknown error\x1b[0m")
    assert [g.id for g in got] == ["cuda.unknown_error"] and got[0].fields["rank"] == "3"


@FAST
@given(st.binary(min_size=1, max_size=2000))
def test_invalid_utf8(data):
    text = (b"iteration 1/10 | step_time_ms 25\n" + data + b"\nsrun: error: Node failure on n1\n").decode(
        "utf-8", "surrogateescape")
    a = attribute(EvidenceBundle(job_log=text))
    _check(a)
    assert a.category.value == "node_failure"


@FAST
@given(st.lists(st.datetimes(), min_size=1, max_size=40))
def test_timestamps_going_backwards(stamps):
    lines = []
    for i, ts in enumerate(stamps):
        lines.append(f"{ts.isoformat()}+00:00 [rank {i % 4} host n{i % 2}] iteration {i}/99 | step_time_ms 25.0")
        lines.append(f"[{ts.strftime('%Y-%m-%d %H:%M:%S')}] [rank{i % 4}]: ncclRemoteError: remote process exited")
    lines.reverse()
    kern = [f"{ts.strftime('%b %d %H:%M:%S')} n1 kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid=1, x" for ts in stamps]
    trig = Trigger(kind="no_progress", at=stamps[0].replace(tzinfo=None).isoformat() + "Z")
    _check(attribute(EvidenceBundle(job_log="\n".join(lines), kernel_logs={"n1": kern}, trigger=trig,
                                    job=JobRecord(job_id="1", nodes=["n1", "n2"]))))


def test_ten_megabyte_line_bounded():
    big = "A" * 10_000_000
    text = big + "\nsrun: error: Node failure on n1\n" + big + "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    tracemalloc.start()
    a = attribute(EvidenceBundle(job_log=text))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert a.category.value == "gpu_hardware"  # the Xid outranks the node-failure line (tier, then authority)
    assert peak < 12 * len(text), peak  # memory stays proportional (time: benchmarks/bench_bounds.py)
    assert len(a.root_event.text) <= 4096
    # the matcher on one huge line is bounded too
    assert default_matcher().match(big + " CUDA error: unknown error") != []


def test_million_lines_bounded():
    lines = [f"iteration {i}/1000000 | loss 0.5 | step_time_ms 25.0" for i in range(1_000_000)]
    lines[700_000] = "[rank3]: RuntimeError: CUDA error: unknown error"
    text = "\n".join(lines)
    del lines
    a = attribute(EvidenceBundle(job_log=text))
    assert (a.category.value, a.domain.value, a.root_event.line_no) == ("cuda_error", "hardware", 700_001)


def test_naive_trigger_time_does_not_break_ordering():
    from datetime import datetime

    trig = Trigger(kind="job_state", at=datetime(2026, 11, 29, 10, 0, 0), state_to="TIMEOUT")
    a = attribute(EvidenceBundle(job_log="2026-11-29T10:00:01+00:00 [rank0]: KeyError: 'x'", trigger=trig))
    assert a.engine == "revive-rules" and "engine error" not in a.explanation
    assert a.category.value == "timeout"


def test_matcher_cheap_on_benign_lines():
    m = default_matcher()
    lines = ["2026-11-29T15:04:05.123+00:00 [rank 1 host node2] iteration 12/400 | loss 0.4321 | step_time_ms 25.0",
             "gpu-node-007:44295:52633 [4] NCCL INFO Channel 04/0 : 4[4] -> 12[4] [send] via NET/IBext_v8/4/GDRDMA"]
    for line in lines:  # benign lines match nothing (their cost: benchmarks/bench_bounds.py)
        assert m.match(line) == []
