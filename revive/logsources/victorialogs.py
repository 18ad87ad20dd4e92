"""VictoriaLogs as a log source (https://docs.victoriametrics.com/victorialogs/querying/).

Read path: ``POST /select/logsql/query`` (form field ``query``; GET with the same argument works
too) with a LogsQL query built as::

    {slurm_job_id="123", host=~"n1|n2"} _time:[2023-11-14T22:13:20.000000000Z, 2023-11-14T22:14:20.000000000Z) | sort by (_time) limit 1000

- the stream filter ``{...}`` is rendered from the configured label template, each value a
  double-quoted string literal (LogsQL string literals follow Go's rules), so a job id cannot
  inject filters;
- ``_time:[start, end)`` is the documented half-open range filter, RFC3339 with nanoseconds;
- ``| sort by (_time) limit N`` returns the N *oldest* entries of the range. (The ``limit`` query
  argument returns the N *newest*, which cannot be continued forward from a cursor; the sort pipe
  with ``limit`` is documented to keep only N entries in memory.)

The response is JSON lines, one object per entry with ``_msg``, ``_time`` (RFC3339, nanoseconds),
``_stream`` (``{label="value",...}``), ``_stream_id`` and the other fields. The cursor is the
newest delivered ``_time``; the next query starts there (inclusive) and drops entries already
delivered at that time (digest of ``_stream`` and ``_msg``). A full page continues from its last
``_time``.

Follow mode (``follow=True``): ``POST /select/logsql/tail`` (``query`` without pipes,
``start_offset`` = how far back to start, as a duration) streams JSON lines; reconnected with
exponential back-off; ``read_new`` polls while it is down.

Tenancy: ``AccountID`` / ``ProjectID`` headers. Auth: ``Authorization: Bearer <token_file content>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from revive.logsources.base import (
    Entry,
    HttpLogSource,
    LogSourceUnavailable,
    StreamSelector,
    StreamState,
    TokenFile,
    check_response,
    render_matchers,
)

FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
"""Stream field names accepted in the template (dots allowed: ``kubernetes.pod_name``)."""

_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)")


def parse_rfc3339_ns(s: str) -> int:
    """``2023-01-01T13:32:13.123456789Z`` → Unix nanoseconds (``ValueError`` when it is not)."""
    m = _RFC3339.fullmatch(s.strip())
    if not m:
        raise ValueError(f"not an RFC3339 time: {s!r}")
    y, mo, d, h, mi, sec, frac, tz = m.groups()
    base = datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), tzinfo=UTC)
    off = 0
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        off = sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    frac_ns = int((frac or "0").ljust(9, "0"))
    return (int(base.timestamp()) - off) * 1_000_000_000 + frac_ns


def format_rfc3339_ns(ns: int) -> str:
    s, frac = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


_STREAM_PAIR = re.compile(r'\s*([^=,{}\s"]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def parse_stream_labels(s: str) -> dict[str, str]:
    """``{host="n1",slurm_job_id="1\\"2"}`` → ``{"host": "n1", "slurm_job_id": '1"2'}`` (best effort)."""
    s = s.strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1]
    out: dict[str, str] = {}
    for m in _STREAM_PAIR.finditer(s):
        try:
            out[m.group(1)] = json.loads(f'"{m.group(2)}"')
        except ValueError:
            out[m.group(1)] = m.group(2)
    return out


def logsql_stream_filter(template: Mapping[str, str], sel: StreamSelector) -> str:
    return render_matchers(template, sel, FIELD_NAME)


def _entry(obj: Any) -> Entry | None:
    if not isinstance(obj, Mapping):
        return None
    try:
        ts = parse_rfc3339_ns(str(obj["_time"]))
    except (KeyError, ValueError):
        return None
    msg = obj.get("_msg", "")
    stream = str(obj.get("_stream", "{}"))
    labels = parse_stream_labels(stream)
    for k, v in obj.items():
        if not k.startswith("_") and isinstance(v, str) and k not in labels:
            labels[k] = v
    return Entry(ts_ns=ts, line=msg if isinstance(msg, str) else json.dumps(msg), labels=labels, stream_key=stream)


def parse_json_lines(body: bytes) -> tuple[list[Entry], int]:
    """JSON lines → (entries, count of lines that were not a log entry)."""
    out: list[Entry] = []
    bad = 0
    for raw in body.split(b"\n"):
        raw = raw.strip()
        if not raw:
            continue
        try:
            e = _entry(json.loads(raw.decode("utf-8", "replace")))
        except ValueError:
            e = None
        if e is None:
            bad += 1
        else:
            out.append(e)
    return out, bad


