"""OTLP trace export configured only by OTEL_* variables, checked against a real OTLP/HTTP receiver
(protobuf over HTTP on loopback, decoded with opentelemetry-proto)."""

from __future__ import annotations

import io
import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from revive.otlp import (
    add_otlp_exporter,
    otlp_configured,
    otlp_tracer_provider,
    redact_url,
    revive_resource,
    traces_endpoint,
)

SECRET = "s3cr3t-token-do-not-log"

INCIDENT_TREE = [
    # (name, parent name)
    ("RunWorkflow:IncidentWorkflow", None),
    ("StartActivity:gather_evidence", "RunWorkflow:IncidentWorkflow"),
    ("StartActivity:attribute", "RunWorkflow:IncidentWorkflow"),
    ("RunWorkflow:DrainAndRequeueRunbook", "RunWorkflow:IncidentWorkflow"),
    ("StartActivity:drain_nodes", "RunWorkflow:DrainAndRequeueRunbook"),
    ("StartActivity:verify_progress", "RunWorkflow:DrainAndRequeueRunbook"),
]


def make_incident_spans(provider: TracerProvider, incident_id: str = "local-1-20261201T000000-a0-gpu") -> None:
    """The span shape Temporal's TracingInterceptor gives an incident, made by hand."""
    tracer = provider.get_tracer("revive.test")
    attrs = {"temporalWorkflowID": incident_id}
    with tracer.start_as_current_span("RunWorkflow:IncidentWorkflow", kind=SpanKind.SERVER, attributes=attrs):
        with tracer.start_as_current_span("StartActivity:gather_evidence", kind=SpanKind.CLIENT):
            pass
        with tracer.start_as_current_span("StartActivity:attribute", kind=SpanKind.CLIENT):
            pass
        with tracer.start_as_current_span("RunWorkflow:DrainAndRequeueRunbook", kind=SpanKind.SERVER,
                                          attributes={"temporalWorkflowID": f"{incident_id}-runbook"}):
            with tracer.start_as_current_span("StartActivity:drain_nodes", kind=SpanKind.CLIENT,
                                              attributes={"revive.nodes": ["node2"]}):
                pass
            with tracer.start_as_current_span("StartActivity:verify_progress", kind=SpanKind.CLIENT):
                pass


def assert_incident_tree(spans, service: str) -> None:
    by = {s.name: s for s in spans}
    assert set(by) >= {n for n, _ in INCIDENT_TREE}, sorted(by)
    root = by["RunWorkflow:IncidentWorkflow"]
    assert root.parent_span_id == ""
    assert root.kind == "SERVER"
    for name, parent in INCIDENT_TREE:
        s = by[name]
        assert s.trace_id == root.trace_id, name
        assert s.service_name == service, (name, s.resource)
        assert s.end_unix_nano >= s.start_unix_nano > 0
        if parent:
            assert s.parent_span_id == by[parent].span_id, (name, parent)
    assert by["StartActivity:drain_nodes"].attributes["revive.nodes"] == ["node2"]
    assert root.attributes["temporalWorkflowID"].startswith("local-1-")


def test_provider_from_env_only_exports_incident_tree(otlp_receiver, clean_otel_env, caplog):
    env = clean_otel_env
    env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    env.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer {SECRET},x-revive-tenant=team-a")
    env.setenv("OTEL_SERVICE_NAME", "revive-worker")
    caplog.set_level(logging.DEBUG)

    provider = otlp_tracer_provider()
    assert provider is not None
    try:
        make_incident_spans(provider)
        assert provider.force_flush(10_000)
        spans = otlp_receiver.wait_for_spans(len(INCIDENT_TREE))
    finally:
        provider.shutdown()
    assert_incident_tree(spans, "revive-worker")
    ok = [r for r in otlp_receiver.requests if r.status == 200]
    assert ok and all(r.path == "/v1/traces" for r in ok)
    assert ok[0].headers["content-type"] == "application/x-protobuf"
    # the headers from OTEL_EXPORTER_OTLP_HEADERS reached the collector ...
    assert ok[0].headers["authorization"] == f"Bearer {SECRET}"
    assert ok[0].headers["x-revive-tenant"] == "team-a"
    # ... and never a log line (ours or the SDK's)
    assert SECRET not in caplog.text
    assert "x-revive-tenant" not in caplog.text
    assert any("OTLP trace export to" in r.getMessage() for r in caplog.records)


