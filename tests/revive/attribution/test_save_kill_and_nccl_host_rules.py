"""Rule 3e (save side) and the NCCL-prefix culprit (docs/attribution.md).

Incidents as they reach Revive: a process SIGKILLed (the shell's bare ``Killed``, a launcher's return
code -9) while a checkpoint save is under way is the host's OOM killer - serialising the state copies
it into host RAM; a node-local system fault (CUDA 802, fabric manager) whose error line names no host,
in a job whose NCCL line prefixes all name one host, happened on that host."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

ONE_NODE = JobRecord(job_id="8001", nodes=["gpu-node-001"], state="FAILED")
TWO_NODES = JobRecord(job_id="8002", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED")


def run(text: str, job: JobRecord | None = None):
    return attribute(EvidenceBundle(job_log=text, job=job))


SD_SAVE_KILLED = """\
Epoch 0: 100%|#| 209/209 [06:12<00:00,  1.78s/it, loss=0.0685, v_num=0, global_step=208.0]
Summoning checkpoint.
Killed
"""


def test_killed_inside_a_checkpoint_save_is_host_oom():
    a = run(SD_SAVE_KILLED)
    assert (a.category.value, a.domain.value, a.action.value) == ("oom_host", "application", "stop_no_retry"), a.explanation
    assert "checkpoint save" in a.explanation


def test_launcher_minus9_during_hf_trainer_save_is_host_oom():
    text = """\
{'loss': 6.8437, 'learning_rate': 5e-05, 'epoch': 0.01}
[INFO|trainer.py:2753] 2023-02-06 16:37:12,461 >> Saving model checkpoint to out/checkpoint-500
[2023-02-06 16:37:31,072] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4242
[2023-02-06 16:37:31,080] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', '--local_rank=0'] exits with return code = -9
"""
    a = run(text, ONE_NODE)
    assert (a.category.value, a.domain.value, a.action.value) == ("oom_host", "application", "stop_no_retry"), a.explanation


def test_sigkill_after_a_completed_save_is_not_a_save_oom():
    # Revive's example job: the save finished ('saved checkpoint'), training went on, then a rank was
    # SIGKILLed (the chaos harness' crash fault): a crash of unknown cause, restart
    text = """\
2026-12-01T11:23:01Z [rank 0 host gpu-node-001] iteration 10 loss 0.51 step_time 0.20
2026-12-01T11:23:01Z [rank 0 host gpu-node-001] saving checkpoint at iteration 10
2026-12-01T11:23:01Z [rank 0 host gpu-node-001] saved checkpoint at iteration 10
2026-12-01T11:23:02Z [rank 0 host gpu-node-001] iteration 11 loss 0.50 step_time 0.20
srun: error: gpu-node-002: task 1: Killed
"""
    a = run(text, TWO_NODES)
    assert a.category.value != "oom_host", a.explanation
    assert a.action.value == "restart_in_place", a.explanation


def test_killed_with_progress_after_the_save_line_is_not_a_save_oom():
    text = SD_SAVE_KILLED.replace("Killed\n", "Epoch 1:   1%|#| 2/209 [00:02<03:12,  1.01s/it, loss=0.0601]\nKilled\n")
    a = run(text)
    assert a.category.value != "oom_host", a.explanation


FABRIC_802 = """\
gpu-node-001:162637:162637 [6] NCCL INFO Bootstrap : Using eth0:172.17.0.14<0>
gpu-node-001:162635:162635 [4] NCCL INFO cudaDriverVersion 12020
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3
ncclUnhandledCudaError: Call to CUDA function failed.
Last error:
Cuda failure 802 'system not yet initialized'
"""


def test_node_local_fault_without_host_takes_the_single_nccl_prefix_host():
    a = run(FABRIC_802)  # no Slurm record: the log is all there is
    assert (a.category.value, a.domain.value) == ("cuda_error", "system"), a.explanation
    assert a.culprit_nodes == ["gpu-node-001"], a.explanation
    assert a.action.value == "requeue_exclude_nodes", a.explanation


def test_nccl_prefix_host_inside_a_timestamped_warn_line_counts():
    text = FABRIC_802.replace("gpu-node-001:162635:162635 [4] NCCL INFO cudaDriverVersion 12020",
                              "[2025-05-10 23:09:41] gpu-node-001:630335:630409 [2] transport/nvls.cc:254 NCCL WARN x")
    text = text.replace("gpu-node-001:162637:162637 [6] NCCL INFO Bootstrap : Using eth0:172.17.0.14<0>\n", "")
    a = run(text)
    assert a.culprit_nodes == ["gpu-node-001"], a.explanation


def test_two_hosts_in_nccl_prefixes_name_no_culprit():
    text = FABRIC_802.replace("gpu-node-001:162635:162635", "gpu-node-002:162635:162635")
    a = run(text)
    assert a.culprit_nodes == [], a.explanation
    # still the node's own fault (run elsewhere); the plan restarts in place until a node is named
    assert a.action.value == "requeue_exclude_nodes", a.explanation


def test_nccl_prefix_host_outside_the_jobs_nodes_is_not_blamed():
    text = FABRIC_802.replace("gpu-node-001:", "login-node-7:")
    a = run(text, TWO_NODES)
    assert a.culprit_nodes == [], a.explanation
