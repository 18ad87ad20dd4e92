"""Return-to-service activities: find Revive's drained nodes, run the site's health check on one,
resume it or drain it again. Every scheduler call goes through the ``Scheduler`` interface.

``HealthActivities(scheduler, client, task_queue, audit_file)``; register the bound methods::

    ha = HealthActivities(scheduler, client, task_queue, audit_file)
    Worker(..., activities=[ha.rts_candidates, ha.rts_guard_drains, ha.run_health_check,
                            ha.resume_checked_node, ha.redrain_checked_node, ...])

Activity names: the method names.

Health check methods (``revive.policy.CheckMethod``):

- ``direct``: ``Scheduler.run_on_node`` runs the command on the node (SSH in site mode, locally
  with ``SLURMD_NODENAME`` on the testbed), as ``revive.health`` does for ``revive node resume``;
- ``reservation``: Slurm starts no job on a drained node, so: create the maintenance window
  ``revive-rts-<node>`` (a ``MAINT,IGNORE_JOBS`` reservation open to ``reservation_users``),
  resume the node, submit the check as a one-node job in the window, wait for it, then drain the
  node again with the reason it had and delete the window — always, also when the job fails or
  the activity is cancelled. The node is resumed for good only by ``resume_checked_node``, after
  the gate (observe mode waits for a person), so no user job ever lands on an unchecked node.

Resumes and re-drains act only while the node is still drained with exactly the reason the check
saw: a reason a person changed meanwhile is never overridden. Each resume is appended to
``node-resumes.jsonl`` beside the audit file (``revive report`` counts false isolations from it);
every closed check, whatever its outcome, is one line of ``node-checks.jsonl`` there
(``record_node_check``: ``{"kind": "node_check", …NodeCheckResult}``).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from datetime import UTC, datetime
from pathlib import Path

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.blocking import run_blocking, with_heartbeats
from revive import ids
from revive import metrics as rm
from revive.appendfile import append_line
from revive.decide.breaker import GuardState
from revive.decide.rts import (
    Candidate,
    CheckVerdict,
    GuardDrainsInput,
    HealthCheckInput,
    NodeActionInput,
    NodeActionResult,
    NodeCheckResult,
    ScanInput,
    select,
    short_reason,
)
from revive.health import health_argv
from revive.models import TERMINAL, NodeRecord
from revive.report import record_resume
from revive.scheduler.base import Scheduler

CHECKS_FILE = "node-checks.jsonl"
"""Beside the audit file: one line per closed node check (any outcome), for the audit trail."""
JOB_POLL_S = 2.0
"""Seconds between reads of the check job's state (``reservation``)."""


def _tail(text: str, n: int = 2) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


