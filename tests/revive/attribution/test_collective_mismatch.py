"""Mismatched collectives (issue #8, rule 3w): ranks that timed out in different collectives at the
same sequence number of one process group, or that c10d's debug wrapper caught calling different
collectives, ran different programs - the job's error, stop. Timeouts that agree stay a hang."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import Action, Category, Domain, EvidenceBundle, JobRecord

_WD = ("[rank{r}]:[E1120 10:{m}:11.000000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
       "timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for 600236 "
       "milliseconds before timing out.")
_STEPS = [f"[rank0]:2024-11-20 09:{50 + i}:00,000 - INFO - step: {i + 1} loss: 2.{i}" for i in range(3)]


def _job(lines: list[str]) -> EvidenceBundle:
    return EvidenceBundle(job_log="\n".join(lines), job=JobRecord(job_id="9", nodes=["gpu-node-001"], state="FAILED"))


def test_ranks_timed_out_in_different_collectives_at_one_seqnum_is_the_programs_error():
    a = attribute(_job(_STEPS + [_WD.format(r=0, m="02", seq=41, op="BROADCAST", n=1),
                                 _WD.format(r=1, m="02", seq=41, op="ALLREDUCE", n=1024)]))
    assert (a.category, a.domain, a.action) == (Category.app_bug, Domain.application, Action.stop_no_retry)
    assert "sequence number 41" in a.explanation
    assert a.culprit_nodes == []


def test_same_collective_with_different_sizes_is_a_mismatch_too():
    a = attribute(_job(_STEPS + [_WD.format(r=0, m="02", seq=7, op="ALLREDUCE", n=4),
                                 _WD.format(r=1, m="02", seq=7, op="ALLREDUCE", n=1853171)]))
    assert (a.category, a.action) == (Category.app_bug, Action.stop_no_retry)
    assert "NumelIn=1853171" in a.explanation


def test_ranks_that_agree_on_the_collective_stay_a_hang_of_unknown_cause():
    a = attribute(_job(_STEPS + [_WD.format(r=0, m="02", seq=41, op="ALLREDUCE", n=1024),
                                 _WD.format(r=1, m="02", seq=41, op="ALLREDUCE", n=1024)]))
    assert (a.category, a.domain, a.action) == (Category.hang, Domain.unknown, Action.restart_in_place)


def test_different_seqnums_are_not_compared():
    a = attribute(_job(_STEPS + [_WD.format(r=0, m="02", seq=41, op="BROADCAST", n=1),
                                 _WD.format(r=1, m="02", seq=42, op="ALLREDUCE", n=1024)]))
    assert a.category == Category.hang


def test_point_to_point_ops_are_not_a_mismatch():
    a = attribute(_job(_STEPS + [_WD.format(r=0, m="02", seq=5, op="SEND", n=64),
                                 _WD.format(r=1, m="02", seq=5, op="ALLREDUCE", n=1024)]))
    assert a.category == Category.hang


def test_debug_wrapper_mismatch_line_decides_over_the_generic_runtime_error():
    a = attribute(_job(_STEPS + [
        "[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=18, OpType=ALLREDUCE, TensorShape=[4]), but Rank 0 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=18, OpType=BROADCAST, TensorShape=[1]).",
    ]))
    assert a.root_event is not None and a.root_event.signature_id == "c10d.collective_mismatch"
    assert (a.category, a.domain, a.action) == (Category.app_bug, Domain.application, Action.stop_no_retry)


def test_keyboard_interrupt_on_a_stuck_run_is_never_requeued():
    a = attribute(_job(_STEPS + ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
                                 "KeyboardInterrupt"]))
    assert (a.category, a.action) == (Category.hang, Action.stop_no_retry)


def test_gdb_backtrace_of_a_stuck_process_is_a_hang():
    a = attribute(_job(_STEPS + [
        "#0  0x00007f3c2a1b3d9f in __GI___poll (fds=0x55d4c1a0, nfds=1, timeout=100) at ../sysdeps/unix/sysv/linux/poll.c:29",
        "#1  0x00007f3c1e2a4b10 in ncclProxyProgress () from /usr/lib/x86_64-linux-gnu/libnccl.so.2",
    ]))
    assert a.category == Category.hang


# ---- 3y: a generic Python exception that names no infrastructure is the program's own error

def _traceback(exc_line: str) -> list[str]:
    return _STEPS + ["Traceback (most recent call last):", '  File "train.py", line 88, in <module>', exc_line]


def test_ddp_unused_parameters_runtime_error_is_the_programs_error():
    a = attribute(_job(_traceback(
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing loss.")))
    assert a.root_event is not None and a.root_event.signature_id == "py.ddp_unused_parameters"
    assert (a.category, a.domain, a.action) == (Category.app_bug, Domain.application, Action.stop_no_retry)


def test_generic_error_naming_a_worker_or_the_network_stays_unknown():
    for line in ("RuntimeError: DataLoader worker (pid(s) 3360242) exited unexpectedly",
                 "RuntimeError: Connection reset by peer while sending tensor",
                 "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
                 "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1."):
        a = attribute(_job(_traceback(line)))
        assert (a.category, a.domain, a.action) == (Category.crash, Domain.unknown, Action.restart_in_place), line


def test_generic_error_followed_by_progress_is_still_survived_noise():
    a = attribute(EvidenceBundle(job_log="\n".join(
        _traceback("RuntimeError: mat2 must be col_major, got stride (4096, 1)")
        + [f"[rank0]:2024-11-20 10:{10 + i}:00,000 - INFO - step: {i + 10} loss: 1.{i}" for i in range(4)]),
        job=JobRecord(job_id="9", nodes=["gpu-node-001"], state="RUNNING")))
    assert a.category == Category.none


# ---- 3z: NCCL says a CUDA/verbs call it made was rejected as invalid: the software stack's error

def test_nccl_cuda_invalid_resource_handle_is_the_stacks_error():
    a = attribute(_job([
        "host1:2532579:2532579 [0] enqueue.cc:336 NCCL WARN Cuda failure 'invalid resource handle'",
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2006, unhandled cuda error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.12.10",
    ]))
    assert (a.category, a.domain, a.action) == (Category.nccl_error, Domain.application, Action.stop_no_retry)
    assert "invalid resource handle" in a.explanation


def test_nccl_cuda_unknown_error_or_unsupported_operation_stays_unknown():
    for err in ("operation not supported", "unknown error"):
        a = attribute(_job([
            f"host1:1:1 [0] enqueue.cc:336 NCCL WARN Cuda failure '{err}'",
            "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:2006, unhandled cuda error, NCCL version 2.12.10",
        ]))
        assert a.domain != Domain.application, err


def test_nvls_invalid_argument_keeps_its_system_verdict():
    a = attribute(_job([
        "gpu-node-001:242431:242479 [5] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid argument'",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL version 2.18.1",
    ]))
    assert a.domain == Domain.system
