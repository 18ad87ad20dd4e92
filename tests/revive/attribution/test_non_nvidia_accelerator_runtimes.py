"""Round-26 incidents (catalog 2026.12.20): jobs on Ascend, Gaudi, ROCm and Neuron accelerators.

- Huawei's CANN prints its error codes at the start of a line (``EI0002: ...``): the pdsh
  ``host: `` prefix must not swallow the code as a host name. ``EI0002`` (a Notify wait that never
  completed) is the NPU's collective hang; ``EJ0001`` (HCCP still held by an earlier job) is the
  node's state; any other ``EI``/``EJ`` code is the collective library's error.
- Gaudi's HCCL bridge says ``what(): Collective call returned error``: the Gaudi job's NCCL error.
- ROCm's HSA runtime aborting a queue (``aborting with error : HSA_STATUS_ERROR_...``) and the
  Neuron runtime failing to load a graph (``Nrt::Load failed``) are the accelerator runtime's error,
  the counterparts of a CUDA runtime error: cause unknown from the line, restart.
- XLA's placer refusing a device assignment is the program's (or its launcher's) configuration."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord


def job(state: str = "FAILED", exit_code: str = "1:0") -> JobRecord:
    return JobRecord(job_id="72006", nodes=["gpu-node-001", "gpu-node-002"], state=state, exit_code=exit_code)


def verdict(text: str, **kw: str) -> tuple[str, str, str, str | None]:
    a = attribute(EvidenceBundle(job_log=text, job=job(**kw)))
    root = a.root_event.signature_id if a.root_event else None
    return a.category.value, a.domain.value, a.action.value, root


STEPS = "".join(f"[rank0] step {i} loss {2.0 - i / 100:.2f}\n" for i in range(1, 6))


def test_an_ascend_notify_wait_timeout_is_a_collective_hang_not_a_host_named_ei0002():
    text = STEPS + (
        "EI0002: The wait execution of the Notify register times out. Reason: The Notify register has not "
        "received the Notify record from remote rank [4294967295].base information: [streamID:[1], taskID[39], "
        "taskType[Notify Wait]].\n")
    category, domain, action, root = verdict(text)
    assert root == "ascend.collective_wait_timeout"
    assert (category, action) == ("hang", "restart_in_place")
    a = attribute(EvidenceBundle(job_log=text, job=job()))
    assert a.culprit_nodes == []  # "EI0002" is a CANN code, not a node the job ran on


def test_hccp_still_held_by_the_last_job_is_the_nodes_state():
    text = ("EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe the last "
            "training process is running.\n")
    assert verdict(text) == ("nccl_error", "system", "restart_in_place", "ascend.hccp_init_busy")


def test_another_cann_collective_code_is_the_collective_librarys_error():
    text = STEPS + ("EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out. Reason: Remote Rank did not "
                    "send the data in time.\n")
    category, domain, action, root = verdict(text)
    assert root == "ascend.cann_error_code"
    assert (category, domain, action) == ("nccl_error", "unknown", "restart_in_place")


def test_a_gaudi_collective_call_error_under_ray_is_an_nccl_error():
    text = STEPS + ("(RayTrainWorker pid=19045) [2023-11-02 13:17:59,227 E 19045 21937] logging.cc:97: Unhandled "
                    "exception: N3c105ErrorE. what(): Collective call returned error\n")
    category, _, _, root = verdict(text)
    assert (category, root) == ("nccl_error", "hccl.collective_call_error")


def test_a_rocm_queue_abort_is_the_gpu_runtimes_error_not_a_bare_sigabrt():
    text = STEPS + (
        ":0:rocdevice.cpp :2672: 0696142325 us: 5999 : [tid:0x7f676e4c7640] Device::callbackQueue aborting with "
        "error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the "
        "largest legal address. code: 0x29\n"
        "srun: error: gpu-node-001: task 0: Aborted (core dumped)\n")
    category, domain, action, root = verdict(text, exit_code="0:6")
    assert root == "rocm.hsa_queue_error"
    # one abort, no kernel evidence: not yet the card's fault
    assert (category, domain, action) == ("cuda_error", "unknown", "restart_in_place")


def test_a_neuron_runtime_that_cannot_load_the_graph_is_the_accelerator_runtimes_error():
    text = ("RuntimeError: INTERNAL: From /job:c_localservice/replica:0/task:0:\n"
            "2 root error(s) found.\n"
            "  (0) INTERNAL: Nrt::Load failed on NeuronCores 0-0(2): nrt_load status=1, error message=\"Non "
            "specific failure\".\n")
    category, domain, action, root = verdict(text)
    assert root == "neuron.runtime_call_failed"
    # before catalog 2026.12.20 the generic RuntimeError made this the program's bug (stop)
    assert (category, domain, action) == ("cuda_error", "unknown", "restart_in_place")


def test_xla_refusing_a_device_assignment_is_the_programs_configuration():
    text = ("RuntimeError: INVALID_ARGUMENT: Cannot assign a device for operation XRTCompile_16: {{node "
            "XRTCompile_16}} was explicitly assigned to /job:localservice/replica:0/task:0/device:TPU:1 but "
            "available devices are [ /job:localservice/replica:0/task:0/device:TPU:0 ].\n")
    assert verdict(text) == ("app_bug", "application", "stop_no_retry", "xla.device_assignment_invalid")
