"""ClusterGuardWorkflow: the drain circuit breaker, serialised per cluster."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio import workflow
from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

import revive.search_attributes as rsa
from activities.guard import GuardActivities
from revive.decide.breaker import DrainGrantInput, GuardInput, GuardState
from revive.ids import guard_workflow_id
from revive.models import Action, Category, IncidentHistoryInput, IncidentOutcome, IncidentResult
from revive.policy import BreakerPolicy
from workflows.guard import ClusterGuardWorkflow

pytestmark = pytest.mark.temporal

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
CAP25 = BreakerPolicy(max_fraction=0.25, max_nodes=10, window=timedelta(hours=1))


def _req(incident: str, nodes: list[str], cluster: str, **kw) -> DrainGrantInput:  # type: ignore[no-untyped-def]
    return DrainGrantInput(
        incident_id=incident,
        cluster=cluster,
        partition="gpu",
        nodes=nodes,
        partition_size=4,
        policy=kw.pop("policy", CAP25),
        now=kw.pop("now", T0),
        **kw,
    )


async def _start(env, cluster: str, tq: str, **kw):  # type: ignore[no-untyped-def]
    return await env.client.start_workflow(
        ClusterGuardWorkflow.run,
        GuardInput(cluster=cluster, **kw),
        id=guard_workflow_id(cluster),
        task_queue=tq,
    )


async def test_breaker_three_concurrent_incidents_one_grant(ts_env) -> None:  # type: ignore[no-untyped-def]
    cluster, tq = f"c-{uuid.uuid4().hex[:6]}", f"tq-{uuid.uuid4().hex[:6]}"
    async with Worker(ts_env.client, task_queue=tq, workflows=[ClusterGuardWorkflow]):
        h = await _start(ts_env, cluster, tq)
        answers = await asyncio.gather(
            *(
                h.execute_update(ClusterGuardWorkflow.request_drain, _req(f"inc-{i}", [f"n{i}"], cluster))
                for i in (1, 2, 3)
            )
        )
        granted = [a for a in answers if a.granted]
        refused = [a for a in answers if not a.granted]
        assert len(granted) == 1 and len(refused) == 2
        assert len(granted[0].nodes) == 1
        for a in refused:
            assert a.breaker_open and a.nodes == []
            assert a.reason.startswith("breaker:max_fraction")
            assert "cap 25% = 1" in a.reason
        st: GuardState = await h.query(ClusterGuardWorkflow.state)
        assert len(st.drains) == 1 and len(st.tripped) == 2
        assert set(st.answers) == {"inc-1", "inc-2", "inc-3"}

        # idempotent: same incident asking again gets the same answer, window unchanged
        for inc in ("inc-1", "inc-2", "inc-3"):
            again = await h.execute_update(
                ClusterGuardWorkflow.request_drain, _req(inc, [f"n{inc[-1]}"], cluster)
            )
            assert again == st.answers[inc]
        assert len((await h.query(ClusterGuardWorkflow.state)).drains) == 1

        # a person approves a refused one: granted over the breaker, recorded
        loser = refused[0]
        loser_id = next(k for k, v in st.answers.items() if v == loser)
        over = await h.execute_update(
            ClusterGuardWorkflow.request_drain,
            _req(loser_id, [f"n{loser_id[-1]}"], cluster, approved_by="alice"),
        )
        assert over.granted and over.breaker_open and "approved_over_breaker by alice" in over.reason
        assert len((await h.query(ClusterGuardWorkflow.state)).drains) == 2

        # the window slides: an hour later one drain fits again
        later = await h.execute_update(
            ClusterGuardWorkflow.request_drain,
            _req("inc-4", ["n4"], cluster, now=T0 + timedelta(hours=1, seconds=1)),
        )
        assert later.granted, later.reason
        await h.terminate()


async def test_max_nodes_and_validator(ts_env) -> None:  # type: ignore[no-untyped-def]
    cluster, tq = f"c-{uuid.uuid4().hex[:6]}", f"tq-{uuid.uuid4().hex[:6]}"
    pol = BreakerPolicy(max_fraction=1.0, max_nodes=1, window=timedelta(hours=1))
    async with Worker(ts_env.client, task_queue=tq, workflows=[ClusterGuardWorkflow]):
        h = await _start(ts_env, cluster, tq)
        a = await h.execute_update(ClusterGuardWorkflow.request_drain, _req("a", ["n1"], cluster, policy=pol))
        b = await h.execute_update(ClusterGuardWorkflow.request_drain, _req("b", ["n2"], cluster, policy=pol))
        # the same node again (another incident) does not count twice
        c = await h.execute_update(ClusterGuardWorkflow.request_drain, _req("c", ["n1"], cluster, policy=pol))
        assert a.granted and not b.granted and c.granted
        assert b.reason.startswith("breaker:max_nodes")
        with pytest.raises(WorkflowUpdateFailedError):
            await h.execute_update(ClusterGuardWorkflow.request_drain, _req("d", [], cluster))
        with pytest.raises(WorkflowUpdateFailedError):
            await h.execute_update(ClusterGuardWorkflow.request_drain, _req("e", ["n3"], "other"))
        await h.terminate()


async def test_continue_as_new_keeps_state(ts_env) -> None:  # type: ignore[no-untyped-def]
    cluster, tq = f"c-{uuid.uuid4().hex[:6]}", f"tq-{uuid.uuid4().hex[:6]}"
    async with Worker(ts_env.client, task_queue=tq, workflows=[ClusterGuardWorkflow]):
        h = await _start(ts_env, cluster, tq, continue_as_new_after=2)
        first_run = (await h.describe()).run_id
        await h.execute_update(ClusterGuardWorkflow.request_drain, _req("a", ["n1"], cluster))
        await h.execute_update(ClusterGuardWorkflow.request_drain, _req("b", ["n2"], cluster))
        latest = ts_env.client.get_workflow_handle(guard_workflow_id(cluster))
        for _ in range(100):
            if (await latest.describe()).run_id != first_run:
                break
            await asyncio.sleep(0.05)
        assert (await latest.describe()).run_id != first_run
        st: GuardState = await latest.query(ClusterGuardWorkflow.state)
        assert st.requests == 2 and len(st.drains) == 1 and set(st.answers) == {"a", "b"}
        again = await latest.execute_update(ClusterGuardWorkflow.request_drain, _req("b", ["n2"], cluster))
        assert not again.granted  # answer survived continue-as-new
        await latest.terminate()


# ---- activities on the dev server (update-with-start, visibility) -----------------------------


@workflow.defn(name="IncidentWorkflow")
class _FakeIncident:
    """Stands in for the lead's IncidentWorkflow: returns the result it is given."""

    @workflow.run
    async def run(self, result: IncidentResult) -> IncidentResult:
        return result


