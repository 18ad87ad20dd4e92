"""How far the evidence itself goes: a second reader's labels against the corpus labels, beside the engine.

The corpus labels (tests/data/corpus/pool/*/expected.yaml) say what each source thread *concluded*,
often from facts the logs do not hold (a fix that worked, "it was intermittent", the user's code).
``tests/data/corpus/second_reader.yaml`` holds a second reader's labels for 180 cases (60 random dev,
120 random test), made from each case's job.log / dmesg.log / slurm.json alone, as an on-call operator
would see them. Scoring both that reader and the engine against the corpus labels on the same cases
shows how much of the goal the evidence supports.

Prints, per set (aggregate only; no case is named, so the test set stays held out):

    BENCH second_reader set=<dev|test> cases=N who=<reader|engine> category=… domain=… culprit_recall=… action=… false_incidents=…
    BENCH second_reader set=<dev|test> cases=N reader_engine_action_agreement=…

Rates are fractions 0-1 (3 decimals), computed as in ``benchmarks/accuracy_cases.py``. The engine
was tuned on dev (its dev numbers are an upper bound), never on test.

Usage: .venv/bin/python benchmarks/second_reader.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy_cases import POOL, Result  # noqa: E402
from revive.attribution.cases import load_case  # noqa: E402
from revive.attribution.engine import attribute  # noqa: E402

READER = ROOT / "tests" / "data" / "corpus" / "second_reader.yaml"


def _line(set_name: str, who: str, r: Result) -> str:
    n = r.cases
    return (f"BENCH second_reader set={set_name} cases={n} who={who} category={r.rate(r.category, n):.3f} "
            f"domain={r.rate(r.domain, n):.3f} culprit_recall={r.rate(r.culprit_hit, r.culprit_total):.3f} "
            f"action={r.rate(r.action, n):.3f} false_incidents={r.false_incidents}")


def evaluate(set_name: str) -> tuple[Result, Result, float]:
    """``(reader, engine, action agreement)`` over the second reader's cases of ``set_name``."""
    rows = yaml.safe_load(READER.read_text(encoding="utf-8")) or {}
    reader, engine, agree = Result("reader"), Result("engine"), 0
    for case, row in sorted(rows.items()):
        if row["set"] != set_name:
            continue
        exp = yaml.safe_load((POOL / case / "expected.yaml").read_text(encoding="utf-8"))
        got = attribute(load_case(POOL / case))
        reader.add(exp, row["category"], row["attribution"], row["culprit_nodes"], row["recommended_action"])
        engine.add(exp, got.category.value, got.domain.value, got.culprit_nodes, got.action.value)
        agree += row["recommended_action"] == got.action.value
    return reader, engine, (agree / reader.cases if reader.cases else 0.0)


def main() -> int:
    for set_name in ("dev", "test"):
        reader, engine, agree = evaluate(set_name)
        print(_line(set_name, "reader", reader))
        print(_line(set_name, "engine", engine))
        print(f"BENCH second_reader set={set_name} cases={reader.cases} reader_engine_action_agreement={agree:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
