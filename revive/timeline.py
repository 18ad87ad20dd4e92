"""Readable timeline of an incident from its workflow history (the audit log)."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle


async def timeline(h: WorkflowHandle) -> list[tuple[str, str]]:
    """(UTC time, what happened) for the events a person cares about."""
    out: list[tuple[str, str]] = []
    scheduled: dict[int, str] = {}
    async for ev in h.fetch_history_events():
        ts = ev.event_time.ToDatetime().strftime("%H:%M:%S.%f")[:-3]
        t = ev.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            out.append((ts, f"incident opened by {ev.workflow_execution_started_event_attributes.identity}"))
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[ev.event_id] = name
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name = scheduled.get(ev.activity_task_completed_event_attributes.scheduled_event_id, "?")
            out.append((ts, f"activity {name} completed"))
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failed = ev.activity_task_failed_event_attributes
            out.append((ts, f"activity {scheduled.get(failed.scheduled_event_id, '?')} failed: {failed.failure.message}"))
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            sig = ev.workflow_execution_signaled_event_attributes
            out.append((ts, f"signal {sig.signal_name} from {sig.identity}"))
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            upd = ev.workflow_execution_update_accepted_event_attributes
            out.append((ts, f"update {upd.accepted_request.input.name} accepted from {upd.accepted_request.meta.identity}"))
        elif t == EventType.EVENT_TYPE_TIMER_FIRED:
            out.append((ts, "timer fired (approval expiry)"))
        elif t == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            out.append((ts, f"runbook {ev.start_child_workflow_execution_initiated_event_attributes.workflow_type.name} started"))
        elif t == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            out.append((ts, "runbook completed"))
        elif t == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = ev.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if "ReviveState" in fields:
                out.append((ts, f"state → {fields['ReviveState'].data.decode().strip(chr(34))}"))
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            out.append((ts, "incident closed"))
        elif t in (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED):
            out.append((ts, f"incident ended: {EventType.Name(t)}"))
    return out
