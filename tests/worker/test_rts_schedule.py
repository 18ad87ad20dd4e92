"""The return-to-service Temporal Schedule on the dev server: created from the policy, updated in
place, overlap SKIP, a triggered run checks the drained node, deleted."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio.client import ScheduleActionStartWorkflow, ScheduleOverlapPolicy

from revive import ids
from revive.decide.rts import RtsInput, RtsOutcome, RtsResult
from revive.models import NodeRecord
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster
from worker.main import build_worker
from worker.rts_schedule import delete_rts_schedule, ensure_rts_schedule

pytestmark = pytest.mark.temporal


async def test_schedule_created_updated_triggered_and_deleted(local_env, tmp_path):
    client, tq = local_env.client, f"rts-sched-{uuid.uuid4().hex[:6]}"
    sched, cfg, _ = fake_cluster(tmp_path)
    sched.add_node(NodeRecord(name="node2", state="IDLE+DRAIN", reason="revive:fake-7-20261129T150400-a0-gpu gpu_hardware"))
    pol = RecoveryPolicy(mode="auto", return_to_service={"enabled": True, "interval": 3600, "command": ["true"]})

    sid, created = await ensure_rts_schedule(client, "fake", pol, None, tq)
    assert created and sid == ids.rts_schedule_id("fake", tq)
    desc = await client.get_schedule_handle(sid).describe()
    assert desc.schedule.spec.intervals[0].every == timedelta(hours=1)
    assert desc.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP and not desc.schedule.state.paused
    action = desc.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow) and action.workflow == ids.RTS_WORKFLOW

    faster = pol.model_copy(update={"return_to_service": pol.return_to_service.model_copy(
        update={"interval": timedelta(minutes=5)})})
    _, created = await ensure_rts_schedule(client, "fake", faster, None, tq)
    desc = await client.get_schedule_handle(sid).describe()
    assert not created and desc.schedule.spec.intervals[0].every == timedelta(minutes=5)

    async with build_worker(client, cfg, sched, task_queue=tq):
        await client.get_schedule_handle(sid).trigger()
        for _ in range(200):
            d = await client.get_schedule_handle(sid).describe()
            if d.info.recent_actions:
                break
            await asyncio.sleep(0.1)
        run = d.info.recent_actions[-1].action
        res = await client.get_workflow_handle(run.workflow_id, result_type=RtsResult).result()
    assert [(r.node, r.outcome) for r in res.checked] == [("node2", RtsOutcome.resumed)]
    assert sched.nodes["node2"].state == "IDLE"

    assert await delete_rts_schedule(client, "fake", tq)
    assert not await delete_rts_schedule(client, "fake", tq)


def test_disabled_policy_gives_a_paused_schedule():
    from worker.rts_schedule import rts_schedule

    s = rts_schedule("fake", RecoveryPolicy(), None, "revive")
    assert s.state.paused and "enabled is false" in (s.state.note or "")
    assert isinstance(s.action, ScheduleActionStartWorkflow)
    (arg,) = s.action.args
    assert isinstance(arg, RtsInput) and arg.task_queue == "revive"
