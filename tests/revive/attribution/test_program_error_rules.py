"""Rules 3aa-3ac (docs/attribution.md): the program's own error against the infrastructure's echo.

Incidents as they reach Revive: one rank raises its own exception and the survivors' NCCL reports
"remote process exited"; torch's type checks that name ``torch.cuda.HalfTensor``; a run whose
progress lines the generic counter pattern did not know stops printing and is cancelled."""

from __future__ import annotations

import pytest

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

TWO_NODES = JobRecord(job_id="7001", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED")

PEER_EXIT = """\
 [2024-06-01 10:00:00] iteration      100/ 1000 | elapsed time per iteration (ms): 500.1 |
[rank3]: Traceback (most recent call last):
[rank3]:   File "train.py", line 80, in <module>
[rank3]:     loss = step(batch)
[rank3]: RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.
[rank0]: Traceback (most recent call last):
[rank0]:   File "train.py", line 82, in <module>
[rank0]:     dist.all_reduce(t)
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.20.5
[rank0]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
"""


def run(text: str, job: JobRecord = TWO_NODES):
    return attribute(EvidenceBundle(job_log=text, job=job))


def test_rank_raising_its_own_error_is_the_root_not_the_survivors_nccl_remote_error():
    a = run(PEER_EXIT)
    assert a.root_event is not None and "LogSoftmaxBackward0" in a.root_event.text, a.explanation
    assert (a.category.value, a.domain.value, a.action.value) == ("app_bug", "application", "stop_no_retry")


def test_nccl_remote_error_alone_stays_unknown_and_restarts():
    alone = "\n".join(x for x in PEER_EXIT.split("\n") if not x.startswith("[rank3]"))
    a = run(alone)
    assert (a.category.value, a.domain.value, a.action.value) == ("nccl_error", "unknown", "restart_in_place")


def test_peer_exit_with_infrastructure_exception_stays_a_restart():
    # the other rank's exception names a network fault: not the program's, so nothing stops the run
    text = PEER_EXIT.replace("RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
                             "ConnectionResetError: [Errno 104] Connection reset by peer")
    a = run(text)
    assert a.domain.value == "unknown" and a.action.value == "restart_in_place", a.explanation


def test_hardware_evidence_outranks_the_exception():
    text = PEER_EXIT + "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
    a = run(text)
    assert a.domain.value == "hardware", a.explanation


def test_tensor_type_names_in_torch_checks_are_not_cuda_faults():
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 80, in <module>\n    out = model(x)\n"
            "RuntimeError: Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same\n")
    a = run(text)
    assert (a.category.value, a.action.value) == ("app_bug", "stop_no_retry"), a.explanation


def test_a_real_cuda_word_still_excludes_the_exception():
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 80, in <module>\n    out = model(x)\n"
            "RuntimeError: the cuda driver returned an unexpected status\n")
    a = run(text)
    assert a.domain.value == "unknown" and a.action.value == "restart_in_place", a.explanation


def test_exclude_words_start_at_a_word_boundary():
    # "restore" is not "store", "ghost" is not "host": the program's own message
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 80, in <module>\n    restore(ckpt)\n"
            "RuntimeError: cannot restore ghost_layer weights: expected 12 tensors, got 11\n")
    a = run(text)
    assert (a.category.value, a.action.value) == ("app_bug", "stop_no_retry"), a.explanation


def test_lower_case_epoch_iter_counters_make_a_cancelled_stall_a_silent_hang():
    lines = [f"[2018-05-28 10:{m:02d}:02] [session 1][epoch  1][iter {100 * m:5d}/10022] loss: 0.77, lr: 1.00e-03"
             for m in range(1, 20)]
    lines.append("slurmstepd: error: *** JOB 181 ON gpu-node-003 CANCELLED AT 2018-05-28T14:40:00 ***")
    a = run("\n".join(lines) + "\n", JobRecord(job_id="181", nodes=["gpu-node-003"], state="CANCELLED"))
    assert a.category.value == "hang", a.explanation


def test_detectrons_json_stats_lines_make_a_cancelled_stall_a_silent_hang():
    # Detectron prints its progress only as JSON ("json_stats: {... "iter": N ...}"), with no timestamps
    lines = [f'json_stats: {{"eta": "10:{59 - i:02d}:14", "iter": {10900 + 20 * i}, "loss": 0.71, "lr": 0.002, '
             f'"mb_qsize": 0, "mem": 6962, "time": 0.4949}}' for i in range(6)]
    lines.append("slurmstepd: error: *** JOB 30116 ON gpu-node-001 CANCELLED AT 2018-03-02T21:40:00 ***")
    a = run("\n".join(lines) + "\n", JobRecord(job_id="30116", nodes=["gpu-node-001"], state="CANCELLED"))
    assert (a.category.value, a.action.value) == ("hang", "restart_in_place"), a.explanation


