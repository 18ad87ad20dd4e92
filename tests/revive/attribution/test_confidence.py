"""Calibrated confidence and the policy floor (issue #8)."""

from __future__ import annotations

from revive.attribution import calibrate, engine
from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord
from revive.signatures.matcher import Matcher, default_matcher, load_catalog

XID79 = "Nov 29 10:00:00 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."


def _matcher_with(table: list[dict]) -> Matcher:
    cat = load_catalog()
    cat["confidence_calibration"] = {"table": table}
    return Matcher(cat)


def _xid_bundle(nodes: list[str], kernel_key: str | None) -> EvidenceBundle:
    line = XID79 if kernel_key else XID79.replace("node2 ", "")
    return EvidenceBundle(job_log="step 1 | loss 1.0 | 0.3 s/step\nRuntimeError: CUDA error: unknown error\n",
                          kernel_logs={kernel_key or "": [line]},
                          job=JobRecord(job_id="1", nodes=nodes, state="FAILED"))


def test_min_confidence_is_a_module_constant():
    assert engine.MIN_CONFIDENCE == 0.5


def test_fit_is_monotone_and_bounded():
    pairs = [(0.3, False)] * 5 + [(0.3, True)] + [(0.5, True)] * 3 + [(0.5, False)] * 3 + [(0.9, True)] * 8
    table = calibrate.fit(pairs)
    vals = [r["confidence"] for r in table]
    assert vals == sorted(vals)
    assert all(0.05 <= v <= 0.97 for v in vals)
    assert table[0]["raw_min"] == 0.0
    assert calibrate.apply(table, 0.95) == vals[-1]
    assert calibrate.apply([], 0.42) == 0.42


def test_default_catalog_carries_a_fitted_table():
    assert default_matcher().calibration, "revive/signatures/catalog/calibration.yaml missing"


def test_high_confidence_drain_stays_a_drain():
    a = attribute(_xid_bundle(["node1", "node2"], "node2"), _matcher_with([{"raw_min": 0.0, "confidence": 0.9}]))
    assert a.action.value == "drain_and_requeue" and a.culprit_nodes == ["node2"]
    assert a.confidence == 0.9


def test_low_confidence_never_drains_requeues_without_the_named_node():
    a = attribute(_xid_bundle(["node1", "node2"], "node2"), _matcher_with([{"raw_min": 0.0, "confidence": 0.3}]))
    assert a.confidence == 0.3
    assert a.action.value == "requeue_exclude_nodes"
    assert a.culprit_nodes == ["node2"]
    assert "below the policy minimum" in a.explanation


def test_low_confidence_without_a_node_escalates():
    b = _xid_bundle(["node1", "node2"], None)
    b.kernel_logs = {}
    b.job_log = "step 1 | loss 1.0 | 0.3 s/step\n" + "uncorrectable ECC error encountered\n"
    a = attribute(b, _matcher_with([{"raw_min": 0.0, "confidence": 0.2}]))
    assert a.action.value == "escalate"
    assert a.culprit_nodes == []