class HealthActivities:
    """Activities of ``ReturnToServiceWorkflow`` and ``NodeCheckWorkflow``."""

    def __init__(self, scheduler: Scheduler, client: Client | None, task_queue: str,
                 audit_file: str | Path | None = None, job_output_dir: str | Path | None = None) -> None:
        """``client`` (pydantic data converter) reads incident status and the guard's records;
        None (unit tests) = no incident is open and the guard holds no records.
        ``job_output_dir``: where a check job in a maintenance window writes its output, when that
        path is readable here (the local testbed); None = ``/dev/null`` (the exit status decides)."""
        self.job_output_dir = str(job_output_dir) if job_output_dir else None
        self.scheduler = scheduler
        self.client = client
        self.task_queue = task_queue
        self.audit_file = Path(audit_file) if audit_file else None

    async def _node(self, node: str) -> NodeRecord | None:
        found = [n for n in await self.scheduler.get_nodes([node]) if n.name == node]
        return found[0] if found else None

    async def _incident_open(self, incident_id: str) -> bool:
        if self.client is None:
            return False
        try:
            desc = await self.client.get_workflow_handle(incident_id).describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return desc.status == WorkflowExecutionStatus.RUNNING

    @activity.defn(name="rts_candidates")
    async def rts_candidates(self, inp: ScanInput) -> list[Candidate]:
        """Revive's drained nodes, each marked to check or skipped with why
        (``revive.decide.rts.select``). Nodes drained by anyone else are not listed. Scheduler and
        RPC errors propagate (retryable)."""
        nodes = await self.scheduler.get_nodes()
        first = select(nodes, inp.policy, inp.now)
        open_ids = {c.drain.incident_id for c in first if c.check and c.drain.incident_id
                    and await self._incident_open(c.drain.incident_id)}
        return select(nodes, inp.policy, inp.now, {i for i in open_ids if i})

    @activity.defn(name="rts_guard_drains")
    async def rts_guard_drains(self, inp: GuardDrainsInput) -> list[datetime]:
        """When the cluster's guard recorded drains of ``inp.node`` (its ``state`` query); [] when
        the guard has never run. RPC errors other than not-found propagate (retryable)."""
        if self.client is None:
            return []
        handle = self.client.get_workflow_handle(ids.guard_workflow_id(inp.cluster, self.task_queue))
        try:
            st: GuardState = await handle.query("state", result_type=GuardState)
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        return sorted(d.at for d in st.drains if inp.node in d.nodes)

    @activity.defn(name="run_health_check")
    async def run_health_check(self, inp: HealthCheckInput) -> CheckVerdict:
        """Run the check (``direct`` or ``reservation``, see the module docstring); heartbeats.
        Never raises for a failing node: a check that cannot run is a failed verdict saying why.
        ``reservation`` leaves the node drained with ``inp.reason`` and no window behind."""
        started = datetime.now(UTC)
        argv = health_argv(inp.command, inp.node)
        if inp.method == "reservation":
            v = await with_heartbeats(self._in_window(inp, argv))
        else:
            try:
                rc, out = await with_heartbeats(self.scheduler.run_on_node(inp.node, argv, timeout_s=inp.timeout_s))
            except Exception as e:  # noqa: BLE001 — a check that cannot run is not a pass
                v = CheckVerdict(node=inp.node, passed=False, summary=f"could not run {shlex.join(argv)}: {e}")
            else:
                tail = _tail(out)
                v = CheckVerdict(node=inp.node, passed=rc == 0,
                                 summary=f"{shlex.join(argv)} exited {rc}" + (f": {tail}" if tail else ""))
            v.commands.append(shlex.join(argv))
        v.started_at, v.finished_at = started, datetime.now(UTC)
        rm.rts_check(v.passed)
        activity.logger.info("health check %s: %s", inp.node, v.summary)
        return v

    async def _in_window(self, inp: HealthCheckInput, argv: list[str]) -> CheckVerdict:
        s, name, cmds = self.scheduler, inp.window_name or ids.maintenance_window_name(inp.node), []
        v = CheckVerdict(node=inp.node, passed=False, summary="")
        resumed = False
        try:
            cmds.append(shlex.join(await s.create_maintenance_window(name, [inp.node], inp.window_s, inp.users)))
            cmds.append(shlex.join(await s.resume_nodes([inp.node])))
            resumed = True
            out = None
            opts = [f"--reservation={name}", f"--nodelist={inp.node}", "--nodes=1", "--ntasks=1",
                    f"--job-name=revive-rts-{inp.node}", f"--time={max(1, int((inp.timeout_s + 59) // 60))}",
                    "--no-requeue"]
            out_dir = inp.output_dir or self.job_output_dir
            if out_dir:
                Path(out_dir).mkdir(parents=True, exist_ok=True)
                out = Path(out_dir) / f"{inp.node}-%j.out"
                opts.append(f"--output={out}")
            else:
                opts.append("--output=/dev/null")
            script = "#!/bin/sh\n" + f"exec {shlex.join(argv)}\n"
            job_id = await s.submit(script, opts)
            cmds.append(f"sbatch {shlex.join(opts)} # {shlex.join(argv)} → job {job_id}")
            deadline = time.monotonic() + inp.timeout_s
            state, exit_code = "PENDING", None
            while time.monotonic() < deadline:
                rec = await s.get_job(job_id)
                state, exit_code = rec.state, rec.exit_code
                if state in TERMINAL:
                    break
                await asyncio.sleep(JOB_POLL_S)
            else:
                cmds.append(shlex.join(await s.cancel(job_id)))
                v.summary = f"check job {job_id} did not finish within {inp.timeout_s:g} s (state {state})"
                return v
            text = ""
            if out is not None:
                path = Path(str(out).replace("%j", job_id))
                text = await run_blocking(lambda: path.read_text(errors="replace")[-4000:] if path.exists() else "")
            tail = _tail(text)
            v.passed = state == "COMPLETED" and (exit_code or "0:0").split(":")[0] == "0"
            v.summary = f"check job {job_id} {state} exit {exit_code or '?'}" + (f": {tail}" if tail else "")
            return v
        except Exception as e:  # noqa: BLE001 — any failure in the window is a failed check
            v.summary = v.summary or f"check in maintenance window {name} failed: {e}"
            return v
        finally:
            try:
                if resumed and inp.reason:
                    cmds.append(shlex.join(await s.drain_nodes([inp.node], inp.reason)))
            finally:
                cmds.append(shlex.join(await s.delete_maintenance_window(name)))
                v.commands = cmds

    @activity.defn(name="resume_checked_node")
    async def resume_checked_node(self, inp: NodeActionInput) -> NodeActionResult:
        """Resume ``inp.node`` if it is still drained with ``inp.expected_reason``; otherwise leave
        it (``done=False``, why). Idempotent: a node already resumed by a retried attempt reads
        ``done=False`` with the live state. Appends the resume to ``node-resumes.jsonl``; counts a
        false isolation (``revive_false_isolations_total``) when ``blamed_hardware``."""
        rec = await self._node(inp.node)
        if rec is None:
            return NodeActionResult(done=False, detail=f"{inp.node}: unknown node")
        if not rec.drained or (rec.reason or "").strip() != inp.expected_reason.strip():
            return NodeActionResult(done=False, detail=(f"{inp.node}: left alone: now {rec.state} with reason "
                                                        f"{rec.reason!r} (the check saw {inp.expected_reason!r})"))
        argv = await self.scheduler.resume_nodes([inp.node])
        rm.action_issued("resume")
        if inp.blamed_hardware:
            rm.false_isolation(inp.category or "unknown")
        if self.audit_file is not None:
            af, node, reason = self.audit_file, inp.node, inp.expected_reason
            await run_blocking(lambda: record_resume(af, node, reason, inp.prefix, incident_id=inp.incident_id))
        return NodeActionResult(done=True, detail=f"{inp.node}: resumed", commands=[shlex.join(argv)])

    @activity.defn(name="redrain_checked_node")
    async def redrain_checked_node(self, inp: NodeActionInput) -> NodeActionResult:
        """Set ``inp.new_reason`` on ``inp.node`` if it is still drained with
        ``inp.expected_reason`` (the node stays drained; only the reason changes). Idempotent: a
        node already carrying ``new_reason`` is done."""
        rec = await self._node(inp.node)
        if rec is None:
            return NodeActionResult(done=False, detail=f"{inp.node}: unknown node")
        live = (rec.reason or "").strip()
        if rec.drained and live == inp.new_reason.strip():
            return NodeActionResult(done=True, detail=f"{inp.node}: reason already updated")
        if not rec.drained or live != inp.expected_reason.strip():
            return NodeActionResult(done=False, detail=(f"{inp.node}: left alone: now {rec.state} with reason "
                                                        f"{rec.reason!r}"))
        argv = await self.scheduler.drain_nodes([inp.node], inp.new_reason)
        return NodeActionResult(done=True, detail=f"{inp.node}: stays drained: {short_reason(inp.new_reason)}",
                                commands=[shlex.join(argv)])


    @activity.defn(name="record_node_check")
    async def record_node_check(self, res: NodeCheckResult) -> None:
        """Append ``res`` as one JSON line to ``node-checks.jsonl`` beside the audit file (O_APPEND +
        fsync); nothing when the worker has no audit file. OS errors propagate (retryable)."""
        if self.audit_file is None:
            return
        path = self.audit_file.with_name(CHECKS_FILE)
        line = json.dumps({"kind": "node_check", **res.model_dump(mode="json")}) + "\n"

        await run_blocking(append_line, path, line)


__all__ = ["CHECKS_FILE", "HealthActivities"]
