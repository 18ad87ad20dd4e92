"""Traces of every incident with OpenTelemetry (the SDK's tracer provider, Temporal's interceptor).

Opt-in with ``REVIVE_TRACE_FILE=/path/spans.jsonl``: the worker, monitor and CLI then trace their
Temporal calls (workflow start, signals, updates, each workflow run and activity) through
``temporalio.contrib.opentelemetry.TracingInterceptor`` and export the spans as JSON, one per
line, with the SDK's ``ConsoleSpanExporter`` into that file. Without it nothing is set up and no
interceptor is added. (An OTLP exporter, for a collector, comes with the metrics and traces issue.)
"""

from __future__ import annotations

import os

_configured = False


def tracing_interceptors() -> list:
    """``[TracingInterceptor()]`` when ``REVIVE_TRACE_FILE`` is set, else ``[]``."""
    global _configured
    path = os.environ.get("REVIVE_TRACE_FILE")
    if not path:
        return []
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    from temporalio.contrib.opentelemetry import TracingInterceptor

    if not _configured:
        out = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        provider = TracerProvider(resource=Resource.create({"service.name": "revive"}))
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
            out=out, formatter=lambda span: span.to_json(indent=None) + "\n")))
        trace.set_tracer_provider(provider)
        _configured = True
    return [TracingInterceptor()]
