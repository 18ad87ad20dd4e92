"""Round-31 incidents (catalog 2026.12.25): start-up hangs in pasted logs, and launch-time runtime errors.

- A job log pasted without its Slurm record that ends in NCCL's ring/tree set-up and then slurmstepd's
  plain ``*** JOB <id> ON <node> CANCELLED AT <time> ***`` was cancelled by a person while its start-up
  hung: a hang. The log alone says how the job ended (``collect.ended_state``). Without the
  cancellation line, the log just stops, and nothing is raised.
- Gloo's ``connectFullMesh failed`` (vLLM's CPU group in an RL rollout) is a collective library's
  failure, not a bare Python crash.
- HIP's ``hipErrorNoBinaryForGpu`` (a binary built for another GPU target or xnack mode) is the build:
  stop.
- A Slurm prolog failure on the allocated node is the node's set-up (Slurm drains it): requeue elsewhere.
  CUDA's sticky `an illegal instruction was encountered` is a CUDA error of unknown cause.
- Ray's driver warning that a worker "died or was killed ... by an unexpected system error", followed by
  ``RayActorError``, is a worker crash of unknown cause, not the program's exception."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord


def verdict(text: str, job: JobRecord | None = None) -> tuple[str, str, str, str | None]:
    a = attribute(EvidenceBundle(job_log=text, job=job))
    return a.category.value, a.domain.value, a.action.value, (a.root_event.signature_id if a.root_event else None)


RINGS = "".join(
    f"Mon May 24 06:43:04 2021[1,{r}]<stdout>:gpu-node-00{r + 1}:53{r}8:54{r}9 [0] NCCL INFO {what}\n"
    for r in (0, 1) for what in ("Channel 00 : 1[41000] -> 0[42000] [receive] via NET/Socket/0",
                                 "Connected all rings", "Connected all trees"))
CANCELLED = "slurmstepd: error: *** JOB 77120 ON gpu-node-001 CANCELLED AT 2021-05-24T08:15:40 ***\n"


def test_a_pasted_log_cancelled_after_nccl_connected_its_rings_is_a_start_up_hang():
    category, domain, action, _ = verdict(RINGS + CANCELLED)
    assert category == "hang"
    assert (domain, action) == ("unknown", "restart_in_place")


def test_the_same_log_without_the_cancellation_line_raises_nothing():
    # it may still be running: a log that stops is not evidence of a hang without a clock or an end
    assert verdict(RINGS)[0] == "none"


def test_a_start_up_that_ran_into_the_time_limit_cites_the_time_limit_not_a_person():
    text = RINGS + ("slurmstepd: error: *** JOB 77120 ON gpu-node-001 CANCELLED AT 2021-05-24T08:15:40 "
                    "DUE TO TIME LIMIT ***\n")
    a = attribute(EvidenceBundle(job_log=text))
    assert (a.category.value, a.root_event.signature_id) == ("hang", "slurm.cancelled_time_limit")
    assert "time limit" in a.explanation.lower() and "cancellation ended" not in a.explanation.lower()


def test_gloo_failing_to_connect_its_full_mesh_in_a_rollout_worker_is_a_collective_error_not_a_crash():
    text = ("(WorkerDict pid=22410) Traceback (most recent call last):\n"
            '(WorkerDict pid=22410)   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/'
            'distributed_c10d.py", line 1953, in _new_process_group_helper\n'
            "(WorkerDict pid=22410)     backend_class = ProcessGroupGloo(\n"
            "(WorkerDict pid=22410) RuntimeError: Gloo connectFullMesh failed with "
            "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] no error\n"
            "ray.exceptions.RayTaskError(RuntimeError): ray::TaskRunner.run() (pid=21877, ip=10.0.0.11)\n")
    job = JobRecord(job_id="967", nodes=["gpu-node-001"], state="FAILED", exit_code="1:0")
    assert verdict(text, job) == ("nccl_error", "unknown", "restart_in_place", "gloo.connect_full_mesh_failed")


def test_a_loopback_peer_still_names_the_hosts_file_not_a_generic_mesh_failure():
    text = ("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
            "timed out connecting: SO_ERROR: Connection refused, remote=[127.0.1.1]:20901\n")
    assert verdict(text)[1:] == ("system", "stop_no_retry", "gloo.loopback_peer")


def test_a_hip_binary_built_for_the_other_xnack_mode_is_the_build_stop():
    text = (":1:hip_code_object.cpp      :460 : 43966602806 us: hipErrorNoBinaryForGpu: Unable to find code "
            "object for all current devices!\n"
            ":1:hip_code_object.cpp      :464 : 43966602811 us:     amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack- - "
            "[Not Found]\n"
            "srun: error: gpu-node-001: task 0: Aborted\n")
    job = JobRecord(job_id="74102", nodes=["gpu-node-001"], state="FAILED", exit_code="134:0")
    assert verdict(text, job) == ("cuda_error", "application", "stop_no_retry", "hip.no_binary_for_gpu")


def test_a_ray_worker_killed_by_an_unexpected_system_error_is_a_crash_not_the_programs_exception():
    text = ("2022-07-07 19:05:41,609 WARNING worker.py:1404 -- A worker died or was killed while executing a task "
            "by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker.\n"
            "Traceback (most recent call last):\n"
            '  File "main.py", line 149, in <module>\n'
            "    model, weights = train(game_config, summary_writer, model_path)\n"
            "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n")
    job = JobRecord(job_id="60415", nodes=["gpu-node-001"], state="FAILED", exit_code="1:0")
    assert verdict(text, job) == ("crash", "unknown", "restart_in_place", "ray.worker_died")


def test_a_prolog_failure_revoking_the_allocation_is_the_nodes_set_up_not_a_crash():
    text = ("salloc: Granted job allocation 235454\n"
            "salloc: Waiting for resource configuration\n"
            "salloc: Prolog failure on node gpu-node-006\n"
            "salloc: Job allocation 235454 has been revoked.\n"
            "salloc: error: Job allocation 235454 has been revoked\n")
    job = JobRecord(job_id="235454", nodes=["gpu-node-005", "gpu-node-006"], state="FAILED", exit_code="1:0")
    a = attribute(EvidenceBundle(job_log=text, job=job))
    assert (a.category.value, a.domain.value, a.root_event.signature_id) == ("node_failure", "system",
                                                                            "slurm.prolog_failed")
    # Slurm drains the node whose prolog failed: the resubmission runs without it
    assert a.culprit_nodes == ["gpu-node-006"] and a.action.value == "requeue_exclude_nodes"


def test_a_cuda_illegal_instruction_is_a_cuda_error_of_unknown_cause_not_a_bare_crash():
    text = ("CUDA status Error: file: ./src/dark_cuda.c : cuda_push_array() : line: 469\n"
            " CUDA Error: an illegal instruction was encountered\n"
            "CUDA Error: an illegal instruction was encountered: No error\n")
    job = JobRecord(job_id="4410", nodes=["gpu-node-005"], state="FAILED", exit_code="1:0")
    assert verdict(text, job) == ("cuda_error", "unknown", "restart_in_place", "cuda.illegal_instruction")