def test_slurm_upper_case_step_line_is_not_progress():
    # a crash, then Slurm's step teardown: "STEP 181.0" is no progress line, so the error was not survived
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
            "KeyError: 'label'\n"
            + "".join(f"slurmstepd: error: *** STEP 181.{i} ON gpu-node-003 CANCELLED AT 2018-05-28T14:40:0{i} ***\n"
                      for i in range(4)))
    a = run(text, JobRecord(job_id="181", nodes=["gpu-node-003"], state="FAILED"))
    assert a.category.value == "app_bug", a.explanation


def test_ray_worker_prefix_is_stripped_so_the_workers_exception_is_seen():
    text = ("(RayTrainWorker pid=1234, ip=10.0.0.1) Traceback (most recent call last):\n"
            "(RayTrainWorker pid=1234, ip=10.0.0.1)   File \"train.py\", line 80, in <module>\n"
            "(RayTrainWorker pid=1234, ip=10.0.0.1) ValueError: too many values to unpack (expected 2)\n")
    a = run(text)
    assert (a.category.value, a.domain.value, a.action.value) == ("app_bug", "application", "stop_no_retry")


def test_lightning_misconfiguration_is_the_jobs_configuration():
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 80, in <module>\n    trainer.fit(model)\n"
            "lightning.fabric.utilities.exceptions.MisconfigurationException: You passed `devices=8` but only 4 GPUs "
            "are available\n")
    a = run(text)
    assert (a.category.value, a.action.value) == ("app_bug", "stop_no_retry"), a.explanation


CONN = "ConnectionResetError: [Errno 104] Connection reset by peer"
REPEAT = """\
=== attempt restart=0 2024-06-01T10:00:00Z
 [2024-06-01 10:00:10] iteration       10/ 1000 | elapsed time per iteration (ms): 500.1 |
[rank2]: Traceback (most recent call last):
[rank2]:   File "train.py", line 80, in <module>
[rank2]: RuntimeError: the loader returned a batch of 0 samples for shard 17
=== attempt restart=1 2024-06-01T10:05:00Z
 [2024-06-01 10:05:10] iteration       10/ 1000 | elapsed time per iteration (ms): 500.3 |
[rank5]: Traceback (most recent call last):
[rank5]:   File "train.py", line 80, in <module>
[rank5]: RuntimeError: the loader returned a batch of 0 samples for shard 17
"""


def test_the_same_exception_after_a_restart_is_not_transient():
    # alone, "worker" keeps this RuntimeError crash / unknown (program_error words); raised again,
    # word for word, after the restart, it is the program's
    text = REPEAT.replace("the loader returned", "worker loader returned")
    a = run(text)
    assert (a.category.value, a.domain.value, a.action.value) == ("app_bug", "application", "stop_no_retry"), \
        a.explanation


def test_a_first_occurrence_of_the_same_exception_stays_a_restart():
    text = REPEAT.replace("the loader returned", "worker loader returned")
    first_only = text[text.index("=== attempt restart=1"):]
    a = run(first_only)
    assert a.domain.value == "unknown" and a.action.value == "restart_in_place", a.explanation


def test_a_repeated_connection_error_is_left_to_the_infrastructure_rules():
    text = REPEAT.replace("RuntimeError: the loader returned a batch of 0 samples for shard 17", CONN)
    a = run(text)
    assert a.action.value != "stop_no_retry", a.explanation


def _stalling_attempt(n: int, hour: int) -> str:
    steps = "".join(f"[2024-06-01 {hour:02d}:{m:02d}:00] Epoch 1 step {m * 10} loss 2.{m:02d}\n" for m in range(0, 10))
    return f"=== attempt restart={n} 2024-06-01T{hour:02d}:00:00Z\n" + steps


def test_a_silent_hang_that_the_previous_attempt_also_had_is_stopped():
    text = (_stalling_attempt(0, 8) + _stalling_attempt(1, 11)
            + "slurmstepd: error: *** JOB 42 ON gpu-node-001 CANCELLED AT 2024-06-01T13:30:00 ***\n")
    a = run(text, JobRecord(job_id="42", nodes=["gpu-node-001"], state="CANCELLED"))
    assert (a.category.value, a.domain.value, a.action.value) == ("hang", "application", "stop_no_retry"), \
        a.explanation


def test_a_first_silent_hang_is_restarted():
    text = (_stalling_attempt(1, 11)
            + "slurmstepd: error: *** JOB 42 ON gpu-node-001 CANCELLED AT 2024-06-01T13:30:00 ***\n")
    a = run(text, JobRecord(job_id="42", nodes=["gpu-node-001"], state="CANCELLED"))
    assert (a.category.value, a.action.value) == ("hang", "restart_in_place"), a.explanation


