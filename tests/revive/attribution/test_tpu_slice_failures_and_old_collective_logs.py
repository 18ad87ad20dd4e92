"""Round-32 incidents (catalog 2026.12.26): a TPU slice's chip failure, NCCL 2.0-2.3's untagged lines,
and PaddlePaddle's start-up line.

- The Cloud TPU runtime's ``Detected failure SLICE_FAILURE_CHIP_DRIVER_ERROR`` is one worker's chip or
  driver: the slice's hardware (MaxText's maxtest guide), drained once the worker is found.
- NCCL before 2.4 printed its error trace as ``host:pid:tid [dev] INFO init.cu:542 -> 2``, without the
  ``NCCL`` tag: still NCCL's system error, not a healthy log (a Horovod job whose bootstrap recv was
  reset by the peer).
- PaddlePaddle's ``init nccl context nranks: N ...`` is a distributed start-up line: a job cancelled with
  its log ending there never trained, its start-up hung."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord


def verdict(text: str, job: JobRecord | None = None) -> tuple[str, str, str, str | None]:
    a = attribute(EvidenceBundle(job_log=text, job=job))
    return a.category.value, a.domain.value, a.action.value, (a.root_event.signature_id if a.root_event else None)


def test_a_tpu_slice_failing_on_a_chip_driver_error_is_the_slices_hardware():
    text = ("I0511 18:17:58.204113     915 session_master.cc:198] Starting TPU session master for 64 workers\n"
            "E0511 18:18:50.796514     915 session_master.cc:505] Session is failing with the following status: "
            "Session master detected TPU session error from worker gpu-node-015.headless-svc:8471.\n"
            "E0511 18:18:50.796852     915 tpunetd_client.cc:311] Detected failure SLICE_FAILURE_CHIP_DRIVER_ERROR "
            "in session e6c885828b538167; Start failure handling\n")
    a = attribute(EvidenceBundle(job_log=text))
    assert (a.category.value, a.domain.value, a.root_event.signature_id) == ("gpu_hardware", "hardware",
                                                                            "tpu.slice_failure_chip_driver")
    # no node is named on the line: the plan says to find it first, never drains a guess
    assert a.culprit_nodes == [] and "not named" in a.explanation


def test_an_untagged_nccl_23_error_trace_is_an_nccl_error_not_a_healthy_log():
    text = ("[1,0]<stdout>:gpu-node-001:2121:2233 [1] include/socket.h:194 WARN Call to recv failed : "
            "Connection reset by peer\n"
            "[1,0]<stdout>:gpu-node-001:2121:2233 [1] INFO transport/net_ib.cu:555 -> 2\n"
            "[1,0]<stdout>:gpu-node-001:2121:2233 [1] INFO bootstrap.cu:169 -> 2\n"
            "[1,0]<stdout>:gpu-node-001:2121:2233 [1] INFO init.cu:542 -> 2\n")
    job = JobRecord(job_id="210", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED", exit_code="1:0")
    assert verdict(text, job) == ("nccl_error", "unknown", "restart_in_place", "nccl.error_trace")


def test_a_paddle_job_cancelled_after_its_nccl_context_init_hung_in_start_up():
    text = ("LAUNCH INFO 2023-03-02 02:01:33,784 training_script: train_with_fleet.py\n"
            "LAUNCH INFO 2023-03-02 02:01:33,784 with_gloo: 0\n"
            "I0302 02:01:36.274989 31267 nccl_context.cc:83] init nccl context nranks: 4 local rank: 0/1 "
            "gpu id: 0/1 ring id: 0/1\n")
    job = JobRecord(job_id="40311", nodes=["gpu-node-001", "gpu-node-002"], state="CANCELLED", exit_code="0:15")
    category, _, action, _ = verdict(text, job)
    assert (category, action) == ("hang", "restart_in_place")
    # the same log from a job that is still running is not yet an incident
    assert verdict(text, JobRecord(job_id="40311", nodes=["gpu-node-001"], state="RUNNING"))[0] == "none"
