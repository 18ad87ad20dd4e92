"""Node history as evidence (issue #8.4): a CUDA error of unknown cause on a node that had an
earlier hardware incident is that node's GPU failing again; without the history it stays unknown.

The job: 2 nodes × 4 ranks (SLURM_NODELIST order, block layout), rank 5 (gpu-node-008) dies with
``CUDA error: an illegal memory access was encountered`` — ambiguous on its own (an application
bug or a faulting GPU print the same line)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from revive.attribution.engine import attribute
from revive.models import Action, Category, Domain, EvidenceBundle, JobRecord, PriorIncident

CRASH_AT = datetime(2026, 11, 24, 3, 12, 9, tzinfo=UTC)
LOG = "\n".join([
    "SLURM_NODELIST=gpu-node-[007-008]",
    "SLURM_TASKS_PER_NODE=4(x2)",
    "2026-11-24T03:10:01Z [rank0]: iteration 1200/50000 | loss 2.31 | 410 ms/it",
    "2026-11-24T03:11:02Z [rank0]: iteration 1350/50000 | loss 2.29 | 409 ms/it",
    "2026-11-24T03:12:09Z [rank5]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "2026-11-24T03:12:09Z [rank5]: CUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.",
])


def _bundle(history: dict[str, list[PriorIncident]] | None = None) -> EvidenceBundle:
    return EvidenceBundle(job_log=LOG, node_history=history or {},
                          job=JobRecord(job_id="48213", nodes=["gpu-node-007", "gpu-node-008"], state="FAILED"))


def test_without_history_an_illegal_memory_access_names_no_node():
    a = attribute(_bundle())
    assert a.category == Category.cuda_error
    assert a.domain != Domain.hardware
    assert a.culprit_nodes == []
    assert a.action != Action.drain_and_requeue


def test_earlier_ecc_incident_on_the_rank_node_makes_it_hardware_and_names_the_node():
    prior = PriorIncident(category=Category.gpu_memory_ecc, domain=Domain.hardware,
                          at=CRASH_AT - timedelta(days=3), incident_id="inc-0412", reason="Xid 48 DBE on 0000:3b:00")
    a = attribute(_bundle({"gpu-node-008": [prior]}))
    assert a.domain == Domain.hardware
    assert a.culprit_nodes == ["gpu-node-008"]
    assert a.culprit_ranks == [5]
    assert a.action == Action.drain_and_requeue
    assert "inc-0412" in a.explanation and "gpu_memory_ecc" in a.explanation


def test_history_on_another_node_does_not_blame_the_failing_one():
    prior = PriorIncident(category=Category.gpu_hardware, domain=Domain.hardware, at=CRASH_AT - timedelta(days=1))
    a = attribute(_bundle({"gpu-node-007": [prior]}))
    assert a.domain != Domain.hardware
    assert a.culprit_nodes == []


def test_old_history_beyond_the_window_is_not_evidence():
    prior = PriorIncident(category=Category.gpu_hardware, domain=Domain.hardware, at=CRASH_AT - timedelta(days=90))
    a = attribute(_bundle({"gpu-node-008": [prior]}))
    assert a.domain != Domain.hardware
    assert a.culprit_nodes == []


def test_an_earlier_application_incident_is_not_hardware_evidence():
    prior = PriorIncident(category=Category.oom_gpu, domain=Domain.application, at=CRASH_AT - timedelta(days=1))
    a = attribute(_bundle({"gpu-node-008": [prior]}))
    assert a.domain != Domain.hardware


def test_a_drain_reason_without_a_time_counts():
    prior = PriorIncident(category=Category.gpu_hardware, reason="operator drain: 'GPU 3 XID 79'")
    a = attribute(_bundle({"gpu-node-008": [prior]}))
    assert a.domain == Domain.hardware and a.culprit_nodes == ["gpu-node-008"]
    assert "XID 79" in a.explanation


def test_history_never_turns_an_application_cuda_error_into_hardware():
    log = LOG.replace("CUDA error: an illegal memory access was encountered",
                      "CUDA error: device-side assert triggered")
    prior = PriorIncident(category=Category.gpu_hardware, domain=Domain.hardware, at=CRASH_AT - timedelta(days=1))
    b = _bundle({"gpu-node-008": [prior]})
    b.job_log = log
    a = attribute(b)
    assert a.domain == Domain.application
    assert a.culprit_nodes == []


def test_history_arrives_through_bundle_json_shape():
    raw = {"job_log": LOG, "node_history": {"gpu-node-008": [
        {"category": "gpu_memory_ecc", "domain": "hardware", "at": "2026-11-21T00:00:00Z", "incident_id": "inc-9"}]}}
    a = attribute(EvidenceBundle.model_validate(raw))
    assert a.culprit_nodes == ["gpu-node-008"]


def test_a_case_folder_carries_node_history_in_bundle_json(tmp_path):
    import json

    from revive.attribution.cases import load_case

    (tmp_path / "job.log").write_text(LOG + "\n")
    (tmp_path / "slurm.json").write_text(json.dumps({"job_id": 48213, "nodes": ["gpu-node-007", "gpu-node-008"],
                                                     "state": "FAILED"}))
    (tmp_path / "bundle.json").write_text(json.dumps({"node_history": {"gpu-node-008": [
        {"category": "gpu_hardware", "domain": "hardware", "at": "2026-11-20T08:00:00Z", "incident_id": "inc-77",
         "reason": "Xid 79 fallen off the bus"}]}}))
    a = attribute(load_case(tmp_path))
    assert a.culprit_nodes == ["gpu-node-008"] and a.action == Action.drain_and_requeue
    assert "inc-77" in a.explanation


def test_malformed_node_history_is_a_note_not_a_crash(tmp_path):
    import json

    from revive.attribution.cases import load_case

    (tmp_path / "job.log").write_text(LOG + "\n")
    (tmp_path / "bundle.json").write_text(json.dumps({"node_history": {"gpu-node-008": [{"category": "melted"}]}}))
    b = load_case(tmp_path)
    assert any("bundle.json invalid" in n for n in b.notes)
    a = attribute(b)
    assert a.domain != Domain.hardware
