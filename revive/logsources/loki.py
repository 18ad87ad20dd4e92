"""Grafana Loki as a log source (HTTP API, https://grafana.com/docs/loki/latest/reference/loki-http-api/).

Read path: ``GET /loki/api/v1/query_range`` with ``query`` = a LogQL stream selector rendered from
the configured label template (``{job="slurm", slurm_job_id="{job_id}"}``; every value quoted as
a Go string literal, so a job id cannot inject matchers), ``start``/``end`` in Unix nanoseconds
(``start`` inclusive, ``end`` exclusive, as documented), ``direction=forward``, ``limit``.
Response (documented shape)::

    {"status": "success",
     "data": {"resultType": "streams",
              "result": [{"stream": {<labels>}, "values": [["<ns>", "<line>"], ...]}, ...],
              "stats": {...}}}

Entries of all streams are merged by timestamp. The cursor is the newest delivered timestamp; the
next query starts there (inclusive) and drops entries already delivered at that timestamp (digest
of stream labels and line). A full page (``limit`` entries) continues from its last timestamp.

Follow mode (``follow=True``): ``GET /loki/api/v1/tail`` over WebSocket (``query``, ``start`` ns,
``delay_for`` s ≤ 5, ``limit``); messages ``{"streams": [...], "dropped_entries": [{"labels": {...},
"timestamp": "<ns>"}]}``. Dropped entries are fetched again with ``query_range``. The tail is
reconnected with exponential back-off from the newest timestamp received; while it is down,
``read_new`` polls. Needs the ``websockets`` package (imported only in follow mode).

Multi-tenancy: ``X-Scope-OrgID: <tenant>``. Auth: ``Authorization: Bearer <token_file content>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx

from revive.logsources.base import (
    Entry,
    HttpLogSource,
    LogSourceError,
    LogSourceUnavailable,
    StreamSelector,
    StreamState,
    TokenFile,
    check_response,
    render_matchers,
)

LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""Loki label names (Prometheus rules)."""


def logql_selector(template: Mapping[str, str], sel: StreamSelector) -> str:
    """The LogQL stream selector for ``sel`` (see :func:`revive.logsources.base.render_matchers`)."""
    return render_matchers(template, sel, LABEL_NAME)


def _stream_key(labels: Mapping[str, str]) -> str:
    return json.dumps(dict(labels), sort_keys=True, ensure_ascii=False)


def parse_streams(result: Any, what: str) -> list[Entry]:
    """``[{"stream": {...}, "values": [["<ns>", "<line>", {metadata}?], ...]}, ...]`` → entries.
    A malformed value is skipped (one bad entry never hides the others)."""
    if not isinstance(result, list):
        raise LogSourceUnavailable(f"{what}: 'result' is not a list")
    out: list[Entry] = []
    for s in result:
        if not isinstance(s, Mapping):
            continue
        labels = s.get("stream") or {}
        if not isinstance(labels, Mapping):
            labels = {}
        labels = {str(k): str(v) for k, v in labels.items()}
        key = _stream_key(labels)
        for v in s.get("values") or ():
            try:
                ts = int(v[0])
                line = v[1]
            except (TypeError, ValueError, IndexError, KeyError):
                continue
            if ts < 0 or not isinstance(line, str):
                continue
            out.append(Entry(ts_ns=ts, line=line, labels=labels, stream_key=key))
    return out


