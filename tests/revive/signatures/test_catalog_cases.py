"""Data-driven signature cases (tests/data/signatures/<family>.yaml) and catalog hygiene."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from revive.models import Action, Category, Domain
from revive.signatures import matcher as matcher_mod
from revive.signatures.matcher import Matcher, default_matcher, load_catalog, scan_text

DATA = Path(__file__).resolve().parents[2] / "data" / "signatures"
FAMILY_FILES = sorted(p for p in DATA.glob("*.yaml") if p.name != "scenarios.yaml")


def _cases():
    for f in FAMILY_FILES:
        doc = yaml.safe_load(f.read_text())
        for c in doc["cases"]:
            yield pytest.param(c, id=f"{doc['family']}:{c['id']}")


def _check(m: Matcher, case: dict) -> None:
    got = m.match(case["text"])
    exp = case["expected"]
    if not exp:
        assert got == [], f"expected no match, got {[g.id for g in got]}"
        return
    ids = [g.id for g in got]
    assert exp["id"] in ids, f"expected {exp['id']} in {ids}"
    sm = next(g for g in got if g.id == exp["id"])
    for attr in ("category", "domain", "role", "action"):
        if attr in exp:
            assert str(getattr(sm, attr)) == exp[attr], f"{attr}: {getattr(sm, attr)} != {exp[attr]}"
    for k, v in (exp.get("fields") or {}).items():
        assert sm.fields.get(k) == str(v), f"field {k}: {sm.fields.get(k)!r} != {v!r}"
    for absent in case.get("absent") or []:
        assert absent not in ids


@pytest.mark.parametrize("case", list(_cases()))
def test_signature_case_re2(case):
    _check(default_matcher(), case)


@pytest.fixture(scope="module")
def pure_python_matcher():
    return Matcher(use_re2=False)


@pytest.mark.parametrize("case", list(_cases()))
def test_signature_case_pure_python_fallback(case, pure_python_matcher):
    _check(pure_python_matcher, case)


def test_every_family_has_positive_and_negative_cases():
    fams = {e["family"] for e in load_catalog()["signatures"]}
    seen: dict[str, tuple[int, int]] = {}
    for f in FAMILY_FILES:
        doc = yaml.safe_load(f.read_text())
        pos = sum(1 for c in doc["cases"] if c["expected"])
        neg = sum(1 for c in doc["cases"] if not c["expected"])
        seen[doc["family"]] = (pos, neg)
    for fam in fams - {"benign"}:
        assert fam in seen, f"no test file for family {fam}"
        assert seen[fam][0] > 0 and seen[fam][1] > 0, fam


def test_every_root_or_cascade_signature_has_a_positive_case():
    m = default_matcher()
    hit: set[str] = set()
    for f in FAMILY_FILES:
        for c in yaml.safe_load(f.read_text())["cases"]:
            hit.update(g.id for g in m.match(c["text"]))
    missing = [s.id for s in m.signatures if s.role != "benign" and s.id not in hit]
    assert not missing, missing


def test_catalog_entries_are_well_formed():
    cat = load_catalog()
    assert cat.get("version")
    ids = set()
    for e in cat["signatures"]:
        assert e["id"] not in ids
        ids.add(e["id"])
        Category(e["category"])
        Domain(e["domain"])
        Action(e["action"])
        assert e["role"] in ("root", "cascade", "benign")
        assert e["prefilter"] and all(isinstance(x, str) and x for x in e["prefilter"])
        assert e.get("source"), e["id"]
        groups = set(re.compile(e["regex"]).groupindex)
        for f in e.get("fields") or []:
            assert f in groups, f"{e['id']}: field {f} is not a named group"
    assert any("Xid" in (e.get("source") or "") and "r5" in e["source"] for e in cat["signatures"])
    hw = {h["id"] for h in cat["hardware_typical"]}
    assert {"xid.event", "sxid.event", "cuda.ecc_uncorrectable", "cuda.unknown_error"} <= hw


def test_catalog_regexes_compile_in_re2_subset():
    assert matcher_mod.HAVE_RE2, "google-re2 is a dependency: the catalog must compile under RE2"
    import re2

    for e in load_catalog()["signatures"]:
        re2.compile(e["regex"])  # raises on backrefs / lookaround
        assert "(?=" not in e["regex"] and "(?!" not in e["regex"] and "(?<=" not in e["regex"]


def test_prefilter_literal_is_required_for_every_positive_case():
    """A positive case's line must contain one of the signature's prefilter literals."""
    m = default_matcher()
    for f in FAMILY_FILES:
        for c in yaml.safe_load(f.read_text())["cases"]:
            if c["expected"]:
                sig = m.by_id[c["expected"]["id"]]
                assert any(lit in c["text"] for lit in sig.prefilter), c["id"]


def test_default_matcher_is_cached():
    assert default_matcher() is default_matcher()


def test_scan_text_reports_line_numbers():
    text = "ok\nNVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\nfine\nsrun: error: node2: task 1: Killed\n"
    got = [(n, sm.id) for n, sm in scan_text(text)]
    assert (2, "xid.event") in got and (4, "host.killed") in got


def test_scan_bytes_matches_scan_text():
    m = default_matcher()
    lines = ["iteration 1/10 | step_time_ms 20"] * 50 + ["[rank3]: OSError: [Errno 28] No space left on device"]
    lines += ["NCCL INFO Channel 00"] * 10 + ["srun: error: Node failure on node9"]
    text = "\n".join(lines) + "\n"
    a = [(n, s.id) for n, s in m.scan_text(text)]
    b = [(n, s.id) for n, s in m.scan_bytes(text.encode())]
    assert a == b and len(a) == 2


def test_scan_file_chunks(tmp_path):
    m = default_matcher()
    p = tmp_path / "log"
    body = ("x" * 100 + "\n") * 2000 + "srun: error: Node failure on node9\n" + ("y" * 50 + "\n") * 2000
    p.write_text(body)
    got = list(m.scan_file(p, chunk_size=4096))
    assert [(n, s.id) for n, s in got] == [(2001, "slurm.node_failure")]


def test_pure_python_bulk_scan_agrees(tmp_path, pure_python_matcher):
    p = tmp_path / "log"
    lines = ["iteration 1/10 | step_time_ms 20"] * 3000 + ["[rank3]: OSError: [Errno 28] No space left on device"]
    lines += ["gpu-node-1:1:1 [0] NCCL INFO Channel 00"] * 10 + ["srun: error: Node failure on node9"]
    p.write_text("\n".join(lines) + "\n")
    a = [(n, s.id) for n, s in default_matcher().scan_file(p, chunk_size=8192)]
    b = [(n, s.id) for n, s in pure_python_matcher.scan_file(p, chunk_size=8192)]
    assert a == b == [(3001, "storage.enospc"), (3012, "slurm.node_failure")]
