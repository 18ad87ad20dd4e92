"""Trusted profiles read groups with the stdlib engine: it must agree with RE2 on every fixture
line, and no built-in pattern may take long on hostile lines (the RE2 set decides matching, the
stdlib engine only runs on lines RE2 already matched)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import re2

from revive.profiles import ProgressExtractor, load_builtin_profiles
from revive.profiles.extract import split_line_prefix

DATA = Path(__file__).resolve().parents[2] / "data" / "progress"


def _opts():
    o = re2.Options()
    o.log_errors = False
    return o


def builtin_patterns():
    for prof in load_builtin_profiles().profiles:
        for kind, specs in prof.patterns.items():
            for spec in specs:
                yield prof.id, kind, spec.regex


def fixture_bodies():
    for log in sorted(DATA.glob("*/*.log")):
        with open(log, encoding="utf-8", newline="") as f:
            for line in f.read().split("\n"):
                for seg in line.split("\r"):
                    yield split_line_prefix(seg)[0]


def test_stdlib_and_re2_agree_on_fixtures():
    bodies = list(fixture_bodies())
    checked = 0
    for pid, kind, regex in builtin_patterns():
        py, r2 = re.compile(regex, re.ASCII), re2.compile(regex, _opts())
        for body in bodies:
            a, b = py.search(body), r2.search(body)
            assert (a is None) == (b is None), (pid, kind, body)
            if a is not None:
                assert a.groupdict() == b.groupdict(), (pid, kind, body)
                checked += 1
    assert checked > 100


def test_builtin_patterns_are_fast_on_hostile_lines():
    ex = ProgressExtractor()
    fragments = ["iteration 1/ 2 | ", "elapsed time per iteration (ms): 1 ", " lm loss: ", "step: 1  loss: 1 ",
                 "tps: 1 ", "mfu: ", "Epoch 1: 5%|", "| 1/2 [00:01<", "completed step: 1, seconds: 1",
                 ", loss: ", "{'loss': 1,", "'epoch': ", "global_step: 1", "step=1, skipped=1, lr=",
                 "Restored all states from the checkpoint at ", "step=", "Restoring checkpoint from /a/1/",
                 "Saving model checkpoint to checkpoint-", "Finished saving checkpoint (finalized tmp dir) to `/"]
    for frag in fragments:
        hostile = (frag * (8192 // len(frag) + 1))[:8192]
        t0 = time.perf_counter()
        ex.events(hostile)
        ex.events(hostile + "\r" + hostile)
        assert time.perf_counter() - t0 < 0.25, frag