class LokiLogSource(HttpLogSource):
    """:class:`revive.logsources.base.LogSource` over Loki. See the module docstring.

    ``selector_template``: label → value template (``{job_id}``, ``{path}``, ``{hosts}``, ``{<label>}``).
    ``client``: an ``httpx.AsyncClient`` to use (not closed by :meth:`close`); or ``transport``
    to build one (tests pass ``httpx.MockTransport``). Other knobs: see :class:`HttpLogSource`.
    """

    kind = "loki"

    def __init__(self, base_url: str, selector_template: Mapping[str, str], *,
                 client: httpx.AsyncClient | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 tenant: str | None = None, token_file: str | None = None, timeout_s: float = 10.0,
                 delay_for_s: int = 0, ws_max_size: int = 16 * 1024 * 1024, **kw: Any) -> None:
        super().__init__(**kw)
        if not selector_template:
            raise ValueError("selector_template needs at least one label")
        for name in selector_template:
            if not LABEL_NAME.fullmatch(name):
                raise ValueError(f"invalid Loki label name {name!r}")
        self.base_url = base_url.rstrip("/")
        self.template = dict(selector_template)
        self.tenant = tenant
        self.token = TokenFile(token_file)
        self.timeout_s = timeout_s
        self.delay_for_s = max(0, min(5, int(delay_for_s)))  # the API caps delay_for at 5
        self.ws_max_size = ws_max_size
        if self.follow:
            try:
                import websockets.asyncio.client  # noqa: F401
            except ImportError as e:
                raise ValueError("Loki follow mode needs the 'websockets' package (>= 15)") from e
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(transport=transport, timeout=timeout_s)

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json"}
        if self.tenant:
            h["X-Scope-OrgID"] = self.tenant
        h.update(self.token.header())
        return h

    async def _aclose_transport(self) -> None:
        if self._own_client:
            await self.client.aclose()

    async def _query(self, sel: StreamSelector, start_ns: int, end_ns: int) -> list[Entry]:
        what = "loki query_range"
        params = {"query": logql_selector(self.template, sel), "start": str(start_ns), "end": str(end_ns),
                  "limit": str(self.limit), "direction": "forward"}
        try:
            r = await self.client.get(f"{self.base_url}/loki/api/v1/query_range", params=params,
                                      headers=self._headers(), timeout=self.timeout_s)
            body = await r.aread()
        except httpx.HTTPError as e:  # connection refused, reset, timeout, protocol junk
            raise LogSourceUnavailable(f"{what}: {type(e).__name__}: {e}") from e
        check_response(r.status_code, r.headers, body, what, self.backoff_s)
        try:
            doc = json.loads(body.decode("utf-8", "replace"))
        except ValueError as e:
            raise LogSourceUnavailable(f"{what}: response is not JSON") from e
        if not isinstance(doc, Mapping) or doc.get("status") != "success" or not isinstance(doc.get("data"), Mapping):
            raise LogSourceUnavailable(f"{what}: unexpected response shape")
        data = doc["data"]
        if data.get("resultType") != "streams":
            raise LogSourceError(f"{what}: resultType {data.get('resultType')!r}, not 'streams' "
                                 "(the label template must render a plain stream selector)")
        return parse_streams(data.get("result"), what)

    # ---- follow mode -------------------------------------------------------------------------
    def tail_url(self, sel: StreamSelector, start_ns: int) -> str:
        u = urlsplit(self.base_url)
        scheme = {"http": "ws", "https": "wss"}.get(u.scheme, u.scheme)
        q = urlencode({"query": logql_selector(self.template, sel), "start": str(start_ns),
                       "limit": str(self.limit), "delay_for": str(self.delay_for_s)})
        return urlunsplit((scheme, u.netloc, u.path.rstrip("/") + "/loki/api/v1/tail", q, ""))

    async def _tail_once(self, st: StreamState, start_ns: int) -> None:
        from websockets.asyncio.client import connect  # checked in __init__
        url = self.tail_url(st.sel, start_ns)
        async with connect(url, additional_headers=self._headers(), open_timeout=self.timeout_s,
                           max_size=self.ws_max_size, proxy=None) as ws:
            st.connected = True
            st.last_error = None
            async for msg in ws:
                self._on_tail_message(st, msg)

    def _on_tail_message(self, st: StreamState, msg: str | bytes) -> None:
        try:
            doc = json.loads(msg if isinstance(msg, str) else msg.decode("utf-8", "replace"))
        except ValueError:
            return
        if not isinstance(doc, Mapping):
            return
        self._push(st, parse_streams(doc.get("streams") or [], "loki tail"))
        for d in doc.get("dropped_entries") or ():
            try:
                labels = {str(k): str(v) for k, v in (d.get("labels") or {}).items()}
                st.dropped.add((_stream_key(labels), int(d["timestamp"])))
            except (AttributeError, KeyError, TypeError, ValueError):
                continue
