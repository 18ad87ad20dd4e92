"""``revive classify``, ``revive progress check`` and ``revive replay`` on bad input, run as an
operator runs them: a clear one-line error (exit 2, no traceback) or a verdict, within seconds
(robustness pass of 2026-12-02)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HISTORY = ROOT / "tests" / "histories" / "fake-7-20261129T150400-a0-app-stopped-v9fast.json"


def revive(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def clean_error(p: subprocess.CompletedProcess, code: int = 2) -> str:
    assert "Traceback" not in p.stderr and "panicked" not in p.stderr, p.stderr[-2000:]
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    return p.stderr


def test_classify_of_a_device_is_a_clear_error():
    # was: /dev/zero (a link to it, or a FIFO) got the verdict "none: the run looks healthy"
    assert "not a regular file or folder" in clean_error(revive("classify", "/dev/zero"))


def test_progress_check_of_a_device_says_what_it_is():
    # was: "/dev/zero: no such file"
    assert "not a regular file" in clean_error(revive("progress", "check", "/dev/zero"))


def test_progress_check_survives_an_epoch_too_big_and_a_stamp_at_the_calendars_edge(tmp_path):
    # was: "unexpected OverflowError" (exit 1) for each
    f = tmp_path / "train.log"
    f.write_text("Epoch " + "9" * 5000 + ":  10%|█         | 100/1000 [00:50<07:30,  2.00it/s]\n"
                 "9999-12-31T23:59:59-12:00 [rank 0 host a] iteration 1/9 | step_time_ms 5\n"
                 "0001-01-01T00:00:00+14:00 [rank 0 host a] iteration 2/9 | step_time_ms 5\n")
    p = revive("progress", "check", "--json", str(f))
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)


def _history(tmp_path: Path, events: list) -> Path:
    f = tmp_path / "h.json"
    f.write_text(json.dumps({"events": events}))
    return f


def test_replay_refuses_files_that_are_no_history(tmp_path):
    # was: "events": [] and a history of one event hung `revive replay` forever (the SDK's replay
    # worker waits for a task that never comes); a start event without a task queue or of an unknown
    # type made its Rust core panic and hang; /dev/zero was read until memory ran out; a missing
    # file was "1 of 1 histories do not replay" (exit 1)
    real = json.loads(HISTORY.read_text())["events"]
    start = {"eventId": "1", "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED",
             "workflowExecutionStartedEventAttributes": {"workflowType": {"name": "IncidentWorkflow"}}}
    renamed = json.loads(json.dumps(real))
    renamed[0]["workflowExecutionStartedEventAttributes"]["workflowType"]["name"] = "Nope"
    cases = {
        "must list two events": [],
        "two events or more": real[:1],
        "names no task queue": [start, {"eventId": "2", "eventType": "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED"}],
        "is not WorkflowExecutionStarted": [{"eventId": "1"}, {"eventId": "2"}],
        "none of this worker's": renamed,
    }
    for why, events in cases.items():
        assert why in clean_error(revive("replay", str(_history(tmp_path, events)), timeout=30)), why
    assert "not a regular file" in clean_error(revive("replay", "/dev/zero", timeout=30))
    assert "No such file" in clean_error(revive("replay", str(tmp_path / "nope.json"), timeout=30))
    (tmp_path / "bad.json").write_text("{nope")
    assert "not JSON" in clean_error(revive("replay", str(tmp_path / "bad.json"), timeout=30))


@pytest.mark.parametrize("n", [2, 40])
def test_replay_still_replays_a_real_history_and_its_prefixes(tmp_path, n):
    events = json.loads(HISTORY.read_text())["events"][:n]
    p = revive("replay", str(_history(tmp_path, events)), timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]


def test_classify_says_what_it_could_not_read_instead_of_a_bare_healthy_verdict(tmp_path):
    case = tmp_path / "case"
    case.mkdir()
    (case / "job.log").write_bytes(bytes(range(256)) * 100)  # binary junk: not read
    p = revive("classify", "--json", str(case))
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["category"] == "none" and any("looks binary" in n for n in got["evidence_notes"])
    assert "warning:" in p.stderr and "looks binary" in p.stderr


def test_a_kernel_log_file_name_that_is_no_host_name_names_no_culprit(tmp_path):
    case = tmp_path / "case"
    case.mkdir()
    (case / "job.log").write_text("iteration 1/10 | elapsed time per iteration (ms): 5.0 |\n")
    (case / "dmesg.$(touch pwned) x.log").write_text(
        "[ 12.3] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n")
    p = revive("classify", "--json", str(case))
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["category"] == "gpu_hardware"          # the Xid still counts
    assert got["culprit_nodes"] == []                 # but the file name is not taken for a node
    assert any("not a node name" in n for n in got["evidence_notes"])
    assert not (ROOT / "pwned").exists() and not (tmp_path / "pwned").exists()
