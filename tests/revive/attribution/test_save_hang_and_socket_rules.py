"""Rules 3af and 3ag (docs/attribution.md): a hang inside a checkpoint save, and NCCL sockets on
interfaces that do not route between the hosts.

Incidents as they reach Revive: a run goes silent right after ``saving checkpoint at iteration N``
and is cancelled (and, for contrast, Revive's own example job that hangs a few steps after a save
that completed); a faulthandler dump printed right after torchtitan's ``Saving a full checkpoint``;
a two-node job whose NCCL lists docker bridge and veth interfaces before ``ncclSystemError``."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

ONE_NODE = JobRecord(job_id="42", nodes=["gpu-node-001"], state="CANCELLED")
TWO_NODES = JobRecord(job_id="697", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED")
CANCEL = "slurmstepd: error: *** JOB 42 ON gpu-node-001 CANCELLED AT 2024-06-01T13:30:00 ***\n"


def run(text: str, job: JobRecord = ONE_NODE):
    return attribute(EvidenceBundle(job_log=text, job=job))


def _megatron(last: int) -> str:
    return "".join(f"[2024-06-01 10:{i:02d}:00] iteration {i * 10:7d}/ 100000 | consumed samples: {i * 5120} | "
                   f"elapsed time per iteration (ms): 6000.0 | lm loss: 2.{i:03d}\n" for i in range(1, last + 1))


def test_silence_right_after_a_save_start_line_is_the_save_paths_hang():
    text = _megatron(20) + "[2024-06-01 10:20:05] saving checkpoint at iteration     200 to /ckpt\n" + CANCEL
    a = run(text)
    assert (a.category.value, a.domain.value, a.action.value) == ("hang", "application", "stop_no_retry"), \
        a.explanation
    assert "save" in a.explanation


def test_revive_example_hang_after_a_completed_save_is_not_a_save_hang():
    # examples/train.py: "saving checkpoint" then "saved checkpoint", a few more steps, then one rank stops
    lines = [f"2024-06-01T10:{m:02d}:00+00:00 [rank 0 host gpu-node-001] iteration {m} loss 1.{m:02d}"
             for m in range(1, 11)]
    lines += ["2024-06-01T10:10:30+00:00 [rank 0 host gpu-node-001] saving checkpoint at iteration 10",
              "2024-06-01T10:10:31+00:00 [rank 0 host gpu-node-001] saved checkpoint at iteration 10"]
    lines += [f"2024-06-01T10:{m:02d}:00+00:00 [rank 0 host gpu-node-001] iteration {m} loss 1.{m:02d}"
              for m in range(11, 14)]
    a = run("\n".join(lines) + "\n" + CANCEL)
    assert a.category.value == "hang" and a.action.value == "restart_in_place", a.explanation


def test_silence_right_after_a_completed_save_is_not_a_save_hang():
    text = (_megatron(20) + "[2024-06-01 10:20:05] saving checkpoint at iteration     200 to /ckpt\n"
            "[2024-06-01 10:20:40]   successfully saved checkpoint at iteration     200 to /ckpt\n" + CANCEL)
    a = run(text)
    assert a.action.value == "restart_in_place", a.explanation


def test_stack_dump_printed_inside_a_save_is_the_save_paths_hang():
    text = ("[rank0]:2024-03-27 10:14:04,102 - root - INFO - step: 10  loss:  9.6010  memory: 21.40GiB(27.06%)\n"
            "[rank0]:2024-03-27 10:14:04,103 - root - INFO - Saving a full checkpoint at step 10\n"
            "[rank0]:Thread 0x00007f13c65f5400 (most recent call first):\n"
            '[rank0]:  File "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3230 in scatter\n')
    a = run(text)
    assert (a.category.value, a.domain.value, a.action.value) == ("hang", "application", "stop_no_retry"), \
        a.explanation


def test_watchdog_timeout_after_a_completed_save_stays_unknown():
    text = (_megatron(20) + "[2024-06-01 10:20:05] saving checkpoint at iteration     200 to /ckpt\n"
            "[2024-06-01 10:20:40]   successfully saved checkpoint at iteration     200 to /ckpt\n"
            "[rank3]:[E601 10:51:00.123 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=2001, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
            "1800002 milliseconds before timing out.\n")
    a = run(text)
    assert a.category.value == "hang" and a.domain.value == "unknown", a.explanation


SOCKET = """\
gpu-node-001:1201:1201 [0] NCCL INFO NET/Socket : Using [0]bond0:192.168.1.161<0> [1]br-05ab815fa14e:172.19.0.1<0> [2]veth6163fba:fe80::b878:6cff:fe52:abe2%veth6163fba<0>
Traceback (most recent call last):
  File "train.py", line 40, in <module>
    model = DDP(model, device_ids=[local_rank])
RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.10.3
ncclSystemError: System call (socket, malloc, munmap, etc) failed.
"""


def test_nccl_socket_on_docker_bridges_is_the_nodes_network_configuration():
    a = run(SOCKET, TWO_NODES)
    assert (a.category.value, a.domain.value, a.action.value) == ("nccl_error", "system", "stop_no_retry"), \
        a.explanation
    assert "NCCL_SOCKET_IFNAME" in a.explanation


def test_interfaces_listed_one_per_line_after_the_using_line_are_read_too():
    text = SOCKET.replace(" [1]br-05ab815fa14e:172.19.0.1<0> [2]veth6163fba:fe80::b878:6cff:fe52:abe2%veth6163fba<0>",
                          "\n[1]br-05ab815fa14e:172.19.0.1<0>\n[2]veth6163fba:fe80::b878:6cff:fe52:abe2%veth6163fba<0>")
    a = run(text, TWO_NODES)
    assert a.domain.value == "system", a.explanation


def test_routable_interfaces_leave_the_system_error_unknown():
    text = SOCKET.replace(" [1]br-05ab815fa14e:172.19.0.1<0> [2]veth6163fba:fe80::b878:6cff:fe52:abe2%veth6163fba<0>",
                          " [1]ib0:10.10.0.1<0>")
    a = run(text, TWO_NODES)
    assert (a.domain.value, a.action.value) == ("unknown", "restart_in_place"), a.explanation


def test_loopback_only_counts_in_a_multi_node_job():
    text = SOCKET.replace("[0]bond0:192.168.1.161<0> [1]br-05ab815fa14e:172.19.0.1<0> "
                          "[2]veth6163fba:fe80::b878:6cff:fe52:abe2%veth6163fba<0>", "[0]lo:127.0.0.1<0>")
    assert run(text, TWO_NODES).domain.value == "system"
    one = JobRecord(job_id="697", nodes=["gpu-node-001"], state="FAILED")
    assert run(text, one).domain.value == "unknown"
