"""Engine scenarios from tests/data/signatures/scenarios.yaml (Revive's demo job, multi-rank logs
where the root is not the first error printed, Slurm states, triggers, kernel logs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from revive.attribution import engine
from revive.attribution.engine import attribute
from revive.models import EvidenceBundle

DATA = Path(__file__).resolve().parents[2] / "data" / "signatures" / "scenarios.yaml"
SCENARIOS = yaml.safe_load(DATA.read_text())["scenarios"]


def _bundle(s: dict) -> EvidenceBundle:
    fields = {k: v for k, v in s.items() if k not in ("id", "expected")}
    return EvidenceBundle.model_validate(fields)


@pytest.mark.parametrize("s", SCENARIOS, ids=[s["id"] for s in SCENARIOS])
def test_scenario(s):
    a = attribute(_bundle(s))
    e = s["expected"]
    got = (a.category.value, a.domain.value, a.culprit_nodes, a.action.value)
    assert got == (e["category"], e["domain"], e["culprit_nodes"], e["action"]), a.explanation
    if "culprit_ranks" in e:
        assert a.culprit_ranks == e["culprit_ranks"]
    if "root_signature" in e:
        assert a.root_event is not None and a.root_event.signature_id == e["root_signature"]
    if "gpus_pci" in e:
        assert [g.pci_bus_id for g in a.gpus] == e["gpus_pci"]
    if e.get("node_notes"):
        assert a.node_notes
    if "explanation_contains" in e:
        assert e["explanation_contains"] in a.explanation
    assert a.explanation
    if a.category.value != "none":
        assert a.root_event is not None or a.category.value in ("straggler",)
    # conservative guard: a drain always has hardware domain, or is a node-local system fault that
    # only a drain clears (a task stuck in D state on a wedged mount) with the node named
    if a.action.value == "drain_and_requeue":
        assert a.domain.value == "hardware" or (
            a.root_event is not None and a.root_event.signature_id in engine._SYSTEM_DRAIN and a.culprit_nodes)
