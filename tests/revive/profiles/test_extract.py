"""Extractor edge cases: tqdm \\r redraws, prefixes, ANSI, junk, huge lines, no match."""

from __future__ import annotations

import os
import random

import pytest

from revive.profiles import (
    CheckpointSaved,
    Iteration,
    ProgressExtractor,
    detect_profile,
    load_builtin_profiles,
    parse_profiles,
    summarize,
)
from revive.profiles.extract import parse_timestamp, split_line_prefix


@pytest.fixture(scope="module")
def ex() -> ProgressExtractor:
    return ProgressExtractor()


def bar(n: int, total: int = 100, rate: str = " 9.50it/s") -> str:
    return f" {n * 100 // total:2d}%|█         | {n}/{total} [00:01<00:09,{rate}]"


def test_tqdm_cr_line_uses_last_complete_update(ex):
    line = "\r".join(bar(n) for n in range(1, 12))
    evs = ex.events(line)
    assert [(e.iter, e.total) for e in evs] == [(11, 100)]
    assert ex.classify(line).step_time_s == pytest.approx(1 / 9.5)


def test_tqdm_cr_line_with_partial_last_update(ex):
    line = bar(41) + "\r" + bar(42) + "\r" + " 43%|█         | 43/1"  # the write was cut
    assert ex.classify(line).iter == 42


def test_tqdm_cr_line_with_log_record_between_redraws(ex):
    line = bar(10) + "\r" + " " * 40 + "\r" + "{'loss': 1.5, 'learning_rate': 5e-05, 'epoch': 0.1}" + "\r" + bar(11)
    evs = ex.events(line)
    assert [type(e).__name__ for e in evs] == ["Metrics", "Iteration"]
    assert evs[0].loss == 1.5 and evs[0].epoch == pytest.approx(0.1) and evs[1].iter == 11


def test_tqdm_seconds_per_iteration(ex):
    e = ex.classify("  1%|▏         | 40/4500 [07:21<4:45:21,  3.84s/it]")
    assert (e.iter, e.total, e.step_time_s) == (40, 4500, 3.84)


@pytest.mark.parametrize("prefix,rank", [
    ("", None), ("0: ", 0), ("12: ", 12), ("[rank3]:", 3), ("[default5]:", 5), ("[rank: 7] ", 7),
])
def test_prefixes(ex, prefix, rank):
    e = ex.classify(prefix + bar(7))
    assert e is not None and e.iter == 7 and e.rank == rank


def test_iso_and_bracket_timestamps(ex):
    e = ex.classify("2026-11-29T15:04:05.123+00:00 [rank 2 host node9] saved checkpoint at iteration 40")
    assert isinstance(e, CheckpointSaved) and e.iter == 40 and (e.rank, e.host) == (2, "node9")
    assert e.ts.utcoffset().total_seconds() == 0 and e.ts.microsecond == 123000
    e = ex.classify("[2024-05-01 10:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[1e-05]")
    assert e.iter == 10 and e.ts.year == 2024 and e.ts.microsecond == 123000


def test_timestamp_formats():
    assert parse_timestamp("05/01/2024 10:00:01 - INFO - x").day == 1
    assert parse_timestamp("I0811 21:54:55.531340 1383 metric_logger.py:226] completed").hour == 21
    assert parse_timestamp("2024-13-45 99:00:00") is None
    assert parse_timestamp("nothing here") is None
    body, rank, host, ts = split_line_prefix("\x1b[32m0: [2024-05-01 10:00:00] hello\x1b[0m")
    assert (body, rank, ts.minute) == ("hello", 0, 0)


def test_ansi_escapes(ex):
    e = ex.classify("\x1b[31mstep: 5  \x1b[32mloss:  2.5000  \x1b[33mmemory:  1.0GiB(1%)  \x1b[34mtps: 1,000  "
                    "\x1b[36mtflops: 1.0  \x1b[35mmfu: 1.0%\x1b[39m")
    assert e.iter == 5 and e.loss == 2.5 and e.throughput == 1000


def test_no_profile_matches():
    lines = ["hello world", "Epoch summary: fine", "training is going well", "", "step on it"]
    s = summarize(lines)
    assert not s.matched and s.profiles == [] and s.attempts == []
    assert "no training-progress profile matched any of 5 lines" in s.note
    assert s.to_text().startswith("no training-progress profile matched")
    assert detect_profile(lines) == []


def test_binary_junk_and_huge_line(ex):
    rnd = random.Random(3)
    junk = bytes(rnd.randrange(256) for _ in range(20000))
    lines = [junk, junk.decode("latin-1"), junk.decode("utf-8", "surrogateescape"), "\x00" * 5000,
             "x" * (1 << 20), "%|" * (1 << 19), "\r" * 100000, bar(5)]
    for line in lines[:-1]:
        ex.events(line)  # no crash
    s = summarize(lines)
    assert s.last_iteration == 5 and s.lines == len(lines)


def test_huge_line_keeps_head_and_tail(ex):
    huge = "saved checkpoint at iteration 3 " + "y" * (1 << 20)
    assert ex.events(huge) == []  # anchored demo pattern ($) does not match a 1 MB line
    tail = "z" * (1 << 20) + "\r" + bar(9)
    assert ex.classify(tail).iter == 9
    head = bar(4) + "\r" + "w" * (1 << 20)
    assert ex.classify(head).iter == 4
    mid = "q" * (1 << 20) + " [Rank 0] step=77, skipped=0, lr=[1] " + "q" * (1 << 20)
    assert ex.events(mid) == []  # only the first and last MAX_LINE characters are read


