"""Repeat offenders per node from the cluster's guard, not from visibility (issue #12.1).

The dev server (``local_env``), the production worker over a ``FakeScheduler`` (which records every
mutating call). Visibility is replaced by one that "has not caught up" (it returns nothing, as the
dev server does for a second or so after a close, and a loaded production cluster for longer): two
node failures on node2 in a row, from two jobs, with ``repeat_offender.incidents: 2`` — the second
incident must drain node2 as a repeat offender because the guard holds the first one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode

from activities.guard import GuardActivities
from revive import ids
from revive.decide.budgets import JobIncidentHistory, PriorIncident
from revive.decide.offenders import NodeIncidentsAnswer, NoteNodesInput
from revive.models import (
    Action,
    Category,
    IncidentHistoryInput,
    IncidentInput,
    IncidentOutcome,
    IncidentResult,
    JobIdentity,
)
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import FakeScheduler
from tests.helpers.builders import T0, fake_cluster, incident, job_log, start_incident, trigger_for
from worker.main import build_worker

pytestmark = pytest.mark.temporal

FAST = {"timeout": 5, "poll_interval": 0.2}


class LaggingVisibility(GuardActivities):
    """Visibility that has not caught up: every read returns no incidents (and is counted)."""

    reads: list[IncidentHistoryInput]

    async def _visibility(self, h: IncidentHistoryInput) -> JobIncidentHistory:
        self.reads.append(h)
        return JobIncidentHistory()


class GuardDown(GuardActivities):
    """The guard never answers (its Update fails as if the server refused it); visibility has the
    earlier incident."""

    reads: list[IncidentHistoryInput]
    earlier: list[PriorIncident]

    async def _note_in_guard(self, note: NoteNodesInput) -> NodeIncidentsAnswer:
        raise RPCError("guard down", RPCStatusCode.UNAVAILABLE, b"")

    async def _visibility(self, h: IncidentHistoryInput) -> JobIncidentHistory:
        self.reads.append(h)
        return JobIncidentHistory(node_incidents=list(self.earlier))


def _two_jobs(tmp: Path) -> tuple[FakeScheduler, object, Path, Path]:
    """Job 7 on node1+node2 and job 8 on node2+node3, both died from a node failure on node2."""
    sched, cfg, log7 = fake_cluster(tmp, "node_fail", resumed=True)
    log8 = tmp / "train-8.out"
    log8.write_text(job_log("node_fail", resumed=True))
    j7 = sched.jobs["7"]
    sched.jobs["8"] = j7.model_copy(update={"job_id": "8", "nodes": ["node2", "node3"], "std_out": str(log8)})
    return sched, cfg, log7, log8


def _inp(log: Path, pol: RecoveryPolicy, cluster: str, job: str, nodes: list[str]) -> IncidentInput:
    base = incident(log, pol, iid=f"{cluster}-{job}-a0-nodefail", trigger=trigger_for("node_fail"),
                    fault_family="job")
    return base.model_copy(update={
        "cluster": cluster, "nodes": nodes,
        "job": JobIdentity(job_id=job, user="root", name="train", restart_count=0)})


async def _run(env, tq: str, inp: IncidentInput) -> IncidentResult:
    h = await start_incident(env.client, tq, inp)
    return await asyncio.wait_for(h.result(), 60)


def _policy() -> RecoveryPolicy:
    return RecoveryPolicy(mode="auto", verify=FAST, repeat_offender={"incidents": 2},
                          breaker={"max_fraction": 1.0, "max_nodes": 4})


async def test_two_quick_node_failures_on_one_node_count_while_visibility_has_not_caught_up(local_env, tmp_path):
    """Job 7 loses node2 → requeue excluding node2 (first incident on it). Seconds later job 8
    loses node2 too: visibility still shows nothing, yet the guard holds the first incident, so
    node2 is a repeat offender (2 of 2) and is drained — once, by the second incident only."""
    cluster = f"ro-{uuid.uuid4().hex[:8]}"
    sched, cfg, log7, log8 = _two_jobs(tmp_path)
    tq = f"ro-{uuid.uuid4().hex[:8]}"
    ga = LaggingVisibility(local_env.client, tq)
    ga.reads = []
    async with build_worker(local_env.client, cfg, sched, task_queue=tq, replace=[ga.admit_incident]):
        first = await _run(local_env, tq, _inp(log7, _policy(), cluster, "7", ["node1", "node2"]))
        assert first.outcome == IncidentOutcome.recovered, first.reason
        assert first.rule == "runbook:exclude_named_nodes" and first.culprit_nodes == ["node2"]
        assert "drain_nodes" not in [c[0] for c in sched.mutating_calls]  # excluded, not drained
        second = await _run(local_env, tq, _inp(log8, _policy(), cluster, "8", ["node2", "node3"]))
        guard = await local_env.client.get_workflow_handle(ids.guard_workflow_id(cluster, tq)).query("state")
    assert second.outcome == IncidentOutcome.recovered, second.reason
    assert second.executed == Action.requeue_exclude_nodes
    assert second.rule == "runbook:exclude_named_nodes+repeat_offender_drain", second.rule
    drains = [c for c in sched.mutating_calls if c[0] == "drain_nodes"]
    assert len(drains) == 1 and "node2" in json.dumps(drains[0], default=str), sched.mutating_calls
    # the guard's durable record of both incidents, in order, each once
    assert [(r["incident_id"], r["nodes"]) for r in guard["node_incidents"]] == [
        (first.incident_id, ["node2"]), (second.incident_id, ["node2"])]
    # visibility was read for the part of the window older than the guard's records — and had nothing
    node_reads = [r for r in ga.reads if r.nodes]
    assert node_reads and all(r.nodes_since_iso for r in node_reads)


async def test_a_retried_admit_notes_the_incident_once(local_env):
    """The admit activity retried (worker killed after the Update): the guard records the incident
    once and still answers the other incident on the node."""
    tq = f"ro-{uuid.uuid4().hex[:8]}"
    cluster = f"ro-{uuid.uuid4().hex[:8]}"
    from temporalio.worker import Worker

    from workflows.guard import ClusterGuardWorkflow

    ga = GuardActivities(local_env.client, tq)
    async with Worker(local_env.client, task_queue=tq, workflows=[ClusterGuardWorkflow]):
        notes = [NoteNodesInput(cluster=cluster, incident_id=f"inc-{i}", job_id=str(i), culprit_nodes=["node2"],
                                nodes=["node1", "node2"], category=Category.node_failure,
                                now=T0 + timedelta(seconds=i)) for i in (1, 2)]
        await ga._note_in_guard(notes[0])
        a = await ga._note_in_guard(notes[1])
        b = await ga._note_in_guard(notes[1])  # the retry
        state = await local_env.client.get_workflow_handle(ids.guard_workflow_id(cluster, tq)).query("state")
        await local_env.client.get_workflow_handle(ids.guard_workflow_id(cluster, tq)).terminate("test over")
    assert [r.incident_id for r in a.incidents] == [r.incident_id for r in b.incidents] == ["inc-1"]
    assert [r["incident_id"] for r in state["node_incidents"]] == ["inc-1", "inc-2"]
    assert a.known_since == T0 + timedelta(seconds=1)


def _payload_text(hist) -> str:  # noqa: ANN001
    """Every payload of a history, decoded (activity results are base64 JSON in the export)."""
    out: list[str] = []

    def walk(x: object) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "data" and isinstance(v, str):
                    try:
                        out.append(base64.b64decode(v).decode(errors="replace"))
                    except ValueError:
                        pass
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(hist.to_json_dict())
    return "\n".join(out)


async def test_an_unreachable_guard_falls_back_to_visibility_with_a_note(local_env, tmp_path):
    """The guard does not answer: the repeat-offender count comes from visibility (here: caught up,
    it holds job 7's incident on node2), the drain still happens, and the incident's history says
    where the count came from."""
    cluster = f"ro-{uuid.uuid4().hex[:8]}"
    sched, cfg, _, log8 = _two_jobs(tmp_path)
    tq = f"ro-{uuid.uuid4().hex[:8]}"
    ga = GuardDown(local_env.client, tq)
    ga.reads = []
    ga.earlier = [PriorIncident(incident_id=f"{cluster}-7-a0-nodefail", job_id="7", category=Category.node_failure,
                                culprit_nodes=["node2"], closed_at=datetime.now(UTC) - timedelta(minutes=5))]
    inp = _inp(log8, _policy(), cluster, "8", ["node2", "node3"])
    async with build_worker(local_env.client, cfg, sched, task_queue=tq, replace=[ga.admit_incident]):
        res = await _run(local_env, tq, inp)
        hist = await local_env.client.get_workflow_handle(inp.incident_id).fetch_history()
    assert res.rule == "runbook:exclude_named_nodes+repeat_offender_drain", res.rule
    assert [c[0] for c in sched.mutating_calls].count("drain_nodes") == 1
    assert ga.reads and ga.reads[-1].nodes == ["node2", "node3"]
    assert "guard unreachable (RPCError: guard down): repeat offenders from visibility only" in _payload_text(hist)
