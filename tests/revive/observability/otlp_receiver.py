"""A small OTLP/HTTP trace receiver on loopback, for tests (stdlib ``http.server`` in a thread).

Accepts ``POST /v1/traces`` with ``Content-Type: application/x-protobuf`` (optionally
``Content-Encoding: gzip`` or ``deflate``), decodes it as
``opentelemetry.proto.collector.trace.v1.trace_service_pb2.ExportTraceServiceRequest`` and answers
``200`` with an empty ``ExportTraceServiceResponse``, as a collector does. Anything else: ``404``
(other path), ``415`` (other content type), ``400`` (undecodable body).

Use the ``otlp_receiver`` fixture (``tests/revive/observability/conftest.py``) or::

    with OTLPReceiver() as rx:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = rx.endpoint   # http://127.0.0.1:<port>
        ...
        spans = rx.wait_for_spans(5)
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_SPAN_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _any_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


@dataclass
class ReceivedSpan:
    """One span as the receiver decoded it (ids as lowercase hex; ``parent_span_id`` "" for a root)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    start_unix_nano: int
    end_unix_nano: int
    status_code: int

    @property
    def service_name(self) -> str | None:
        return self.resource.get("service.name")


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    """Request headers, names lowercased."""
    request: ExportTraceServiceRequest | None
    status: int


@dataclass
class OTLPReceiver:
    """Start with ``start()`` (or ``with``); ``endpoint`` is the base URL for
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``traces_url`` the full one for ``…_TRACES_ENDPOINT``."""

    host: str = "127.0.0.1"
    port: int = 0
    requests: list[ReceivedRequest] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> OTLPReceiver:
        rx = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _reply(self, status: int, body: bytes = b"", ctype: str = "application/x-protobuf") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, req = 200, None
                ctype = headers.get("content-type", "").split(";")[0].strip()
                if self.path.split("?")[0] != "/v1/traces":
                    status = 404
                elif ctype != "application/x-protobuf":
                    status = 415
                else:
                    try:
                        enc = headers.get("content-encoding", "").lower()
                        if enc == "gzip":
                            body = gzip.decompress(body)
                        elif enc == "deflate":
                            body = zlib.decompress(body)
                        req = ExportTraceServiceRequest()
                        req.ParseFromString(body)
                    except Exception:
                        status, req = 400, None
                with rx._cond:
                    rx.requests.append(ReceivedRequest(path=self.path, headers=headers, request=req, status=status))
                    rx._cond.notify_all()
                if status == 200:
                    self._reply(200, ExportTraceServiceResponse().SerializeToString())
                else:
                    self._reply(status, b"rejected", "text/plain")

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="otlp-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- addresses -----------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def traces_url(self) -> str:
        return f"{self.endpoint}/v1/traces"

    # ---- what arrived --------------------------------------------------------------------------
    def spans(self) -> list[ReceivedSpan]:
        """Every span of every accepted request, in arrival order."""
        out: list[ReceivedSpan] = []
        with self._cond:
            reqs = [r.request for r in self.requests if r.request is not None]
        for req in reqs:
            for rs in req.resource_spans:
                res = _attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append(ReceivedSpan(
                            name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(), kind=_SPAN_KINDS.get(s.kind, str(s.kind)),
                            attributes=_attrs(s.attributes), resource=res, scope=ss.scope.name,
                            start_unix_nano=s.start_time_unix_nano, end_unix_nano=s.end_time_unix_nano,
                            status_code=s.status.code))
        return out

    def wait_for_spans(self, n: int, timeout: float = 10.0) -> list[ReceivedSpan]:
        """Block until at least ``n`` spans arrived (then return them all) or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                have = sum(len(s.spans) for r in self.requests if r.request is not None
                           for rs in r.request.resource_spans for s in rs.scope_spans)
                if have >= n:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"OTLP receiver got {have} spans, wanted {n} "
                                       f"({len(self.requests)} requests: {[r.status for r in self.requests]})")
                self._cond.wait(left)
        return self.spans()

    def by_name(self) -> dict[str, ReceivedSpan]:
        return {s.name: s for s in self.spans()}
