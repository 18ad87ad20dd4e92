"""Rules 3ao, 3ap and 3n's bars (docs/attribution.md): what the lines around a collective say.

Incidents as they reach Revive: an evaluation harness whose rank finished generating and then waited
out the 30-minute timeout for the others; rank 0 building a test set while the others sit in their
first all-reduce; nccl-tests that finished and only warned while tearing its communicator down; a
DeepSpeed run in a container killed by SIGBUS."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

ONE_NODE = JobRecord(job_id="7003", nodes=["gpu-node-001"], state="FAILED")
WATCHDOG = ("[E ProcessGroupNCCL.cpp:474] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800668 milliseconds before timing "
            "out.\n")


def run(text: str):
    return attribute(EvidenceBundle(job_log=text, job=ONE_NODE))


def test_a_rank_that_finished_its_loop_and_waited_out_the_timeout_is_uneven_work():
    a = run("Running generate_until requests:  12%|█▏        | 40/330 [04:51<35:13,  7.29s/it]\n"
            "Running generate_until requests: 100%|██████████| 330/330 [31:02<00:00,  5.64s/it]\n" + WATCHDOG)
    assert (a.category.value, a.domain.value, a.action.value) == ("hang", "application", "stop_no_retry"), a.explanation
    assert "finished loop" in a.explanation


def test_a_timeout_in_the_middle_of_a_loop_stays_a_hang_of_unknown_cause():
    a = run("Epoch 0:   6%|██       | 32038/500150 [6:28:41<94:39:19,  1.37it/s, loss=2.6]\n" + WATCHDOG)
    assert (a.category.value, a.domain.value, a.action.value) == ("hang", "unknown", "restart_in_place"), a.explanation


def test_the_first_all_reduce_timing_out_while_rank_0_prepares_the_test_set_is_the_jobs_configuration():
    a = run("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/3\n"
            "Preparing test set...:  45%|████▍     | 30/67 [27:15<23:13, 37.65s/it]\n" + WATCHDOG)
    assert (a.domain.value, a.action.value) == ("application", "stop_no_retry"), a.explanation


def test_nccl_warnings_from_a_communicator_teardown_after_the_work_are_no_incident():
    log = ("  8589934592    2147483648     float    none       0    31602  271.82  271.82      0\n"
           "# Avg bus bandwidth    : 148.6\n"
           "gpu-node-001:438416:438416 [0] transport/nvls.cc:130 NCCL WARN Cuda failure 1 'invalid argument'\n"
           "gpu-node-001:438416:438416 [0] init.cc:2149 NCCL WARN commReclaim: cleanup comm 0x555556fd69f0 rank 0 "
           "failed in destroy/abort, error 1\n")
    a = attribute(EvidenceBundle(job_log=log))
    assert a.category.value == "none", a.explanation
    assert "teardown" in a.explanation
    # the same NVLS failure with no teardown after it is a fault of the run
    b = attribute(EvidenceBundle(job_log=log.rsplit("gpu-node-001:438416:438416 [0] init.cc", 1)[0]))
    assert b.category.value == "nccl_error", b.explanation


def test_sigbus_from_the_launcher_is_shared_memory_running_out():
    a = run("[2023-07-20 08:31:21,406] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed\n"
            "[2023-07-20 08:31:38,117] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1182\n"
            "[2023-07-20 08:31:38,119] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'main.py', "
            "'--local_rank=3'] exits with return code = -7\n")
    assert (a.category.value, a.domain.value, a.action.value) == ("oom_host", "system", "stop_no_retry"), a.explanation


def test_launch_configuration_errors_stop():
    for line in ("train.py: error: unrecognized arguments: --local-rank=0",
                 "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                 "address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)."):
        a = run(line + "\n")
        assert (a.category.value, a.domain.value, a.action.value) == ("app_bug", "application", "stop_no_retry"), line


def test_an_exception_the_interpreter_ignored_is_no_incident():
    a = attribute(EvidenceBundle(job_log=(
        "Epochs 5/15. Running Loss: 0.0001: 100%\n"
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f0b2c1e8d30>\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/torch/utils/data/dataloader.py", line 1466, in __del__\n'
        "    self._shutdown_workers()\n"
        "AssertionError: can only join a child process\n"
        "Epochs 6/15. Running Loss: 0.0001: 100%\n")))
    assert a.category.value == "none", a.explanation
    assert "Exception ignored" in a.explanation
    # the same exception raised by the program's own traceback is the program's
    b = run("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
            "AssertionError: can only join a child process\n")
    assert b.category.value == "app_bug", b.explanation


def test_nccl_setup_errors_of_the_cluster_network_stop():
    for line in ("gpu-node-001:41388:41526 [0] register_mr_buffers:544 NCCL WARN NET/OFI Unable to register memory "
                 "(type = 2) for device 0. RC: -22, Error: Invalid argument",
                 "gpu-node-001:1:2 [0] misc/socket.cc:484 NCCL WARN ncclSocketInit: connecting to address with "
                 "family 0 is neither AF_INET(2) nor AF_INET6(10)"):
        a = run(line + "\n")
        assert (a.category.value, a.domain.value, a.action.value) == ("nccl_error", "system", "stop_no_retry"), line


def test_nccl_sockets_on_an_ipv4_link_local_interface_are_the_network_configuration():
    a = run("worker-0:412:412 [0] NCCL INFO NET/Socket : Using [0]enp73s0:10.0.216.156<0> "
            "[1]pod-id-link0:169.254.170.23<0>\n"
            "RuntimeError: NCCL error: remote process exited or there was a network error\n")
    assert (a.domain.value, a.action.value) == ("system", "stop_no_retry"), a.explanation


def test_a_job_cancelled_while_still_in_its_distributed_start_up_hung_there():
    job = JobRecord(job_id="88213", nodes=["gpu-node-001", "gpu-node-002"], state="CANCELLED")
    log = "".join(f"[default{r}]:gpu-node-00{1 + r // 8}:2170{r}:2176{r} [{r % 8}] NCCL INFO comm 0x12{r} rank {r} "
                  f"nranks 16 cudaDev {r % 8} busId 7000 - Init COMPLETE\n" for r in range(16))
    a = attribute(EvidenceBundle(job_log=log, job=job))
    assert (a.category.value, a.action.value) == ("hang", "restart_in_place"), a.explanation
    assert "cancellation" in a.explanation.lower()
    # a cancelled run that trained is not this rule's
    b = attribute(EvidenceBundle(job_log="step 10/1000 loss 2.31\nstep 20/1000 loss 2.10\n" + log, job=job))
    assert "start-up" not in b.explanation, b.explanation
