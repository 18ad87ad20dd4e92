"""Slurm job states: one table, with the meaning Slurm gives each state.

Source: Slurm 22.05 ``squeue(1)`` man page, section "JOB STATE CODES" (the same names appear in
``scontrol show job``'s ``JobState=`` and slurmrestd's ``job_state``). ``JobRecord.state`` holds the
base state without flags (``RUNNING+...`` → ``RUNNING``); a name Slurm adds later maps to
``UNKNOWN`` instead of failing validation. ``PURGED`` is Revive's own: slurmctld no longer knows the
job (``MinJobAge`` passed) and the record comes from the spec saved at detection.

Three sets answer the questions Revive asks, and nothing else defines job-state sets:

- ``ACTIVE``: the job holds or waits for an allocation (watch it, act on it);
- ``TERMINAL``: the job ended (any reason); ``UNSUCCESSFUL_END``: ended without completing;
- ``ABNORMAL_END``: the job ended because something failed — leaving RUNNING for one of these
  opens an incident (``CANCELLED`` by a person and ``COMPLETED`` do not).
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """A Slurm 22.05 job state (squeue(1) "JOB STATE CODES"), plus ``UNKNOWN`` and ``PURGED``."""

    BOOT_FAIL = "BOOT_FAIL"
    """Terminated due to launch failure, typically a hardware failure (e.g. unable to boot the node)."""
    CANCELLED = "CANCELLED"
    """Explicitly cancelled by the user or system administrator."""
    COMPLETED = "COMPLETED"
    """All processes on all nodes terminated with an exit code of zero."""
    CONFIGURING = "CONFIGURING"
    """Allocated resources, waiting for them to become ready (e.g. booting)."""
    COMPLETING = "COMPLETING"
    """Finishing; some processes on some nodes may still be active."""
    DEADLINE = "DEADLINE"
    """Terminated on reaching its deadline."""
    FAILED = "FAILED"
    """Terminated with a non-zero exit code or other failure condition."""
    NODE_FAIL = "NODE_FAIL"
    """Terminated due to the failure of one or more allocated nodes."""
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    """Experienced an out-of-memory error."""
    PENDING = "PENDING"
    """Awaiting resource allocation."""
    PREEMPTED = "PREEMPTED"
    """Terminated due to preemption."""
    RUNNING = "RUNNING"
    """Currently has an allocation."""
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    """Being held after its requested reservation was deleted."""
    REQUEUE_FED = "REQUEUE_FED"
    """Being requeued by a federation."""
    REQUEUE_HOLD = "REQUEUE_HOLD"
    """Held job is being requeued."""
    REQUEUED = "REQUEUED"
    """Completing job is being requeued."""
    RESIZING = "RESIZING"
    """About to change size."""
    REVOKED = "REVOKED"
    """Sibling was removed from the cluster due to another cluster starting the job."""
    SIGNALING = "SIGNALING"
    """Being signalled."""
    SPECIAL_EXIT = "SPECIAL_EXIT"
    """Requeued in a special state (held with a specific exit value)."""
    STAGE_OUT = "STAGE_OUT"
    """Staging out files."""
    STOPPED = "STOPPED"
    """Has an allocation, but execution has been stopped with SIGSTOP."""
    SUSPENDED = "SUSPENDED"
    """Has an allocation, but execution has been suspended and CPUs released."""
    TIMEOUT = "TIMEOUT"
    """Terminated upon reaching its time limit."""
    UNKNOWN = "UNKNOWN"
    """Revive: a state this table does not know, or none reported."""
    PURGED = "PURGED"
    """Revive: slurmctld no longer knows the job; the record was saved at detection."""

    @classmethod
    def _missing_(cls, value: object) -> JobState:
        if isinstance(value, str):
            base = value.split("+", 1)[0].strip().upper()
            if base in cls.__members__:
                return cls[base]
        return cls.UNKNOWN


ACTIVE: frozenset[JobState] = frozenset({
    JobState.PENDING, JobState.CONFIGURING, JobState.RUNNING, JobState.COMPLETING, JobState.REQUEUED,
    JobState.REQUEUE_HOLD, JobState.REQUEUE_FED, JobState.RESIZING, JobState.SIGNALING, JobState.STAGE_OUT,
    JobState.SUSPENDED, JobState.STOPPED, JobState.SPECIAL_EXIT, JobState.RESV_DEL_HOLD,
})
"""The job holds or waits for an allocation: it can still run again without a resubmission."""

TERMINAL: frozenset[JobState] = frozenset({
    JobState.BOOT_FAIL, JobState.CANCELLED, JobState.COMPLETED, JobState.DEADLINE, JobState.FAILED,
    JobState.NODE_FAIL, JobState.OUT_OF_MEMORY, JobState.PREEMPTED, JobState.TIMEOUT, JobState.REVOKED,
})
"""The job ended; only a requeue (or a resubmission) runs it again."""

ABNORMAL_END: frozenset[JobState] = frozenset({
    JobState.FAILED, JobState.NODE_FAIL, JobState.TIMEOUT, JobState.OUT_OF_MEMORY, JobState.PREEMPTED,
    JobState.BOOT_FAIL, JobState.DEADLINE,
})
"""Leaving RUNNING for one of these is abnormal and opens an incident."""

UNSUCCESSFUL_END: frozenset[JobState] = TERMINAL - {JobState.COMPLETED}
"""The job ended without completing (a failure, a cancellation, a limit): errors it printed were
not survived."""

WATCH_START: frozenset[JobState] = frozenset({JobState.RUNNING, JobState.PENDING, JobState.CONFIGURING})
"""States in which the monitor starts watching a newly seen job."""

NOT_STARTED: frozenset[JobState] = frozenset({
    JobState.PENDING, JobState.REQUEUED, JobState.REQUEUE_HOLD, JobState.REQUEUE_FED, JobState.RESV_DEL_HOLD,
    JobState.UNKNOWN,
})
"""The job's current attempt has not started (it waits for an allocation, e.g. after a requeue):
its StartTime is the scheduler's expectation, not a fact (``JobRecord.attempt_started_at``)."""

FAMILY_BY_END: dict[JobState, str] = {
    JobState.NODE_FAIL: "node", JobState.TIMEOUT: "limit", JobState.PREEMPTED: "limit",
    JobState.OUT_OF_MEMORY: "oom",
}
"""Incident family of a job-state trigger (everything else in ``ABNORMAL_END`` is ``crash``)."""
