"""The ``revive`` CLI: typer's runner for offline commands, real subprocesses for the entry point,
and a real dev server for approve/reject against unknown incidents."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "data" / "cases"


def revive(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)


def test_help_lists_every_command():
    r = revive("--help")
    assert r.returncode == 0, r.stderr
    for cmd in ("demo", "server", "worker", "monitor", "approve", "reject", "incidents", "show", "classify",
                "policy", "node", "explain", "backtest", "replay"):
        assert cmd in r.stdout


def test_classify_json_on_shared_cases():
    r = revive("classify", "--json", str(CASES / "024-xid79-fallen-off-bus-gsp"), str(CASES / "048-neg-nccl-info-init-chatter"))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert rows[0]["category"] == "gpu_hardware" and rows[0]["culprit_nodes"] == ["gpu-node-001"]
    assert rows[0]["action"] == "drain_and_requeue"
    assert rows[1]["category"] == "none" and rows[1]["action"] == "none"


def test_classify_missing_path_is_a_clear_error():
    r = revive("classify", "/nonexistent/case")
    assert r.returncode == 2 and "no such file" in r.stderr


def test_classify_binary_junk_records_unknown(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_bytes(bytes(range(256)) * 100 + b"\xff\xfe\x00garbage\n" * 50)
    r = revive("classify", "--json", str(junk))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["category"], got["action"]) == ("none", "none")  # junk is no failure signature


def test_policy_check_prints_effective_settings_and_names_bad_fields(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text("mode: auto\npartition_modes: {canary: auto}\napproval: {timeout: 600}\n")
    r = revive("policy", "check", str(good))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["mode"] == "auto"
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: yolo\n")
    r = revive("policy", "check", str(bad))
    assert r.returncode != 0 and "mode" in r.stderr and "observe" in r.stderr


def test_bad_config_is_a_clear_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: x\n")
    r = revive("incidents", "--config", str(cfg))
    assert r.returncode == 2 and "audit_file" in r.stderr


@pytest.mark.temporal
async def test_approve_unknown_incident_fails_clearly(local_env, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: t\naudit_file: {tmp_path}/a.jsonl\nstate_dir: {tmp_path}/s\n"
                   f"temporal: {{address: '{local_env.client.service_client.config.target_host}'}}\n")
    r = revive("approve", "no-such-incident", "--as", "alice", "--config", str(cfg))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "no incident 'no-such-incident'" in r.stderr
    r = revive("incidents", "--config", str(cfg))
    assert r.returncode == 0, r.stderr


def test_approve_with_temporal_down_is_a_clear_error(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: t\naudit_file: {tmp_path}/a.jsonl\nstate_dir: {tmp_path}/s\ntemporal: {{address: '127.0.0.1:1'}}\n")
    r = revive("approve", "x", "--as", "alice", "--config", str(cfg))
    assert r.returncode == 2 and "cannot reach Temporal at 127.0.0.1:1" in r.stderr


def test_explain_prints_evidence_to_outcome_even_with_markup_like_log_text(tmp_path):
    from datetime import UTC, datetime

    from revive.models import (
        Action,
        Attribution,
        AuditRecord,
        Category,
        Domain,
        Event,
        IncidentOutcome,
        IncidentResult,
        Plan,
        Trigger,
        TriggerKind,
    )
    from revive.policy import RecoveryPolicy

    now = datetime(2026, 11, 29, tzinfo=UTC)
    root = Event(source="job.log", line_no=3, text="[rank0]: RuntimeError: [/__w/pytorch/third_party/gloo/pair.cc:553] "
                                                    "Connection closed by peer \x1b]0;title\x07")
    a = Attribution(category=Category.crash, domain=Domain.unknown, action=Action.restart_in_place, root_event=root,
                    explanation="crash [/bold] with no hardware evidence")
    plan = Plan(action=Action.restart_in_place, recommended=Action.restart_in_place, runbook="restart_in_place",
                rule="runbook:restart_in_place")
    rec = AuditRecord(incident_id="c-1-x-a0-crash", cluster="c", job_id="1", attempt=0, mode="observe",
                      trigger=Trigger(kind=TriggerKind.job_state, at=now), attribution=a, plan=plan,
                      result=IncidentResult(incident_id="c-1-x-a0-crash", outcome=IncidentOutcome.recovered,
                                            rule=plan.rule),
                      policy=RecoveryPolicy())
    (tmp_path / "audit.jsonl").write_text("garbage line\n" + rec.model_dump_json() + "\n")
    cfg = tmp_path / "c.yaml"
    # Temporal unreachable whatever runs on the default port: "nope" is looked up in the audit file only
    cfg.write_text(f"name: c\naudit_file: {tmp_path}/audit.jsonl\nstate_dir: {tmp_path}/s\n"
                   "temporal: {address: '127.0.0.1:1'}\n")
    r = revive("explain", "c-1-x-a0-crash", "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    assert "restart_in_place" in r.stdout and "recovered" in r.stdout and "\x1b" not in r.stdout
    r = revive("explain", "nope", "--config", str(cfg))
    assert r.returncode == 2 and "no closed incident" in r.stderr


def test_usage_errors_are_messages_not_tracebacks():
    for args in (["show"], ["incidents", "--bogus"], ["nosuchcmd"]):
        r = revive(*args)
        assert r.returncode != 0 and "Traceback" not in r.stderr, (args, r.stderr)


@pytest.mark.temporal
async def test_an_approval_sent_while_the_worker_is_gone_never_acts_later(local_env, tmp_path):
    """Ghost approval (chaos finding): the worker polled a moment ago and is gone. ``revive approve``
    gives up within its timeout with exit 4 and says nothing was decided; when a worker returns,
    the workflow refuses the late decision as stale and nothing runs."""
    import asyncio
    import uuid

    from revive.models import IncidentOutcome
    from revive.policy import RecoveryPolicy
    from tests.helpers.builders import fake_cluster, incident
    from tests.workflows.test_incident import _wait_state
    from worker.main import build_worker
    from workflows.incident import IncidentWorkflow

    sched, ccfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    tq = f"tq-{uuid.uuid4().hex[:6]}"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: fake\naudit_file: {tmp_path}/a.jsonl\nstate_dir: {tmp_path}/s\n"
                   f"temporal: {{address: '{local_env.client.service_client.config.target_host}', task_queue: {tq}}}\n")
    inp = incident(log, RecoveryPolicy(approval={"timeout": 3600}, verify={"timeout": 5, "poll_interval": 0.2}),
                   iid=f"fake-7-a0-{uuid.uuid4().hex[:6]}")
    async with build_worker(local_env.client, ccfg, sched, task_queue=tq):
        h = await local_env.client.start_workflow(IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq)
        await _wait_state(h, "awaiting_approval")
    # the worker is gone; the server still lists it as a poller for a while
    r = await asyncio.to_thread(revive, "approve", inp.incident_id, "--as", "alice", "--timeout", "3",
                                "--config", str(cfg))
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert "nothing was decided" in " ".join(r.stderr.split())  # rich wraps at 80 columns
    async with build_worker(local_env.client, ccfg, sched, task_queue=tq):
        await asyncio.sleep(3)  # the worker back: the late approval reaches the workflow, which refuses it
        status = await h.query("status")
        assert status["state"] == "awaiting_approval" and status["decision"] is None
        await h.execute_update("decide", {"decision": "reject", "approver": "bob"})
        res = await h.result()
    assert res.outcome == IncidentOutcome.rejected and sched.mutating_calls == []
