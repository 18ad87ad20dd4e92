"""Node history as evidence (issue #8.4): the gather stage reads Revive's earlier hardware
incidents on the job's nodes from Temporal visibility, and a CUDA error of unknown cause on a node
whose GPU failed before is attributed to that node's hardware."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import revive.search_attributes as rsa
from activities.evidence import EvidenceActivities
from activities.guard import hardware_history
from revive.attribution.engine import attribute
from revive.models import (
    Action,
    Category,
    Domain,
    GatherEvidenceInput,
    IncidentOutcome,
    IncidentResult,
    Trigger,
    TriggerKind,
)
from tests.helpers.builders import T0, fake_cluster

pytestmark = pytest.mark.temporal


@workflow.defn(name="IncidentWorkflow")
class _ClosedIncident:
    """Stands in for an earlier, closed IncidentWorkflow: returns the result it is given."""

    @workflow.run
    async def run(self, result: IncidentResult) -> IncidentResult:
        return result


async def _close(client, tq: str, cluster: str, iid: str, category: Category, culprits: list[str]) -> None:  # type: ignore[no-untyped-def]
    res = IncidentResult(incident_id=iid, outcome=IncidentOutcome.recovered, category=category,
                         executed=Action.drain_and_requeue, culprit_nodes=culprits, closed_at=datetime.now(UTC),
                         job_id="5")
    attrs = TypedSearchAttributes([
        SearchAttributePair(rsa.CLUSTER, cluster), SearchAttributePair(rsa.JOB_ID, "5"),
        SearchAttributePair(rsa.INCIDENT_ID, iid), SearchAttributePair(rsa.CATEGORY, category.value),
        SearchAttributePair(rsa.CULPRITS, culprits), SearchAttributePair(rsa.NODES, ["node1", *culprits]),
    ])
    await client.execute_workflow(_ClosedIncident.run, res, id=f"incident-{cluster}-{iid}", task_queue=tq,
                                  search_attributes=attrs)


async def test_a_cuda_error_on_a_node_whose_gpu_failed_last_week_is_that_nodes_hardware(local_env, tmp_path):
    cluster, tq = f"c-{uuid.uuid4().hex[:6]}", f"tq-{uuid.uuid4().hex[:6]}"
    client = local_env.client
    async with Worker(client, task_queue=tq, workflows=[_ClosedIncident], workflow_runner=UnsandboxedWorkflowRunner()):
        await _close(client, tq, cluster, "xid79-on-node2", Category.gpu_hardware, ["node2"])
        await _close(client, tq, cluster, "app-bug-on-node2", Category.app_bug, ["node2"])
        await _close(client, tq, cluster, "ecc-on-node3", Category.gpu_memory_ecc, ["node3"])
    since = datetime.now(UTC) - timedelta(days=30)
    for _ in range(100):  # visibility is eventually consistent
        hist = await hardware_history(client, cluster, ["node1", "node2"], since, exclude_incident_id="now")
        if hist.get("node2"):
            break
        await asyncio.sleep(0.1)
    assert list(hist) == ["node2"], hist  # node3's ECC is not this job's node; the app bug is not hardware
    assert [p.incident_id for p in hist["node2"]] == ["xid79-on-node2"]
    assert hist["node2"][0].category == Category.gpu_hardware and hist["node2"][0].at is not None
    assert await hardware_history(client, cluster, ["node2"], since, exclude_incident_id="xid79-on-node2") == {}

    # this job's failure: "CUDA error: unknown error" on node2, no Xid in node2's kernel log
    sched, _, log = fake_cluster(tmp_path, "xid79")
    (tmp_path / "nodes" / "node2" / "kern.log").write_text("")
    trig = Trigger(kind=TriggerKind.job_state, at=datetime.now(UTC), state_from="RUNNING", state_to="FAILED")

    async def history(cl: str, nodes: list[str], since: datetime, iid: str) -> dict:
        return await hardware_history(client, cl, nodes, since, exclude_incident_id=iid)

    def gatherer(node_history) -> EvidenceActivities:  # type: ignore[no-untyped-def]
        return EvidenceActivities(sched, str(tmp_path / "nodes" / "{node}" / "kern.log"), tmp_path / "ev",
                                  node_history=node_history)

    inp = GatherEvidenceInput(incident_id="now", cluster=cluster, job_id="7", trigger=trig, settle_s=0)
    without = attribute(await gatherer(None).gather_evidence(inp))
    bundle = await gatherer(history).gather_evidence(inp)
    assert [p.incident_id for p in bundle.node_history["node2"]] == ["xid79-on-node2"]
    with_history = attribute(bundle)
    assert without.culprit_nodes == []  # the log alone names no node to drain
    assert with_history.domain == Domain.hardware and with_history.culprit_nodes == ["node2"]
    assert with_history.action == Action.drain_and_requeue
    assert "xid79-on-node2" in with_history.explanation


async def test_node_history_that_cannot_be_read_is_a_note_not_a_failure(tmp_path):
    sched, _, _ = fake_cluster(tmp_path, "xid79")

    async def broken(cl: str, nodes: list[str], since: datetime, iid: str) -> dict:
        raise ConnectionError("temporal frontend unreachable")

    ev = EvidenceActivities(sched, str(tmp_path / "nodes" / "{node}" / "kern.log"), tmp_path / "ev", node_history=broken)
    trig = Trigger(kind=TriggerKind.job_state, at=T0, state_from="RUNNING", state_to="FAILED")
    b = await ev.gather_evidence(GatherEvidenceInput(incident_id="i", cluster="c", job_id="7", trigger=trig, settle_s=0))
    assert b.node_history == {} and b.job is not None
    assert any("node history unavailable: ConnectionError" in n for n in b.notes), b.notes