def test_extractor_with_untrusted_profile():
    ps = parse_profiles(
        '{"profiles": [{"id": "mine", "framework": "my trainer", "version": "1", "source": "me", '
        '"literals": ["progress "], "patterns": {"iteration": "progress (?P<iter>\\\\d+)/(?P<total>\\\\d+) '
        'took (?P<step_time_ms>[0-9.]+)ms"}}]}', "job 7 --comment", trusted=False)
    ex = ProgressExtractor(ps)
    e = ex.classify("12: progress 3/10 took 250ms")
    assert isinstance(e, Iteration) and (e.iter, e.total, e.step_time_s, e.rank) == (3, 10, 0.25, 12)
    merged = load_builtin_profiles().merged(ps)
    assert merged.ids()[0] == "mine" and "megatron" in merged.ids()


def test_profile_literal_gate_is_respected():
    ps = parse_profiles({"profiles": [
        {"id": "a", "framework": "a", "version": "1", "source": "x", "literals": ["AAA"],
         "patterns": {"iteration": r"it (?P<iter>\d+)"}},
        {"id": "b", "framework": "b", "version": "1", "source": "x", "literals": ["BBB"],
         "patterns": {"run_start": r"BBB start"}},
    ]}, "test", trusted=True)
    ex = ProgressExtractor(ps)
    assert ex.events("BBB it 5") == []  # passes the combined prefilter, but not profile a's literals
    assert ex.classify("AAA it 5").iter == 5


def test_multi_rank_cadence_and_attempt_collapse():
    lines = []
    for it in range(1, 6):
        for r in range(4):
            lines.append(f"2026-01-01T00:00:{it * 2:02d}.{r:03d}+00:00 [rank {r} host n{r}] iteration {it}/5 | "
                         f"loss 1.0 | compute_ms 1.0 | step_time_ms 2000.0")
    s = summarize(["=== attempt restart=0 2026-01-01T00:00:00+00:00", "=== attempt restart=0"] + lines)
    assert s.run_starts == 1 and s.iterations_seen == 20
    assert s.cadence_s == pytest.approx(2.0) and s.cadence_source == "timestamps"
    assert s.step_time_s == pytest.approx(2.0)


def test_summary_is_json_ready():
    s = summarize(["=== attempt restart=0", "2026-01-01T00:00:02+00:00 [rank 0 host a] iteration 1/2 | loss 1 | "
                   "compute_ms 1 | step_time_ms 1"])
    js = s.model_dump_json()
    assert '"revive_demo"' in js and '"run_starts":1' in js


def test_builtin_profiles_cover_the_frameworks():
    ids = set(load_builtin_profiles().ids())
    assert {"megatron", "nemo2", "lightning", "hf_trainer", "accelerate", "tqdm", "torchtitan", "deepspeed",
            "maxtext", "orbax", "t5x", "revive_demo"} <= ids
    for p in load_builtin_profiles().profiles:
        assert p.version and p.source and p.literals


def test_fuzz_lines_never_crash(ex):
    rnd = random.Random(11)
    pieces = ["iteration ", "step: ", "%|", "\r", "\x1b[31m", " | ", "/", "[rank1]:", "0: ", "loss: ", "nan",
              "1e+400", "99999999999999999999999", "s/it", "it/s", "global_step: ", "saving checkpoint at iteration",
              "successfully saved checkpoint from iteration", "Restoring checkpoint from ", "`", "'", "{", "}"]
    for _ in range(3000):
        line = "".join(rnd.choice(pieces) + str(rnd.randrange(1000)) for _ in range(rnd.randrange(1, 12)))
        ex.events(line)
    ex.events(os.urandom(4096))


def test_trust_flags_and_merge_rules():
    builtin = load_builtin_profiles()
    mine = parse_profiles({"profiles": [{"id": "megatron", "framework": "fork", "version": "1", "source": "x",
                                         "literals": ["it "], "patterns": {"iteration": r"it (?P<iter>\d+)"}}]},
                          "job 9 --comment", trusted=False)
    assert all(p.trusted for p in builtin.profiles) and not mine.profiles[0].trusted
    from revive.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\['megatron'\] already defined"):
        builtin.merged(mine)
    both = builtin.merged(mine, allow_replace=True)
    assert both.get("megatron").framework == "fork" and not both.get("megatron").trusted
    assert both.get("tqdm").trusted


def test_report_text_and_json():
    from revive.profiles import report

    lines = ["=== attempt restart=0", "2026-01-01T00:00:02+00:00 [rank 0 host a] iteration 1/2 | loss 1 | "
             "compute_ms 1 | step_time_ms 1"]
    assert "revive_demo" in report(lines) and '"run_starts": 1' in report(lines, "json")
    with pytest.raises(ValueError):
        report(lines, "xml")


def test_validation_and_sanity_bars_are_not_progress(ex):
    assert ex.events("Validation DataLoader 0:  50%|█████     | 5/10 [00:01<00:01,  4.00it/s]") == []
    assert ex.events("Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:00<00:00,  9.00it/s]") == []
    assert ex.events("validate step: 10  loss:  2.0000  memory:  9.46GiB(64.99%)  tps: 7,094") == []
