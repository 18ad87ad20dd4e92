"""Round-28 incidents (catalog 2026.12.22): the cluster layer ends a training job.

- Open MPI's launcher reports a rank the kernel (or the kubelet) killed as ``mpirun noticed that
  process rank 1 ... exited on signal 9 (Killed)``: a crash, not a healthy run; without an
  oom-kill line it is not yet an OOM.
- The kubelet refusing a pod whose GPU its device plugin no longer offers
  (``UnexpectedAdmissionError: Pod Allocate failed due to requested number of devices unavailable
  for nvidia.com/gpu``) is the node's state: place the job elsewhere.
- Round 29: vLLM's ``Invocation of collective_rpc method failed`` in an RL trainer is the trainer's
  extension breaking on the vLLM it runs against (stop), unless its traceback names a more specific
  error (a CUDA OOM decides at its own tier).
- Round 30: PyTorch's driver-API check (``CUDA driver error: invalid argument``) is a CUDA error, not
  a generic crash."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

MPIJOB_RANK_KILLED = """\
[1,0]<stdout>:Running benchmark...
[1,0]<stdout>:Iter #0: 212.4 img/sec per GPU
[1,0]<stdout>:Iter #1: 214.0 img/sec per GPU
-------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
-------------------------------------------------------
--------------------------------------------------------------------------
mpirun.real noticed that process rank 1 with PID 39 on node mpi-test-2-mpijob-worker-1 exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""


def test_an_mpi_rank_killed_by_signal_9_is_a_crash_not_a_healthy_run():
    a = attribute(EvidenceBundle(job_log=MPIJOB_RANK_KILLED))
    assert a.category.value == "crash", a.explanation  # before catalog 2026.12.22: no incident
    assert a.root_event is not None and a.root_event.signature_id == "host.killed"
    assert (a.domain.value, a.action.value) == ("unknown", "restart_in_place")


ADMISSION_REFUSED = """\
$ kubectl describe node gpu-node-004 | grep -A1 -E 'Capacity|Allocatable' | grep -E 'Capacity|Allocatable|nvidia'
Capacity:
  nvidia.com/gpu:     4
Allocatable:
  nvidia.com/gpu:     3
$ kubectl describe pod train-worker-0 | grep -E '^(Name|Node|Status|Reason|Message):'
Name:           train-worker-0
Node:           gpu-node-004/10.0.0.14
Status:         Failed
Reason:         UnexpectedAdmissionError
Message:        Pod Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected
"""


def test_a_pod_the_kubelet_cannot_give_its_gpu_is_the_nodes_state_and_the_job_goes_elsewhere():
    job = JobRecord(job_id="1782", nodes=["gpu-node-004"], state="FAILED", exit_code="0:0")
    a = attribute(EvidenceBundle(job_log=ADMISSION_REFUSED, job=job))
    assert (a.category.value, a.domain.value) == ("node_failure", "system"), a.explanation
    assert a.action.value == "requeue_exclude_nodes"
    assert a.culprit_nodes == ["gpu-node-004"]


VLLM_RPC = """\
(LLMRayActor pid=585804) (EngineCore_DP0 pid=586112) INFO 03-05 00:24:58 [core.py:210] init engine (profile, create kv cache, warmup model) took 41.20 seconds
(LLMRayActor pid=585804) (EngineCore_DP0 pid=586112) ERROR 03-05 00:25:45 [core.py:1094] Invocation of collective_rpc method failed
(LLMRayActor pid=585804) (EngineCore_DP0 pid=586112) ERROR 03-05 00:25:45 [core.py:1094] Traceback (most recent call last):
(LLMRayActor pid=585804) (EngineCore_DP0 pid=586112) ERROR 03-05 00:25:45 [core.py:1094]   File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 657, in collective_rpc
"""


def test_a_failed_vllm_worker_rpc_in_an_rl_trainer_is_the_trainers_extension():
    a = attribute(EvidenceBundle(job_log=VLLM_RPC))
    assert (a.category.value, a.domain.value, a.action.value) == ("app_bug", "application", "stop_no_retry"), a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "vllm.collective_rpc_failed"


def test_a_cuda_oom_inside_the_failed_rpc_decides_instead():
    text = VLLM_RPC + ("(LLMRayActor pid=585804) (EngineCore_DP0 pid=586112) ERROR 03-05 00:25:45 [core.py:1094] "
                       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                       "capacity of 79.10 GiB of which 1.02 GiB is free.\n")
    a = attribute(EvidenceBundle(job_log=text))
    assert a.category.value == "oom_gpu", a.explanation


def test_a_cuda_driver_api_error_is_a_cuda_error_not_a_bare_crash():
    text = ("[rank0]: Traceback (most recent call last):\n"
            "[rank0]:   File \"/usr/lib/python3.12/site-packages/torch/distributed/_symmetric_memory/__init__.py\", "
            "line 1710, in rendezvous\n"
            "[rank0]:   RuntimeError: CUDA driver error: invalid argument\n")
    a = attribute(EvidenceBundle(job_log=text))
    assert (a.category.value, a.action.value) == ("cuda_error", "restart_in_place"), a.explanation
