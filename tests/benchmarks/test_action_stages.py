"""``benchmarks/action_stages.py`` splits an incident's time to first action by stage, from the
recorded histories in ``tests/histories/`` (the same JSON ``bench_mttd`` fetches from Temporal)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import action_stages  # noqa: E402

H = ROOT / "tests" / "histories"


def _load(name: str) -> tuple[dict, dict | None]:
    inc = json.loads((H / f"{name}.json").read_text())
    rb = H / f"{name}.runbook.json"
    return inc, json.loads(rb.read_text()) if rb.exists() else None


def _start(inc: dict) -> float:
    t = inc["events"][0]["eventTime"]
    return datetime.fromisoformat(t[:26].rstrip("Z") + "+00:00").timestamp()


@pytest.mark.parametrize("tag", ["v8ckpt", "v9fast"])
def test_an_auto_xid79_incident_splits_into_stages_that_add_up_to_its_first_drain(tag):
    inc, rb = _load(f"fake-7-20261129T150400-a0-gpu-auto-recovered-{tag}")
    fault = _start(inc) - 0.25  # a fault a quarter second before the incident started
    st = action_stages.stages(inc, rb, fault)
    parts = [st[k] for k in action_stages.STAGES]
    assert all(p is not None and p >= 0 for p in parts), st
    assert abs(sum(parts) - st["action_s"]) < 1e-6
    assert abs(st["detect_s"] - 0.25) < 0.01
    names = [a[0] for a in st["activities"]]
    assert names[-1] == "drain_nodes" and "gather_evidence" in names and "requeue_job" not in names
    assert 0 < st["wft_s"] < st["action_s"]


def test_the_fixed_settle_wait_shows_in_the_old_gather_stage_and_not_in_the_new():
    old = action_stages.stages(*_load("fake-7-20261129T150400-a0-gpu-auto-recovered-v8ckpt"), None)
    new = action_stages.stages(*_load("fake-7-20261129T150400-a0-gpu-auto-recovered-v9fast"), None)
    assert old["gather_s"] >= 2.0 > new["gather_s"]  # the fake job had already FAILED: no wait
    assert [a[0] for a in old["activities"]].count("checkpoint_loop") == 2
    assert [a[0] for a in new["activities"]].count("checkpoint_loop") == 1


def test_an_incident_without_a_runbook_has_no_act_stage_and_nothing_raises():
    inc, rb = _load("fake-7-20261129T150400-a0-app-stopped-v9fast")
    st = action_stages.stages(inc, rb, None)
    assert rb is None and st["act_s"] is None and st["action_s"] is None and st["detect_s"] is None
    assert st["attribute_s"] is not None
    assert action_stages.stages({"events": [{"eventType": 7, "eventTime": None}]}, {}, 1.0)["gather_s"] is None
