"""The corpus dev/test split is deterministic, by source thread, and committed as generated."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import yaml

SPLIT_PY = Path(__file__).resolve().parents[2] / "data" / "corpus" / "split.py"


def _mod():
    spec = importlib.util.spec_from_file_location("corpus_split", SPLIT_PY)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_committed_split_matches_the_rule():
    mod = _mod()
    assert mod.load_split() == mod.compute()


def test_same_thread_same_set_and_enough_test_negatives():
    mod = _mod()
    split = mod.compute()
    by_key: dict[str, set[str]] = {}
    negatives = 0
    for name, s in split.items():
        exp = yaml.safe_load((mod.POOL / name / "expected.yaml").read_text(encoding="utf-8"))
        by_key.setdefault(mod.source_key(exp["source"]), set()).add(s)
        negatives += s == "test" and exp["category"] == "none"
    assert all(len(v) == 1 for v in by_key.values())
    assert negatives >= mod.MIN_TEST_NEGATIVES
    assert mod.source_key("https://github.com/a/b/issues/1#issuecomment-123") == "https://github.com/a/b/issues/1"


def test_first_looks_cover_every_dev_case_and_never_a_test_case():
    """first_look.yaml (what each case's round's engine said before rules were written from it) feeds
    the confidence fit: it must hold every dev case, and no test case (the test set is never scored
    case by case)."""
    mod = _mod()
    split = mod.load_split()
    rows = yaml.safe_load((mod.HERE / "first_look.yaml").read_text(encoding="utf-8"))
    assert set(rows) == {c for c, s in split.items() if s == "dev"}
    assert all(set(r) == {"engine", "raw", "category", "domain", "action"} for r in rows.values())
    assert all(0.0 <= r["raw"] <= 1.0 for r in rows.values())