async def test_request_drain_grant_activity_update_with_start(local_env) -> None:  # type: ignore[no-untyped-def]
    cluster, tq = f"c-{uuid.uuid4().hex[:6]}", f"tq-{uuid.uuid4().hex[:6]}"
    ga = GuardActivities(local_env.client, tq)
    async with Worker(local_env.client, task_queue=tq, workflows=[ClusterGuardWorkflow]):
        answers = await asyncio.gather(
            *(ga.request_drain_grant(_req(f"inc-{i}", [f"n{i}"], cluster)) for i in (1, 2, 3))
        )
        assert sum(a.granted for a in answers) == 1
        assert all(a.reason.startswith("breaker:max_fraction") for a in answers if not a.granted)
        # same incident again → same answer
        winner = next(i for i, a in enumerate(answers, 1) if a.granted)
        again = await ga.request_drain_grant(_req(f"inc-{winner}", [f"n{winner}"], cluster))
        assert again.granted
        await local_env.client.get_workflow_handle(guard_workflow_id(cluster, tq)).terminate()


async def test_incident_history_activity(local_env) -> None:  # type: ignore[no-untyped-def]
    cluster, tq = f"c-{uuid.uuid4().hex[:6]}", f"tq-{uuid.uuid4().hex[:6]}"
    ga = GuardActivities(local_env.client, tq)
    submit = datetime.now(UTC) - timedelta(seconds=5)

    async def incident(iid: str, job: str, executed: Action, nodes: list[str], ckpt: int) -> None:
        res = IncidentResult(
            incident_id=iid, outcome=IncidentOutcome.recovered, category=Category.gpu_hardware,
            executed=executed, culprit_nodes=nodes, closed_at=datetime.now(UTC), job_id=job,
            checkpoint_iteration=ckpt, root_signature="xid79",
        )
        sa = TypedSearchAttributes([
            SearchAttributePair(rsa.CLUSTER, cluster), SearchAttributePair(rsa.JOB_ID, job),
            SearchAttributePair(rsa.NODES, nodes), SearchAttributePair(rsa.INCIDENT_ID, iid),
        ])
        await local_env.client.execute_workflow(
            _FakeIncident.run, res, id=f"incident-{cluster}-{iid}", task_queue=tq, search_attributes=sa
        )

    async with Worker(local_env.client, task_queue=tq, workflows=[_FakeIncident],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        await incident("i1", "100", Action.drain_and_requeue, ["n1"], 10)
        await incident("i2", "100", Action.requeue_exclude_nodes, ["n2"], 20)
        await incident("i3", "200", Action.drain_and_requeue, ["n1"], 5)
        await incident("i4", "100", Action.none, [], 20)

    inp = IncidentHistoryInput(cluster=cluster, job_id="100", job_submit_time_iso=submit.isoformat(),
                               exclude_incident_id="i4", nodes=["n1"],
                               nodes_since_iso=(submit - timedelta(hours=1)).isoformat())
    for _ in range(60):
        h = await ga.incident_history(inp)
        if len(h.prior) == 2 and len(h.node_incidents) == 2:
            break
        await asyncio.sleep(0.1)
    assert [p.incident_id for p in h.prior] == ["i1", "i2"]
    assert h.requeues == 2
    assert h.prior[1].checkpoint_iteration == 20 and h.prior[0].root_signature == "xid79"
    assert sorted(p.incident_id for p in h.node_incidents) == ["i1", "i3"]
    # a submit time after all incidents: a recycled job id inherits nothing
    fresh = await ga.incident_history(IncidentHistoryInput(
        cluster=cluster, job_id="100", job_submit_time_iso=datetime.now(UTC).isoformat()))
    assert fresh.prior == [] and fresh.requeues == 0
