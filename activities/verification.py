"""Verify stage: the requeued job runs and prints an iteration past its checkpoint.

Polls every ``poll_s`` seconds inside one heartbeating activity (samples-python's "frequent
polling" pattern) until the job's log shows, after an ``=== attempt restart=N`` line with N above
the incident's attempt, ``resumed from checkpoint at iteration K`` and then a progress line with an
iteration above K — or until ``timeout_s``.

The log is followed from an offset (``revive.tail.Follower``, like the monitor): the first poll
reads at most the last ``VERIFY_TAIL_BYTES`` of the file, later polls only what it gained, and a
file truncated on requeue (Slurm's default open mode) is read again from its start. File reads run
in a thread (``activities.blocking``), never on the event loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from temporalio import activity

from activities.blocking import run_blocking
from revive.errors import SchedulerError
from revive.models import VerifyInput, VerifyResult, WaitCheckpointInput
from revive.progress import ResumeTracker, parse_attempt, parse_checkpoint
from revive.scheduler.base import Scheduler
from revive.tail import Follower, TailState

VERIFY_TAIL_BYTES = 16 * 1024 * 1024
"""Bytes of the log's tail read on the first poll (earlier attempts lie before it)."""


def _follower_at(path: str, offset: int | None) -> Follower:
    """A follower of ``path`` starting at ``offset`` (None: ``VERIFY_TAIL_BYTES`` before the end).
    A missing file starts at 0 when it appears."""
    f = Follower()
    try:
        st = os.stat(path)
    except OSError:
        return f
    start = max(0, st.st_size - VERIFY_TAIL_BYTES) if offset is None else min(offset, st.st_size)
    f.states[path] = TailState(path=path, inode=st.st_ino, offset=start)
    return f


class VerificationActivities:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    @activity.defn(name="verify_progress")
    async def verify_progress(self, inp: VerifyInput) -> VerifyResult:
        """Returns ``recovered=True`` with the resume point, or ``recovered=False`` with why."""
        deadline = time.monotonic() + inp.timeout_s
        state: str | None = None
        nodes: list[str] = []
        detail = ""
        # A resubmitted job (after_attempt -1) appends to the old log from restart 0: only lines
        # written after verification began count. That offset survives activity retries.
        start_offset: int | None = None
        if inp.after_attempt < 0 and inp.log_path:
            details = activity.info().heartbeat_details
            if details and isinstance(details[0], dict) and "offset" in details[0]:
                start_offset = int(details[0]["offset"])
            else:
                try:
                    start_offset = Path(inp.log_path).stat().st_size
                except OSError:
                    start_offset = 0
        tracker = ResumeTracker(inp.after_attempt)
        follower: Follower | None = None
        followed: str | None = None
        while True:
            log_path = inp.log_path
            try:
                job = await self.scheduler.get_job(inp.job.job_id)
                state, nodes = job.state, job.nodes
                log_path = inp.log_path or job.std_out
            except SchedulerError as e:
                detail = f"job unavailable: {e}"
            if log_path:
                if follower is None or followed != log_path:
                    follower, followed = _follower_at(log_path, start_offset), log_path
                    tracker = ResumeTracker(inp.after_attempt)
                for _, text in await run_blocking(follower.read_new, log_path):
                    tracker.feed(text)
            res = tracker.res
            if res.first_after is not None:
                bad = sorted(set(inp.excluded_nodes) & (set(nodes) | set(res.host_set)))
                ok_resume = inp.checkpoint_iteration is None or res.resumed_from is not None
                if bad:
                    detail = f"resumed but on excluded node(s) {bad}"
                elif ok_resume:
                    return VerifyResult(
                        recovered=True, job_state=state, nodes=nodes, resumed_from=res.resumed_from,
                        first_iteration_after=res.first_after, resumed_at=res.first_after_at,
                        detail=f"attempt {res.attempt} resumed from checkpoint at iteration {res.resumed_from} "
                               f"and reached iteration {res.first_after} on {','.join(sorted(res.host_set or nodes))}",
                    )
                else:
                    detail = "training restarted from scratch: no 'resumed from checkpoint' line"
            if time.monotonic() >= deadline:
                return VerifyResult(recovered=False, job_state=state, nodes=nodes,
                                    resumed_from=res.resumed_from,
                                    detail=detail or f"no iteration past the checkpoint within {inp.timeout_s:.0f} s "
                                                     f"(job state {state})")
            activity.heartbeat({"state": state, "offset": start_offset})
            await asyncio.sleep(inp.poll_s)

    @activity.defn(name="wait_for_checkpoint")
    async def wait_for_checkpoint(self, inp: WaitCheckpointInput) -> int | None:
        """Wait for the next ``saved checkpoint at iteration N`` (N > ``after_iteration``) in the job
        log, so that a requeue loses no work. Returns N, or None after ``timeout_s`` seconds."""
        deadline = time.monotonic() + inp.timeout_s
        if not inp.log_path:
            return None
        follower = _follower_at(inp.log_path, None)
        while True:
            saved: int | None = None
            for _, line in await run_blocking(follower.read_new, inp.log_path):
                if parse_attempt(line) is not None:
                    saved = None  # a new attempt: only its own checkpoints count
                    continue
                ck = parse_checkpoint(line)
                if ck and ck[0] == "saved" and (inp.after_iteration is None or ck[1] > inp.after_iteration):
                    saved = ck[1]
            if saved is not None:
                return saved
            if time.monotonic() >= deadline:
                return None
            activity.heartbeat()
            await asyncio.sleep(inp.poll_s)
