"""Rules keyed on what JAX's coordination service, c10d's start-up barrier, the host allocator and the
launcher's ssh say (issue #8, docs/attribution.md 3p-3s): a task that stopped heartbeating died; a
start-up barrier missing every task but 0 is a launch misconfiguration; a shutdown barrier is a hang;
a CPU-allocator OOM is host memory; an unreachable job node is a node failure."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import Action, Category, Domain, EvidenceBundle, JobRecord

NODES = ["gpu-node-001", "gpu-node-002"]


def _job(log: str, nodes: list[str] = NODES, state: str = "FAILED") -> EvidenceBundle:
    return EvidenceBundle(job_log=log, job=JobRecord(job_id="7", nodes=nodes, state=state))


_HEARTBEAT = (
    "2024-10-09 15:47:38.568412: E external/xla/xla/tsl/distributed_runtime/coordination/coordination_service.cc:1170] "
    "/job:jax_worker/replica:0/task:3 has been set to ERROR in coordination service: UNAVAILABLE: Task "
    "/job:jax_worker/replica:0/task:3 heartbeat timeout. This indicates that the remote task has failed, got preempted, "
    "or crashed unexpectedly. Check the task logs for an earlier error to debug further.")


def test_a_task_that_stopped_heartbeating_is_a_peer_crash_with_its_rank():
    a = attribute(_job("I1115 16:00:39.451247 1 trainer.py:501] Training: step 198\n" + _HEARTBEAT))
    assert a.root_event is not None and a.root_event.signature_id == "jax.task_heartbeat_timeout"
    assert (a.category, a.domain, a.action) == (Category.crash, Domain.unknown, Action.restart_in_place)
    assert a.culprit_ranks == [3]
    assert a.culprit_nodes == []  # a crash never blames a node


def _connect_barrier(tasks: list[int]) -> str:
    return "\n".join([
        '    jax.distributed.initialize(coordinator_address="localhost", num_processes=8, process_id=0)',
        "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: PjRT_Client_Connect. "
        "Timed out task names:",
        *[f"/job:jax_worker/replica:0/task:{t}" for t in tasks],
        "",
        "Additional GRPC error information from remote target unknown_target_for_coordination_leader while calling "
        "/tensorflow.CoordinationService/Barrier:",
    ])


def test_connect_barrier_missing_every_task_but_zero_is_the_launch_configuration():
    a = attribute(_job(_connect_barrier([1, 6, 3, 2, 5, 7, 4]), nodes=["gpu-node-001"]))
    assert (a.category, a.domain, a.action) == (Category.app_bug, Domain.application, Action.stop_no_retry)
    assert "only process 0" in a.explanation


def test_connect_barrier_missing_some_tasks_is_not_called_a_launch_bug():
    a = attribute(_job(_connect_barrier([3, 5])))
    assert a.category == Category.crash
    assert a.action == Action.restart_in_place


def test_other_barrier_naming_one_task_restarts_and_names_that_rank():
    log = ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: "
           "multihost_broadcast_sync0. Timed out task names:\n/job:jax_worker/replica:0/task:5\n")
    a = attribute(_job(log))
    assert (a.category, a.action) == (Category.crash, Action.restart_in_place)
    assert a.culprit_ranks == [5]


def test_shutdown_barrier_after_the_last_iteration_is_a_teardown_hang():
    log = "\n".join([
        " iteration     1000/    1000 | consumed samples: 64000 | elapsed time per iteration (ms): 812.1 | lm loss: 2.01",
        "E0101 00:10:00.000 1 coordination_service.cc:100] Shutdown barrier has failed.",
    ])
    a = attribute(_job(log))
    assert (a.category, a.domain, a.action) == (Category.hang, Domain.application, Action.stop_no_retry)


def test_shutdown_barrier_mid_run_is_a_hang_of_unknown_cause():
    log = "\n".join([
        " iteration      200/    1000 | consumed samples: 12800 | elapsed time per iteration (ms): 812.1 | lm loss: 2.71",
        "DEADLINE_EXCEEDED: Barrier timed out. Id: Shutdown::1. This usually happens because a task triggered the barrier "
        "too early or too slowly.",
    ])
    a = attribute(_job(log))
    assert (a.category, a.domain, a.action) == (Category.hang, Domain.unknown, Action.restart_in_place)


def test_transport_failure_to_the_coordinator_stays_a_communication_error():
    log = ("F0720 09:14:13.604200 1044529 client.h:77] Terminating process because the JAX distributed service detected "
           "fatal errors. This most likely indicates that another task died; see the other task logs for more details. "
           "absl::Status: UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was "
           "preempted/died/restarted unexpectedly or this task is experiencing network issues.")
    a = attribute(_job(log))
    assert (a.category, a.domain, a.action) == (Category.nccl_error, Domain.unknown, Action.restart_in_place)


def test_store_based_barrier_with_missing_workers_is_a_start_up_stall():
    log = ("RuntimeError: Timed out initializing process group in store based barrier on rank: 4330, for key: "
           "store_based_barrier_key:522 (world_size=2048, worker_count=1792, timeout=0:30:00)")
    a = attribute(_job(log))
    assert a.root_event is not None and a.root_event.signature_id == "c10d.store_barrier_timeout"
    assert (a.category, a.action) == (Category.hang, Action.restart_in_place)


def test_tensorflow_oom_on_the_cpu_allocator_is_host_memory():
    log = ("Training...\nResource exhausted: OOM when allocating tensor with shape[1024,50257] and type float on "
           "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu\nKilled")
    a = attribute(_job(log, nodes=["gpu-node-001"]))
    assert (a.category, a.domain, a.action) == (Category.oom_host, Domain.application, Action.stop_no_retry)


def test_tensorflow_oom_on_a_gpu_stays_gpu_memory():
    log = ("Resource exhausted: OOM when allocating tensor with shape[8192,50257] and type float on "
           "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
    a = attribute(_job(log, nodes=["gpu-node-001"]))
    assert a.category == Category.oom_gpu


def test_a_job_node_that_does_not_answer_ssh_is_a_node_failure_naming_it():
    log = "\n".join([
        "gpu-node-001: [2024-03-01 10:00:00,000] [INFO] [runner.py:555:main] cmd = pdsh -S -f 1024 -w gpu-node-001,gpu-node-002",
        "gpu-node-002: ssh: connect to host gpu-node-002 port 22: No route to host",
        "pdsh@gpu-node-001: gpu-node-002: ssh exited with exit code 255",
    ])
    a = attribute(_job(log))
    assert (a.category, a.domain, a.action) == (Category.node_failure, Domain.hardware, Action.requeue_exclude_nodes)
    assert a.culprit_nodes == ["gpu-node-002"]


def test_a_refused_ssh_connection_is_not_a_dead_node():
    a = attribute(_job("ssh: connect to host gpu-node-002 port 22: Connection refused", state="COMPLETED"))
    assert a.category == Category.none


def test_torn_checkpoint_write_without_errno_is_an_io_error_of_unknown_cause():
    log = "[rank1]: RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 704 vs 598"
    a = attribute(_job(log))
    assert (a.category, a.domain, a.action) == (Category.io_error, Domain.unknown, Action.restart_in_place)


def test_torn_checkpoint_write_beside_enospc_is_storage_full():
    log = "\n".join([
        "[rank3]: OSError: [Errno 28] No space left on device",
        "[rank1]: RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 704 vs 598",
    ])
    a = attribute(_job(log))
    assert (a.category, a.domain, a.action) == (Category.io_error, Domain.system, Action.stop_no_retry)


def test_hugging_face_trainer_dicts_are_progress_so_a_long_silence_after_them_is_a_hang():
    lines = [f"[2025-08-18 18:{m:02d}:{s:02d}.000] {{'loss': 0.{20 + i:02d}, 'grad_norm': 0.2, 'learning_rate': 5e-05, "
             f"'epoch': {i / 100:.2f}}}"
             for i, (m, s) in enumerate((i * 10 // 60, i * 10 % 60) for i in range(30))]
    lines.append("[2025-08-18 20:30:00.000] There are 6 training processes running")
    a = attribute(_job("\n".join(lines), state="RUNNING"))
    assert a.category == Category.hang
    assert a.root_event is not None and a.root_event.signature_id == "engine.silent_hang"


def test_hugging_face_trainer_dicts_at_a_steady_cadence_are_healthy():
    lines = [f"[2025-08-18 18:{i // 6:02d}:{i % 6 * 10:02d}.000] {{'loss': 0.{20 + i:02d}, 'epoch': {i / 100:.2f}}}"
             for i in range(30)]
    a = attribute(_job("\n".join(lines), state="RUNNING"))
    assert a.category == Category.none


def test_lightning_requeue_on_the_pre_time_limit_signal_is_a_timeout():
    log = "\n".join([
        "Epoch 37:  61%|██████    | 1098/1800 [11:02<07:03,  1.66it/s, loss=0.412, v_num=7]",
        "Handling auto-requeue signal: 10",
        "requeing job 4265117...",
        "Requeued SLURM job: 4265117",
    ])
    a = attribute(_job(log, nodes=["gpu-node-023"], state="RUNNING"))
    assert (a.category, a.domain, a.action) == (Category.timeout, Domain.system, Action.restart_in_place)


def test_lightning_requeue_after_a_preemption_line_is_a_preemption():
    log = "\n".join([
        "slurmstepd: error: *** STEP 4265117.0 ON gpu-node-023 CANCELLED AT 2020-10-20T04:13:52 DUE TO PREEMPTION ***",
        "handling SIGUSR1",
        "requeing job 4265117...",
    ])
    a = attribute(_job(log, nodes=["gpu-node-023"], state="PREEMPTED"))
    assert a.category == Category.preempted


def test_invalid_device_ordinal_is_the_launch_configuration():
    a = attribute(_job("RuntimeError: CUDA error: invalid device ordinal", nodes=["gpu-node-001"]))
    assert (a.category, a.domain, a.action) == (Category.app_bug, Domain.application, Action.stop_no_retry)


def test_two_ranks_on_one_gpu_is_the_jobs_launch_error_and_stops():
    log = "\n".join([
        "gpu-node-001:4101:4101 [1] init.cc:778 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
        "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3",
    ])
    a = attribute(_job(log, nodes=["gpu-node-001"]))
    assert (a.category, a.domain, a.action) == (Category.app_bug, Domain.application, Action.stop_no_retry)
    assert a.root_event is not None and a.root_event.signature_id == "nccl.duplicate_gpu", a.explanation


def test_tcpstore_clients_joined_timeout_beats_the_generic_diststoreerror_on_its_line():
    a = attribute(_job("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined."))
    assert a.root_event is not None and a.root_event.signature_id == "c10d.store_barrier_timeout"
    assert a.category == Category.hang


# ---- rule 3al: the time limit ended a start-up that never trained
TIME_LIMIT = "slurmstepd: error: *** JOB 61304 ON gpu-node-001 CANCELLED AT 2021-01-25T19:41:07 DUE TO TIME LIMIT ***\n"
_ONE_NODE = JobRecord(job_id="61304", nodes=["gpu-node-001"], state="TIMEOUT")


def _tl(text: str):
    return attribute(EvidenceBundle(job_log=text + TIME_LIMIT, job=_ONE_NODE))


def test_a_lightning_start_up_where_only_rank_0_of_8_ever_started_is_the_launch_configuration():
    a = _tl("GPU available: True, used: True\nLOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]\n"
            "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8\n")
    assert (a.category.value, a.domain.value, a.action.value) == ("hang", "application", "stop_no_retry"), a.explanation


def test_a_lightning_rank_started_twice_is_the_launch_configuration():
    a = _tl("initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4\ninitializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4\n"
            "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/4\ninitializing ddp: GLOBAL_RANK: 0, MEMBER: 1/4\n")
    assert (a.category.value, a.action.value) == ("hang", "stop_no_retry"), a.explanation


def test_a_start_up_stack_at_the_time_limit_is_a_hang_of_unknown_cause():
    a = _tl("Thread 1234 (active): \"MainThread\"\n    broadcast (torch/distributed/distributed_c10d.py:1193)\n"
            "    _configure_distributed_model (deepspeed/runtime/engine.py:1182)\n"
            "    initialize (deepspeed/__init__.py:125)\n")
    assert (a.category.value, a.action.value) == ("hang", "restart_in_place"), a.explanation


def test_every_member_started_and_no_step_yet_is_still_a_hang_but_not_the_configuration():
    a = _tl("initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2\ninitializing ddp: GLOBAL_RANK: 1, MEMBER: 2/2\n")
    assert (a.category.value, a.domain.value, a.action.value) == ("hang", "unknown", "restart_in_place")


def test_a_run_that_trained_until_the_time_limit_is_a_timeout():
    a = _tl("initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/1\n"
            " iteration      100/ 1000 | elapsed time per iteration (ms): 500.1 |\n")
    assert a.category.value == "timeout", a.explanation


def test_a_time_limit_after_plain_output_with_no_start_up_lines_stays_a_timeout():
    a = _tl("loading dataset shard 3 of 900\nloading dataset shard 4 of 900\n")
    assert a.category.value == "timeout", a.explanation
