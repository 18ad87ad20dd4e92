"""Rules keyed on what the fabric and the verbs layer say (issue #8, docs/attribution.md 3ah-3ak): a
failed NVLS multicast bind is the node's fabric configuration; a contained CUDA error (peer memory over
NVLink or a hardware error) is NVLink hardware, in every spelling; a JAX task that re-registered with a new
incarnation was restarted on its own by the launcher; an IB QP access/request async event is the software
that drives the QP, while a port error stays the link's."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import Action, Category, Domain, EvidenceBundle, JobRecord

NODES = ["gpu-node-001", "gpu-node-002"]


def _job(log: str, nodes: list[str] = NODES, state: str = "FAILED") -> EvidenceBundle:
    return EvidenceBundle(job_log=log, job=JobRecord(job_id="9", nodes=nodes, state=state))


def _root(a) -> str:
    assert a.root_event is not None
    return a.root_event.signature_id


def test_nvls_bind_failure_is_the_fabric_configuration_and_is_not_retried():
    log = "\n".join([
        "step 0 | loss 11.02",
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, "
        "unhandled cuda error, NCCL version 2.29.7",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 "
        "'the operation cannot be performed in the present state'.",
        "This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches.",
        "Disable NVLS (NCCL_NVLS_ENABLE=0) if you wish to avoid this error in the future.",
    ])
    a = attribute(_job(log, nodes=["gpu-node-001"]))
    assert _root(a) == "nccl.nvls_bind_failed"
    assert (a.category, a.domain, a.action) == (Category.nccl_error, Domain.system, Action.stop_no_retry)


def test_nvls_bind_failure_quoted_alone_is_still_recognised():
    a = attribute(_job("Failed to bind NVLink SHARP (NVLS) Multicast memory: CUDA error 401"))
    assert _root(a) == "nccl.nvls_bind_failed"
    assert a.domain == Domain.system


def test_contained_cuda_error_is_nvlink_hardware_on_the_node_that_printed_it():
    log = "\n".join([
        "[rank 5 host gpu-node-002] step 65069 loss 1.71",
        "[rank 5 host gpu-node-002] CUDA_ERROR_CONTAINED: Invalid access of peer GPU memory over nvlink or a "
        "hardware error",
        "[rank 1 host gpu-node-001] jax.errors.JaxRuntimeError: INTERNAL: CUDA error: unspecified launch failure",
    ])
    a = attribute(_job(log))
    assert _root(a) == "cuda.error_contained"
    assert (a.category, a.domain, a.action) == (Category.nvlink, Domain.hardware, Action.drain_and_requeue)
    assert a.culprit_nodes == ["gpu-node-002"]


def test_nvlink_uncorrectable_in_the_driver_api_spelling_is_the_same_fault():
    log = "jax.errors.JaxRuntimeError: INTERNAL: Could not synchronize CUDA stream: CUDA_ERROR_NVLINK_UNCORRECTABLE"
    a = attribute(_job(log, nodes=["gpu-node-001"]))
    assert _root(a) == "cuda.nvlink_uncorrectable"
    assert (a.category, a.domain) == (Category.nvlink, Domain.hardware)


def test_a_task_that_came_back_with_a_new_incarnation_is_the_restart_policy():
    log = "\n".join([
        "INFO iris.runtime.jax_init: initializing jax.distributed with 16 processes",
        "ABORTED: 5 unexpectedly tried to connect with a different incarnation. It has likely restarted.",
    ])
    a = attribute(_job(log))
    assert _root(a) == "jax.task_restarted"
    assert (a.category, a.domain, a.action) == (Category.crash, Domain.system, Action.restart_in_place)
    assert a.culprit_ranks == []  # the restarted task is not to blame; the gang must restart as a whole


def test_ib_qp_access_violation_is_the_software_driving_the_qp_not_the_link():
    log = "\n".join([
        "gpu-node-002:127799:127863 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_0:1 Got async event : "
        "local access violation work queue error",
        "gpu-node-001:10214:10303 [0] transport/net_ib.cc:1909 NCCL WARN NET/IB : Got completion from peer "
        "10.1.3.202<33057> with status=9 opcode=0 len=0 vendor err 138 (Send) localGid ::ffff:10.206.1.23 "
        "remoteGids::ffff:10.206.1.11 hca mlx5_0",
        "gpu-node-001:10214:10303 [0] NCCL INFO transport/net.cc:1137 -> 6",
    ])
    a = attribute(_job(log))
    assert _root(a) == "nccl.ib_qp_async_error"
    assert (a.category, a.domain, a.action) == (Category.nccl_error, Domain.application, Action.stop_no_retry)
    assert a.culprit_nodes == []


def test_ib_port_error_async_event_still_blames_the_hosts_link():
    log = ("gpu-node-002:41822:41901 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error\n"
           "gpu-node-001:1:2 [0] NCCL INFO transport/net.cc:1137 -> 6\n")
    a = attribute(_job(log))
    assert _root(a) == "nccl.ib_async_event"
    assert a.domain == Domain.hardware
    assert "gpu-node-002" in a.culprit_nodes
