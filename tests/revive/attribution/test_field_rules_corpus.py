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


_LAYOUT = "SLURM_NODELIST=gpu-node-[001-002]\nSLURM_TASKS_PER_NODE=8(x2)\n"
_PROGRESS = "".join(f"2024-05-01T10:{m:02d}:00Z [rank0]: iteration {100 + m}/9000 | loss 2.1 | 600 ms/it\n"
                    for m in range(10))


def test_iommu_dma_fault_on_the_node_makes_an_nccl_illegal_access_a_node_system_fault():
    log = _LAYOUT + _PROGRESS + (
        "[rank11]: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
        "Cuda failure 'an illegal memory access was encountered'\n")
    b = _job(log, ["gpu-node-001", "gpu-node-002"])
    b.kernel_logs = {"gpu-node-002": [
        "May  1 10:39:58 gpu-node-002 kernel: DMAR: DRHD: handling fault status reg 2",
        "May  1 10:39:58 gpu-node-002 kernel: DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault addr "
        "0x1fffc0000 [fault reason 0x06] PTE Read access is not set"]}
    a = attribute(b)
    assert a.domain == Domain.system
    assert a.culprit_nodes == ["gpu-node-002"]
    assert a.action == Action.requeue_exclude_nodes


def test_iommu_fault_alone_raises_no_incident():
    b = _job(_LAYOUT + _PROGRESS, ["gpu-node-001", "gpu-node-002"])
    b.job.state = "RUNNING"
    b.kernel_logs = {"gpu-node-002": ["May  1 10:39:58 gpu-node-002 kernel: DMAR: DRHD: handling fault status reg 2"]}
    assert attribute(b).category == Category.none


def test_mlx5_port_link_down_names_the_host_beside_its_ib_completion_error():
    log = _LAYOUT + _PROGRESS + (
        "gpu-node-002:41822:41901 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.0.1.1<49312> with error 12, opcode 1, len 0, vendor err 129\n")
    b = _job(log, ["gpu-node-001", "gpu-node-002"])
    b.kernel_logs = {"gpu-node-002": ["May  1 10:39:50 gpu-node-002 kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN"]}
    a = attribute(b)
    assert (a.domain, a.culprit_nodes, a.action) == (Domain.hardware, ["gpu-node-002"], Action.requeue_exclude_nodes)


def test_flightrecorder_terminate_after_dump_is_a_hang():
    log = _LAYOUT + _PROGRESS + (
        "[rank3]:[F501 10:40:00.100000 ProcessGroupNCCL.cpp:1224] [PG ID 0 PG GUID 0(default_pg) Rank 3] Terminating "
        "the process after attempting to dump debug info, due to collective timeout or exception.\n")
    a = attribute(_job(log, ["gpu-node-001", "gpu-node-002"]))
    assert a.category == Category.hang
    assert a.root_event is not None and a.root_event.signature_id == "nccl.heartbeat_timeout"


_WD = ("gpu-node-002: [E ProcessGroupNCCL.cpp:737] [Rank 8] Watchdog caught collective operation timeout: "
       "WorkNCCL(SeqNum=1, OpType=BROADCAST, Timeout(ms)=900000) ran for 900412 milliseconds before timing out.\n")


def test_first_collective_timing_out_during_dataset_preprocessing_is_the_jobs_configuration():
    log = ("gpu-node-002: Running tokenizer on dataset:  37%|███▋      | 74000/200000 [14:41<25:03, 83.81 examples/s]\n"
           + _WD)
    a = attribute(_job(log, ["gpu-node-001", "gpu-node-002"]))
    assert (a.category, a.domain, a.action) == (Category.hang, Domain.application, Action.stop_no_retry)
    assert "preprocessing" in a.explanation


def test_a_collective_timing_out_mid_training_stays_a_hang_of_unknown_cause():
    a = attribute(_job(_LAYOUT + _PROGRESS + _WD, ["gpu-node-001", "gpu-node-002"]))
    assert (a.category, a.domain, a.action) == (Category.hang, Domain.unknown, Action.restart_in_place)


def test_time_limit_hours_after_progress_stopped_is_a_hang_the_limit_ended():
    log = _LAYOUT + _PROGRESS + (
        "slurmstepd: error: *** JOB 1234 ON gpu-node-001 CANCELLED AT 2024-05-01T14:09:30 DUE TO TIME LIMIT ***\n")
    b = _job(log, ["gpu-node-001", "gpu-node-002"])
    b.job.state = "TIMEOUT"
    a = attribute(b)
    assert (a.category, a.action) == (Category.hang, Action.restart_in_place)
    assert "time limit ended a hang" in a.explanation


def test_time_limit_while_progress_was_still_flowing_is_a_timeout():
    log = _LAYOUT + _PROGRESS + (
        "slurmstepd: error: *** JOB 1234 ON gpu-node-001 CANCELLED AT 2024-05-01T10:10:30 DUE TO TIME LIMIT ***\n")
    b = _job(log, ["gpu-node-001", "gpu-node-002"])
    b.job.state = "TIMEOUT"
    assert attribute(b).category == Category.timeout
