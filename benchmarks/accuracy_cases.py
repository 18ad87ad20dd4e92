"""Print attribution accuracy per case set.

Usage: .venv/bin/python benchmarks/accuracy_cases.py [-v] [--set shared|dev|test ...] [CASES_DIR]

Sets: ``shared`` = tests/data/cases (the 18 shared examples); ``dev`` and ``test`` = the corpus
pool (tests/data/corpus/pool) split by tests/data/corpus/split.yaml. One line per set:

    BENCH accuracy set=<s> cases=N category=… domain=… culprit_recall=… action=… false_incidents=… ece=…

Rates are fractions (3 decimals). culprit_recall = expected culprit nodes found / expected culprit
nodes, over the cases that expect any. false_incidents = negatives (expected category ``none``)
where the engine raised an incident. ece = expected calibration error (10 equal-width bins) of
``confidence`` against "category and action both right".

``-v`` lists the misses, for ``shared`` and ``dev`` only: the test set is scored in aggregate and
never inspected case by case (it is the held-out estimate of accuracy on unseen incidents).
A CASES_DIR argument scores that folder as one set named after it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from revive.attribution.cases import load_case  # noqa: E402
from revive.attribution.engine import attribute  # noqa: E402

SHARED = ROOT / "tests" / "data" / "cases"
POOL = ROOT / "tests" / "data" / "corpus" / "pool"
SPLIT = ROOT / "tests" / "data" / "corpus" / "split.yaml"
SETS = ("shared", "dev", "test")
FIELDS = ("category", "domain", "culprit_nodes", "action")


@dataclass
class Result:
    name: str
    cases: int = 0
    category: int = 0
    domain: int = 0
    action: int = 0
    culprit_hit: int = 0
    culprit_total: int = 0
    negatives: int = 0
    false_incidents: int = 0
    conf: list[tuple[float, bool]] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)

    def add(self, exp: dict, category: str, domain: str, culprit_nodes: list[str], action: str) -> tuple[bool, bool, bool, int]:
        """Count one verdict against ``exp`` (an expected.yaml mapping); return (category, domain, action
        right, culprit nodes found)."""
        cat_ok = exp["category"] == category
        dom_ok = exp["attribution"] == domain
        act_ok = exp["recommended_action"] == action
        want = set(exp.get("culprit_nodes") or [])
        hit = len(want & set(culprit_nodes))
        self.cases += 1
        self.category += cat_ok
        self.domain += dom_ok
        self.action += act_ok
        self.culprit_hit += hit
        self.culprit_total += len(want)
        if exp["category"] == "none":
            self.negatives += 1
            self.false_incidents += category != "none"
        return cat_ok, dom_ok, act_ok, hit

    def rate(self, n: int, d: int) -> float:
        return n / d if d else 1.0

    def ece(self, bins: int = 10) -> float:
        if not self.conf:
            return 0.0
        total = 0.0
        for b in range(bins):
            lo, hi = b / bins, (b + 1) / bins
            sel = [(c, ok) for c, ok in self.conf if (lo <= c < hi) or (b == bins - 1 and c == 1.0)]
            if not sel:
                continue
            acc = sum(ok for _, ok in sel) / len(sel)
            avg = sum(c for c, _ in sel) / len(sel)
            total += len(sel) / len(self.conf) * abs(acc - avg)
        return total

    def line(self) -> str:
        n = self.cases
        return (f"BENCH accuracy set={self.name} cases={n} category={self.rate(self.category, n):.3f} "
                f"domain={self.rate(self.domain, n):.3f} "
                f"culprit_recall={self.rate(self.culprit_hit, self.culprit_total):.3f} "
                f"action={self.rate(self.action, n):.3f} false_incidents={self.false_incidents} "
                f"ece={self.ece():.3f}")


def case_dirs(set_name: str) -> list[Path]:
    if set_name == "shared":
        return sorted(d for d in SHARED.iterdir() if (d / "expected.yaml").exists())
    split = yaml.safe_load(SPLIT.read_text(encoding="utf-8")) or {}
    return sorted(POOL / c for c, s in split.items() if s == set_name and (POOL / c / "expected.yaml").exists())


def score(name: str, cases: list[Path]) -> Result:
    res = Result(name)
    for case in cases:
        exp = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8"))
        got = attribute(load_case(case))
        cat_ok, dom_ok, act_ok, hit = res.add(exp, got.category.value, got.domain.value, got.culprit_nodes,
                                              got.action.value)
        want = set(exp.get("culprit_nodes") or [])
        res.conf.append((float(got.confidence), cat_ok and act_ok))
        bad = []
        if not cat_ok:
            bad.append(f"category: expected {exp['category']} got {got.category.value}")
        if not dom_ok:
            bad.append(f"domain: expected {exp['attribution']} got {got.domain.value}")
        if hit < len(want) or (not want and got.culprit_nodes):
            bad.append(f"culprit_nodes: expected {sorted(want)} got {sorted(got.culprit_nodes)}")
        if not act_ok:
            bad.append(f"action: expected {exp['recommended_action']} got {got.action.value}")
        if bad:
            res.misses.append(f"FAIL {case.name}: {got.category.value}/{got.domain.value}/{got.culprit_nodes}/"
                              f"{got.action.value} conf={got.confidence} root={got.root_event.signature_id if got.root_event else None}"
                              "  <- " + "; ".join(bad))
    return res


def evaluate(cases_dir: Path | str | None = None, verbose: bool = False, set_name: str | None = None) -> Result:
    """Score one set (``set_name``) or one folder of cases (``cases_dir``). Importable.

    ``verbose`` prints the misses, never for the test set."""
    if set_name is None and cases_dir is None:
        set_name = "shared"
    if verbose and set_name == "test":
        raise ValueError("misses are never listed for the test set")
    if set_name is not None:
        if set_name not in SETS:
            raise ValueError(f"unknown set {set_name!r}")
        res = score(set_name, case_dirs(set_name))
    else:
        d = Path(cases_dir)  # type: ignore[arg-type]
        res = score(d.name, sorted(c for c in d.iterdir() if (c / "expected.yaml").exists()))
    if verbose:
        for m in res.misses:
            print(m)
    return res


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return 0
    verbose = "-v" in argv
    sets: list[str] = []
    dirs: list[str] = []
    it = iter(a for a in argv if a != "-v")
    for a in it:
        if a == "--set":
            sets.append(next(it, ""))
        elif a.startswith("--set="):
            sets.append(a.split("=", 1)[1])
        else:
            dirs.append(a)
    if not sets and not dirs:
        sets = list(SETS)
    if verbose and "test" in sets:
        print("refusing -v for the test set: it is scored in aggregate only", file=sys.stderr)
        return 2
    for s in sets:
        if s not in SETS:
            print(f"unknown set {s!r} (one of {', '.join(SETS)})", file=sys.stderr)
            return 2
        print(evaluate(set_name=s, verbose=verbose).line())
    for d in dirs:
        if not Path(d).is_dir():
            print(f"not a folder of cases: {d!r} (see --help)", file=sys.stderr)
            return 2
        print(evaluate(cases_dir=Path(d), verbose=verbose).line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
