"""OTLP/HTTP trace export configured from the standard ``OTEL_*`` environment variables.

Configured when ``OTEL_TRACES_EXPORTER`` lists ``otlp``, or, with ``OTEL_TRACES_EXPORTER`` unset,
when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. Not
configured (nothing set up, ``None`` returned) when ``OTEL_TRACES_EXPORTER`` is ``none`` or lists
no ``otlp``, when ``OTEL_SDK_DISABLED=true``, or when the protocol
(``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL``) is other than ``http/protobuf`` (the only one shipped).

The exporter (``opentelemetry-exporter-otlp-proto-http``'s ``OTLPSpanExporter``) reads the rest
itself, as the specification says:

- ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is used as is; else ``OTEL_EXPORTER_OTLP_ENDPOINT`` +
  ``/v1/traces``; else ``http://localhost:4318/v1/traces``;
- ``OTEL_EXPORTER_OTLP[_TRACES]_HEADERS`` (``key=value,key2=value2``), ``…_TIMEOUT``,
  ``…_COMPRESSION``, ``…_CERTIFICATE``, ``…_CLIENT_KEY``, ``…_CLIENT_CERTIFICATE``;
- ``OTEL_BSP_*`` tune the ``BatchSpanProcessor``;
- ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` set the resource (``revive_resource``;
  ``service.name`` defaults to ``revive``).

Headers usually carry credentials: this module never logs them (nor their names), and logs the
endpoint without user info, query or fragment.

Composable with ``revive.telemetry`` (the JSON-lines file exporter): ``add_otlp_exporter(provider)``
adds the OTLP processor to any ``TracerProvider``; ``otlp_tracer_provider()`` builds a new one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

log = logging.getLogger("revive.otlp")

DEFAULT_SERVICE = "revive"
DEFAULT_ENDPOINT = "http://localhost:4318"
SUPPORTED_PROTOCOL = "http/protobuf"


def _get(env: Mapping[str, str], name: str) -> str:
    return (env.get(name) or "").strip()


def otlp_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for OTLP trace export (see the module doc). Logs why not when
    an OTLP setting is present but cannot be honoured."""
    env = os.environ if env is None else env
    if _get(env, "OTEL_SDK_DISABLED").lower() == "true":
        return False
    exporters = _get(env, "OTEL_TRACES_EXPORTER")
    if exporters:
        names = {x.strip().lower() for x in exporters.split(",") if x.strip()}
        if "otlp" not in names:
            return False
    elif not (_get(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _get(env, "OTEL_EXPORTER_OTLP_ENDPOINT")):
        return False
    proto = _get(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _get(env, "OTEL_EXPORTER_OTLP_PROTOCOL")
    if proto and proto != SUPPORTED_PROTOCOL:
        log.warning("OTLP trace export not set up: protocol %r is not supported (only %s)", proto, SUPPORTED_PROTOCOL)
        return False
    return True


def traces_endpoint(env: Mapping[str, str] | None = None) -> str:
    """The URL spans are posted to, resolved as the exporter does."""
    env = os.environ if env is None else env
    if ep := _get(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return ep
    base = _get(env, "OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
    return f"{base.removesuffix('/')}/v1/traces"


def redact_url(url: str) -> str:
    """``url`` without user info, query and fragment (safe to log)."""
    try:
        p = urlsplit(url)
        host = p.hostname or ""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        netloc = host + (f":{p.port}" if p.port else "")
        return urlunsplit((p.scheme, netloc, p.path, "", ""))
    except ValueError:
        return "<unparseable endpoint>"


def revive_resource(default_service: str = DEFAULT_SERVICE) -> Resource:
    """The SDK's resource from ``OTEL_RESOURCE_ATTRIBUTES`` / ``OTEL_SERVICE_NAME``, with
    ``service.name`` = ``default_service`` when neither names the service."""
    res = Resource.create()
    name = str(res.attributes.get(SERVICE_NAME, ""))
    if not name or name.startswith("unknown_service"):
        res = res.merge(Resource({SERVICE_NAME: default_service}))
    return res


def add_otlp_exporter(provider: TracerProvider) -> BatchSpanProcessor | None:
    """Add a ``BatchSpanProcessor(OTLPSpanExporter())`` to ``provider`` when the environment asks
    for OTLP export; return the processor (``None``: not configured, nothing added)."""
    if not otlp_configured():
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    processor = BatchSpanProcessor(OTLPSpanExporter())
    provider.add_span_processor(processor)
    log.info("OTLP trace export to %s", redact_url(traces_endpoint()))
    return processor


def otlp_tracer_provider(default_service: str = DEFAULT_SERVICE) -> TracerProvider | None:
    """A new ``TracerProvider`` (resource from ``revive_resource``) exporting over OTLP/HTTP, or
    ``None`` when the environment does not ask for it. Does not make it the global provider
    (``opentelemetry.trace.set_tracer_provider`` is the caller's choice)."""
    if not otlp_configured():
        return None
    provider = TracerProvider(resource=revive_resource(default_service))
    add_otlp_exporter(provider)
    return provider
