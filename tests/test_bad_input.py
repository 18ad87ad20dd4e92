"""Bad input never crashes Revive and never loses evidence (tester's regression suite).

Each test names the input that broke something; see the report in the session log."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from revive.attribution.cases import MAX_LOG_BYTES, load_case
from revive.attribution.engine import attribute
from revive.config import load_cluster_config
from revive.errors import ConfigError
from revive.policy import load_policy
from revive.scheduler.slurm_cli import SlurmCLI, parse_job_line, parse_node_line
from revive.tail import LINE_CAP, Follower
from worker.detect import AttemptTracker

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from cli.main import main; main()"]
XID79_CASE = ROOT / "tests" / "data" / "cases" / "024-xid79-fallen-off-bus-gsp"


def revive(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})


def assert_clean_error(p: subprocess.CompletedProcess, code: int | None = None) -> None:
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode != 0
    if code is not None:
        assert p.returncode == code, (p.returncode, p.stderr)


# ----------------------------------------------------------------------------- CLI error handling
def test_cli_usage_error_is_a_usage_message_not_a_traceback():
    # was: ModuleNotFoundError: No module named 'click' (typer vendors click) on every usage error
    p = revive("classify")
    assert_clean_error(p, 2)
    assert "Missing argument" in p.stderr


def test_cli_classify_table_survives_rich_markup_and_escapes_in_log_text(tmp_path):
    # was: rich.errors.MarkupError traceback; ESC/OSC sequences from the log reached the terminal
    log = tmp_path / "markup.log"
    log.write_text("\x1b]0;pwned\x07 RuntimeError: CUDA error: unknown error [/] [/bold]\n")
    p = revive("classify", str(log))
    assert p.returncode == 0, p.stderr
    assert "cuda_error" in p.stdout and "\x1b]0" not in p.stdout and "\x07" not in p.stdout


def test_cli_error_message_with_brackets_is_printed_verbatim(tmp_path):
    p = revive("classify", str(tmp_path / "nope[/]"))
    assert_clean_error(p, 2)
    assert "nope[/]" in p.stderr


def test_cli_yaml_error_context_is_not_eaten_as_markup(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("mode: [auto\n  bad: : :\n")
    p = revive("policy", "check", str(f))
    assert_clean_error(p, 2)
    assert "mode: [auto" in p.stderr


@pytest.mark.parametrize("cmd", [["policy", "check"], ["incidents", "--config"], ["explain", "i1", "--config"]])
def test_cli_binary_config_or_policy_is_a_config_error(tmp_path, cmd):
    # was: UnicodeDecodeError traceback
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"\xff\xfe\x00m\x00o")
    p = revive(*cmd, str(f))
    assert_clean_error(p, 2)
    assert "not a text file" in p.stderr


def test_cli_explain_and_backtest_survive_a_corrupt_audit_file(tmp_path):
    # was: AttributeError ('list' has no .get), pydantic ValidationError and JSONDecodeError tracebacks
    audit = tmp_path / "audit.jsonl"
    audit.write_text('garbage\n[1,2]\n"str"\n{"incident_id": "i1", "result": 5}\n')
    cfg = tmp_path / "c.yaml"
    # Temporal unreachable, whatever runs on this machine's default port (the open-incident fallback)
    cfg.write_text(f"name: x\naudit_file: {audit}\nstate_dir: {tmp_path}\ntemporal: {{address: '127.0.0.1:1'}}\n")
    p = revive("explain", "i2", "--config", str(cfg))
    assert_clean_error(p, 2)
    assert "no closed incident" in p.stderr
    p = revive("explain", "i1", "--config", str(cfg))
    assert_clean_error(p, 2)
    assert "invalid" in p.stderr
    pol = tmp_path / "p.yaml"
    pol.write_text("mode: observe\n")
    audit.write_text('garbage\n[1,2]\n')
    p = revive("backtest", "--policy", str(pol), "--config", str(cfg))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "skipped 2" in p.stderr and "0 incidents" in p.stdout


# ----------------------------------------------------------------------------- policy / config
def test_policy_rejects_negative_and_zero_durations(tmp_path):
    # was: accepted (approval.timeout -100 s, verify.poll_interval -1 s, hang.floor -5 s)
    f = tmp_path / "p.yaml"
    f.write_text("approval: {timeout: -100}\nhang: {floor: -5}\nverify: {poll_interval: -1}\nnotify: {timeout: 0}\n")
    with pytest.raises(ConfigError) as e:
        load_policy(f)
    for field in ("approval", "hang", "verify", "notify"):
        assert field in str(e.value)
    f.write_text("budgets: {backoff: 0}\n")
    assert load_policy(f).budgets.backoff == timedelta(0)


def test_binary_policy_and_config_raise_config_error(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError):
        load_policy(f)
    with pytest.raises(ConfigError):
        load_cluster_config(f)


# ----------------------------------------------------------------------------- classify / cases
def test_fifo_in_a_case_folder_does_not_block(tmp_path):
    # was: read_bytes() on job.log / slurm.json FIFOs blocked forever
    case = tmp_path / "c"
    case.mkdir()
    for n in ("job.log", "slurm.json", "dmesg.log", "trigger.json", "bundle.json", "gpu_metrics.csv"):
        os.mkfifo(case / n)
    b = load_case(case)
    assert any("not a regular file" in n for n in b.notes)
    os.mkfifo(tmp_path / "f.log")
    assert "not a regular file" in load_case(tmp_path / "f.log").notes[0]


def test_huge_sparse_log_is_read_from_its_tail_only(tmp_path):
    # was: the whole 2 GB read into memory (2.2 GB RSS, 10 s) before keeping the last 64 MB
    f = tmp_path / "big.log"
    with open(f, "wb") as fh:
        fh.truncate(2 << 30)
        fh.seek((2 << 30) - 100)
        fh.write(b"\nRuntimeError: CUDA error: unknown error\n")
    import tracemalloc

    tracemalloc.start()
    b = load_case(f)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * MAX_LOG_BYTES, peak
    assert "CUDA error: unknown error" in b.job_log


def test_nul_padded_log_is_still_read(tmp_path):
    # was: a log with a NUL hole in front (copytruncate) was declared binary: the error was lost and
    # the verdict was "the run looks healthy"
    f = tmp_path / "job.log"
    f.write_bytes(b"\x00" * 100_000 + b"2026-01-01T00:00:00 [rank 0 host n1] RuntimeError: CUDA error: unknown error\n")
    a = attribute(load_case(f))
    assert a.category.value == "cuda_error", a.explanation


def test_random_binary_is_still_refused(tmp_path):
    f = tmp_path / "junk.bin"
    f.write_bytes(os.urandom(100_000))
    b = load_case(f)
    assert b.job_log == "" and any("binary" in n for n in b.notes)


def test_null_node_names_in_slurm_json_are_not_culprits(tmp_path):
    # was: "nodes": [null, 5] gave a node named "None", which became the culprit to drain
    case = tmp_path / "c"
    case.mkdir()
    for n in ("job.log", "dmesg.log"):
        (case / n).write_bytes((XID79_CASE / n).read_bytes())
    (case / "slurm.json").write_text(json.dumps({"job_id": 1, "nodes": [None, ["a"], {"b": 1}], "state": "FAILED"}))
    a = attribute(load_case(case))
    assert "None" not in a.culprit_nodes


def test_syslog_year_rollover_keeps_the_xid(tmp_path):
    # was: an Xid stamped "Jan  1" for a job started Dec 31 got last year's date, was dropped as an
    # earlier incident's event, and the verdict fell back to a CUDA restatement
    case = tmp_path / "c"
    case.mkdir()
    (case / "slurm.json").write_text('{"job_id": 1, "nodes": ["n1", "n2"], "state": "FAILED"}')
    (case / "job.log").write_text(
        "=== attempt restart=0 2026-12-31T23:50:00+00:00\n"
        "2026-12-31T23:59:00+00:00 [rank 0 host n1] iteration 5/100 | loss 1\n"
        "RuntimeError: CUDA error: unknown error\n")
    (case / "dmesg.log").write_text(
        "Jan  1 00:05:00 n2 kernel: NVRM: Xid (PCI:0000:06:00): 79, pid=1, GPU has fallen off the bus.\n")
    a = attribute(load_case(case))
    assert a.root_event and a.root_event.signature_id == "xid.event", a.explanation
    assert a.culprit_nodes == ["n2"]


# ----------------------------------------------------------------------------- tail
@pytest.mark.parametrize("content", [
    "[1,2]", '{"local|/a|1": 5}', '{"local|/a|1": null}', '{"local|/a|1": {"offset": 1e400}}',
    '{"local|/a|1": {"offset": 1, "line_no": [1]}}',
])
def test_corrupt_offsets_file_never_crashes_the_follower(tmp_path, content):
    # was: AttributeError / TypeError / OverflowError from Follower() (the monitor could not start)
    of = tmp_path / "offsets.json"
    of.write_text(content)
    assert Follower(offsets_file=of, cluster="local").states == {}


def test_negative_offset_in_cache_does_not_stop_reading(tmp_path):
    # was: offset -100 was kept; seek() failed on every poll and the log was never read again
    log = tmp_path / "a.log"
    log.write_text("one\ntwo\n")
    of = tmp_path / "offsets.json"
    of.write_text(json.dumps({f"local|{log}|{os.stat(log).st_ino}": {"offset": -100, "line_no": 0}}))
    assert [t for _, t in Follower(offsets_file=of).read_new(str(log))] == ["one", "two"]


def test_error_at_the_end_of_a_huge_line_is_kept(tmp_path):
    # was: only the head of a >4 KB line was kept; the error that ends a progress-bar line was lost
    log = tmp_path / "a.log"
    log.write_bytes(b"")
    f = Follower()
    f.read_new(str(log))
    with open(log, "ab") as fh:
        fh.write(b"\r 50%|#####" * 2_000_000)
    assert f.read_new(str(log)) == []
    with open(log, "ab") as fh:
        fh.write(b"\rRuntimeError: CUDA error: unknown error\nnext\n")
    out = f.read_new(str(log))
    while len(out) < 2:
        out += f.read_new(str(log))
    assert len(out[0][1]) <= LINE_CAP
    assert "CUDA error: unknown error" in out[0][1]
    assert out[1][1] == "next"


# ----------------------------------------------------------------------------- detect
def _p(it: int, ts: str) -> str:
    return f"{ts} [rank 0 host n1] iteration {it}/100 | loss 1 | compute_ms 1 | step_time_ms 2"


def test_mixed_naive_and_zoned_progress_stamps_do_not_crash():
    # was: TypeError: can't compare offset-naive and offset-aware datetimes (monitor pass failed)
    t = AttemptTracker()
    t.feed(_p(1, "2026-01-01T00:00:00"), 0)
    t.feed(_p(2, "2026-01-01T00:00:01Z"), 1)
    assert t.step_intervals == [1.0]


def test_a_clock_jump_does_not_disable_hang_detection():
    # was: one stamp in year 9999 made the median step interval ~8000 years: never "hung"
    t = AttemptTracker(k=5, floor_s=60)
    t.feed(_p(1, "2026-01-01T00:00:00"), 0)
    t.feed(_p(2, "9999-12-31T23:59:59"), 1)
    t.feed(_p(3, "2026-01-01T00:00:02"), 2)
    t.feed(_p(4, "2026-01-01T00:00:03"), 3)
    assert t.threshold_s() == 60
    assert t.hung(3 + 61)


# ----------------------------------------------------------------------------- scheduler parsers
@pytest.mark.parametrize("line", ["JobId=", "JobId=2 Jo", "JobId=2 JobName=wrap UserId=root(0)", "JobId=5\x00JobState=FAILED"])
def test_truncated_job_lines_are_refused(line):
    # was: accepted as job "2 Jo" / "" in state UNKNOWN
    with pytest.raises(ValueError):
        parse_job_line(line)


@pytest.mark.parametrize("line", ["NodeName=", "NodeName=nod", "NodeName=node1 Arch=x86_64 CoresPer"])
def test_truncated_node_lines_are_refused(line):
    with pytest.raises(ValueError):
        parse_node_line(line)


class _Runner:
    def __init__(self, out: str) -> None:
        self.out = out

    async def run(self, argv, timeout_s=None, env=None, **kw):
        return 0, self.out, ""


async def test_one_garbled_record_does_not_hide_every_job():
    # was: a single unparsable line (bad hostlist, truncation) made list_jobs raise ValueError, so
    # the monitor watched no job at all until slurmctld stopped printing it
    good = (ROOT / "tests/data/slurm/show_job_failed.txt").read_text().strip()
    out = "\n".join([good, "JobId=9 JobState=RUNNING NodeList=node[1-", "JobId=3 Jo"]) + "\n"
    cli = SlurmCLI(_Runner(out), cluster="t")
    jobs = await cli.list_jobs()
    assert [j.job_id for j in jobs] == ["2"]
    node = (ROOT / "tests/data/slurm/show_node_all.txt").read_text().splitlines()[0]
    cli = SlurmCLI(_Runner(node + "\nNodeName=x State=IDLE Reason=a\nNodeName=nod\n"), cluster="t")
    assert [n.name for n in await cli.get_nodes()] == ["node1", "x"]


# ----------------------------------------------------------------------------- decide signal/update
@pytest.mark.temporal
async def test_decide_with_bad_payloads_is_refused_or_recorded_never_wedges(local_env, tmp_path):
    """Update: bad payloads are refused. Signal: a null payload used to fail the workflow task on
    every retry (AttributeError in ApprovalGate.problem), wedging the incident; wrongly-shaped
    payloads are dropped by the SDK and never reach ``ignored`` (the audit record)."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import WorkflowUpdateFailedError

    from revive.models import Decision
    from revive.policy import RecoveryPolicy
    from tests.helpers.builders import fake_cluster, incident
    from worker.main import build_worker
    from workflows.incident import IncidentWorkflow

    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    pol = RecoveryPolicy(approval={"timeout": 3600})
    tq = f"tq-{uuid.uuid4()}"
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        h = await local_env.client.start_workflow(IncidentWorkflow.run, incident(log, pol),
                                                  id=f"bad-input-{uuid.uuid4().hex[:6]}", task_queue=tq)
        for _ in range(100):
            try:
                if (await h.query("status"))["state"] == "awaiting_approval":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.1)
        for payload in ({"approver": "a"}, {"decision": 5, "approver": ["x"]}, "approve", None):
            with pytest.raises(WorkflowUpdateFailedError):
                await h.execute_update("decide", payload, result_type=str)
        await h.signal("decide", {"approver": "a"})
        await h.signal("decide", None)
        await asyncio.sleep(1.5)
        failed = [ev.workflow_task_failed_event_attributes.failure.message async for ev in h.fetch_history_events()
                  if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
        try:
            assert failed == [], f"workflow task failing (incident wedged): {failed[:1]}"
            st = await asyncio.wait_for(h.query("status"), 5)
            assert len(st["ignored_decisions"]) == 2, st["ignored_decisions"]
            await asyncio.wait_for(h.execute_update("decide", Decision(decision="reject", approver="bob")), 10)
        finally:
            await h.terminate("test over")
