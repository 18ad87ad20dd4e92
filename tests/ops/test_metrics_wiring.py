"""The revive_* metrics hooks through a real incident (time-skipping server, FakeScheduler)."""

from __future__ import annotations

import uuid

import pytest
from temporalio import activity

from revive import metrics as rm
from revive.decide.budgets import JobIncidentHistory
from revive.models import IncidentHistoryInput, IncidentOutcome
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster, incident
from worker.main import build_worker
from workflows.incident import IncidentWorkflow

pytestmark = pytest.mark.temporal


@activity.defn(name="incident_history")
async def no_history(inp: IncidentHistoryInput) -> JobIncidentHistory:
    return JobIncidentHistory()


async def test_auto_incident_feeds_every_hook(ts_env, tmp_path, monkeypatch):
    m = rm.ReviveMetrics()
    monkeypatch.setattr(rm, "METRICS", m)
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})
    tq = f"tq-{uuid.uuid4()}"
    timed = rm.TimedScheduler(sched)  # as run_worker wraps SlurmCLI
    async with build_worker(ts_env.client, cfg, timed, task_queue=tq, replace=[no_history]):
        res = await ts_env.client.execute_workflow(IncidentWorkflow.run, incident(log, pol),
                                                   id=f"m-{uuid.uuid4().hex[:8]}", task_queue=tq)
    assert res.outcome == IncidentOutcome.recovered
    assert res.fault_time is not None, "fault_time comes from the attribution's root event"
    get = m.registry.get_sample_value
    assert get("revive_incidents_total", {"category": "gpu_hardware", "outcome": "recovered", "mode": "auto"}) == 1
    assert get("revive_drains_total") == 1
    assert get("revive_requeues_total") == 1
    assert get("revive_breaker_open", {"cluster": "fake"}) == 0
    assert get("revive_activity_seconds_count", {"activity": "append_audit", "outcome": "completed"}) == 1
    assert get("revive_activity_seconds_count", {"activity": "drain_nodes", "outcome": "completed"}) == 1
    # fault → detection / action / resume: observed, not skipped as missing
    assert get("revive_mttd_seconds_count") == 1
    assert get("revive_mttr_seconds_count") == 1
    assert get("revive_scheduler_call_seconds_count", {"call": "drain_nodes"}) == 1
    assert get("revive_scheduler_call_seconds_count", {"call": "get_job"}) >= 1


def test_resume_counts(monkeypatch):
    import asyncio

    from revive.health import resume_node
    from revive.models import NodeRecord
    from revive.scheduler.fake import FakeScheduler

    m = rm.ReviveMetrics()
    monkeypatch.setattr(rm, "METRICS", m)
    pol = RecoveryPolicy()
    s = FakeScheduler(cluster="c", jobs=[], nodes=[
        NodeRecord(name="n1", state="IDLE+DRAIN", reason=f"{pol.drain_reason_prefix}x")])
    ok, msg = asyncio.run(resume_node(s, None, "n1", None, pol))
    assert ok, msg
    assert m.registry.get_sample_value("revive_resumes_total") == 1


def test_monitor_observed_and_metrics_port(tmp_path):
    import types
    import urllib.request

    m = rm.ReviveMetrics()
    f = tmp_path / "a.log"
    f.write_bytes(b"x" * 100)
    mon = types.SimpleNamespace(follower=types.SimpleNamespace(states={str(f): types.SimpleNamespace(offset=40)}),
                                watches={"1": object(), "2": object()})
    import time

    rm.monitor_observed(mon, time.monotonic(), metrics=m)
    assert m.registry.get_sample_value("revive_monitor_lag_bytes_max") == 60
    assert m.registry.get_sample_value("revive_jobs_watched") == 2
    srv = m.serve(0)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=5).read().decode()
    finally:
        srv.stop()
    assert "revive_monitor_lag_bytes_max 60.0" in body
    rm.monitor_observed(object(), time.monotonic(), metrics=m)  # odd input: never raises


def test_cli_metrics_port_option_is_wired():
    from typer.testing import CliRunner

    from cli.main import app

    for verb in ("worker", "monitor"):
        out = CliRunner().invoke(app, [verb, "--help"], env={"COLUMNS": "200"}).output
        assert "--metrics-port" in out and "REVIVE_METRICS_PORT" in out, out
