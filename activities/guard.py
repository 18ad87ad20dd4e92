"""Guard activities: drain grants from the per-cluster guard, and a job's incident history.

``GuardActivities(client, task_queue)`` holds a Temporal client (created with
``pydantic_data_converter``) and the task queue the guard workflow runs on. Register both bound
methods on the worker::

    ga = GuardActivities(client, task_queue)
    Worker(..., workflows=[ClusterGuardWorkflow, ...],
           activities=[ga.request_drain_grant, ga.incident_history, ...])

Activity names: ``request_drain_grant``, ``incident_history``.
"""

from __future__ import annotations

import re
from datetime import datetime

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from revive import ids
from revive import metrics as rm
from revive.decide.breaker import DrainGrant, DrainGrantInput, GuardInput
from revive.decide.budgets import (
    JobIncidentHistory,
    history_from_priors,
    prior_from_result,
)
from revive.models import IncidentHistoryInput, IncidentResult

MAX_INCIDENTS_READ = 200
"""Upper bound on closed incidents read per query (a job with more is already far over budget)."""

_SAFE = re.compile(r"^[A-Za-z0-9_.:@+/\-\[\],]+$")


def _q(value: str, what: str) -> str:
    """Quote a visibility-query literal; refuse anything that is not a plain identifier."""
    if not _SAFE.match(value):
        raise ApplicationError(
            f"{what} {value!r} has characters not allowed in a visibility query",
            type="ConfigError",
            non_retryable=True,
        )
    return f"'{value}'"


def _iso(value: str, what: str) -> str:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApplicationError(
            f"{what} {value!r} is not ISO-8601", type="ConfigError", non_retryable=True
        ) from None
    return f"'{value}'"


class GuardActivities:
    """Activities that talk to Temporal itself (guard workflow, visibility)."""

    def __init__(self, client: Client, task_queue: str) -> None:
        """``client`` must use ``pydantic_data_converter``; ``task_queue`` is where
        ``ClusterGuardWorkflow`` is registered."""
        self.client = client
        self.task_queue = task_queue

    @activity.defn(name="request_drain_grant")
    async def request_drain_grant(self, inp: DrainGrantInput) -> DrainGrant:
        """Ask the cluster's guard for a drain grant (update-with-start; the guard is created with
        ``id_conflict_policy=USE_EXISTING`` on first use). Idempotent per incident id.

        Raises whatever the client raises (retryable: the server is down) and
        ``WorkflowUpdateFailedError`` for a request the guard's validator refuses (wrong
        cluster, no nodes): the incident workflow should treat that as a refusal.
        """
        start_op: WithStartWorkflowOperation = WithStartWorkflowOperation(
            ids.GUARD_WORKFLOW,
            GuardInput(cluster=inp.cluster),
            id=ids.guard_workflow_id(inp.cluster, self.task_queue),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        grant: DrainGrant = await self.client.execute_update_with_start_workflow(
            ids.GUARD_REQUEST_DRAIN, inp, start_workflow_operation=start_op, result_type=DrainGrant
        )
        rm.set_breaker(inp.cluster, grant.breaker_open)
        return grant

    async def _read(self, query: str) -> list[IncidentResult]:
        out: list[IncidentResult] = []
        async for wf in self.client.list_workflows(query, limit=MAX_INCIDENTS_READ):
            handle = self.client.get_workflow_handle(
                wf.id, run_id=wf.run_id, result_type=IncidentResult
            )
            try:
                out.append(await handle.result(follow_runs=False))
            except Exception as e:  # noqa: BLE001 — one unreadable result must not hide the rest
                activity.logger.warning("incident %s: result unreadable: %s", wf.id, e)
        return out

    @activity.defn(name="incident_history")
    async def incident_history(self, inp: IncidentHistoryInput) -> JobIncidentHistory:
        """The job's closed (completed) ``IncidentWorkflow`` results as a ``JobIncidentHistory``
        (oldest first, ``requeues`` counted from the executed actions), read through visibility.

        Visibility is eventually consistent: an incident closed a second ago may be missing.
        Raises ``ApplicationError(type="ConfigError", non_retryable=True)`` for values that
        cannot be put in a query; RPC errors propagate (retryable).
        """
        base = (
            f"WorkflowType='{ids.INCIDENT_WORKFLOW}' AND ExecutionStatus='Completed' "
            f"AND ReviveCluster={_q(inp.cluster, 'cluster')}"
        )
        query = f"{base} AND ReviveJobId={_q(inp.job_id, 'job id')}"
        if inp.job_submit_time_iso:
            query += f" AND StartTime >= {_iso(inp.job_submit_time_iso, 'job_submit_time_iso')}"
        results = [
            r for r in await self._read(query) if r.incident_id != inp.exclude_incident_id
        ]
        history = history_from_priors([prior_from_result(r, inp.job_id) for r in results])

        if inp.nodes:
            nodes = ", ".join(_q(n, "node") for n in dict.fromkeys(inp.nodes))
            nq = f"{base} AND ReviveNodes IN ({nodes})"
            if inp.nodes_since_iso:
                nq += f" AND CloseTime >= {_iso(inp.nodes_since_iso, 'nodes_since_iso')}"
            node_results = [
                r for r in await self._read(nq) if r.incident_id != inp.exclude_incident_id
            ]
            history.node_incidents = [prior_from_result(r) for r in node_results]
        return history


__all__ = ["GuardActivities"]
