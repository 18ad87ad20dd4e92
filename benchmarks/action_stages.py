"""Where an incident's time to first action goes, read from its Temporal histories.

Input: the incident workflow's history and its runbook child's, as JSON dicts (``WorkflowHistory.
to_json_dict()``, or a file in ``tests/histories/``: ``{"events": [...]}`` with proto3-JSON field
names), and the fault time (unix seconds). Stages, in seconds, end to end:

- ``detect_s``: fault → WorkflowExecutionStarted of the incident (the monitor's start accepted);
- ``gather_s``: → the last of the gather-stage activities completed (``save_job_spec``,
  ``gather_evidence``; whichever ends later when they run side by side);
- ``attribute_s``: → ``attribute`` completed;
- ``decide_s``: → the runbook child's StartChildWorkflowExecutionInitiated (job record admission,
  bad-checkpoint check, mode, drain grant);
- ``act_s``: → the first mutating activity of the runbook completed (``drain_nodes``,
  ``requeue_job``, ``signal_job``, ``rollback_checkpoint``: Slurm accepted the command).

``activities`` lists every activity of both histories up to that first action as
``(name, queue_s, run_s)``: scheduled → started (waiting for a worker slot or poller) and
started → completed (the activity's own work), so a slow stage shows whether the worker or the
work is slow. ``wft_s`` sums the workflow tasks' scheduled → completed spans in the same window
(the worker deciding). Missing events give ``None`` for the stages after them; nothing raises for
a history of another shape.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

MUTATING = frozenset({"drain_nodes", "requeue_job", "signal_job", "rollback_checkpoint"})
"""Activities that change the cluster (``activities.remediation`` / ``activities.rollback``)."""
GATHER = frozenset({"save_job_spec", "gather_evidence"})
STAGES = ("detect_s", "gather_s", "attribute_s", "decide_s", "act_s")


def _t(ev: dict[str, Any]) -> float | None:
    s = ev.get("eventTime")
    if not isinstance(s, str):
        return None
    # proto3 JSON: RFC 3339 with up to nanoseconds and a Z; fromisoformat takes microseconds
    head, _, frac = s.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return base + (float("0." + frac) if frac.isdigit() else 0.0)


def _attrs(ev: dict[str, Any]) -> dict[str, Any]:
    for k, v in ev.items():
        if k.endswith("Attributes") and isinstance(v, dict):
            return v
    return {}


def _type(ev: dict[str, Any]) -> str:
    t = ev.get("eventType", "")
    return t.removeprefix("EVENT_TYPE_") if isinstance(t, str) else ""


def activity_spans(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each activity of one history: name, scheduled / started / completed times (None if absent)."""
    by_id: dict[str, dict[str, Any]] = {}
    for ev in events:
        typ, a = _type(ev), _attrs(ev)
        if typ == "ACTIVITY_TASK_SCHEDULED":
            by_id[str(ev.get("eventId"))] = {"name": (a.get("activityType") or {}).get("name", "?"),
                                             "scheduled": _t(ev), "started": None, "completed": None}
        elif typ in ("ACTIVITY_TASK_STARTED", "ACTIVITY_TASK_COMPLETED", "ACTIVITY_TASK_FAILED",
                     "ACTIVITY_TASK_TIMED_OUT"):
            span = by_id.get(str(a.get("scheduledEventId")))
            if span is not None:
                span["started" if typ == "ACTIVITY_TASK_STARTED" else "completed"] = _t(ev)
    return list(by_id.values())


def _wft_seconds(events: list[dict[str, Any]], until: float | None) -> float:
    sched: dict[str, float] = {}
    total = 0.0
    for ev in events:
        typ, t = _type(ev), _t(ev)
        if t is None:
            continue
        if typ == "WORKFLOW_TASK_SCHEDULED":
            sched[str(ev.get("eventId"))] = t
        elif typ == "WORKFLOW_TASK_COMPLETED":
            s = sched.get(str(_attrs(ev).get("scheduledEventId")))
            if s is not None and (until is None or t <= until):
                total += t - s
    return total


def stages(incident: dict[str, Any], runbook: dict[str, Any] | None, fault_t: float | None) -> dict[str, Any]:
    """The stage split (see the module docstring) of one incident."""
    ev = incident.get("events") or []
    rb = (runbook or {}).get("events") or []
    start = next((_t(e) for e in ev if _type(e) == "WORKFLOW_EXECUTION_STARTED"), None)
    inc = activity_spans(ev)
    rbs = activity_spans(rb)
    gather_end = max((s["completed"] for s in inc if s["name"] in GATHER and s["completed"]), default=None)
    attr_end = next((s["completed"] for s in inc if s["name"] == "attribute" and s["completed"]), None)
    child = next((_t(e) for e in ev if _type(e) == "START_CHILD_WORKFLOW_EXECUTION_INITIATED"), None)
    act_end = min((s["completed"] for s in rbs if s["name"] in MUTATING and s["completed"]), default=None)
    marks = [fault_t, start, gather_end, attr_end, child, act_end]
    out: dict[str, Any] = {}
    for name, a, b in zip(STAGES, marks, marks[1:], strict=False):
        out[name] = (b - a) if a is not None and b is not None else None
    out["action_s"] = (act_end - fault_t) if act_end is not None and fault_t is not None else None
    out["activities"] = [
        (s["name"], (s["started"] - s["scheduled"]) if s["started"] and s["scheduled"] else None,
         (s["completed"] - s["started"]) if s["completed"] and s["started"] else None)
        for s in inc + rbs if act_end is None or (s["scheduled"] or 0) <= act_end
    ]
    out["wft_s"] = _wft_seconds(ev, child) + _wft_seconds(rb, act_end)
    return out
