"""``PATCH_FAST_FIRST_ACTION``: the incident's independent reads run side by side and the runbook
does not repeat a bad-checkpoint check the incident has just run — same decisions, fewer round trips
before the first cluster action (time-skipping server, real activities over a FakeScheduler)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from revive import ids
from revive.models import Decision, IncidentOutcome
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster, incident
from tests.workflows.test_incident import _wait_state, _worker
from workflows.incident import IncidentWorkflow

pytestmark = pytest.mark.temporal

AUTO = RecoveryPolicy(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})


async def _history(env: WorkflowEnvironment, wid: str) -> list[tuple[str, str]]:
    """(event kind, activity name) in history order: ``S`` scheduled, ``C`` completed or failed."""
    hist = await env.client.get_workflow_handle(wid).fetch_history()
    names: dict[int, str] = {}
    out = []
    for e in hist.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            out.append(("S", names[e.event_id]))
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            out.append(("C", names[e.activity_task_completed_event_attributes.scheduled_event_id]))
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            out.append(("C", names[e.activity_task_failed_event_attributes.scheduled_event_id]))
    return out


def _side_by_side(events: list[tuple[str, str]], *names: str) -> bool:
    """Every one of ``names`` was scheduled before the first of them completed."""
    first_done = next(i for i, (k, n) in enumerate(events) if k == "C" and n in names)
    return all(("S", n) in events[:first_done] for n in names)


async def _start(env, sched, cfg, inp, tq):
    wid = f"{inp.incident_id}-{uuid.uuid4().hex[:6]}"
    h = await env.client.start_workflow(IncidentWorkflow.run, inp, id=wid, task_queue=tq)
    return wid, h


async def test_xid79_in_auto_mode_reads_side_by_side_and_drains_after_one_loop_check(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    inp = incident(log, AUTO, iid=f"fake-7-a0-gpu-fast-{uuid.uuid4().hex[:4]}")
    tq = f"tq-{uuid.uuid4()}"
    async with _worker(ts_env, sched, cfg, tq):
        wid, h = await _start(ts_env, sched, cfg, inp, tq)
        res = await h.result()
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert res.category.value == "gpu_hardware" and res.culprit_nodes == ["node2"]
    assert [c[0] for c in sched.mutating_calls] == ["drain_nodes", "requeue"]
    ev = await _history(ts_env, wid)
    assert _side_by_side(ev, "save_job_spec", "gather_evidence")
    assert _side_by_side(ev, "admit_incident", "read_guard_mode", "checkpoint_loop")
    assert [n for k, n in ev if k == "S"].count("checkpoint_loop") == 1
    rb = [n for k, n in await _history(ts_env, ids.runbook_id(inp.incident_id)) if k == "S"]
    assert "checkpoint_loop" not in rb  # the incident's check, moments before, found no suspect
    assert rb[:2] == ["check_identity", "drain_nodes"]


async def test_a_person_in_between_makes_the_runbook_check_again(ts_env, tmp_path):
    """Observe mode: the approval may come much later, so the runbook re-runs the check."""
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    pol = RecoveryPolicy(mode="observe", approval={"timeout": 3600}, verify={"timeout": 5, "poll_interval": 0.2})
    inp = incident(log, pol, iid=f"fake-7-a0-gpu-approve-{uuid.uuid4().hex[:4]}")
    tq = f"tq-{uuid.uuid4()}"
    async with _worker(ts_env, sched, cfg, tq):
        wid, h = await _start(ts_env, sched, cfg, inp, tq)
        await _wait_state(h, "awaiting_approval")
        await h.execute_update(IncidentWorkflow.decide, Decision(decision="approve", approver="alice"))
        res = await h.result()
    assert res.outcome == IncidentOutcome.recovered, res.reason
    rb = [n for k, n in await _history(ts_env, ids.runbook_id(inp.incident_id)) if k == "S"]
    assert rb[:3] == ["check_identity", "checkpoint_loop", "drain_nodes"]


async def test_a_plan_without_runbook_closes_with_no_read_left_running(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "app")
    inp = incident(log, AUTO, iid=f"fake-7-a0-app-fast-{uuid.uuid4().hex[:4]}", fault_family="app")
    tq = f"tq-{uuid.uuid4()}"
    async with _worker(ts_env, sched, cfg, tq):
        wid, h = await _start(ts_env, sched, cfg, inp, tq)
        res = await asyncio.wait_for(h.result(), 60)
    assert res.outcome == IncidentOutcome.stopped and sched.mutating_calls == []
    ev = await _history(ts_env, wid)
    scheduled = [n for k, n in ev if k == "S"]
    assert "checkpoint_loop" in scheduled and "read_guard_mode" in scheduled  # started beside the admission
    assert sorted(scheduled) == sorted(n for k, n in ev if k == "C")  # … and waited for before the close
