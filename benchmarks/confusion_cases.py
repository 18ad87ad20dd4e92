"""Print confusion tables (expected vs predicted) of the attribution engine over one case set.

Usage: .venv/bin/python benchmarks/confusion_cases.py [--set shared|dev|test] [--field domain|action|category ...]

Sets are those of ``benchmarks/accuracy_cases.py`` (shared = tests/data/cases; dev and test = the
corpus pool split by tests/data/corpus/split.yaml). Default: ``--set dev --field domain --field
action``. Each table has one row per expected value and one column per predicted value, each cell
a case count; the diagonal is right. Below the table, the off-diagonal cells are listed largest
first (``expected -> predicted: n``).

Only aggregate counts are printed, for every set: no case names, no log lines. That is what the
test set allows (it is the held-out estimate of accuracy on unseen incidents: never inspected case
by case); ``benchmarks/accuracy_cases.py --set dev -v`` names the dev misses.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy_cases import SETS, case_dirs  # noqa: E402
from revive.attribution.cases import load_case  # noqa: E402
from revive.attribution.engine import attribute  # noqa: E402

# field name -> (expected.yaml key, Attribution attribute)
FIELDS: dict[str, tuple[str, str]] = {
    "category": ("category", "category"),
    "domain": ("attribution", "domain"),
    "action": ("recommended_action", "action"),
}


def confusion(set_name: str, fields: list[str]) -> dict[str, Counter[tuple[str, str]]]:
    """``{field: Counter[(expected, predicted)]}`` over every case of ``set_name``."""
    tables: dict[str, Counter[tuple[str, str]]] = {f: Counter() for f in fields}
    for case in case_dirs(set_name):
        exp = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8")) or {}
        got = attribute(load_case(case))
        for f in fields:
            key, attr = FIELDS[f]
            tables[f][(str(exp.get(key)), str(getattr(got, attr).value))] += 1
    return tables


def render(field_name: str, table: Counter[tuple[str, str]], set_name: str) -> str:
    rows = sorted({e for e, _ in table})
    cols = sorted({p for _, p in table})
    width = max([len("expected \\ got")] + [len(r) for r in rows]) + 1
    cw = [max(len(c), 3) + 1 for c in cols]
    total = sum(table.values())
    right = sum(n for (e, p), n in table.items() if e == p)
    out = [f"== {field_name} set={set_name} cases={total} right={right} ({right / total if total else 1:.3f})"]
    out.append("expected \\ got".ljust(width) + "".join(c.rjust(w) for c, w in zip(cols, cw, strict=True)))
    for r in rows:
        out.append(r.ljust(width) + "".join(str(table.get((r, c), "") or ".").rjust(w) for c, w in zip(cols, cw, strict=True)))
    off = sorted(((n, e, p) for (e, p), n in table.items() if e != p), key=lambda t: (-t[0], t[1], t[2]))
    if off:
        out.append("off-diagonal: " + ", ".join(f"{e} -> {p}: {n}" for n, e, p in off))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    sets: list[str] = []
    fields: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--set", "--field"):
            val = next(it, "")
            (sets if a == "--set" else fields).append(val)
        elif a.startswith("--set="):
            sets.append(a.split("=", 1)[1])
        elif a.startswith("--field="):
            fields.append(a.split("=", 1)[1])
        else:
            print(f"unknown argument {a!r}", file=sys.stderr)
            return 2
    sets = sets or ["dev"]
    fields = fields or ["domain", "action"]
    for s in sets:
        if s not in SETS:
            print(f"unknown set {s!r} (one of {', '.join(SETS)})", file=sys.stderr)
            return 2
    for f in fields:
        if f not in FIELDS:
            print(f"unknown field {f!r} (one of {', '.join(FIELDS)})", file=sys.stderr)
            return 2
    for s in sets:
        tables = confusion(s, fields)
        for f in fields:
            print(render(f, tables[f], s))
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