class VictoriaLogsSource(HttpLogSource):
    """:class:`revive.logsources.base.LogSource` over VictoriaLogs. See the module docstring.

    ``stream_template``: stream field → value template (``{job_id}``, ``{path}``, ``{hosts}``,
    ``{<label>}``). ``account_id``/``project_id``: the tenant headers. ``client``/``transport``
    as for :class:`revive.logsources.loki.LokiLogSource`."""

    kind = "victorialogs"

    def __init__(self, base_url: str, stream_template: Mapping[str, str], *,
                 client: httpx.AsyncClient | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 account_id: str | None = None, project_id: str | None = None, token_file: str | None = None,
                 timeout_s: float = 10.0, extra_filter: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        if not stream_template:
            raise ValueError("stream_template needs at least one field")
        for name in stream_template:
            if not FIELD_NAME.fullmatch(name):
                raise ValueError(f"invalid VictoriaLogs stream field name {name!r}")
        self.base_url = base_url.rstrip("/")
        self.template = dict(stream_template)
        self.account_id = account_id
        self.project_id = project_id
        self.token = TokenFile(token_file)
        self.timeout_s = timeout_s
        self.extra_filter = extra_filter.strip()
        self.malformed = 0
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(transport=transport, timeout=timeout_s)

    def _headers(self) -> dict[str, str]:
        h: dict[str, str] = {}
        if self.account_id is not None:
            h["AccountID"] = str(self.account_id)
        if self.project_id is not None:
            h["ProjectID"] = str(self.project_id)
        h.update(self.token.header())
        return h

    async def _aclose_transport(self) -> None:
        if self._own_client:
            await self.client.aclose()

    def build_query(self, sel: StreamSelector, start_ns: int, end_ns: int) -> str:
        f = logsql_stream_filter(self.template, sel)
        extra = f" {self.extra_filter}" if self.extra_filter else ""
        return (f"{f}{extra} _time:[{format_rfc3339_ns(start_ns)}, {format_rfc3339_ns(end_ns)}) "
                f"| sort by (_time) limit {self.limit}")

    async def _query(self, sel: StreamSelector, start_ns: int, end_ns: int) -> list[Entry]:
        what = "victorialogs query"
        data = {"query": self.build_query(sel, start_ns, end_ns)}
        try:
            r = await self.client.post(f"{self.base_url}/select/logsql/query", data=data,
                                       headers=self._headers(), timeout=self.timeout_s)
            body = await r.aread()
        except httpx.HTTPError as e:
            raise LogSourceUnavailable(f"{what}: {type(e).__name__}: {e}") from e
        check_response(r.status_code, r.headers, body, what, self.backoff_s)
        ctype = r.headers.get("content-type", "")
        if "html" in ctype:  # a proxy's error page with status 200
            raise LogSourceUnavailable(f"{what}: response is {ctype}, not JSON lines")
        entries, bad = parse_json_lines(body)
        self.malformed += bad
        if bad and not entries:
            raise LogSourceUnavailable(f"{what}: response is not JSON lines")
        return entries

    # ---- follow mode -------------------------------------------------------------------------
    async def _tail_once(self, st: StreamState, start_ns: int) -> None:
        what = "victorialogs tail"
        q = logsql_stream_filter(self.template, st.sel)
        if self.extra_filter:
            q = f"{q} {self.extra_filter}"
        data = {"query": q}
        back_ms = -(-(self._now_ns() - start_ns) // 1_000_000) if start_ns else 0  # ceil
        if back_ms > 0:
            # the server starts at now - offset (1 s by default) - start_offset: a second early, de-duplicated
            data["start_offset"] = f"{back_ms}ms"
        timeout = httpx.Timeout(self.timeout_s, read=None)
        async with self.client.stream("POST", f"{self.base_url}/select/logsql/tail", data=data,
                                      headers=self._headers(), timeout=timeout) as r:
            if r.status_code != 200:
                body = await r.aread()
                check_response(r.status_code, r.headers, body, what, self.backoff_s)
            st.connected = True
            st.last_error = None
            buf = b""
            async for chunk in r.aiter_bytes():
                buf += chunk
                if b"\n" not in buf:
                    if len(buf) > 16 * 1024 * 1024:
                        buf = b""  # a runaway line: drop it rather than grow without bound
                    continue
                lines, buf = buf.rsplit(b"\n", 1)
                entries, bad = parse_json_lines(lines)
                self.malformed += bad
                self._push(st, entries)
