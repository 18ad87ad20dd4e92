"""Fail-open hold release: a job Revive holds is released even if Revive dies.

Revive prefers action sequences that leave no hold (drain first, then requeue: Slurm never picks a
drained node). Where a hold is unavoidable (``requeuehold`` → ``update ExcNodeList`` →
``release``), the runbook first calls ``arm_hold_release``: it starts an operating-system process
detached from the worker (its own session via ``setsid``, stdio on ``/dev/null``) that sleeps
``after_s`` seconds and then runs ``scontrol release <job>`` — only if the job is still pending
and held with ``Reason=job_requeued_in_held_state`` (the reason ``requeuehold`` sets). It runs on
the controller host (``LocalRunner``) or, in SSH mode, on the login node (``SSHRunner``): it needs
neither the worker, nor the monitor, nor Temporal (a Temporal timer needs a worker, so it is not
enough). The monitor additionally runs ``release_stranded_holds`` as a watchdog.

If the hold release cannot be armed (``arm_hold_release`` returns 0) the runbook must not take the hold:
it falls back to a hold-free sequence or to approval.

The hold release is plain POSIX ``sh`` (no Revive install needed on the login node); the same logic is in
``scripts/release-hold.sh`` for operators. See ``docs/operations/fail-open.md``.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime
from typing import Protocol

from revive.models import JobRecord
from revive.scheduler.runners import CommandRunner

log = logging.getLogger(__name__)

HELD_REASON = "job_requeued_in_held_state"
"""The Slurm reason ``scontrol requeuehold`` leaves on the job."""

# Runs detached. $1 = job id, $2 = seconds to wait, $3 = SLURM_CONF ("" = leave as is).
RELEASE_SCRIPT = r"""
sleep "$2"
if [ -n "$3" ]; then SLURM_CONF="$3"; export SLURM_CONF; fi
out=$(scontrol show job -o "$1" 2>/dev/null) || exit 0
case "$out" in *"JobState=PENDING"*) ;; *) exit 0 ;; esac
case "$out" in *"Reason=job_requeued_in_held_state"*) ;; *) exit 0 ;; esac
if scontrol release "$1"; then
  command -v logger >/dev/null 2>&1 && logger -t revive-release-hold "released held job $1"
fi
exit 0
"""

# Starts RELEASE_SCRIPT in a new session with stdio detached, prints its pid, exits at once.
LAUNCH_SCRIPT = r"""
setsid sh -c "$1" revive-release-hold "$2" "$3" "$4" </dev/null >/dev/null 2>&1 &
echo $!
"""

_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")


def hold_release_argv(job_id: str, after_s: float, slurm_conf: str | None) -> list[str]:
    """The argv that arms the hold release: ``sh -c <LAUNCH_SCRIPT> revive-arm <RELEASE_SCRIPT> <job>
    <after_s> <slurm_conf>``. Values are positional parameters, never interpolated into the
    script text. Raises ``ValueError`` for a job id that is not ``<digits>[_<digits>]`` or a
    negative delay."""
    if not _JOB_ID.match(str(job_id)):
        raise ValueError(f"not a Slurm job id: {job_id!r}")
    if after_s < 0:
        raise ValueError(f"after_s must be >= 0, got {after_s}")
    return ["sh", "-c", LAUNCH_SCRIPT, "revive-arm", RELEASE_SCRIPT, str(job_id),
            f"{after_s:g}", slurm_conf or ""]


async def arm_hold_release(
    runner: CommandRunner, job_id: str, after_s: float, slurm_conf: str | None
) -> int:
    """Start the detached hold release for ``job_id``; call it just before ``requeuehold``.

    Args:
        runner: ``LocalRunner`` (controller host) or ``SSHRunner`` (login node).
        job_id: Slurm job id.
        after_s: seconds until the hold release checks the job (longer than the hold should last, e.g.
            30 s for a hold that Revive lifts within a few seconds).
        slurm_conf: path of ``slurm.conf`` on the host the hold release runs on, or None.

    Returns the hold release's pid on that host, or 0 when it could not be armed (the caller must then
    avoid the hold). Never raises for transport errors (logged); ``ValueError`` for bad input.
    """
    argv = hold_release_argv(job_id, after_s, slurm_conf)
    try:
        rc, out, err = await runner.run(argv, timeout_s=15.0)
    except Exception as e:  # noqa: BLE001 — SchedulerUnavailable, OSError …: report 0
        log.warning("hold release for job %s not armed: %s", job_id, e)
        return 0
    pid = out.strip().splitlines()[-1] if out.strip() else ""
    if rc != 0 or not pid.isdigit():
        log.warning("hold release for job %s not armed: rc=%s out=%r err=%r", job_id, rc, out, err)
        return 0
    return int(pid)


class _Sched(Protocol):
    async def list_jobs(self) -> list[JobRecord]: ...
    async def release(self, job_id: str) -> list[str]: ...


def held_by_revive(job: JobRecord) -> bool:
    """True when ``job`` is pending, held, with the reason ``requeuehold`` sets."""
    return job.state == "PENDING" and job.hold and (job.reason or "") == HELD_REASON


async def release_stranded_holds(
    scheduler: _Sched,
    max_age_s: float,
    *,
    now: datetime | None = None,
    seen: dict[str, float] | None = None,
) -> list[str]:
    """Watchdog for the monitor: release jobs held by ``requeuehold`` for longer than
    ``max_age_s`` seconds; returns the job ids released.

    Age: Slurm 22.05 resets ``SubmitTime`` on requeue, so the age is ``now - submit_time``
    (``now`` defaults to the wall clock, UTC). When the monitor passes ``seen`` (a dict it keeps
    between sweeps, job id → ``time.monotonic()`` first seen held), the age is also measured from
    first sight and the larger age wins; jobs no longer held are dropped from ``seen``. A job
    without ``submit_time`` and not yet in ``seen`` is only recorded. Release failures are logged
    and skipped; ``SchedulerError`` from ``list_jobs`` propagates (the monitor retries).
    """
    now = now or datetime.now(UTC)
    mono = time.monotonic()
    jobs = await scheduler.list_jobs()
    held = [j for j in jobs if held_by_revive(j)]
    if seen is not None:
        for jid in list(seen):
            if jid not in {j.job_id for j in held}:
                del seen[jid]
    released: list[str] = []
    for j in held:
        ages: list[float] = []
        if j.submit_time is not None:
            st = j.submit_time if j.submit_time.tzinfo else j.submit_time.replace(tzinfo=UTC)
            ages.append((now - st).total_seconds())
        if seen is not None:
            first = seen.setdefault(j.job_id, mono)
            ages.append(mono - first)
        if not ages or max(ages) < max_age_s:
            continue
        try:
            await scheduler.release(j.job_id)
        except Exception as e:  # noqa: BLE001
            log.warning("watchdog: release of job %s failed: %s", j.job_id, e)
            continue
        log.warning("watchdog: released job %s held by Revive for %.0fs", j.job_id, max(ages))
        released.append(j.job_id)
        if seen is not None:
            seen.pop(j.job_id, None)
    return released
