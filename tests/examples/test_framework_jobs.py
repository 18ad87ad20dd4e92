"""The real-framework jobs' tooling without a cluster: the demo refuses an unknown framework, the
injector reads the frameworks' own checkpoint names and finds no process for a job that is not
running, and both example scripts parse their options (``--help`` imports no framework)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cli import framework_jobs as fj
from cli.demo import run_demo
from tests.helpers.slurm import ROOT


def test_demo_refuses_an_unknown_framework(capsys):
    assert run_demo(fault="crash", framework="tensorflow") == 2
    assert "unknown FRAMEWORK='tensorflow'" in capsys.readouterr().err


def test_saved_steps_reads_each_frameworks_own_names(tmp_path):
    for n in ("checkpoint-10", "checkpoint-20", "tmp-checkpoint-30", "runs"):
        (tmp_path / "hf" / n).mkdir(parents=True)
    (tmp_path / "pl").mkdir()
    for n in ("epoch=3-step=10.ckpt", "last.ckpt", "hpc_ckpt_1.ckpt", "epoch=6-step=20.ckpt"):
        (tmp_path / "pl" / n).write_bytes(b"")
    assert fj.saved_steps("hf", tmp_path / "hf") == [10, 20]
    assert fj.saved_steps("lightning", tmp_path / "pl") == [10, 20]
    assert fj.saved_steps("hf", tmp_path / "missing") == []


def test_injector_finds_no_process_for_a_job_that_is_not_running(tmp_path):
    assert fj.rank_process("999999999", 1) is None
    with pytest.raises(TimeoutError, match="no checkpoint at step 10"):
        fj.inject("hf", "999999999", tmp_path, "crash", tmp_path / "m.json", timeout_s=0.3)
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("script", ["examples/hf/train.py", "examples/lightning/train.py"])
def test_example_scripts_parse_their_options(script):
    r = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--max-steps" in r.stdout