def test_a_previous_attempt_that_crashed_does_not_make_the_hang_a_repeat():
    crashed = _stalling_attempt(0, 8) + "Traceback (most recent call last):\nKeyError: 'x'\n"
    text = (crashed + _stalling_attempt(1, 11)
            + "slurmstepd: error: *** JOB 42 ON gpu-node-001 CANCELLED AT 2024-06-01T13:30:00 ***\n")
    a = run(text, JobRecord(job_id="42", nodes=["gpu-node-001"], state="CANCELLED"))
    assert (a.category.value, a.action.value) == ("hang", "restart_in_place"), a.explanation


# ---- misuse texts that hold an infrastructure word, and errors raised before the job could run
TB = 'Traceback (most recent call last):\n  File "train.py", line 80, in <module>\n    main()\n'
PROGRESS = " iteration      100/ 1000 | elapsed time per iteration (ms): 500.1 |\n"


@pytest.mark.parametrize(("last_line", "root"), [
    ("RuntimeError: Default process group has not been initialized, please make sure to call init_process_group.",
     "py.exception_generic"),
    ("RuntimeError: Tensors must be CUDA and dense", "py.exception_generic"),
    ("_pickle.UnpicklingError: invalid load key, '<'.", "py.exception_generic"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "cuda.no_kernel_image"),
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "gpu.arch_unsupported"),
    ("torch._dynamo.exc.Unsupported: call_function UserDefinedClassVariable() [] {}", "py.torch_compile_error"),
    ("jaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: Executable expected parameter 0 of size 4096 but "
     "got buffer with incompatible size 8192", "jax.xla_invalid_argument"),
    ("huggingface_hub.utils._errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url "
     "https://huggingface.co/meta-llama/Llama-2-7b-hf/resolve/main/config.json.", "hub.access_denied"),
    ("Exception: data did not match any variant of untagged enum PyPreTokenizerTypeWrapper at line 40 column 3",
     "py.exception_generic"),
])
def test_a_misuse_the_retry_would_repeat_stops_the_job(last_line, root):
    a = run(PROGRESS + TB + last_line + "\n")
    assert a.root_event is not None and a.root_event.signature_id == root, a.explanation
    assert (a.category.value, a.domain.value, a.action.value) == ("app_bug", "application", "stop_no_retry")


@pytest.mark.parametrize("last_line", [
    "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: failed to connect to all addresses",
    "_pickle.UnpicklingError: pickle data was truncated",
    "RuntimeError: NCCL communicator was aborted on rank 3.",
])
def test_the_same_types_naming_the_infrastructure_still_restart(last_line):
    a = run(PROGRESS + TB + last_line + "\n")
    assert a.action.value != "stop_no_retry" and a.domain.value != "application", a.explanation


def test_the_nccl_result_code_under_a_dist_backend_error_decides_over_the_wrapper():
    a = run(PROGRESS + TB + "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:219, invalid usage, NCCL version 2.14.3\n"
            "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n")
    assert a.root_event is not None and a.root_event.signature_id == "nccl.invalid_usage", a.explanation
    assert (a.domain.value, a.action.value) == ("application", "stop_no_retry")


def test_an_mpi_abort_alone_is_a_crash_of_that_rank_and_restarts():
    a = run(PROGRESS + "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n")
    assert (a.category.value, a.action.value) == ("crash", "restart_in_place"), a.explanation


def test_an_mpich_abort_names_its_rank_as_open_mpis_does():
    """MPICH prints the rank as 'process N'; the entry captures it as ``rank_b`` (RE2 refuses a
    repeated group name) and the matcher folds it into ``rank``."""
    for line in ("MPI_ABORT was invoked on rank 5 in communicator MPI_COMM_WORLD\n",
                 "application called MPI_Abort(MPI_COMM_WORLD, 1) - process 5\n"):
        a = run(PROGRESS + line)
        assert a.root_event is not None and a.root_event.signature_id == "mpi.abort", a.explanation
        assert a.culprit_ranks == [5], (line, a.culprit_ranks)


def test_a_watchdog_timeout_thrown_as_a_dist_backend_error_is_a_hang():
    a = run(PROGRESS + "terminate called after throwing an instance of 'c10::DistBackendError'\n"
            "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with "
            "exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
            "OpType=_ALLGATHER_BASE, NumelIn=100, NumelOut=800, Timeout(ms)=600000) ran for 600045 milliseconds "
            "before timing out.\n")
    assert a.root_event is not None and a.root_event.signature_id == "nccl.watchdog_timeout", a.explanation
    assert a.category.value == "hang"
