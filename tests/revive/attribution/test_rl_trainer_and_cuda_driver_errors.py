"""Rounds 29-30 incidents (catalogs 2026.12.23-24): framework and CUDA errors that read as bare crashes.

- vLLM's ``Invocation of collective_rpc method failed`` in an RL trainer is the trainer's
  extension breaking on the vLLM it runs against (stop), unless its traceback names a more specific
  error (a CUDA OOM decides at its own tier).
- PyTorch's driver-API check (``CUDA driver error: invalid argument``) is a CUDA error, not a generic
  crash."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle

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
