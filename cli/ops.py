"""On-call helpers behind the CLI verbs (``incidents``, ``show``, ``approve``/``reject``, ``explain``,
``export``, ``watch``): visibility queries built safely, stage timings from history, the
worker-polling check. No typer here; ``cli.main`` owns the commands."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType

OPEN_STATES = ("opened", "gathering", "attributing", "planning", "awaiting_approval", "acting")
"""``ReviveState`` values of an incident still in progress (``revive.models.IncidentState``)."""
OUTCOMES = ("recovered", "not_recovered", "rejected", "expired", "escalated", "stopped", "no_action")
"""``ReviveState`` values of a closed incident (``revive.models.IncidentOutcome``)."""

_UNSAFE = re.compile(r"['\"\\\x00-\x1f\x7f]")
_REL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class QueryValueError(ValueError):
    """A filter value that cannot be put in a visibility query."""


def literal(value: str, what: str) -> str:
    """``value`` as a single-quoted visibility-query literal. A quote, backslash or control
    character is refused (never escaped: the server's escaping rules differ between visibility
    stores), so no value can end the literal and add a clause."""
    if not value or len(value) > 256 or _UNSAFE.search(value):
        raise QueryValueError(f"{what} {value!r}: not allowed in a query (no quotes, backslashes or control "
                              f"characters, 1-256 characters)")
    return f"'{value}'"


def parse_since(s: str, now: datetime | None = None) -> datetime:
    """``30m``, ``2h``, ``7d``, ``1w`` (before now) or an ISO-8601 time (UTC when no zone)."""
    now = now or datetime.now(UTC)
    m = _REL.match(s)
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
    try:
        d = datetime.fromisoformat(s.strip().replace("Z", "+00:00"))
    except ValueError:
        raise QueryValueError(f"--since {s!r}: expected 30m, 2h, 7d or an ISO-8601 time") from None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def incidents_query(state: str | None = None, job: str | None = None, node: str | None = None,
                    since: datetime | None = None, cluster: str | None = None) -> str:
    """The visibility query for ``revive incidents`` (every value through ``literal``)."""
    q = "WorkflowType='IncidentWorkflow'"
    if cluster:
        q += f" AND ReviveCluster={literal(cluster, 'cluster')}"
    if state:
        if state not in OPEN_STATES + OUTCOMES:
            raise QueryValueError(f"--state {state!r}: one of {', '.join(OPEN_STATES + OUTCOMES)}")
        q += f" AND ReviveState={literal(state, '--state')}"
        if state in OPEN_STATES:  # a terminated incident keeps its last stage: it is not waiting
            q += " AND ExecutionStatus='Running'"
    if job:
        q += f" AND ReviveJobId={literal(job, '--job')}"
    if node:
        n = literal(node, "--node")
        q += f" AND (ReviveNodes={n} OR ReviveCulprits={n})"
    if since:
        q += f" AND StartTime>='{since.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}'"
    return q


def shown_state(revive_state: str | None, status: str) -> str:
    """What the state column says: Revive's state while the workflow runs, or its outcome once it
    completed; a workflow ended otherwise (terminated, timed out, failed, cancelled) in an open
    stage shows the Temporal status instead (it is not waiting for anything any more)."""
    st = (revive_state or "").strip()
    if status == "running":
        return st or "opened"
    if st in OUTCOMES:
        return st
    return status


@dataclass
class Row:
    incident: str
    job: str | None
    category: str | None
    state: str
    revive_state: str | None
    temporal_status: str
    mode: str | None
    nodes: list[str]
    culprits: list[str]
    started: str
    closed: str | None
    task_queue: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _status(wf: Any) -> str:
    return wf.status.name.lower() if wf.status is not None else "unknown"


def _ts(d: datetime | None) -> str | None:
    return d.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if d else None


async def list_incidents(client: Any, query: str, limit: int = 50) -> list[Row]:
    rows = []
    async for wf in client.list_workflows(query, limit=limit):
        attrs = {p.key.name: p.value for p in wf.typed_search_attributes}
        status = _status(wf)
        rows.append(Row(
            incident=wf.id, job=attrs.get("ReviveJobId"), category=attrs.get("ReviveCategory"),
            state=shown_state(attrs.get("ReviveState"), status), revive_state=attrs.get("ReviveState"),
            temporal_status=status, mode=attrs.get("ReviveMode"), nodes=list(attrs.get("ReviveNodes") or []),
            culprits=list(attrs.get("ReviveCulprits") or []), started=_ts(wf.start_time) or "",
            closed=_ts(wf.close_time), task_queue=wf.task_queue,
        ))
    return rows


# ---- stages from history ----------------------------------------------------------------------

@dataclass
class Stage:
    state: str
    entered: datetime
    seconds: float | None = None
    """Until the next stage (or the close); for the current stage of a running incident, so far."""
    current: bool = False


@dataclass
class Stages:
    stages: list[Stage] = field(default_factory=list)
    started: datetime | None = None
    closed: datetime | None = None
    ended_how: str | None = None


def _state_of(ev: Any) -> str | None:
    fields = ev.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    if "ReviveState" not in fields:
        return None
    try:
        v = json.loads(fields["ReviveState"].data)
    except ValueError:
        return None
    return v if isinstance(v, str) else None


def stages_from_events(events: Sequence[Any], now: datetime | None = None) -> Stages:
    """Stage entry times (``ReviveState`` upserts) and durations from history events (the
    initial state is the start's search attribute). A closed incident's last stage ends at the close."""
    out = Stages()
    for ev in events:
        at = ev.event_time.ToDatetime().replace(tzinfo=UTC)
        t = ev.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            out.started = at
            out.stages.append(Stage("opened", at))
        elif t == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            st = _state_of(ev)
            if st and (not out.stages or out.stages[-1].state != st):
                out.stages.append(Stage(st, at))
        elif t in (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
                   EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
                   EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED):
            out.closed = at
            out.ended_how = EventType.Name(t).removeprefix("EVENT_TYPE_WORKFLOW_EXECUTION_").lower()
    for i, s in enumerate(out.stages):
        end = out.stages[i + 1].entered if i + 1 < len(out.stages) else out.closed
        if end is None and now is not None:
            s.seconds, s.current = max(0.0, (now - s.entered).total_seconds()), True
        elif end is not None:
            s.seconds = max(0.0, (end - s.entered).total_seconds())
    return out


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "…"
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


# ---- is a worker there? ----------------------------------------------------------------------

POLLER_FRESH_S = 90.0
"""A poller seen by the server within this many seconds counts as live (long polls last 60 s)."""


async def live_pollers(client: Any, task_queue: str, now: datetime | None = None) -> list[str]:
    """Identities of workers polling ``task_queue`` for workflow tasks, seen within ``POLLER_FRESH_S``."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    now = now or datetime.now(UTC)
    out = []
    for p in resp.pollers:
        seen = p.last_access_time.ToDatetime().replace(tzinfo=UTC) if p.HasField("last_access_time") else None
        if seen is None or (now - seen).total_seconds() <= POLLER_FRESH_S:
            out.append(p.identity or "?")
    return out


async def with_timeout(coro: Any, seconds: float) -> Any:
    return await asyncio.wait_for(coro, timeout=seconds)
