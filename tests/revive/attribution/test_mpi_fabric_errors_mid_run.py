"""Round-27 incidents (catalog 2026.12.21): MPI jobs on HPC fabrics (Slingshot CXI) that fail mid-run.

- MPICH's OFI netmod reports an undeliverable message as ``OFI poll failed (...Input/output
  error...)``: libfabric's errno, not a file system's; the job's collective transport failed
  (cause unknown from the line: restart). Before catalog 2026.12.21 the bare ``Input/output error``
  made it an ``io_error``.
- Any other MPICH error stack (``Fatal error in PMPI_Waitall: ..., error stack:``) is an MPI failure;
  only ``MPI_Init``'s is the site's set-up (stop).
- libcxi's ``cxil_map: write error`` (a buffer the NIC could not map) and Open MPI's ``failed to
  register your buffer`` are the transport's error, not a bare crash.
- Cray MPICH asked for GPU support by a binary built without the GTL library is the program's
  build: stop."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord


def job(exit_code: str = "255:0") -> JobRecord:
    return JobRecord(job_id="73001", nodes=["gpu-node-035", "gpu-node-036"], state="FAILED", exit_code=exit_code)


def verdict(text: str) -> tuple[str, str, str, str | None]:
    a = attribute(EvidenceBundle(job_log=text, job=job()))
    return a.category.value, a.domain.value, a.action.value, (a.root_event.signature_id if a.root_event else None)


STEPS = "".join(f"STEP {i:5d} TIME = 1.0e-13 DT = 2.0e-16 WALLTIME = {0.5 * i:.2f} s\n" for i in range(1, 6))


def test_an_undeliverable_mpi_message_is_the_fabrics_error_not_the_file_systems():
    text = STEPS + (
        "MPICH ERROR [Rank 8281] [job id 1410467.0] [Wed Aug 23 06:05:55 2023] [gpu-node-036] - Abort(136982671) "
        "(rank 8281 in comm 0): Fatal error in PMPI_Waitall: Other MPI error, error stack:\n"
        "PMPI_Waitall(339)..............: MPI_Waitall(count=26, req_array=0x1006e9b0, status_array=0xfefafb0) failed\n"
        "MPIDI_OFI_handle_cq_error(1062): OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:Input/output "
        "error - UNDELIVERABLE)\n"
        "srun: error: gpu-node-036: task 8281: Exited with exit code 255\n")
    category, domain, action, root = verdict(text)
    assert category == "nccl_error" and category != "io_error"
    assert root == "mpi.ofi_completion_error"
    assert (domain, action) == ("unknown", "restart_in_place")  # mid-run: not MPI_Init's set-up (stop)


def test_a_failed_mpi_call_mid_run_is_an_mpi_failure_with_an_unknown_cause():
    text = STEPS + "Rank 12 aborted with code 1: Fatal error in internal_Probe: Other MPI error, error stack:\n"
    assert verdict(text) == ("nccl_error", "unknown", "restart_in_place", "mpi.fatal_error")


def test_a_buffer_the_slingshot_nic_could_not_map_is_the_transports_error_not_a_bare_crash():
    text = ("# OSU MPI-CUDA Bi-Directional Bandwidth Test v7.5.2\n"
            "# Size      Bandwidth (MB/s)        Validation\n"
            "cxil_map: write error\n"
            "cxil_map: write error\n"
            "[gpu-node-035:00000] *** An error occurred in MPI_Irecv\n")
    category, _, action, root = verdict(text)
    assert (category, action, root) == ("nccl_error", "restart_in_place", "cxi.map_failed")


def test_cray_mpich_gpu_support_without_the_gtl_library_is_the_programs_build():
    text = ("MPICH ERROR [Rank 0] [job id 410301.1] [Thu Feb 13 12:42:18 2025] [gpu-node-035] - Abort(-1) (rank 0 "
            "in comm 0): MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not linked\n"
            " (Other MPI error)\n"
            "srun: error: gpu-node-035: task 0: Exited with exit code 255\n")
    assert verdict(text) == ("app_bug", "application", "stop_no_retry", "cray_mpich.gtl_not_linked")


def test_mindspore_asking_for_a_gpu_the_node_lacks_stops_instead_of_passing_as_healthy():
    text = ("[INFO] DEVICE [mindspore/ccsrc/runtime/hardware/gpu/gpu_device_context.cc:90] Initialize] Start "
            "initializing NCCL communicator for device 1\n"
            "[ERROR] DEVICE [mindspore/ccsrc/runtime/device/gpu/cuda_driver.cc:245] SetDevice] SetDevice for id:7 "
            "failed, ret[101], invalid device ordinal. Please make sure that the 'device_id' set in context is in "
            "the range:[0, total number of GPU).\n")
    category, _, action, root = verdict(text)
    assert category != "none"  # before catalog 2026.12.21: no incident at all
    assert (action, root) == ("stop_no_retry", "cuda.invalid_device")
