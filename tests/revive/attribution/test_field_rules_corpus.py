"""Field rules learnt from the corpus (issue #8): a SIGKILL right after DeepSpeed reported host
memory nearly full is the kernel OOM killer; Megatron's rerun state machine asking for a different
GPU names the suspicious node so the requeue avoids it."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import Action, Category, Domain, EvidenceBundle, JobRecord

_DS_KILL = "\n".join([
    "gpu-node-001: [2023-08-29 10:14:02,311] [INFO] [utils.py:785:see_memory_usage] Before initializing optimizer states",
    "gpu-node-001: [2023-08-29 10:14:02,312] [INFO] [utils.py:793:see_memory_usage] CPU Virtual Memory:  used = {used} GB, percent = {pct}%",
    "gpu-node-001: [2023-08-29 10:15:41,907] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 211873",
    "gpu-node-001: [2023-08-29 10:15:43,220] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', "
    "'--local_rank=7'] exits with return code = -9",
])


def _job(log: str, nodes: list[str]) -> EvidenceBundle:
    return EvidenceBundle(job_log=log, job=JobRecord(job_id="7", nodes=nodes, state="FAILED"))


def test_sigkill_after_host_memory_at_90_percent_is_the_oom_killer():
    a = attribute(_job(_DS_KILL.format(used="451.87", pct="89.7"), ["gpu-node-001"]))
    assert (a.category, a.domain, a.action) == (Category.oom_host, Domain.application, Action.stop_no_retry)
    assert "89.7%" in a.explanation


def test_sigkill_with_host_memory_at_40_percent_stays_an_unexplained_signal():
    a = attribute(_job(_DS_KILL.format(used="201.50", pct="40.0"), ["gpu-node-001"]))
    assert a.category == Category.crash
    assert a.action != Action.stop_no_retry


def test_megatron_rerun_on_a_different_gpu_requeues_without_the_suspicious_node():
    log = "\n".join([
        "SLURM_NODELIST=gpu-node-[001-002]",
        "ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 11 at iteration #812 invocation #1 "
        "(message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel communication collective')",
        "WARNING:megatron.core.rerun_state_machine:Rank 11, node gpu-node-002, device 3, iteration #812: First rerun: "
        "unexpected result is reproducible within the tolerance (nan = nan). Need to rerun on a different GPU to verify correctness",
    ])
    a = attribute(_job(log, ["gpu-node-001", "gpu-node-002"]))
    assert a.root_event is not None and a.root_event.signature_id == "megatron.rerun_other_gpu"
    assert a.domain == Domain.unknown
    assert a.culprit_nodes == ["gpu-node-002"]
    assert a.action == Action.requeue_exclude_nodes


def test_megatron_persistent_error_after_the_rerun_still_drains_the_gpu():
    log = "\n".join([
        "WARNING:megatron.core.rerun_state_machine:Rank 11, node gpu-node-002, device 3, iteration #812: First rerun: "
        "unexpected result is reproducible within the tolerance (nan = nan). Need to rerun on a different GPU to verify correctness",
        "ERROR:megatron.core.rerun_state_machine:Rank 11, node gpu-node-002, device 3, iteration #812: Possible persistent error!",
    ])
    a = attribute(_job(log, ["gpu-node-001", "gpu-node-002"]))
    assert (a.category, a.domain, a.action) == (Category.gpu_hardware, Domain.hardware, Action.drain_and_requeue)
    assert a.culprit_nodes == ["gpu-node-002"]
