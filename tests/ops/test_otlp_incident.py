"""A real incident's span tree over OTLP: IncidentWorkflow on the time-skipping server with the
production worker, Temporal's TracingInterceptor and the OTLP provider (revive.otlp) configured only
by OTEL_* → the loopback receiver gets gather → attribute → runbook → verify spans in one trace."""

from __future__ import annotations

import os
import uuid

import pytest
from temporalio import activity
from temporalio.client import Client

from revive.decide.budgets import JobIncidentHistory
from revive.models import IncidentHistoryInput, IncidentOutcome
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster, incident
from tests.revive.observability.otlp_receiver import OTLPReceiver
from worker.main import build_worker
from workflows.incident import IncidentWorkflow

pytestmark = pytest.mark.temporal


@activity.defn(name="incident_history")
async def no_history(inp: IncidentHistoryInput) -> JobIncidentHistory:
    return JobIncidentHistory()


async def test_incident_span_tree_reaches_otlp(ts_env, tmp_path, monkeypatch):
    from temporalio.contrib.opentelemetry import TracingInterceptor

    from revive.otlp import otlp_tracer_provider

    for k in list(os.environ):
        if k.startswith("OTEL_"):
            monkeypatch.delenv(k)
    with OTLPReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "revive-worker")
        provider = otlp_tracer_provider()
        assert provider is not None
        cfg = ts_env.client.config()
        cfg["interceptors"] = [TracingInterceptor(provider.get_tracer("revive"))]
        client = Client(**cfg)  # the worker takes the client's interceptors that are worker ones too
        sched, ccfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
        pol = RecoveryPolicy(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})
        tq = f"otlp-{uuid.uuid4().hex[:6]}"
        try:
            async with build_worker(client, ccfg, sched, task_queue=tq, replace=[no_history]):
                res = await client.execute_workflow(IncidentWorkflow.run, incident(log, pol),
                                                    id=f"otlp-{uuid.uuid4().hex[:8]}", task_queue=tq)
            assert res.outcome == IncidentOutcome.recovered, res.reason
            assert provider.force_flush(10_000)
            spans = rx.wait_for_spans(12)
        finally:
            provider.shutdown()
    names = [s.name for s in spans]
    by = {s.name: s for s in spans}
    root = by["StartWorkflow:IncidentWorkflow"]
    run = by["RunWorkflow:IncidentWorkflow"]
    assert run.parent_span_id == root.span_id
    for stage in ("gather_evidence", "attribute", "append_audit"):
        assert f"RunActivity:{stage}" in by, names
    assert "StartChildWorkflow:DrainAndRequeueRunbook" in by, names
    child_run = by["RunWorkflow:DrainAndRequeueRunbook"]
    assert child_run.parent_span_id == by["StartChildWorkflow:DrainAndRequeueRunbook"].span_id
    for act in ("drain_nodes", "requeue_job", "verify_progress"):
        assert f"RunActivity:{act}" in by, names
    assert len({s.trace_id for s in spans}) == 1, "one trace per incident"
    assert {s.service_name for s in spans} == {"revive-worker"}

    ids = {s.span_id: s for s in spans}

    def ancestors(s):
        while s.parent_span_id and s.parent_span_id in ids:
            s = ids[s.parent_span_id]
            yield s.name

    # Temporal's interceptor parents a workflow's outbound spans on the context it was started with
    # (StartWorkflow / StartChildWorkflow); RunWorkflow spans are their siblings
    verify = list(ancestors(by["RunActivity:verify_progress"]))
    assert verify[:2] == ["StartActivity:verify_progress", "StartChildWorkflow:DrainAndRequeueRunbook"], verify
    assert verify[-1] == "StartWorkflow:IncidentWorkflow"
    for stage in ("gather_evidence", "attribute"):
        chain = list(ancestors(by[f"RunActivity:{stage}"]))
        assert chain == [f"StartActivity:{stage}", "StartWorkflow:IncidentWorkflow"], chain
    assert by["StartChildWorkflow:DrainAndRequeueRunbook"].parent_span_id == root.span_id
