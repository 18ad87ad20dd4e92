"""Issue #12.3 / chaos point ``worker-kill-gathering``: a worker that dies while it gathers evidence
(or sends a notification) costs the incident its heartbeat timeout, not the activity's
start-to-close (2 minutes for gather). The dev server (``local_env``), the production worker; the
gather's first attempt hangs without heartbeating, as a SIGKILLed worker's would."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from temporalio import activity

from activities.evidence import EvidenceActivities
from activities.jobspec import JobSpecActivities
from revive.models import EvidenceBundle, GatherEvidenceInput, JobSpecSaved, SaveJobSpecInput
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster, incident
from worker.main import build_worker
from workflows.incident import GATHER_HEARTBEAT, IncidentWorkflow

pytestmark = pytest.mark.temporal


async def test_a_gather_whose_worker_died_is_retried_after_its_heartbeat_timeout(local_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    real = EvidenceActivities(sched, cfg.kernel_log.path_template, tmp_path / "evidence")
    started: list[tuple[int, float]] = []

    @activity.defn(name="gather_evidence")
    async def gather(inp: GatherEvidenceInput) -> EvidenceBundle:
        started.append((activity.info().attempt, time.monotonic()))
        if activity.info().attempt == 1:
            await asyncio.sleep(3600)  # the worker "died": no heartbeat, no result
        return await real.gather_evidence(inp)

    tq = f"hb-{uuid.uuid4().hex[:8]}"
    inp = incident(log, RecoveryPolicy(), iid=f"fake-7-a0-gpu-{uuid.uuid4().hex[:6]}")
    async with build_worker(local_env.client, cfg, sched, task_queue=tq, replace=[gather]):
        h = await local_env.client.start_workflow(IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq)
        for _ in range(900):
            if len(started) >= 2 and (await h.query("status"))["state"] != "gathering":
                break
            await asyncio.sleep(0.1)
        state = (await h.query("status"))["state"]
        await h.terminate("test over")
    assert [a for a, _ in started] == [1, 2], started
    waited = started[1][1] - started[0][1]
    # retried after the 15 s heartbeat timeout (plus the retry's 1 s backoff), far from 2 minutes
    assert GATHER_HEARTBEAT.total_seconds() <= waited < 60, waited
    assert state != "gathering"  # the second attempt's evidence moved the incident on


async def test_a_job_spec_save_whose_worker_died_does_not_hold_the_gather_for_a_minute(local_env, tmp_path):
    # chaos worker-kill-gathering: the job-spec save runs beside the gather and the killed worker had
    # taken it too; without a heartbeat timeout the incident waited out its 60 s start-to-close
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    real = JobSpecActivities(sched, tmp_path / "jobspec")
    started: list[tuple[int, float]] = []

    @activity.defn(name="save_job_spec")
    async def save_job_spec(inp: SaveJobSpecInput) -> JobSpecSaved:
        started.append((activity.info().attempt, time.monotonic()))
        if activity.info().attempt == 1:
            await asyncio.sleep(3600)  # the worker "died"
        return await real.save_job_spec(inp)

    tq = f"hb-{uuid.uuid4().hex[:8]}"
    inp = incident(log, RecoveryPolicy(), iid=f"fake-7-a0-gpu-{uuid.uuid4().hex[:6]}")
    async with build_worker(local_env.client, cfg, sched, task_queue=tq, replace=[save_job_spec]):
        h = await local_env.client.start_workflow(IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq)
        for _ in range(900):
            if len(started) >= 2 and (await h.query("status"))["state"] != "gathering":
                break
            await asyncio.sleep(0.1)
        state = (await h.query("status"))["state"]
        await h.terminate("test over")
    assert [a for a, _ in started] == [1, 2], started
    waited = started[1][1] - started[0][1]
    assert GATHER_HEARTBEAT.total_seconds() <= waited < 60, waited
    assert state != "gathering"
