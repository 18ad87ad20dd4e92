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


async def _first_attempt_dies(env, tmp_path, name: str, make_real) -> tuple[list[tuple[int, float, float]], str]:
    """Run an incident whose activity ``name`` hangs on its first attempt without heartbeating (as a
    SIGKILLed worker's would) and delegates to the real activity (``make_real(sched, cfg)``) after.
    Returns (attempt, monotonic start on the worker, server seconds since the first attempt started)
    per attempt, and the incident's state once the second attempt moved it on (or 90 s passed). The
    server's own times (``started_time``, ``current_attempt_scheduled_time``) bound the retry from
    below whatever the worker's event loop was doing; a busy CI host can run the first attempt's
    body seconds after the server started it."""
    started: list[tuple[int, float, float]] = []
    first_start: list = []
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    real = make_real(sched, cfg)

    async def body(inp):
        info = activity.info()
        if info.attempt == 1:
            first_start.append(info.started_time)
        server_s = (info.current_attempt_scheduled_time - first_start[0]).total_seconds() if first_start else 0.0
        started.append((info.attempt, time.monotonic(), server_s))
        if activity.info().attempt == 1:
            await asyncio.sleep(3600)  # the worker "died": no heartbeat, no result
        return await real(inp)

    stand_in = {"gather_evidence": gather_stand_in, "save_job_spec": save_stand_in}[name](body)
    tq = f"hb-{uuid.uuid4().hex[:8]}"
    inp = incident(log, RecoveryPolicy(), iid=f"fake-7-a0-gpu-{uuid.uuid4().hex[:6]}")
    async with build_worker(env.client, cfg, sched, task_queue=tq, replace=[stand_in]):
        h = await env.client.start_workflow(IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq)
        for _ in range(900):
            if len(started) >= 2 and (await h.query("status"))["state"] != "gathering":
                break
            await asyncio.sleep(0.1)
        state = (await h.query("status"))["state"]
        await h.terminate("test over")
    return started, state


def gather_stand_in(body):
    @activity.defn(name="gather_evidence")
    async def gather(inp: GatherEvidenceInput) -> EvidenceBundle:
        return await body(inp)
    return gather


def save_stand_in(body):
    @activity.defn(name="save_job_spec")
    async def save(inp: SaveJobSpecInput) -> JobSpecSaved:
        return await body(inp)
    return save


async def test_a_gather_whose_worker_died_is_retried_after_its_heartbeat_timeout(local_env, tmp_path):
    started, state = await _first_attempt_dies(
        local_env, tmp_path, "gather_evidence",
        lambda sched, cfg: EvidenceActivities(sched, cfg.kernel_log.path_template, tmp_path / "evidence").gather_evidence)
    assert [a for a, *_ in started] == [1, 2], started
    waited = started[1][1] - started[0][1]
    # retried after the 15 s heartbeat timeout (plus the retry's 1 s backoff, server clock), far from 2 minutes
    assert started[1][2] >= GATHER_HEARTBEAT.total_seconds(), started
    assert waited < 60, waited
    assert state != "gathering"  # the second attempt's evidence moved the incident on


async def test_a_job_spec_save_whose_worker_died_does_not_hold_the_gather_for_a_minute(local_env, tmp_path):
    # chaos worker-kill-gathering: the job-spec save runs beside the gather and the killed worker had
    # taken it too; without a heartbeat timeout the incident waited out its 60 s start-to-close
    started, state = await _first_attempt_dies(
        local_env, tmp_path, "save_job_spec",
        lambda sched, cfg: JobSpecActivities(sched, tmp_path / "jobspec").save_job_spec)
    assert [a for a, *_ in started] == [1, 2], started
    waited = started[1][1] - started[0][1]
    assert started[1][2] >= GATHER_HEARTBEAT.total_seconds(), started
    assert waited < 60, waited
    assert state != "gathering"