def test_traces_endpoint_and_gzip(otlp_receiver, clean_otel_env):
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as is (no /v1/traces appended); gzip is decoded."""
    env = clean_otel_env
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", otlp_receiver.traces_url)
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9/ignored")  # the traces one wins
    env.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    assert traces_endpoint() == otlp_receiver.traces_url
    provider = otlp_tracer_provider()
    assert provider is not None
    try:
        make_incident_spans(provider)
        assert provider.force_flush(10_000)
        spans = otlp_receiver.wait_for_spans(len(INCIDENT_TREE))
    finally:
        provider.shutdown()
    assert_incident_tree(spans, "revive")  # OTEL_SERVICE_NAME unset: Revive's default
    assert otlp_receiver.requests[0].headers.get("content-encoding") == "gzip"


def test_composes_with_the_json_file_exporter(otlp_receiver, clean_otel_env):
    """add_otlp_exporter on a provider built like revive.telemetry's: both exporters get every span."""
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    clean_otel_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    out = io.StringIO()
    provider = TracerProvider(resource=revive_resource())
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
        out=out, formatter=lambda span: span.to_json(indent=None) + "\n")))
    processor = add_otlp_exporter(provider)
    assert processor is not None
    try:
        make_incident_spans(provider)
        assert provider.force_flush(10_000)
        spans = otlp_receiver.wait_for_spans(len(INCIDENT_TREE))
    finally:
        provider.shutdown()
    assert_incident_tree(spans, "revive")
    assert spans[0].resource["deployment.environment"] == "test"
    file_names = {json.loads(line)["name"] for line in out.getvalue().splitlines() if line.strip()}
    assert file_names == {n for n, _ in INCIDENT_TREE}


@pytest.mark.parametrize("env, expected", [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),  # the spec's default endpoint, localhost:4318
    ({"OTEL_TRACES_EXPORTER": "console,otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
    ({"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, False),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
     False),
])
def test_configured_from_env(clean_otel_env, env, expected):
    for k, v in env.items():
        clean_otel_env.setenv(k, v)
    assert otlp_configured() is expected
    provider = otlp_tracer_provider()
    assert (provider is not None) is expected
    assert (add_otlp_exporter(TracerProvider()) is not None) is expected
    if provider is not None:
        provider.shutdown()


def test_default_endpoint_and_redaction(clean_otel_env):
    assert traces_endpoint() == "http://localhost:4318/v1/traces"
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example:4318/")
    assert traces_endpoint() == "https://collector.example:4318/v1/traces"
    assert redact_url(f"https://user:{SECRET}@collector.example:4318/v1/traces?token={SECRET}#x") == \
        "https://collector.example:4318/v1/traces"


def test_resource_service_name(clean_otel_env):
    assert revive_resource().attributes["service.name"] == "revive"
    assert revive_resource("revive-monitor").attributes["service.name"] == "revive-monitor"
    clean_otel_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs")
    assert revive_resource().attributes["service.name"] == "from-attrs"
    clean_otel_env.setenv("OTEL_SERVICE_NAME", "from-service-name")
    assert revive_resource().attributes["service.name"] == "from-service-name"


def test_receiver_rejects_wrong_requests(otlp_receiver):
    import httpx

    assert httpx.post(otlp_receiver.endpoint + "/v1/metrics", content=b"",
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 404
    assert httpx.post(otlp_receiver.traces_url, content=b"{}",
                      headers={"Content-Type": "application/json"}).status_code == 415
    assert httpx.post(otlp_receiver.traces_url, content=b"\xff\xff\xff",
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 400
    assert otlp_receiver.spans() == []


@pytest.mark.parametrize("where", ["refused", "rejected"])
def test_failed_export_logs_no_header(otlp_receiver, clean_otel_env, caplog, where):
    """An export that fails (collector down, or answering 404) is logged by the SDK without the headers."""
    import socket

    if where == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{s.getsockname()[1]}/v1/traces"  # closed again: connection refused
    else:
        url = otlp_receiver.endpoint + "/not-traces"
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"authorization=Bearer {SECRET}")
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    caplog.set_level(logging.DEBUG)
    provider = otlp_tracer_provider()
    assert provider is not None
    try:
        make_incident_spans(provider)
        provider.force_flush(5_000)
    finally:
        provider.shutdown()
    if where == "rejected":
        assert [r.status for r in otlp_receiver.requests][:1] == [404]
        assert otlp_receiver.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert any(r.levelno >= logging.WARNING and r.name.startswith("opentelemetry") for r in caplog.records), \
        caplog.text
    assert SECRET not in caplog.text
