"""Rules 3av (any signal exit after a watchdog timeout) and round 14's catalog entries (docs/attribution.md).

Incidents as they reach Revive: a DDP job hangs on its first collective, the ProcessGroupNCCL heartbeat
monitor terminates the rank, and the launcher then SIGKILLs what is left (the shell prints ``Killed``):
the verdict is the hang, not a crash. A Gloo process group whose peers advertise a loopback address
(the hostname resolves to 127.0.1.1) and an NCCL topology file that does not describe the node are the
site's configuration: system, stop. A SIGKILL with no watchdog before it is still a crash of its own."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

TWO_NODES = JobRecord(job_id="8101", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED")


def run(text: str, job: JobRecord | None = None):
    return attribute(EvidenceBundle(job_log=text, job=job))


HEARTBEAT_THEN_KILLED = """\
All distributed processes registered. Starting with 2 processes
Epoch 0:   0%|          | 0/1030 [00:00<?, ?it/s]
[rank1]:[E513 12:38:14.493976596 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg) Rank 1] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.
[rank1]:[F513 12:46:14.495035780 ProcessGroupNCCL.cpp:1614] [PG ID 0 PG GUID 0(default_pg) Rank 1] Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.
[rank: 1] Child process with PID 8273 terminated with code -6. Forcefully terminating all other processes to avoid zombies
Killed
"""


def test_the_launchers_sigkill_after_a_watchdog_hang_is_the_hangs_teardown():
    a = run(HEARTBEAT_THEN_KILLED)
    assert a.category.value == "hang", a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "nccl.heartbeat_timeout", a.explanation


def test_the_launchers_minus6_after_the_old_watchdog_format_is_the_watchdogs_abort():
    text = (
        "[E ProcessGroupNCCL.cpp:916] [Rank 3] NCCL watchdog thread terminated with exception: [Rank 3] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=235, OpType=BROADCAST, NumelIn=768, NumelOut=768, "
        "Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out.\n"
        "[2024-11-18 10:34:05,102] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'finetune.py', "
        "'--local_rank=3'] exits with return code = -6\n")
    a = run(text)
    assert a.category.value == "hang", a.explanation


def test_a_launcher_signal_alone_stays_a_crash():
    a = run("[2024-11-18 10:34:05,102] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'finetune.py'] "
            "exits with return code = -6\n")
    assert a.category.value == "crash", a.explanation


def test_a_sigkill_with_no_watchdog_before_it_stays_a_crash():
    a = run("Epoch 0:   5%|          | 50/1030 [00:40<13:00, 1.25it/s]\nKilled\n")
    assert (a.category.value, a.domain.value) == ("crash", "unknown"), a.explanation


def test_a_sigkill_before_the_first_watchdog_line_is_not_its_teardown():
    lines = HEARTBEAT_THEN_KILLED.splitlines()
    # the process was killed first; the watchdog line comes later (another rank noticing the loss)
    text = "\n".join(lines[:2] + ["Killed"] + lines[2:4]) + "\n"
    a = run(text)
    assert a.category.value == "crash", a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "host.killed", a.explanation


GLOO_LOOPBACK = """\
INFO 08-15 03:12:02 [parallel_state.py:1165] world_size=16 rank=8 local_rank=0 distributed_init_method=tcp://10.0.12.34:39511 backend=nccl
RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152]
  timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:41263
  (rank=8, size=16, local=[127.0.0.1])
RuntimeError: Engine core initialization failed
"""


def test_gloo_peers_on_loopback_are_the_nodes_name_resolution():
    a = run(GLOO_LOOPBACK, TWO_NODES)
    assert (a.category.value, a.domain.value, a.action.value) == ("crash", "system", "stop_no_retry"), a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "gloo.loopback_peer"


def test_gloo_refused_by_a_routable_peer_is_not_blamed_on_name_resolution():
    a = run(GLOO_LOOPBACK.replace("remote=[127.0.0.1]", "remote=[10.0.12.35]"), TWO_NODES)
    assert a.root_event is None or a.root_event.signature_id != "gloo.loopback_peer", a.explanation
    assert a.domain.value != "system" or a.action.value != "stop_no_retry", a.explanation


TOPO_FILE = """\
gpu-node-005:2196:2196 [1] NCCL INFO NCCL_TOPO_FILE set by environment to /opt/amazon/ofi-nccl/share/aws-ofi-nccl/xml/p5.48xl-topo.xml
gpu-node-005:2196:2275 [1] graph/xml.h:101 NCCL WARN Attribute arch of node cpu not found
gpu-node-005:2196:2275 [1] NCCL INFO graph/topo.cc:690 -> 3
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5
ncclInternalError: Internal check failed.
"""


def test_a_topology_file_that_does_not_describe_the_node_is_the_sites_and_stops():
    a = run(TOPO_FILE)
    assert (a.category.value, a.domain.value, a.action.value) == ("nccl_error", "system", "stop_no_retry"), a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "nccl.topo_xml_attr"


def test_the_internal_error_alone_stays_unknown():
    a = run("\n".join(TOPO_FILE.splitlines()[3:]) + "\n")
    assert a.domain.value == "unknown", a.explanation
