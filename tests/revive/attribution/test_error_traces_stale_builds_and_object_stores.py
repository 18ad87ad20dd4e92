"""Round-22 incidents (catalog 2026.12.15): NCCL's INFO-level error trace, ROCm GPU memory faults,
object-store and corrupt-sample reads, a run waiting forever on a JIT extension build's lock (rule
3ay), and start-ups a person cancelled.

- NCCL logs ``<file>:<line> -> <ncclResult_t>`` at every level a failing call returns through
  (src/include/checks.h). When the WARN line is missing (NVIDIA/nccl#1000) that trace is all there is:
  an NCCL failure, not an unexplained crash. It loses to any real NCCL report, and a job that
  COMPLETED with every step at exit 0 survived it (teardown noise).
- ROCR-Runtime's ``Memory access fault by GPU node-N ... Reason: ...`` is the AMD illegal access; with
  an ECC reason it is the GPU's memory.
- botocore / the AWS SDK for C++ / MosaicML streaming errors and undecodable images are I/O.
- ``Using <dir> as PyTorch extensions root...`` as the last words of a cancelled or timed-out run is
  the build waiting on a stale lock: a hang of the site's cache, the same on every retry.
- A person's cancel kills with SIGKILL after KillWait: ``0:9`` is the cancellation, not a crash; a
  tqdm bar at ``0/N`` is no finished step."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

NODES = ["gpu-node-001", "gpu-node-002"]


def job(state: str, exit_code: str, nodes: list[str] | None = None) -> JobRecord:
    return JobRecord(job_id="60011", nodes=nodes or NODES, state=state, exit_code=exit_code)


BOOTSTRAP_TRACE = """\
+ srun --nodes=2 --ntasks-per-node=1 torchrun --nnodes=2 --nproc_per_node=8 train_fsdp.py
gpu-node-001:2293:2293 [0] NCCL INFO Bootstrap : Using ibp12s0:10.0.0.102<0>
NCCL version 2.18.5+cuda11.8
gpu-node-002:2351:2678 [2] NCCL INFO group.cc:65 -> 2 [Async thread]
gpu-node-002:2354:2687 [5] NCCL INFO bootstrap.cc:270 -> 2
gpu-node-002:2349:2688 [0] NCCL INFO misc/socket.cc:567 -> 2
gpu-node-002:2352:2691 [3] NCCL INFO init.cc:1350 -> 2
srun: error: gpu-node-002: task 1: Exited with exit code 1
"""


def test_an_nccl_error_trace_with_no_warn_line_is_an_nccl_failure():
    a = attribute(EvidenceBundle(job_log=BOOTSTRAP_TRACE, job=job("FAILED", "1:0")))
    assert a.category.value == "nccl_error", a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "nccl.error_trace"
    assert a.action.value == "restart_in_place"  # the trace alone does not say whose it is
    assert a.culprit_nodes == []


def test_a_real_nccl_report_outranks_its_trace():
    text = BOOTSTRAP_TRACE.replace(
        "srun: error:", "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, "
        "NCCL version 2.18.5\nsrun: error:")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0")))
    assert a.root_event is not None and a.root_event.signature_id == "nccl.system_error", a.explanation


TEARDOWN_TRACE = """\
[testing] Running with BF16, with top-k (async=True, previous=True) ... passed
[tuning] Best combine: SMs 24, NVL chunk 8: 148.90 GB/s (NVL)
gpu-node-001:2374:2994 [0] proxy.cc:1458 NCCL WARN [Service thread] Accept failed Resource temporarily unavailable
gpu-node-001:2374:2994 [0] NCCL INFO misc/socket.cc:826 -> 3
gpu-node-001:2378:3013 [4] NCCL INFO misc/socket.cc:47 -> 3
"""


def test_a_trace_at_teardown_of_a_job_that_completed_is_not_an_incident():
    ok = attribute(EvidenceBundle(job_log=TEARDOWN_TRACE, job=job("COMPLETED", "0:0", ["gpu-node-001"])))
    assert ok.category.value == "none" and ok.action.value == "none", ok.explanation
    # the same lines in a job that failed are its failure
    bad = attribute(EvidenceBundle(job_log=TEARDOWN_TRACE, job=job("FAILED", "1:0", ["gpu-node-001"])))
    assert bad.category.value == "nccl_error", bad.explanation


ROCM_FAULT = """\
+ python3 train.py --epochs 50 --batch-size 64 --device cuda
Epoch 1/50  train_loss=2.1034  val_loss=1.9877  time=312.4s
Epoch 2/50  train_loss=1.7412  val_loss=1.6920  time=309.8s
Memory access fault by GPU node-2 (Agent handle: 0x55fea5592860) on address 0x7fc133800000. Reason: {reason}.
Aborted (core dumped)
"""


def test_a_rocm_memory_access_fault_is_a_gpu_error_not_the_abort_after_it():
    text = ROCM_FAULT.format(reason="Page not present or supervisor privilege")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "134:0", ["gpu-node-001"])))
    assert (a.category.value, a.domain.value, a.action.value) == ("cuda_error", "unknown", "restart_in_place"), a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "rocm.memory_access_fault"
    assert a.culprit_nodes == []  # "node-2" is the HSA agent, not a host


def test_a_rocm_memory_fault_with_an_ecc_reason_drains_the_node():
    text = ROCM_FAULT.format(reason="DRAM ECC failure")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "134:0", ["gpu-node-001"])))
    assert (a.category.value, a.domain.value) == ("gpu_memory_ecc", "hardware"), a.explanation
    assert a.action.value == "drain_and_requeue"
    assert a.culprit_nodes == ["gpu-node-001"]


def test_object_store_and_corrupt_sample_errors_are_io_errors():
    lines = [
        "OSError: AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 28, Timeout was reached",
        "botocore.exceptions.ClientError: An error occurred (NoSuchKey) when calling the GetObject operation: "
        "The specified key does not exist.",
        "RuntimeError: Failed to download s3://bucket/data/train/index.json -> /tmp/tmp95xvpyl_/train/index.json. "
        "Got errors:",
        "InternalError (see above for traceback): DALI daliOutput(&pipe_handle_) failed: Critical error in pipeline: "
        'Error in thread 0: [/opt/dali/dali/pipeline/operators/decoder/nvjpeg_decoder.h:331] NVJPEG error "3"',
    ]
    for line in lines:
        text = f"step 800 | loss 5.44\nTraceback (most recent call last):\n{line}\n"
        a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0", ["gpu-node-001"])))
        assert (a.category.value, a.action.value) == ("io_error", "restart_in_place"), (line, a.explanation)


def test_an_eio_does_not_say_whose_storage_failed():
    text = "step 500 | loss 1.2\nOSError: [Errno 5] Input/output error: '/lustre/ckpt/step_500/model.pt'\n"
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0", ["gpu-node-001"])))
    assert (a.category.value, a.domain.value) == ("io_error", "unknown"), a.explanation


STALE_BUILD_LOCK = """\
+ srun --nodes=2 --ntasks-per-node=1 deepspeed train_sft.py --zero_stage 2 --bf16
[2024-02-06 09:14:05,219] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl
Using /home/user/.cache/torch_extensions/py310_cu118 as PyTorch extensions root...
Using /home/user/.cache/torch_extensions/py310_cu118 as PyTorch extensions root...
"""


def test_a_run_ended_while_waiting_on_an_extension_build_is_a_stale_lock_hang():
    for state, tail in (("TIMEOUT", "slurmstepd: error: *** JOB 208208 ON gpu-node-001 CANCELLED AT "
                                    "2024-02-06T13:14:02 DUE TO TIME LIMIT ***\n"),
                        ("CANCELLED", "slurmstepd: error: *** JOB 208208 ON gpu-node-001 CANCELLED AT "
                                      "2024-02-06T10:41:37 ***\n")):
        a = attribute(EvidenceBundle(job_log=STALE_BUILD_LOCK + tail, job=job(state, "0:15")))
        assert (a.category.value, a.domain.value, a.action.value) == ("hang", "system", "stop_no_retry"), (state, a.explanation)
        assert "extensions root" in a.explanation


def test_a_build_that_finished_and_trained_is_not_a_stale_lock():
    trained = STALE_BUILD_LOCK + "Loading extension module fused_adam...\n" + "".join(
        f"step {i} | loss 2.{i} | 1.3 s/it\n" for i in range(1, 30))
    a = attribute(EvidenceBundle(job_log=trained, job=job("TIMEOUT", "0:15")))
    assert a.category.value == "timeout", a.explanation


CANCELLED_AT_FIRST_ALLGATHER = """\
+ TORCH_DISTRIBUTED_DEBUG=DETAIL NCCL_DEBUG=INFO torchrun --nnodes 1 --nproc_per_node 2 T5_training.py
r0 Training Epoch:   0%|          | 0/188 [00:00<?, ?it/s]
gpu-node-001:3183:3183 [0] NCCL INFO Bootstrap : Using eno1:10.0.0.1<0>
gpu-node-001:3183:3183 [0] NCCL INFO cudaDriverVersion 12010
NCCL version 2.18.1+cuda12.1
"""


def test_a_cancel_before_the_first_step_is_a_start_up_hang_not_a_sigkill_crash():
    a = attribute(EvidenceBundle(job_log=CANCELLED_AT_FIRST_ALLGATHER, job=job("CANCELLED", "0:9", ["gpu-node-001"])))
    assert (a.category.value, a.action.value) == ("hang", "restart_in_place"), a.explanation
    assert a.root_event is None or a.root_event.signature_id != "slurm.exit_sigkill"
    # the same exit code on a job that was not cancelled stays the weak SIGKILL hint
    b = attribute(EvidenceBundle(job_log=CANCELLED_AT_FIRST_ALLGATHER, job=job("FAILED", "0:9", ["gpu-node-001"])))
    assert b.root_event is not None and b.root_event.signature_id == "slurm.exit_sigkill", b.explanation


def test_a_cancel_after_lightning_registered_every_process_is_a_start_up_hang():
    text = ("+ python main.py -t --base configs/stable-diffusion/pokemon.yaml --gpus 0,1\n--------\n"
            "distributed_backend=nccl\nAll DDP processes registered. Starting ddp with 2 processes\n--------\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("CANCELLED", "0:15", ["gpu-node-001"])))
    assert a.category.value == "hang", a.explanation


def test_a_py_spy_dump_in_any_thread_id_format_is_a_stuck_process():
    for header in ('Thread 0x1F90C7080 (active): "MainThread"', 'Thread 165 (active+gil): "MainThread"',
                   'Thread (idle): "MainThread"'):
        text = (f"[titan] Training starts at step 1\n+ py-spy dump --pid 4242\n{header}\n"
                "    all_gather_into_tensor (torch/distributed/distributed_c10d.py:4381)\n")
        a = attribute(EvidenceBundle(job_log=text, job=job("RUNNING", "0:0", ["gpu-node-001"])))
        assert a.category.value == "hang", (header, a.explanation)
        assert a.root_event is not None and a.root_event.signature_id == "host.stack_dump"


# ---- round 23 (catalog 2026.12.16)

RAY_MARKED_DEAD = """\
The node with node id: 75b2eec8a61cdafd37cc8072b1caf9abdeef9c4e74a4f24d5dfce28d and ip: 10.0.0.7 has been marked dead because the detector has missed too many heartbeats from it. This can happen when a raylet crashes unexpectedly or has lagging heartbeats.
['done', 'done', 'done', 'done', 'done', 'done']
"""


def test_warnings_of_a_job_that_completed_with_exit_0_are_not_an_incident():
    ok = attribute(EvidenceBundle(job_log=RAY_MARKED_DEAD, job=job("COMPLETED", "0:0")))
    assert ok.category.value == "none" and ok.culprit_nodes == [], ok.explanation
    assert "COMPLETED" in ok.explanation
    # the same lines while the job still runs, or in a job that failed, keep their incident
    for state, code in (("RUNNING", "0:0"), ("FAILED", "1:0")):
        a = attribute(EvidenceBundle(job_log=RAY_MARKED_DEAD, job=job(state, code)))
        assert a.category.value == "node_failure", (state, a.explanation)


def test_a_completed_record_does_not_hide_a_hardware_fault_or_a_failed_task():
    xid = "[ 5123.4] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    a = attribute(EvidenceBundle(job_log="step 10 | loss 1.0\n", kernel_logs={"gpu-node-001": [xid]},
                                 job=job("COMPLETED", "0:0", ["gpu-node-001"])))
    assert a.domain.value == "hardware", a.explanation
    task = "step 10 | loss 1.0\nsrun: error: gpu-node-001: task 3: Exited with exit code 1\n"
    b = attribute(EvidenceBundle(job_log=task, job=job("COMPLETED", "0:0", ["gpu-node-001"])))
    assert b.category.value != "none", b.explanation


NCCL_TESTS_STUCK = """\
# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
rccl-tests: Version develop:3f7f785
# Using devices
#   Rank  0 Pid   2303 on gpu-node-001 device  0 [0000:2f:00.0] AMD Instinct MI100
gpu-node-001:2303:2303 [0] /opt/rocm/share/rccl/src/init.cc:140 NCCL WARN Missing "iommu=pt" from kernel command line which can lead to system instablity or hang!
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
slurmstepd: error: *** STEP 1129.0 ON gpu-node-001 CANCELLED AT 2024-03-30T18:42:09 ***
"""


def test_an_nccl_tests_run_cancelled_before_its_first_result_on_a_node_without_iommu_pt_is_the_nodes_hang():
    a = attribute(EvidenceBundle(job_log=NCCL_TESTS_STUCK, job=job("CANCELLED", "0:15", ["gpu-node-001"])))
    assert (a.category.value, a.domain.value) == ("hang", "system"), a.explanation
    assert "iommu=pt" in a.explanation
    # without the RCCL warning: a start-up hang of unknown cause
    plain = "\n".join(x for x in NCCL_TESTS_STUCK.splitlines() if "iommu" not in x) + "\n"
    b = attribute(EvidenceBundle(job_log=plain, job=job("CANCELLED", "0:15", ["gpu-node-001"])))
    assert (b.category.value, b.domain.value) == ("hang", "unknown"), b.explanation


def test_the_nccl_tests_banner_is_not_a_progress_line():
    from revive.signatures.matcher import default_matcher
    banner = NCCL_TESTS_STUCK.splitlines()[0]
    assert default_matcher().progress_of(banner)[0] is False


def test_the_iommu_pt_warning_does_not_explain_an_rccl_error_other_than_a_hang():
    text = NCCL_TESTS_STUCK.splitlines()[5] + "\n" + (
        "gpu-node-001:2303:2303 [0] NCCL WARN Cuda failure 'invalid argument'\n"
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL version 2.18.3\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0", ["gpu-node-001"])))
    assert a.category.value == "nccl_error" and a.domain.value != "system", a.explanation


def test_launch_and_image_errors_are_stopped_not_retried():
    cases = {
        "There are not enough slots available in the system to satisfy the 8 slots": ("app_bug", "application"),
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=11.0": ("crash", "system"),
    }
    for line, (cat, dom) in cases.items():
        a = attribute(EvidenceBundle(job_log=f"+ mpirun -np 8 python train.py\n{line}\n", job=job("FAILED", "1:0", ["gpu-node-001"])))
        assert (a.category.value, a.domain.value, a.action.value) == (cat, dom, "stop_no_retry"), (line, a.explanation)


def test_ucx_transport_retry_exceeded_is_the_interconnect_not_the_abort():
    text = ("Grid : Message : MemoryManager Cache 34004218675 bytes\n"
            "[gpu-node-001:32182:0:32182] ib_mlx5_log.c:145  Transport retry count exceeded on mlx5_2:1/IB "
            "(synd 0x15 vend 0x81 hw_synd 0/0)\nsrun: error: gpu-node-001: task 0: Aborted (core dumped)\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "134:0", ["gpu-node-001"])))
    assert a.category.value == "nccl_error", a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "nccl.ib_retry_exceeded"


def test_fp16_overflow_at_the_loss_scale_floor_is_the_models_numerics_even_while_the_loop_runs():
    floor = ("[2021-11-27 00:36:54,800] [INFO] [stage2.py:1628:step] [deepscale] OVERFLOW! Rank 0 Skipping step. "
             "Attempted loss scale: 1, reducing to 1\n")
    bars = "".join(f" 0%|          | {i}/24128 [00:40<2:40:10,  2.50it/s]\n" for i in range(98, 104))
    a = attribute(EvidenceBundle(job_log=(floor + bars) * 3, job=job("CANCELLED", "0:15", ["gpu-node-001"])))
    assert (a.category.value, a.domain.value, a.action.value) == ("app_bug", "application", "stop_no_retry"), a.explanation
    # overflow above the floor is the scaler doing its job
    ok = floor.replace("loss scale: 1, reducing to 1", "loss scale: 65536, reducing to 32768")
    b = attribute(EvidenceBundle(job_log=(ok + bars) * 3, job=job("RUNNING", "0:0", ["gpu-node-001"])))
    assert b.category.value == "none", b.explanation


def test_an_ascend_hccl_failure_is_a_collective_failure():
    text = ("ERROR 07-23 03:49:58 [core.py:515] EngineCore failed to start.\n"
            "[ERROR] HCCL(2717288,python3):2025-07-23-03:49:57.177.194 [hccl_socket_manager.cc:778] [2734049]"
            "[Wait][LinkEstablish]wait socket establish timeout, role[1] rank[12] timeout[120]\n"
            "ERROR 07-23 03:49:58 [core.py:515] RuntimeError: Getting socket times out.\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0")))
    assert a.category.value == "nccl_error", a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "hccl.error"


# ---- round 24 (catalog 2026.12.18)

def test_xla_reports_a_failed_nccl_call_as_a_collective_failure_not_a_python_crash():
    text = ("time: Sat Mar 13 14:35:13 2021, type: train_loss, epoch: 0, step: 128, elbo: -14.41902\n"
            "Traceback (most recent call last):\n"
            "RuntimeError: Internal: external/org_tensorflow/tensorflow/compiler/xla/service/gpu/nccl_all_reduce_thunk.cc:162: "
            "NCCL operation ncclAllReduce(send_buffer, recv_buffer, buffer.element_count, datatype, reduce_op, comm, "
            "*cu_stream) failed: invalid usage: while running replica 0 and partition 0 of a replicated computation\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0", ["gpu-node-001"])))
    assert (a.category.value, a.domain.value, a.action.value) == ("nccl_error", "unknown", "restart_in_place"), a.explanation


def test_tpu_workers_that_stopped_answering_are_a_preemption():
    text = ("I0902 03:33:36.516501 140070334211904 basic_session_run_hooks.py:260] loss = 1.109375, step = 488600 (45.410 sec)\n"
            "INFO:tensorflow:ShutdownHook: lame workers found: HeartbeatManager(/job:worker/replica:0/task:0/device:CPU:0)\n")
    a = attribute(EvidenceBundle(job_log=text))
    assert (a.category.value, a.domain.value, a.action.value) == ("preempted", "system", "restart_in_place"), a.explanation


def test_a_tpu_another_process_holds_is_the_nodes_state():
    text = ("root@host:~# python train.py\nTraceback (most recent call last):\n"
            "RuntimeError: Unable to initialize backend 'tpu': UNKNOWN: TPU initialization failed: open(/dev/vfio/1): "
            "Device or resource busy: Device or resource busy; Couldn't open iommu group /dev/vfio/1\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0", ["gpu-node-001"])))
    assert (a.category.value, a.domain.value) == ("crash", "system"), a.explanation
    assert a.culprit_nodes == ["gpu-node-001"]
