"""Round 20's incidents (catalog 2026.12.12): throughput printed as a rate, remote reads that time out,
and the collective libraries of other accelerators.

An MXNet job's Speedometer prints samples/sec; when it halves and stays down the run is a straggler,
exactly as when a per-iteration time doubles; a steady rate is healthy. A streaming dataset whose HTTP
read times out and then raises FileNotFoundError for the shard failed on I/O, not in the program. An
Intel GPU job's oneCCL error and a Gaudi graph-compile failure are recognised, not left to the abort
signal that follows them."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord
from revive.signatures.matcher import default_matcher

ONE_NODE = JobRecord(job_id="7", nodes=["gpu-node-001"], state="RUNNING")


def speedometer(rates: list[float]) -> str:
    return "".join(f"INFO:root:Epoch[0] Batch [{20 * (i + 1)}]\tSpeed: {r:.2f} samples/sec\taccuracy=0.5\n"
                   for i, r in enumerate(rates))


def test_a_rate_is_read_as_seconds_per_unit_of_work():
    is_prog, it, secs = default_matcher().progress_of("Epoch[3] Batch [40]\tSpeed: 50.00 samples/sec\tTrain-CE=0.6")
    assert is_prog and it is None  # the batch counter restarts every epoch: no iteration from it
    assert secs == 1 / 50.0


def test_a_rate_that_halves_and_stays_down_is_a_straggler():
    a = attribute(EvidenceBundle(job_log=speedometer([62.0] * 15 + [31.0] * 15), job=ONE_NODE))
    assert a.category.value == "straggler", a.explanation
    assert a.culprit_nodes == ["gpu-node-001"]  # one node ran the job: the slowdown is its own


def test_a_steady_rate_is_healthy():
    a = attribute(EvidenceBundle(job_log=speedometer([62.0, 61.5, 62.3, 61.9] * 8), job=ONE_NODE))
    assert a.category.value == "none", a.explanation


def test_a_remote_read_timeout_then_a_missing_shard_is_io_not_the_program():
    text = ("  1%|          | 64/8192 [56:27<87:25:33, 38.72s/it]'(ReadTimeoutError(\"HTTPSConnectionPool(host="
            "'huggingface.co', port=443): Read timed out. (read timeout=10)\"), '(Request ID: 5ef2)')' thrown while "
            "requesting GET https://huggingface.co/datasets/x/resolve/main/chunk9/a.jsonl.zst\n"
            "Traceback (most recent call last):\n"
            "FileNotFoundError: zstd://a.jsonl::hf://datasets/x@2d0a/train/chunk9/a.jsonl.zst\n")
    a = attribute(EvidenceBundle(job_log=text, job=JobRecord(job_id="8", nodes=["gpu-node-001"], state="FAILED",
                                                             exit_code="1:0")))
    assert (a.category.value, a.action.value) == ("io_error", "restart_in_place"), a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "storage.remote_read_timeout"


def test_other_accelerators_collective_and_compiler_failures_are_recognised():
    xpu = ("2026:07:02-03:29:05:[1] |CCL_ERROR| worker.cpp:338 ccl_worker_func: worker 0 caught internal\n"
           "    exception: oneCCL: ze_call.cpp:28 do_call: EXCEPTION: ze error at zeCommandQueueExecuteCommandLists\n"
           "=   KILLED BY SIGNAL: 9 (Killed)   /   SIGNAL: 6 (Aborted)\n")
    a = attribute(EvidenceBundle(job_log=xpu))
    assert a.category.value == "nccl_error" and a.root_event.signature_id == "ccl.oneccl_error", a.explanation
    gaudi = "[rank2]: RuntimeError: synNodeCreateWithId failed for node: batch_gemm with synStatus 26 [Generic failure]. .\n"
    g = attribute(EvidenceBundle(job_log=gaudi))
    assert (g.category.value, g.action.value) == ("crash", "stop_no_retry"), g.explanation
