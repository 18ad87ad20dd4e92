"""The second reader's labels (tests/data/corpus/second_reader.yaml) are well-formed, sit in the set the
one-time split gave each case, and the benchmark scores both the reader and the engine on them."""

from __future__ import annotations

import yaml

from benchmarks import second_reader
from benchmarks.accuracy_cases import POOL, SPLIT
from revive.models import Action, Category, Domain


def test_every_row_names_a_pool_case_in_its_split_set_with_valid_labels():
    rows = yaml.safe_load(second_reader.READER.read_text(encoding="utf-8"))
    split = yaml.safe_load(SPLIT.read_text(encoding="utf-8"))
    assert {r["set"] for r in rows.values()} == {"dev", "test"}
    for case, r in rows.items():
        assert (POOL / case / "expected.yaml").exists(), case
        assert split[case] == r["set"], case
        Category(r["category"]), Domain(r["attribution"]), Action(r["recommended_action"])
        assert 0.0 <= r["confidence"] <= 1.0


def test_the_benchmark_scores_reader_and_engine_on_the_same_cases():
    reader, engine, agree = second_reader.evaluate("dev")
    assert reader.cases == engine.cases == 60
    assert 0.0 < agree <= 1.0
    line = second_reader._line("dev", "reader", reader)
    assert line.startswith("BENCH second_reader set=dev cases=60 who=reader category=")
