"""Every folder of tests/data/cases (copied from the shared cases) is a test against expected.yaml."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from revive.attribution.cases import load_case
from revive.attribution.engine import attribute

CASES = Path(__file__).resolve().parents[2] / "data" / "cases"
FOLDERS = sorted(d for d in CASES.iterdir() if (d / "expected.yaml").exists())


def test_cases_present():
    assert len(FOLDERS) >= 17


@pytest.mark.parametrize("case", FOLDERS, ids=[d.name for d in FOLDERS])
def test_case(case: Path):
    exp = yaml.safe_load((case / "expected.yaml").read_text())
    a = attribute(load_case(case))
    assert a.category.value == exp["category"], a.explanation
    assert a.domain.value == exp["attribution"], a.explanation
    assert sorted(a.culprit_nodes) == sorted(exp.get("culprit_nodes") or []), a.explanation
    assert a.action.value == exp["recommended_action"], a.explanation
    # evidence is cited for every incident
    if exp["category"] != "none":
        assert a.explanation
        assert a.root_event is not None or exp["category"] == "straggler"


@pytest.mark.parametrize("case", FOLDERS, ids=[d.name for d in FOLDERS])
def test_case_ranks(case: Path):
    exp = yaml.safe_load((case / "expected.yaml").read_text())
    a = attribute(load_case(case))
    assert sorted(a.culprit_ranks) == sorted(exp.get("culprit_ranks") or [])


def test_accuracy_report_script_runs(capsys):
    import importlib.util

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "accuracy_cases.py"
    spec = importlib.util.spec_from_file_location("accuracy_cases", script)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    res = mod.evaluate(CASES)
    assert res.cases == len(FOLDERS)
    assert res.category == res.domain == res.action == res.cases, res.misses
    assert res.culprit_hit == res.culprit_total and res.false_incidents == 0, res.misses
    assert res.line().startswith(f"BENCH accuracy set={CASES.name} cases={res.cases} category=1.000")


def test_accuracy_report_refuses_verbose_test_set():
    import importlib.util

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "accuracy_cases.py"
    spec = importlib.util.spec_from_file_location("accuracy_cases", script)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    assert mod.main(["-v", "--set", "test"]) == 2
    with pytest.raises(ValueError):
        mod.evaluate(set_name="test", verbose=True)
