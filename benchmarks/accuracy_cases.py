"""Print attribution accuracy on the case folders, per field.

Usage: .venv/bin/python benchmarks/accuracy_cases.py [CASES_DIR] [-v]
Default CASES_DIR: tests/data/cases (the committed copy of the shared cases).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from revive.attribution.cases import load_case  # noqa: E402
from revive.attribution.engine import attribute  # noqa: E402

FIELDS = ("category", "domain", "culprit_nodes", "action")


def evaluate(cases_dir: Path, verbose: bool = False) -> dict[str, tuple[int, int]]:
    score = {f: [0, 0] for f in FIELDS}
    for case in sorted(d for d in cases_dir.iterdir() if (d / "expected.yaml").exists()):
        exp = yaml.safe_load((case / "expected.yaml").read_text())
        got = attribute(load_case(case))
        pairs = {
            "category": (exp["category"], got.category.value),
            "domain": (exp["attribution"], got.domain.value),
            "culprit_nodes": (sorted(exp.get("culprit_nodes") or []), sorted(got.culprit_nodes)),
            "action": (exp["recommended_action"], got.action.value),
        }
        bad = []
        for f, (e, g) in pairs.items():
            score[f][1] += 1
            if e == g:
                score[f][0] += 1
            else:
                bad.append(f"{f}: expected {e} got {g}")
        if verbose or bad:
            print(f"{'OK  ' if not bad else 'FAIL'} {case.name}: {got.category.value}/{got.domain.value}/"
                  f"{got.culprit_nodes}/{got.action.value} ranks={got.culprit_ranks} conf={got.confidence}"
                  + ("" if not bad else "  <- " + "; ".join(bad)))
    return {f: (a, b) for f, (a, b) in score.items()}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    cases = Path(args[0]) if args else ROOT / "tests" / "data" / "cases"
    res = evaluate(cases, verbose="-v" in sys.argv)
    print("ACCURACY " + " ".join(f"{f}={a}/{b}" for f, (a, b) in res.items()))


if __name__ == "__main__":
    main()
