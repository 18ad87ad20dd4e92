"""Confidence calibration: fit ``raw confidence -> P(category and action right)`` on outcomes.

The engine's raw confidence comes from the root's tier and a few modifiers (conflicting evidence,
node not named, unknown domain). It orders verdicts well but its values are not probabilities.
``fit`` turns (raw, correct) pairs into a monotone step table by isotonic regression
(pool-adjacent-violators), shrinking each block toward the overall rate by ``prior_weight``
pseudo-cases so that a level seen on two cases does not jump to 0 or 1. The table lives in
``revive/signatures/catalog/calibration.yaml`` (data, versioned with the catalog) and
``apply`` is what the engine calls.

Per-signature-family shrinkage on top of the step table was tried and not kept: leave-one-out
Brier score on the 49 dev cases was 0.1885 with it vs 0.1853 without (a constant scores 0.1849),
so with this little data the one-dimensional table is all the data supports. Refit when the
corpus grows.

What it is fitted on (dev set only, never the held-out test set): every dev case twice - the current
engine's outcome (an upper bound for unseen incidents: the rules were written from these cases) and
the case's *first look*, the outcome of the engine of its round before any rule was written from it
(``tests/data/corpus/first_look.yaml``, a lower bound). Fitted on the tuned outcomes alone the table
said 0.85 where the held-out test set was right 0.58 of the time (ECE 0.26); the first looks alone
were right 0.50. Weighting the two bounds equally is the estimate for an incident the engine has
never seen.

Refit:
    .venv/bin/python tests/data/corpus/first_look.py      # after a corpus round is merged
    .venv/bin/python -m revive.attribution.calibrate --write
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "signatures" / "catalog" / "calibration.yaml"
MIN_PROB, MAX_PROB = 0.05, 0.97


def fit(pairs: Iterable[tuple[float, bool]], prior_weight: float = 2.0) -> list[dict[str, float]]:
    """Isotonic (non-decreasing) step table ``[{raw_min, confidence, n}]`` from (raw, correct)."""
    data = sorted((round(float(r), 4), bool(ok)) for r, ok in pairs)
    if not data:
        return []
    p0 = sum(ok for _, ok in data) / len(data)
    # one block per distinct raw level, then pool adjacent violators
    blocks: list[list[float]] = []  # [raw_min, successes, count]
    for r, ok in data:
        if blocks and blocks[-1][0] == r:
            blocks[-1][1] += ok
            blocks[-1][2] += 1
        else:
            blocks.append([r, float(ok), 1.0])

    def value(b: Sequence[float]) -> float:
        return (b[1] + prior_weight * p0) / (b[2] + prior_weight)

    merged: list[list[float]] = []
    for b in blocks:
        merged.append(list(b))
        while len(merged) > 1 and value(merged[-2]) > value(merged[-1]):
            last = merged.pop()
            merged[-1][1] += last[1]
            merged[-1][2] += last[2]
    return [{"raw_min": 0.0 if i == 0 else b[0],
             "confidence": round(min(MAX_PROB, max(MIN_PROB, value(b))), 3),
             "n": int(b[2])} for i, b in enumerate(merged)]


def apply(table: Sequence[dict[str, Any]] | None, raw: float) -> float:
    """The calibrated confidence for ``raw`` (the step whose ``raw_min`` is the largest <= raw);
    ``raw`` itself when there is no table."""
    if not table:
        return raw
    out = raw
    for row in table:
        if raw >= float(row.get("raw_min", 0.0)):
            out = float(row["confidence"])
        else:
            break
    return out


def _first_look_pairs() -> list[tuple[float, bool]]:
    """(raw, category and action right) of each dev case's first look (``first_look.yaml``); [] when
    the file is absent."""
    import yaml  # noqa: PLC0415

    path = Path(__file__).resolve().parents[2] / "tests" / "data" / "corpus" / "first_look.yaml"
    if not path.is_file():
        return []
    rows = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [(float(r["raw"]), bool(r["category"] and r["action"])) for _, r in sorted(rows.items())]


def _dev_pairs() -> list[tuple[float, bool]]:
    import yaml  # noqa: PLC0415

    from revive.attribution.cases import load_case  # noqa: PLC0415
    from revive.attribution.engine import attribute  # noqa: PLC0415
    from revive.signatures.matcher import Matcher, load_catalog  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2]
    pool = root / "tests" / "data" / "corpus" / "pool"
    split = yaml.safe_load((root / "tests" / "data" / "corpus" / "split.yaml").read_text(encoding="utf-8"))
    cat = load_catalog()
    cat.pop("confidence_calibration", None)
    raw_matcher = Matcher(cat)
    pairs = []
    for name, s in sorted(split.items()):
        if s != "dev":
            continue
        exp = yaml.safe_load((pool / name / "expected.yaml").read_text(encoding="utf-8"))
        a = attribute(load_case(pool / name), raw_matcher)
        ok = a.category.value == exp["category"] and a.action.value == exp["recommended_action"]
        pairs.append((a.confidence, ok))
    return pairs


def main(argv: list[str]) -> int:
    import yaml  # noqa: PLC0415

    tuned, first = _dev_pairs(), _first_look_pairs()
    pairs = tuned + first
    table = fit(pairs)
    doc = {
        "confidence_calibration": {
            "method": "isotonic regression (pool-adjacent-violators) of 'category and action both right' "
                      "on the engine's raw confidence, each block shrunk toward the overall rate by 2 "
                      "pseudo-cases, clipped to [0.05, 0.97]",
            "fitted_on": f"dev split of tests/data/corpus (split.yaml): {len(tuned)} cases scored by the current "
                         f"engine and {len(first)} first looks (first_look.yaml); never the test split",
            "fitted_at": datetime.now(UTC).strftime("%Y-%m-%d"),
            "refit": ".venv/bin/python -m revive.attribution.calibrate --write",
            "table": table,
        }
    }
    text = ("# Confidence calibration table, generated by revive/attribution/calibrate.py; do not edit by hand.\n"
            + yaml.safe_dump(doc, sort_keys=False, width=100))
    if "--write" in argv:
        CALIBRATION_FILE.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
