"""One scheduler interface for every concern that touches the cluster manager.

Reads go through the Slurm CLI (``scontrol``/``squeue``, locally or over SSH) or slurmrestd;
actions always go through the CLI, because slurmrestd 22.05 can neither drain/resume a node nor
requeue a job. ``FakeScheduler`` (``revive.scheduler.fake``) records every mutating call: the
observe-mode tests assert on that record.

Error tree (``revive.errors``): ``SchedulerError`` → ``SchedulerUnavailable`` (slurmctld or the
transport is down: retryable), ``JobNotFound`` (purged or never existed: non-retryable),
``SchedulerCommandError`` (the command ran and refused, e.g. ``Requested operation is presently
disabled``: non-retryable).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from revive.models import JobRecord, NodeRecord
from revive.signals import SignalScope


@runtime_checkable
class Scheduler(Protocol):
    """Contract every scheduler backend implements. All methods are coroutines.

    Mutating methods are idempotent where Slurm allows it and return the argv they ran (for the
    audit). They never check policy: that is the runbook's job.
    """

    cluster: str

    # ---- reads -------------------------------------------------------------------------------
    async def get_job(self, job_id: str) -> JobRecord:
        """The job's live record (``scontrol show job -o <id>``). Raises ``JobNotFound``."""
        ...

    async def list_jobs(self) -> list[JobRecord]:
        """Every job slurmctld still knows (pending, running, and finished within MinJobAge)."""
        ...

    async def get_nodes(self, names: list[str] | None = None) -> list[NodeRecord]:
        """Node records, all nodes when ``names`` is None."""
        ...

    async def ping(self) -> bool:
        """True when slurmctld answers."""
        ...

    # ---- actions (CLI only; 22.05 REST cannot do these) --------------------------------------
    async def drain_nodes(self, nodes: list[str], reason: str) -> list[str]:
        """``scontrol update NodeName=<n> State=DRAIN Reason=<reason>``. Returns argv run."""
        ...

    async def resume_nodes(self, nodes: list[str]) -> list[str]:
        """``scontrol update NodeName=<n> State=RESUME``."""
        ...

    async def requeue(self, job_id: str, hold: bool = False) -> list[str]:
        """``scontrol requeue <id>`` (or ``requeuehold``)."""
        ...

    async def update_job(self, job_id: str, **fields: str) -> list[str]:
        """``scontrol update JobId=<id> K=V …`` (e.g. ``ExcNodeList=node2``)."""
        ...

    async def hold(self, job_id: str) -> list[str]:
        """``scontrol hold <id>``: a pending job stays pending (priority 0) until ``release``.
        Slurm refuses it on a job that already runs."""
        ...

    async def release(self, job_id: str) -> list[str]:
        """``scontrol release <id>``."""
        ...

    async def cancel(self, job_id: str, signal: str | None = None) -> list[str]:
        """``scancel [--signal=S] <id>``."""
        ...

    async def signal_job(self, job_id: str, signal: str, scope: SignalScope = SignalScope.steps) -> list[str]:
        """Send a save signal to a running job without ending it: ``scancel [--batch|--full]
        --signal=<S> <id>`` (``revive.signals.scancel_argv``; ``scope`` says which processes it
        reaches). ``job_id`` may be an array task ``123_4`` (only that task is signalled).
        Raises ``ValueError`` for a signal outside ``revive.signals.SAVE_SIGNALS``."""
        ...

    async def submit(self, script: str, options: list[str]) -> str:
        """``sbatch --parsable <options>`` with ``script`` on stdin. Returns the new job id."""
        ...

    async def batch_script(self, job_id: str) -> str:
        """The job's batch script (``scontrol write batch_script <id> -``)."""
        ...

    async def run_on_node(self, node: str, argv: list[str], timeout_s: float = 30.0) -> tuple[int, str]:
        """Run a read-only diagnostic on a node (``srun --overlap`` or SSH). Returns (rc, output)."""
        ...

    # ---- maintenance windows (return to service: a health-check job on a drained node) ------
    async def create_maintenance_window(self, name: str, nodes: list[str], duration_s: float,
                                        users: list[str]) -> list[str]:
        """Reserve ``nodes`` for maintenance from now for ``duration_s`` seconds, open only to
        ``users``, whatever jobs run there (Slurm: ``scontrol create reservation
        ReservationName=<name> Flags=MAINT,IGNORE_JOBS Nodes=<n> StartTime=now
        Duration=<minutes> Users=<u>``). Idempotent: a window of that name that already exists is
        kept. Returns the argv run."""
        ...

    async def delete_maintenance_window(self, name: str) -> list[str]:
        """Remove the window (``scontrol delete ReservationName=<name>``). A window that does not
        exist (already deleted, or expired) is not an error."""
        ...

    async def list_maintenance_windows(self) -> list[str]:
        """Names of the windows the scheduler holds now (``scontrol show reservation -o``)."""
        ...
