"""Node-level faults that only the node's kernel or Slurm names (catalog 2026.12.6).

Incidents as an operator meets them: a rank's NCCL communicator aborts while its node's kernel logs
an uncorrected memory error; a collective times out while one node's CPU is soft-locked; srun could
not start the step on one node; the step's program is not on the node; a GPU is held in exclusive
mode; the container's CUDA needs a newer driver than the node has."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

TWO_NODES = JobRecord(job_id="7002", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED")
TRAINING = ("[2024-03-03 10:00:00] iteration      100/ 1000 | elapsed time per iteration (ms): 500.1 |\n"
            "[2024-03-03 10:00:05] iteration      110/ 1000 | elapsed time per iteration (ms): 500.3 |\n")
WATCHDOG = ("[rank9]:[E303 10:35:00.000000 4242 ProcessGroupNCCL.cpp:632] [Rank 9] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=1800000) ran for 1800089 milliseconds before timing out.\n")


def run(log: str, kernel: dict[str, list[str]] | None = None) -> object:
    return attribute(EvidenceBundle(job_log=log, job=TWO_NODES, kernel_logs=kernel or {}))


def test_an_uncorrected_host_memory_error_drains_its_node():
    a = run(TRAINING + "RuntimeError: NCCL communicator was aborted on rank 9.\n",
            {"gpu-node-002": ["Mar  3 10:04:58 gpu-node-002 kernel: EDAC MC0: 1 UE memory read error on "
                              "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345)"]})
    assert a.root_event is not None and a.root_event.signature_id == "host.memory_uncorrected", a.explanation
    assert (a.category.value, a.domain.value, a.action.value) == ("node_failure", "hardware", "drain_and_requeue")
    assert a.culprit_nodes == ["gpu-node-002"]


def test_corrected_memory_errors_are_not_an_incident_of_their_own():
    a = run(TRAINING, {"gpu-node-002": ["Mar  3 10:04:58 gpu-node-002 kernel: EDAC MC0: 1 CE memory read error on "
                                        "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345)",
                                        "Mar  3 10:04:58 gpu-node-002 kernel: mce: [Hardware Error]: Machine check "
                                        "events logged"]})
    assert a.category.value == "none", a.explanation


def test_a_collective_timeout_beside_a_soft_locked_cpu_is_that_nodes_hang():
    a = run(TRAINING + WATCHDOG,
            {"gpu-node-002": ["Mar  3 10:20:00 gpu-node-002 kernel: watchdog: BUG: soft lockup - CPU#12 stuck for "
                              "23s! [python:4242]"]})
    assert a.root_event is not None and a.root_event.signature_id == "host.soft_lockup", a.explanation
    assert (a.category.value, a.domain.value, a.action.value) == ("hang", "system", "requeue_exclude_nodes")
    assert a.culprit_nodes == ["gpu-node-002"]


def test_a_kernel_panic_is_a_node_failure_of_the_panicked_node():
    a = run(TRAINING + "srun: error: gpu-node-002: task 1: Killed\n",
            {"gpu-node-002": ["Mar  3 10:04:58 gpu-node-002 kernel: Kernel panic - not syncing: Fatal exception"]})
    assert (a.category.value, a.action.value) == ("node_failure", "requeue_exclude_nodes"), a.explanation
    assert a.culprit_nodes == ["gpu-node-002"]


def test_a_step_that_could_not_launch_on_one_node_blames_that_node():
    a = run("srun: error: Task launch for StepId=7002.0 failed on node gpu-node-002: Communication connection "
            "failure\nsrun: error: Application launch failed: Communication connection failure\n")
    assert a.root_event is not None and a.root_event.signature_id == "slurm.task_launch_failed", a.explanation
    assert (a.category.value, a.action.value, a.culprit_nodes) == ("node_failure", "requeue_exclude_nodes",
                                                                    ["gpu-node-002"])


def test_a_program_missing_from_the_node_and_an_impossible_step_request_stop():
    for line in ("slurmstepd: error: execve(): torchrun: No such file or directory\n",
                 "srun: error: Unable to create step for job 7002: Invalid generic resource (gres) specification\n"):
        a = run(line)
        assert (a.category.value, a.domain.value, a.action.value) == ("app_bug", "application", "stop_no_retry"), line
    # a step refused for a passing reason is not the job script's
    a = run(TRAINING + "srun: error: Unable to create step for job 7002: Job/step already completing or completed\n")
    assert a.category.value != "app_bug", a.explanation


def test_cuda_device_availability_errors_name_the_program_the_node_or_the_driver():
    cases = {
        "RuntimeError: No CUDA GPUs are available": ("app_bug", "application", "stop_no_retry"),
        "gpu-node-002: RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable":
            ("cuda_error", "system", "requeue_exclude_nodes"),
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).":
            ("cuda_error", "system", "stop_no_retry"),
        "gpu-node-001: Failed to initialize NVML: Driver/library version mismatch":
            ("cuda_error", "system", "requeue_exclude_nodes"),
    }
    for line, want in cases.items():
        a = run(TRAINING + line + "\n")
        assert (a.category.value, a.domain.value, a.action.value) == want, (line, a.explanation)


def test_a_batch_script_gone_from_the_nodes_spool_drains_the_batch_host():
    job = JobRecord(job_id="89", nodes=["gpu-node-004", "gpu-node-005"], state="FAILED")
    a = attribute(EvidenceBundle(job_log="slurmstepd: error: execve(): /tmp/slurmd/job00089/slurm_script: No such "
                                         "file or directory\n", job=job))
    assert (a.category.value, a.domain.value, a.action.value) == ("node_failure", "system", "drain_and_requeue")
    assert a.culprit_nodes == ["gpu-node-004"], a.explanation


def test_one_node_that_lost_the_rendezvous_is_named_several_are_not():
    line = ("WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node '{h}-ib0_187281_0' has failed "
            "to send a keep-alive heartbeat to the rendezvous 'none' due to an error of type RendezvousConnectionError.\n")
    a = run(TRAINING + line.format(h="gpu-node-001") * 3)
    assert (a.category.value, a.domain.value, a.action.value) == ("node_failure", "unknown", "requeue_exclude_nodes")
    assert a.culprit_nodes == ["gpu-node-001"], a.explanation  # gpu-node-001-ib0 is gpu-node-001's IB name
    b = run(TRAINING + line.format(h="gpu-node-001") + line.format(h="gpu-node-002"))
    assert b.culprit_nodes == [] and b.action.value == "restart_in_place", b.explanation


def test_a_task_stuck_in_the_gpu_driver_is_a_hang_of_the_node_not_a_storage_stall():
    trace = ["[  +0.000049] task:python3.11      state:D stack:    0 pid:15277 ppid: 15257 flags:0x00000002",
             "[  +0.000006] Call Trace:", "[  +0.000011]  schedule+0x4e/0xb0", "[  +0.000005]  mutex_lock+0x34/0x40",
             "[  +0.000005]  uvm_page_tree_get_ptes_async+0x93/0x970 [nvidia_uvm]",
             "[  +0.000028]  uvm_ioctl+0x13e0/0x16f0 [nvidia_uvm]"]
    a = run(TRAINING, {"gpu-node-002": trace})
    assert (a.category.value, a.action.value, a.culprit_nodes) == ("hang", "requeue_exclude_nodes",
                                                                   ["gpu-node-002"]), a.explanation
    # the same D state on a file system is storage's: the node's mount, drained
    nfs = trace[:4] + ["[  +0.000005]  nfs_wait_bit_killable+0x20/0x80 [nfs]", "[  +0.000005]  rpc_wait_bit_killable"]
    b = run(TRAINING, {"gpu-node-002": nfs})
    assert (b.category.value, b.action.value) == ("io_error", "drain_and_requeue"), b.explanation


def test_a_ray_worker_node_marked_dead_is_a_node_failure_named_by_its_ip():
    a = attribute(EvidenceBundle(job_log=(
        "(BaseWorkerMixin pid=5137, ip=10.0.0.103) loss: 2.019226  [ 6400/30000]\n"
        "2022-02-15 16:53:52,096\tWARNING worker.py:1462 -- The node with node id: 8f205b12643d and ip: 10.0.0.103 "
        "has been marked dead because the detector has missed too many heartbeats from it.\n"
        "(BackendExecutor pid=5126, ip=10.0.0.32) ERROR utils.py:42 -- The actor died unexpectedly before finishing "
        "this task.\n")))
    assert (a.category.value, a.action.value, a.culprit_nodes) == ("node_failure", "requeue_exclude_nodes",
                                                                   ["10.0.0.103"]), a.explanation


def test_a_pod_killed_at_its_memory_limit_stops_and_an_eviction_restarts():
    a = run("    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n")
    assert (a.category.value, a.domain.value, a.action.value) == ("oom_host", "application", "stop_no_retry")
    b = run("Status:         Failed\nReason:         Evicted\nMessage:        The node was low on resource: memory.\n")
    assert (b.category.value, b.action.value) == ("oom_host", "restart_in_place"), b.explanation
    c = run("Status:         Failed\nReason:         Evicted\nMessage:        The node was low on resource: "
            "ephemeral-storage.\n")
    assert c.category.value != "oom_host", c.explanation


def test_no_gpu_visible_to_a_job_that_asked_slurm_for_one_is_the_sites_binding():
    a = run("$ srun -p gpu --container-image=cuda-11.2.2 --gres=gpu:A100:1 python train.py\n"
            "RuntimeError: CUDA error: no CUDA-capable device is detected\n")
    assert (a.category.value, a.domain.value, a.action.value) == ("cuda_error", "system", "stop_no_retry"), a.explanation
    b = run("RuntimeError: No CUDA GPUs are available\n")  # no request in sight: the script's own device choice
    assert (b.category.value, b.domain.value) == ("app_bug", "application"), b.explanation


def test_the_sites_launch_stack_failing_to_start_the_job_stops():
    for log in ("slurmstepd: error: pyxis:     [ERROR] Command not found: nvidia-container-cli\n"
                "slurmstepd: error: pyxis: couldn't start container\n",
                "It looks like pmix_init failed for some reason; your parallel process is\nlikely to abort.\n"):
        a = run(log)
        assert (a.category.value, a.domain.value, a.action.value) == ("crash", "system", "stop_no_retry"), log


def test_a_step_slurm_could_not_kill_is_a_hang():
    a = run("[2020-12-14T09:44:56.002] [63532.0] error: *** STEP 63532.0 STEPD TERMINATED ON gpu-node-002 AT "
            "2020-12-14T09:44:56 DUE TO JOB NOT ENDING WITH SIGNALS ***\n")
    assert (a.category.value, a.action.value) == ("hang", "restart_in_place"), a.explanation


def test_rays_memory_monitor_killing_workers_is_host_oom_of_the_job():
    a = run("(raylet) node_manager.cc:3069: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
            "crashed due to other reasons at node (ID: 351e406b)\n")
    assert (a.category.value, a.domain.value, a.action.value) == ("oom_host", "application", "stop_no_retry")
