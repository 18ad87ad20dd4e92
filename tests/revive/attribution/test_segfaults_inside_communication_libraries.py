"""Round-31 incidents (rule 3az): a segmentation fault is read by the frame it faulted in.

- NCCL 2.27's RAS thread crashing (UCX's handler prints the backtrace; the first frame below
  ``libucs`` is ``libnccl.so``) is NCCL's failure, and it recurs on that version: stop.
- Open MPI's libnbc progressing a non-blocking allreduce on GPU buffers (the first frame below the
  sigreturn trampoline is ``libmpi.so.40``) is the MPI library's, however the launcher restates it.
- A fault in the CUDA compiler (``libnvrtc``) under UCX's handler is not UCX's: a crash of unknown cause."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord


def verdict(text: str) -> tuple[str, str, str]:
    job = JobRecord(job_id="2243671", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED", exit_code="139:0")
    a = attribute(EvidenceBundle(job_log=text, job=job))
    return a.category.value, a.domain.value, a.action.value


STEPS = "".join(f"iteration {i:6d}/  100000 | elapsed time per iteration (ms): 812.4 | lm loss: 2.41E+00\n"
                for i in range(10, 60, 10))


def test_nccls_ras_thread_segfault_under_ucxs_handler_is_ncclss_failure_stop():
    text = STEPS + (
        "[gpu-node-001:288505:0:296459] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x48)\n"
        "==== backtrace (tid: 296459) ====\n"
        " 0  /usr/lib/libucs.so.0(ucs_handle_error+0x2d4) [0x7fedc925c274]\n"
        " 1  /usr/lib/libucs.so.0(+0x2d44c) [0x7fedc925c44c]\n"
        " 2  /usr/lib/libucs.so.0(+0x2d61a) [0x7fedc925c61a]\n"
        " 3  /opt/nccl/lib/libnccl.so(+0x120057) [0x7ff1c18c1057]\n"
        " 4  /usr/lib/x86_64-linux-gnu/libc.so.6(+0x89144) [0x7ff1c151e144]\n"
        "=================================\n")
    assert verdict(text) == ("nccl_error", "application", "stop_no_retry")


def test_open_mpi_libnbc_segfault_is_the_mpi_librarys_even_as_the_launcher_restates_it():
    text = (
        "[gpu-node-001:31808] *** Process received signal ***\n"
        "[gpu-node-001:31808] Signal: Segmentation fault (11)\n"
        "[gpu-node-001:31808] [ 0] linux-vdso.so.1(__kernel_rt_sigreturn+0x0)[0x400027ce07dc]\n"
        "[gpu-node-001:31808] [ 1] /opt/openmpi-5.0.9/lib/libmpi.so.40(NBC_Progress+0x164)[0x400029a97bd4]\n"
        "[gpu-node-001:31808] *** End of error message ***\n"
        "srun: error: gpu-node-001: task 0: Segmentation fault (core dumped)\n"
        "srun: error: gpu-node-002: task 2: Segmentation fault (core dumped)\n")
    assert verdict(text) == ("nccl_error", "application", "stop_no_retry")


def test_a_fault_in_the_cuda_compiler_under_ucxs_handler_stays_a_crash_of_unknown_cause():
    text = STEPS + (
        "640: [gpu-node-001:244443:0:244443] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x455)\n"
        "640: ==== backtrace (tid: 244443) ====\n"
        "640:  0  /opt/hpcx/ucx/lib/libucs.so.0(ucs_handle_error+0x2cc) [0x4000d2b214dc]\n"
        "640:  3  linux-vdso.so.1(__kernel_rt_sigreturn+0) [0x4000347707dc]\n"
        "640:  4  /usr/local/cuda/lib64/libnvrtc.so.12.8.61(+0x935000) [0x400140a25000]\n"
        "srun: error: gpu-node-001: task 640: Segmentation fault\n")
    assert verdict(text) == ("crash", "unknown", "restart_in_place")


def test_a_segfault_with_no_backtrace_stays_a_crash():
    assert verdict(STEPS + "srun: error: gpu-node-002: task 3: Segmentation fault (core dumped)\n")[0] == "crash"
