"""Round-33 incidents (catalog 2026.12.27): a node whose NVLink fabric state is out of sync, and a
checkpoint write that came up short.

- The driver's ``NV_ERR_FABRIC_STATE_OUT_OF_SYNC`` (its cached NVLink fabric state disagrees with the
  fabric manager's) makes NVLS multicast mappings fail (NVSHMEM's ``cuMemMap`` 401): the node's software
  state, fixed by restarting fabric manager or rebooting. It is the one node-software fault besides a
  task stuck in D state that drains the node: the node is named from its kernel log.
- Torch7's ``write error: wrote N blocks instead of M`` while saving is the file system's short write:
  an io_error, not a bare crash."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord


def test_an_nvlink_fabric_state_out_of_sync_drains_the_node_its_kernel_log_names():
    job = JobRecord(job_id="40", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED", exit_code="255:0")
    text = ("/opt/nvshmem/src/host/team/team_internal_nvls.cpp:254: non-zero status: 401 cuMemMap failed to map "
            "274877906944 bytes handle at address: 0x1320000000 offset 0 on device 7\n"
            "/opt/nvshmem/src/host/mem/mem_heap.cpp:1573: non-zero status: 7 Mapping mem size 274877906944 to MC "
            "group 101602722380032 failed\n")
    kernel = {"gpu-node-002": ["[1891044.581319] NVRM: nvCheckOkFailedNoLog: Check failed: NVLink fabric state "
                               "cached by the driver is out of sync [NV_ERR_FABRIC_STATE_OUT_OF_SYNC] (0x00000087) "
                               "returned from status @ mem_multicast_fabric.c:2917"]}
    a = attribute(EvidenceBundle(job_log=text, job=job, kernel_logs=kernel))
    assert (a.category.value, a.domain.value, a.action.value) == ("nvlink", "system", "drain_and_requeue")
    assert a.culprit_nodes == ["gpu-node-002"]


def test_a_short_write_while_saving_is_the_file_systems_error_not_a_crash():
    text = ("[10/20/17 02:14:08 INFO] Saving checkpoint to 'model_epoch3_12.51.t7'...\n"
            "/home/user/torch/install/bin/luajit: /home/user/torch/install/share/lua/5.1/torch/File.lua:210: write "
            "error: wrote 9367499 blocks instead of 31014000 at /home/user/torch/pkg/torch/lib/TH/THDiskFile.c:353\n")
    job = JobRecord(job_id="463", nodes=["gpu-node-001"], state="FAILED", exit_code="1:0")
    a = attribute(EvidenceBundle(job_log=text, job=job))
    assert (a.category.value, a.domain.value, a.action.value) == ("io_error", "unknown", "restart_in_place")
    assert a.root_event is not None and a.root_event.signature_id == "storage.short_write"
