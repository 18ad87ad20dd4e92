"""Test doubles for the ``Scheduler`` protocol.

- ``FakeScheduler``: in-memory jobs and nodes with just enough Slurm semantics for workflow and
  runbook tests (drain marks a node ``+DRAIN``; requeue bumps ``restart_count`` and sets the job
  PENDING, or held with ``hold=True``; release clears the hold; cancel sets CANCELLED). Every
  mutating call is appended to ``.calls`` as ``(method, kwargs)``.
- ``RecordingScheduler(inner)``: delegates everything to a real scheduler and records each
  mutating call (optionally appending it as one JSON line to a file) *before* delegating, so a
  test can prove that observe mode made zero mutating calls against the real cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from revive.errors import JobNotFound, SchedulerCommandError, SchedulerUnavailable
from revive.models import TERMINAL, JobRecord, NodeRecord
from revive.signals import SignalScope, scancel_argv

__all__ = ["FakeScheduler", "RecordingScheduler", "MUTATING_METHODS"]

MUTATING_METHODS = (
    "drain_nodes", "resume_nodes", "requeue", "update_job", "hold", "release", "cancel", "submit", "signal_job",
    "create_maintenance_window", "delete_maintenance_window",
)
_FINISHED = TERMINAL


class FakeScheduler:
    """In-memory ``Scheduler``. Seed it with ``jobs`` / ``nodes`` (or ``add_job``/``add_node``)."""

    def __init__(
        self,
        cluster: str = "fake",
        jobs: list[JobRecord] | None = None,
        nodes: list[NodeRecord] | None = None,
    ) -> None:
        self.cluster = cluster
        self.jobs: dict[str, JobRecord] = {j.job_id: j for j in jobs or []}
        self.nodes: dict[str, NodeRecord] = {n.name: n for n in nodes or []}
        self.calls: list[tuple[str, dict]] = []
        self.scripts: dict[str, str] = {}
        self.node_outputs: dict[tuple[str, str], tuple[int, str]] = {}
        """``(node, argv[0]) → (rc, output)`` canned answers for ``run_on_node``."""
        self.on_signal: dict[str, Callable[[str, str], None]] = {}
        """``job id → hook(signal, scope)`` run by ``signal_job``: a test's stand-in for the job's
        own signal handler (write the checkpoint line, requeue itself …)."""
        self.available = True
        """Set False to make every call raise ``SchedulerUnavailable`` (slurmctld down)."""
        self.windows: dict[str, list[str]] = {}
        """Maintenance windows held now: name → nodes."""
        self.submit_outcomes: list[tuple[str, str]] = []
        """``(state, exit_code)`` given, in order, to each job ``submit`` creates (a health-check
        job finishes at once); empty = the job stays PENDING."""
        self._next_id = max([int(j) for j in self.jobs if j.isdigit()] + [0]) + 1

    # ---- seeding / inspection -----------------------------------------------------------------
    def add_job(self, job: JobRecord) -> None:
        self.jobs[job.job_id] = job

    def add_node(self, node: NodeRecord) -> None:
        self.nodes[node.name] = node

    @property
    def mutating_calls(self) -> list[tuple[str, dict]]:
        return [c for c in self.calls if c[0] in MUTATING_METHODS]

    def _check(self) -> None:
        if not self.available:
            raise SchedulerUnavailable(f"fake slurmctld of {self.cluster!r} is down")

    def _job(self, job_id: str) -> JobRecord:
        self._check()
        try:
            return self.jobs[str(job_id)]
        except KeyError:
            raise JobNotFound(f"job {job_id} not found on cluster {self.cluster!r}") from None

    def _set_job(self, job: JobRecord, **changes) -> JobRecord:
        new = job.model_copy(update=changes)
        self.jobs[new.job_id] = new
        return new

    # ---- reads --------------------------------------------------------------------------------
    async def get_job(self, job_id: str) -> JobRecord:
        return self._job(job_id).model_copy(deep=True)

    async def list_jobs(self) -> list[JobRecord]:
        self._check()
        return [j.model_copy(deep=True) for j in self.jobs.values()]

    async def get_nodes(self, names: list[str] | None = None) -> list[NodeRecord]:
        self._check()
        nodes = list(self.nodes.values())
        if names is not None:
            nodes = [n for n in nodes if n.name in set(names)]
        return [n.model_copy(deep=True) for n in nodes]

    async def ping(self) -> bool:
        return self.available

    # ---- actions ------------------------------------------------------------------------------
    async def drain_nodes(self, nodes: list[str], reason: str) -> list[str]:
        self.calls.append(("drain_nodes", {"nodes": list(nodes), "reason": reason}))
        self._check()
        for name in nodes:
            n = self.nodes.get(name) or NodeRecord(name=name, state="IDLE")
            state = n.state if "DRAIN" in n.state.upper() else f"{n.state}+DRAIN"
            self.nodes[name] = n.model_copy(update={"state": state, "reason": reason})
        return ["scontrol", "update", f"NodeName={','.join(nodes)}", "State=DRAIN", f"Reason={reason}"]

    async def resume_nodes(self, nodes: list[str]) -> list[str]:
        self.calls.append(("resume_nodes", {"nodes": list(nodes)}))
        self._check()
        for name in nodes:
            n = self.nodes.get(name)
            if n is not None:
                base = n.state.split("+", 1)[0].rstrip("*")
                if base.upper() in ("DOWN", "DRAINED", "DRAINING"):
                    base = "IDLE"
                self.nodes[name] = n.model_copy(update={"state": base, "reason": None})
        return ["scontrol", "update", f"NodeName={','.join(nodes)}", "State=RESUME"]

    async def requeue(self, job_id: str, hold: bool = False) -> list[str]:
        self.calls.append(("requeue", {"job_id": str(job_id), "hold": hold}))
        job = self._job(job_id)
        argv = ["scontrol", "requeuehold" if hold else "requeue", str(job_id)]
        if job.requeue is False:
            raise SchedulerCommandError(argv, 1, f"Requested operation is presently disabled for job {job_id}")
        if job.state == "PENDING":
            raise SchedulerCommandError(argv, 1, "Job is pending execution")
        self._set_job(
            job,
            state="PENDING",
            reason="job_requeued_in_held_state" if hold else "BeginTime",
            restart_count=job.restart_count + 1,
            nodes=[],
            hold=hold,
            submit_time=datetime.now(UTC),  # 22.05 resets SubmitTime on requeue
        )
        return argv

    async def update_job(self, job_id: str, **fields: str) -> list[str]:
        self.calls.append(("update_job", {"job_id": str(job_id), **fields}))
        job = self._job(job_id)
        changes: dict = {}
        if "ExcNodeList" in fields and job.state not in ("PENDING", *_FINISHED):
            # Slurm 22.05 (checked on the testbed): `scontrol update JobId=<running> ExcNodeList=…`
            # fails with "Job is no longer pending execution"
            raise SchedulerCommandError(["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={fields['ExcNodeList']}"],
                                        1, f"Job is no longer pending execution for job {job_id}")
        for k, v in fields.items():
            if k == "ExcNodeList":
                from revive.scheduler.hostlist import expand_hostlist

                changes["exc_nodes"] = expand_hostlist(v)
            elif k == "Comment":
                changes["comment"] = v
            elif k == "TimeLimit":
                changes["time_limit"] = v
            elif k == "Dependency":  # slurmctld re-evaluates it: the terms wait again
                changes["dependency"] = ",".join(f"{t}(unfulfilled)" for t in v.split(",") if t)
                changes["reason"] = "Dependency"
        self._set_job(job, **changes)
        return ["scontrol", "update", f"JobId={job_id}", *(f"{k}={v}" for k, v in fields.items())]

    async def hold(self, job_id: str) -> list[str]:
        self.calls.append(("hold", {"job_id": str(job_id)}))
        job = self._job(job_id)
        argv = ["scontrol", "hold", str(job_id)]
        if job.state != "PENDING":
            raise SchedulerCommandError(argv, 1, f"Job {job_id} is not pending (Slurm holds only pending jobs)")
        self._set_job(job, hold=True, reason="JobHeldAdmin")
        return argv

    async def release(self, job_id: str) -> list[str]:
        self.calls.append(("release", {"job_id": str(job_id)}))
        job = self._job(job_id)
        if job.hold:
            self._set_job(job, hold=False, reason=None)
        return ["scontrol", "release", str(job_id)]

    async def cancel(self, job_id: str, signal: str | None = None) -> list[str]:
        self.calls.append(("cancel", {"job_id": str(job_id), "signal": signal}))
        job = self._job(job_id)
        if signal is None and job.state not in _FINISHED:
            self._set_job(job, state="CANCELLED", hold=False)
        return ["scancel", *([f"--signal={signal}"] if signal else []), str(job_id)]

    async def signal_job(self, job_id: str, signal: str, scope: SignalScope = SignalScope.steps) -> list[str]:
        self.calls.append(("signal_job", {"job_id": str(job_id), "signal": signal, "scope": str(scope)}))
        argv = scancel_argv(str(job_id), signal, scope)
        job = self._job(job_id)
        if job.state not in ("RUNNING", "SUSPENDED", "COMPLETING"):
            raise SchedulerCommandError(argv, 1, f"scancel: error: Kill job error on job id {job_id}: "
                                                 "Job/step already completing or completed")
        hook = self.on_signal.get(str(job_id))
        if hook is not None:
            hook(signal, str(scope))
        return argv

    async def submit(self, script: str, options: list[str]) -> str:
        self.calls.append(("submit", {"script": script, "options": list(options)}))
        self._check()
        job_id = str(self._next_id)
        self._next_id += 1
        name = next((o.split("=", 1)[1] for o in options if o.startswith("--job-name=")), None)
        state, exit_code = self.submit_outcomes.pop(0) if self.submit_outcomes else ("PENDING", None)
        self.jobs[job_id] = JobRecord(
            job_id=job_id, name=name, user="root", state=state, exit_code=exit_code,
            submit_time=datetime.now(UTC), requeue="--no-requeue" not in options,
        )
        self.scripts[job_id] = script
        return job_id

    async def batch_script(self, job_id: str) -> str:
        self._job(job_id)
        return self.scripts.get(str(job_id), "")

    async def run_on_node(self, node: str, argv: list[str], timeout_s: float = 30.0) -> tuple[int, str]:
        self._check()
        return self.node_outputs.get((node, argv[0] if argv else ""), (0, ""))

    async def create_maintenance_window(self, name: str, nodes: list[str], duration_s: float,
                                        users: list[str]) -> list[str]:
        self.calls.append(("create_maintenance_window", {"name": name, "nodes": list(nodes),
                                                         "duration_s": duration_s, "users": list(users)}))
        self._check()
        self.windows.setdefault(name, list(nodes))
        return ["scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={','.join(nodes)}"]

    async def delete_maintenance_window(self, name: str) -> list[str]:
        self.calls.append(("delete_maintenance_window", {"name": name}))
        self._check()
        self.windows.pop(name, None)
        return ["scontrol", "delete", f"ReservationName={name}"]

    async def list_maintenance_windows(self) -> list[str]:
        self._check()
        return list(self.windows)


class RecordingScheduler:
    """Wraps a real ``Scheduler``; records mutating calls (and appends them as JSONL to
    ``record_file`` when given) before delegating. Reads are delegated unrecorded."""

    def __init__(self, inner, record_file: str | Path | None = None) -> None:
        self.inner = inner
        self.cluster = inner.cluster
        self.calls: list[tuple[str, dict]] = []
        self.record_file = Path(record_file) if record_file else None
        self._lock = threading.Lock()

    @property
    def mutating_calls(self) -> list[tuple[str, dict]]:
        return list(self.calls)

    def _record(self, method: str, kwargs: dict) -> None:
        self.calls.append((method, kwargs))
        if self.record_file is not None:
            line = json.dumps(
                {"at": datetime.now(UTC).isoformat(), "cluster": self.cluster,
                 "method": method, "args": kwargs},
                default=str,
            )
            with self._lock:
                self.record_file.parent.mkdir(parents=True, exist_ok=True)
                with self.record_file.open("a") as f:
                    f.write(line + "\n")

    # reads
    async def get_job(self, job_id: str) -> JobRecord:
        return await self.inner.get_job(job_id)

    async def list_jobs(self) -> list[JobRecord]:
        return await self.inner.list_jobs()

    async def get_nodes(self, names: list[str] | None = None) -> list[NodeRecord]:
        return await self.inner.get_nodes(names)

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def batch_script(self, job_id: str) -> str:
        return await self.inner.batch_script(job_id)

    async def run_on_node(self, node: str, argv: list[str], timeout_s: float = 30.0) -> tuple[int, str]:
        return await self.inner.run_on_node(node, argv, timeout_s)

    # actions
    async def drain_nodes(self, nodes: list[str], reason: str) -> list[str]:
        self._record("drain_nodes", {"nodes": list(nodes), "reason": reason})
        return await self.inner.drain_nodes(nodes, reason)

    async def resume_nodes(self, nodes: list[str]) -> list[str]:
        self._record("resume_nodes", {"nodes": list(nodes)})
        return await self.inner.resume_nodes(nodes)

    async def requeue(self, job_id: str, hold: bool = False) -> list[str]:
        self._record("requeue", {"job_id": str(job_id), "hold": hold})
        return await self.inner.requeue(job_id, hold)

    async def update_job(self, job_id: str, **fields: str) -> list[str]:
        self._record("update_job", {"job_id": str(job_id), **fields})
        return await self.inner.update_job(job_id, **fields)

    async def hold(self, job_id: str) -> list[str]:
        self._record("hold", {"job_id": str(job_id)})
        return await self.inner.hold(job_id)

    async def release(self, job_id: str) -> list[str]:
        self._record("release", {"job_id": str(job_id)})
        return await self.inner.release(job_id)

    async def cancel(self, job_id: str, signal: str | None = None) -> list[str]:
        self._record("cancel", {"job_id": str(job_id), "signal": signal})
        return await self.inner.cancel(job_id, signal)

    async def signal_job(self, job_id: str, signal: str, scope: SignalScope = SignalScope.steps) -> list[str]:
        self._record("signal_job", {"job_id": str(job_id), "signal": signal, "scope": str(scope)})
        return await self.inner.signal_job(job_id, signal, scope)

    async def submit(self, script: str, options: list[str]) -> str:
        self._record("submit", {"script": script, "options": list(options)})
        return await self.inner.submit(script, options)

    async def create_maintenance_window(self, name: str, nodes: list[str], duration_s: float,
                                        users: list[str]) -> list[str]:
        self._record("create_maintenance_window", {"name": name, "nodes": list(nodes),
                                                   "duration_s": duration_s, "users": list(users)})
        return await self.inner.create_maintenance_window(name, nodes, duration_s, users)

    async def delete_maintenance_window(self, name: str) -> list[str]:
        self._record("delete_maintenance_window", {"name": name})
        return await self.inner.delete_maintenance_window(name)

    async def list_maintenance_windows(self) -> list[str]:
        return await self.inner.list_maintenance_windows()
