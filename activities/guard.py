"""Guard activities: drain grants from the per-cluster guard, and a job's incident history.

``GuardActivities(client, task_queue)`` holds a Temporal client (created with
``pydantic_data_converter``) and the task queue the guard workflow runs on. Register both bound
methods on the worker::

    ga = GuardActivities(client, task_queue)
    Worker(..., workflows=[ClusterGuardWorkflow, ...],
           activities=[ga.request_drain_grant, ga.incident_history, ...])

Activity names: ``request_drain_grant``, ``incident_history`` (visibility; the fallback),
``admit_incident`` (the per-job record, ``JobRecordWorkflow``, and the guard's per-node incident
records) and ``report_job_outcome`` (the per-job record),
``read_guard_mode`` (the mode the guard holds) and ``read_guard_policy`` (for the monitor).

Plain functions for the CLI and the monitor: ``update_guard_settings`` (the ``set_mode`` /
``apply_policy`` Updates, update-with-start, retried on ``RESOURCE_EXHAUSTED``) and
``guard_settings`` (the ``settings`` query; None when the guard does not exist yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from datetime import datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from revive import ids
from revive import metrics as rm
from revive import search_attributes as sa
from revive.decide.breaker import DrainGrant, DrainGrantInput, GuardInput
from revive.decide.budgets import (
    JobIncidentHistory,
    history_from_priors,
    prior_from_result,
)
from revive.decide.budgets import PriorIncident as JobPrior
from revive.decide.jobrecord import AdmitAnswer, AdmitIncidentInput, JobRecordInput, ReportInput
from revive.decide.offenders import MAX_NODES, NodeIncidentsAnswer, NoteNodesInput
from revive.decide.settings import GuardSettings, ModeAnswer, ModeQuery, SettingsAnswer, effective_mode
from revive.errors import ReviveError
from revive.models import Category, Domain, IncidentHistoryInput, IncidentResult, PriorIncident

GUARD_NOTE_TIMEOUT_S = 15.0
"""Seconds the ``note_node_incidents`` Update may take before the guard counts as unreachable (no
worker runs it, its task keeps failing): the node incidents then come from visibility, with a note."""
DEFAULT_REPEAT_WINDOW = timedelta(hours=24)
"""``RepeatOffenderPolicy.window``'s default, used when the activity's input carries no window."""

UPDATE_RETRIES = 8
"""Attempts of an Update refused with ``RESOURCE_EXHAUSTED`` (too many in flight on one workflow;
Temporal's default ``history.maxInFlightUpdates`` is 10), with exponential backoff from 0.2 s."""


async def _with_backoff(call: Any) -> Any:
    """Run ``call()`` (a coroutine factory); retry ``RESOURCE_EXHAUSTED`` up to ``UPDATE_RETRIES`` times."""
    delay = 0.2
    for attempt in range(UPDATE_RETRIES):
        try:
            return await call()
        except RPCError as e:
            if e.status != RPCStatusCode.RESOURCE_EXHAUSTED or attempt == UPDATE_RETRIES - 1:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)
    raise AssertionError("unreachable")


