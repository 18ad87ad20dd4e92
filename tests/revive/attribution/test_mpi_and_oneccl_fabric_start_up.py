"""Round-25 incidents (catalog 2026.12.19): MPI and oneCCL that cannot open the node's fabric.

- MPICH prints an error stack when ``MPI_Init`` fails (``Abort(N) ...: Fatal error in PMPI_Init:
  ..., error stack:`` and its ch4 OFI netmod's ``OFI fi_getinfo() failed (ofi_init.c:...)`` frames):
  no libfabric provider or NIC context could be opened, before the program ran a line of its own.
  The site's MPI / libfabric set-up on the node: stop, it fails the same way on every retry.
- oneCCL's ATL says ``can't find suitable provider`` / ``failed to initialize ATL`` when the
  libfabric provider it was told to use does not work there (a container's small /dev/shm): the
  same, not the generic ``|CCL_ERROR|`` of a collective that failed mid-run.
- Intel's PSM3 provider says ``PSM3 can't open nic unit`` on a host without a NIC it can drive;
  MPI start-up then hangs until someone cancels it."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord


def job(state: str, exit_code: str) -> JobRecord:
    return JobRecord(job_id="71002", nodes=["gpu-node-001", "gpu-node-002"], state=state, exit_code=exit_code)


MPICH_NO_PROVIDER = """\
+ CCL_ATL_TRANSPORT=ofi FI_PROVIDER=shm mpirun -n 2 ./benchmark -l allreduce -d bfloat16
Abort(2138767) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init: Unknown error class, error stack:
MPIDI_OFI_mpi_init_hook(1584):
find_provider(2819)..........: OFI fi_getinfo() failed (ofi_init.c:2819:find_provider:No data available)
Abort(2138767) on node 1 (rank 1 in comm 0): Fatal error in PMPI_Init: Unknown error class, error stack:
MPIDI_OFI_mpi_init_hook(1584):
find_provider(2819)..........: OFI fi_getinfo() failed (ofi_init.c:2819:find_provider:No data available)
"""


def test_mpi_init_that_finds_no_fabric_provider_is_the_sites_mpi_set_up():
    a = attribute(EvidenceBundle(job_log=MPICH_NO_PROVIDER, job=job("FAILED", "1:0")))
    assert (a.category.value, a.domain.value, a.action.value) == ("nccl_error", "system", "stop_no_retry"), a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "mpi.init_failed"
    assert a.culprit_nodes == []  # the error stack does not say the node is broken, only set up wrong


ONECCL_NO_PROVIDER = """\
(RayWorkerVllm pid=7746) 2024:08:21-10:24:26:( 7746) |CCL_ERROR| atl_ofi_helper.cpp:867 atl_ofi_get_prov_list: fi_getinfo error: ret -61, providers 0
(RayWorkerVllm pid=7746) 2024:08:21-10:24:26:( 7746) |CCL_ERROR| atl_ofi_helper.cpp:907 atl_ofi_get_prov_list: can't create providers for name shm
(RayWorkerVllm pid=7746) 2024:08:21-10:24:26:( 7746) |CCL_ERROR| atl_ofi_helper.cpp:1384 atl_ofi_open_nw_provs: can not open network providers
(RayWorkerVllm pid=7746) 2024:08:21-10:24:26:( 7746) |CCL_ERROR| atl_ofi.cpp:243 init: can't find suitable provider
failed to initialize ATL
"""


def test_oneccl_without_a_usable_provider_is_the_nodes_set_up_not_a_failed_collective():
    a = attribute(EvidenceBundle(job_log=ONECCL_NO_PROVIDER, job=job("FAILED", "1:0")))
    assert a.root_event is not None and a.root_event.signature_id == "ccl.ofi_provider_missing", a.explanation
    assert (a.domain.value, a.action.value) == ("system", "stop_no_retry")


def test_a_oneccl_error_mid_run_keeps_its_unknown_cause():
    text = ("epoch 3 step 120 loss 1.82\n"
            "2026:07:02-03:29:05:[1] |CCL_ERROR| worker.cpp:338 ccl_worker_func: worker 0 caught internal "
            "exception: oneCCL: ze_call.cpp:28 do_call: EXCEPTION: ze error at zeCommandQueueExecuteCommandLists, "
            "code: ZE_RESULT_ERROR_UNKNOWN\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0")))
    assert a.root_event is not None and a.root_event.signature_id == "ccl.oneccl_error", a.explanation
    assert (a.domain.value, a.action.value) == ("unknown", "restart_in_place")


PSM3_NO_NIC = """\
+ mpirun -n 2 ./a.out
gpu-node-001:rank0.a.out: Failed to get eth0 (unit 0) cpu set
gpu-node-001:rank0: PSM3 can't open nic unit: 0 (err=23)
gpu-node-001:rank1.a.out: Failed to get eth0 (unit 0) cpu set
gpu-node-001:rank1: PSM3 can't open nic unit: 0 (err=23)
"""


def test_psm3_that_cannot_open_a_nic_is_the_sites_libfabric_even_when_the_job_was_cancelled():
    a = attribute(EvidenceBundle(job_log=PSM3_NO_NIC, job=job("CANCELLED", "0:15")))
    assert a.category.value != "none", a.explanation  # before catalog 2026.12.19: a healthy job
    assert a.root_event is not None and a.root_event.signature_id == "mpi.psm3_nic_open_failed"
    assert (a.domain.value, a.action.value) == ("system", "stop_no_retry")