def _guard_start(cluster: str, task_queue: str) -> WithStartWorkflowOperation:
    return WithStartWorkflowOperation(
        ids.GUARD_WORKFLOW,
        GuardInput(cluster=cluster),
        id=ids.guard_workflow_id(cluster, task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def update_guard_settings(client: Client, cluster: str, task_queue: str, update: str,
                                payload: dict[str, Any]) -> SettingsAnswer:
    """Send ``set_mode`` or ``apply_policy`` to the cluster's guard (created if absent).

    Raises ``ValueError`` with the guard's refusal (invalid mode/policy, caps) — nothing was
    recorded then; ``RPCError`` when the server is unreachable or still exhausted after retries.
    """
    if update not in (ids.GUARD_SET_MODE, ids.GUARD_APPLY_POLICY):
        raise ValueError(f"not a settings Update: {update!r}")

    async def call() -> SettingsAnswer:
        answer: SettingsAnswer = await client.execute_update_with_start_workflow(
            update, payload, start_workflow_operation=_guard_start(cluster, task_queue),
            result_type=SettingsAnswer)
        return answer

    try:
        result: SettingsAnswer = await _with_backoff(call)
    except WorkflowUpdateFailedError as e:
        raise ValueError(getattr(e.cause, "message", None) or str(e)) from None
    return result


async def guard_settings(client: Client, cluster: str, task_queue: str) -> GuardSettings | None:
    """The guard's mode and policy (``settings`` query); None when the guard does not exist yet.
    Other RPC errors propagate."""
    handle = client.get_workflow_handle(ids.guard_workflow_id(cluster, task_queue))
    try:
        got: GuardSettings = await handle.query(ids.GUARD_SETTINGS_QUERY, result_type=GuardSettings)
        return got
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise

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

    @activity.defn(name="read_guard_mode")
    async def read_guard_mode(self, inp: ModeQuery) -> ModeAnswer:
        """The mode the incident's gate uses: the guard's partition override, else its cluster-wide
        mode; when the guard has no mode set yet (or does not exist), ``inp.fallback`` — the mode of
        the policy in the incident's input (``source="input"``). RPC errors propagate (retried):
        an unreachable guard never silently turns an operator's rollback to observe into auto."""
        s = await guard_settings(self.client, inp.cluster, self.task_queue)
        version = s.policy_version if s else 0
        got = effective_mode(s, inp.partition) if s else None
        if got is None:
            return ModeAnswer(mode=inp.fallback, source="input", policy_version=version)
        mode, source, who = got
        return ModeAnswer(mode=mode, source=source, policy_version=version, set_by=who)

    @activity.defn(name="read_guard_policy")
    async def read_guard_policy(self, cluster: str) -> GuardSettings | None:
        """The guard's settings (policy, version, modes) for the monitor; None: no guard yet (keep
        the policy file, the bootstrap)."""
        return await guard_settings(self.client, cluster, self.task_queue)

    @activity.defn(name="admit_incident")
    async def admit_incident(self, inp: AdmitIncidentInput) -> AdmitAnswer:
        """Admit the incident into its job's record (``JobRecordWorkflow``, update-with-start) and
        return the job's history for the budget check — other open incidents of the job counted as
        reserved requeues (atomic: the record's Update is synchronous).

        Fallback for jobs whose earlier incidents predate the record: when the record does not
        exist yet, the job's closed incidents are read through visibility (as ``incident_history``
        does) and sent as ``seed`` (used once).

        Repeat offenders (incidents of any job on the candidate nodes): the incident's culprit
        nodes are noted in the cluster's guard and the guard answers the other incidents on the
        nodes in the same Update (``note_node_incidents``), so an incident noted a second ago
        counts. Visibility is read only for the part of the window older than the guard's records
        (``known_since``), or for all of it when the guard does not answer within
        ``GUARD_NOTE_TIMEOUT_S`` or refuses (then ``history.notes`` says so). Errors: as
        ``incident_history``; ``WorkflowUpdateFailedError`` from the record → non-retryable
        ``ApplicationError`` (a refused admit).
        """
        a, h = inp.admit, inp.history
        wid = ids.job_record_id(a.cluster, a.job_id, self.task_queue)
        # the visibility read (the job's closed incidents for a seed, the nodes' recent incidents)
        # runs beside the record's describe and Update: it needs neither
        # (the culprits too: the node read is the fallback when the guard does not answer)
        asked = list(dict.fromkeys([*h.nodes, *inp.culprit_nodes]))
        vis = asyncio.create_task(self._visibility(h.model_copy(update={"nodes": asked})))
        try:
            return await self._admit(inp, wid, vis)
        finally:
            if not vis.done():
                vis.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await vis

    async def _admit(self, inp: AdmitIncidentInput, wid: str,
                     vis: asyncio.Task[JobIncidentHistory]) -> AdmitAnswer:
        h = inp.history
        # the guard's node note needs nothing from the record: its Update runs beside the record's
        # (one round trip fewer before the plan; the note is idempotent per incident id, so a retried
        # activity notes once, and the record refuses only an admit sent to another job's record)
        nodes = (asyncio.create_task(self._node_incidents(inp, vis))
                 if h.nodes or inp.culprit_nodes else None)
        try:
            answer = await self._admit_record(inp, wid, vis)
        except BaseException:
            if nodes is not None:
                nodes.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await nodes
            raise
        if nodes is not None:
            found, notes = await nodes
            answer.history.node_incidents = found
            answer.history.notes.extend(notes)
        return answer

    async def _admit_record(self, inp: AdmitIncidentInput, wid: str,
                            vis: asyncio.Task[JobIncidentHistory]) -> AdmitAnswer:
        a = inp.admit
        seed = list(a.seed)
        try:
            await self.client.get_workflow_handle(wid).describe()
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:
                raise
            seed = (await vis).prior
        payload = a.model_copy(update={"seed": seed})

        async def call() -> AdmitAnswer:
            # a WithStartWorkflowOperation is single-use: a fresh one for each retried attempt
            start: WithStartWorkflowOperation = WithStartWorkflowOperation(
                ids.JOB_RECORD_WORKFLOW, JobRecordInput(cluster=a.cluster, job_id=a.job_id), id=wid,
                task_queue=self.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
            answer: AdmitAnswer = await self.client.execute_update_with_start_workflow(
                ids.JOB_RECORD_ADMIT, payload, start_workflow_operation=start, result_type=AdmitAnswer)
            return answer

        try:
            answer: AdmitAnswer = await _with_backoff(call)
        except WorkflowUpdateFailedError as e:
            raise ApplicationError(f"job record refused the admit: {getattr(e.cause, 'message', e)}",
                                   type="JobRecordRefused", non_retryable=True) from None
        return answer

    async def _node_incidents(self, inp: AdmitIncidentInput,
                              vis: asyncio.Task[JobIncidentHistory]) -> tuple[list[JobPrior], list[str]]:
        """Other incidents on the candidate nodes within the window → ``(priors, notes)``: the
        guard's records (the culprits noted for this incident first), plus visibility (``vis``,
        read beside it) for what the guard does not cover. Raises what visibility raises when it
        is needed and fails."""
        a, h = inp.admit, inp.history
        window = inp.repeat_window
        if window is None and h.nodes_since_iso:
            try:
                window = a.now - datetime.fromisoformat(h.nodes_since_iso.replace("Z", "+00:00"))
            except (ValueError, TypeError):
                window = None
        window = window if window is not None and window > timedelta(0) else DEFAULT_REPEAT_WINDOW
        note = NoteNodesInput(
            cluster=a.cluster, incident_id=a.incident_id, job_id=a.job_id, category=a.category,
            culprit_nodes=list(dict.fromkeys(inp.culprit_nodes))[:64],
            nodes=list(dict.fromkeys(h.nodes))[:MAX_NODES], window=window, now=a.now)

        notes: list[str] = []
        priors: list[JobPrior] = []
        covered = False
        try:
            ans = await asyncio.wait_for(self._note_in_guard(note), GUARD_NOTE_TIMEOUT_S)
            priors = [JobPrior(incident_id=r.incident_id, job_id=r.job_id, category=r.category,
                                    culprit_nodes=list(r.nodes), closed_at=r.at) for r in ans.incidents]
            covered = ans.known_since <= a.now - window
        except WorkflowUpdateFailedError as e:
            notes.append(f"guard refused the node incidents note ({getattr(e.cause, 'message', e)}): "
                         "repeat offenders from visibility only")
        except (RPCError, TimeoutError) as e:
            notes.append(f"guard unreachable ({type(e).__name__}: {str(e)[:200]}): "
                         "repeat offenders from visibility only")
        for n in notes:
            activity.logger.warning("incident %s: %s", a.incident_id, n)
        if covered:
            return priors, notes
        older = (await vis).node_incidents
        have = {p.incident_id for p in priors}
        return [*[p for p in older if p.incident_id not in have], *priors], notes

    async def _note_in_guard(self, note: NoteNodesInput) -> NodeIncidentsAnswer:
        """The guard's ``note_node_incidents`` Update (update-with-start, retried on
        ``RESOURCE_EXHAUSTED``). Raises ``RPCError`` / ``WorkflowUpdateFailedError``."""
        async def call() -> NodeIncidentsAnswer:
            got: NodeIncidentsAnswer = await self.client.execute_update_with_start_workflow(
                ids.GUARD_NOTE_NODES, note, start_workflow_operation=_guard_start(note.cluster, self.task_queue),
                result_type=NodeIncidentsAnswer)
            return got

        answer: NodeIncidentsAnswer = await _with_backoff(call)
        return answer

    async def _visibility(self, h: IncidentHistoryInput) -> JobIncidentHistory:
        """``incident_history``, or an empty history where the server has no visibility API
        (``UNIMPLEMENTED``: the time-skipping test server) — the record still answers the budgets."""
        try:
            return await self.incident_history(h)
        except RPCError as e:
            if e.status != RPCStatusCode.UNIMPLEMENTED:
                raise
            activity.logger.warning("no visibility on this server: job and node history from the record only")
            return JobIncidentHistory()

    @activity.defn(name="report_job_outcome")
    async def report_job_outcome(self, inp: ReportInput) -> bool:
        """Record the incident's outcome in its job's record (replaces its reservation). True when
        the record had admitted it. A refused report raises a non-retryable ``ApplicationError``."""
        handle = self.client.get_workflow_handle(ids.job_record_id(inp.cluster, inp.job_id, self.task_queue))

        async def call() -> bool:
            known: bool = await handle.execute_update(ids.JOB_RECORD_REPORT, inp, result_type=bool)
            return known

        try:
            result: bool = await _with_backoff(call)
        except WorkflowUpdateFailedError as e:
            raise ApplicationError(f"job record refused the report: {getattr(e.cause, 'message', e)}",
                                   type="JobRecordRefused", non_retryable=True) from None
        return result

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


HARDWARE_HISTORY_CATEGORIES = ("gpu_hardware", "gpu_memory_ecc", "nvlink")
"""Categories of an earlier incident that count as a node's hardware history (the engine's
``revive.attribution.verdict._HISTORY_HW_CATEGORIES``, as ``ReviveCategory`` values)."""
HARDWARE_HISTORY_READ = 200
"""At most this many earlier incidents read per gather (newest matter; older ones change nothing)."""


async def hardware_history(client: Client, cluster: str, nodes: list[str], since: datetime,
                           exclude_incident_id: str | None = None) -> dict[str, list[PriorIncident]]:
    """Earlier hardware incidents on ``nodes`` since ``since`` (UTC) → ``{node: [PriorIncident]}``,
    for ``EvidenceBundle.node_history`` (issue #8.4). Read from Revive's closed incidents through
    visibility — ``ReviveCulprits`` names the node and ``ReviveCategory`` is a hardware category —
    with no result fetched (search attributes and close time only). Visibility lags by a second or
    so: an incident closed just now may be missing (it only delays the upgrade by one incident).
    A server without a visibility API (``UNIMPLEMENTED``) has no history: ``{}``. Raises
    ``ReviveError`` for values that cannot be put in a query; other RPC errors propagate (the
    caller turns them into a bundle note)."""
    if not nodes:
        return {}
    try:
        culprits = ", ".join(_q(n, "node") for n in dict.fromkeys(nodes))
        query = (f"WorkflowType='{ids.INCIDENT_WORKFLOW}' AND ExecutionStatus='Completed' "
                 f"AND ReviveCluster={_q(cluster, 'cluster')} AND ReviveCulprits IN ({culprits}) "
                 f"AND ReviveCategory IN ({', '.join(repr(c) for c in HARDWARE_HISTORY_CATEGORIES)}) "
                 f"AND CloseTime >= {_iso(since.isoformat(), 'since')}")
    except ApplicationError as e:
        raise ReviveError(str(e.message)) from None
    out: dict[str, list[PriorIncident]] = {}
    wanted = set(nodes)
    try:
        found = [wf async for wf in client.list_workflows(query, limit=HARDWARE_HISTORY_READ)]
    except RPCError as e:
        if e.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        return {}  # a server without visibility (the time-skipping test server): no history
    for wf in found:
        attrs = wf.typed_search_attributes
        iid = attrs.get(sa.INCIDENT_ID) or wf.id
        if iid == exclude_incident_id:
            continue
        category = attrs.get(sa.CATEGORY) or ""
        try:
            cat = Category(category)
        except ValueError:
            continue
        for node in attrs.get(sa.CULPRITS) or []:
            if node in wanted:
                out.setdefault(node, []).append(PriorIncident(
                    category=cat, domain=Domain.hardware, at=wf.close_time, incident_id=iid,
                    reason=f"Revive incident {iid}: {cat.value}"))
    return out


__all__ = ["GuardActivities", "guard_settings", "hardware_history", "update_guard_settings"]
