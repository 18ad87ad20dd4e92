"""Verify stage: the requeued job runs and prints an iteration past its checkpoint.

Polls every ``poll_s`` seconds inside one heartbeating activity (samples-python's "frequent
polling" pattern) until the job's log shows, after an ``=== attempt restart=N`` line with N above
the incident's attempt, ``resumed from checkpoint at iteration K`` and then a progress line with an
iteration above K — or until ``timeout_s``.

The log is followed from an offset through the site's ``LogReader`` (local files, or the login node
over SFTP): the first poll reads at most the last ``VERIFY_TAIL_BYTES`` of the file, later polls
only what it gained, and a file truncated on requeue (Slurm's default open mode) is read again from
its start. Local reads run in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

from temporalio import activity

from revive import chaos
from revive.errors import ReviveError, SchedulerError
from revive.logline import decode_line
from revive.models import VerifyInput, VerifyResult, WaitCheckpointInput
from revive.progress import ProfileResumeTracker, ResumeTracker, parse_attempt, parse_checkpoint
from revive.scheduler.base import Scheduler
from revive.site import LocalLogs, LogReader

VERIFY_TAIL_BYTES = 16 * 1024 * 1024
"""Bytes of the log's tail read on the first poll (earlier attempts lie before it)."""


async def _open(logs: LogReader, path: str, offset: int | None, job_id: str = "") -> tuple[LogReader, list[tuple[int, str]]]:
    """A fresh reader of ``path`` positioned at ``offset`` (None: ``VERIFY_TAIL_BYTES`` before the
    end), and the lines between that point and the end. A missing file starts at 0 when it appears."""
    reader = logs.fresh()
    try:
        data, size = await reader.read_tail(path, VERIFY_TAIL_BYTES, job_id=job_id)
    except (OSError, ReviveError):
        return reader, []
    if offset is not None:  # only what was written after ``offset`` counts
        data = data[max(0, len(data) - max(0, size - offset)):]
    reader.seek(path, data, size)
    nl = data.rfind(b"\n")
    lines = data[: nl + 1].decode("utf-8", "replace").splitlines() if nl >= 0 else []
    return reader, [(0, decode_line(x.encode())) for x in lines]


class VerificationActivities:
    def __init__(self, scheduler: Scheduler, logs: LogReader | None = None) -> None:
        """``logs``: the site's job-log reader (local files by default; the login node in SSH mode)."""
        self.scheduler = scheduler
        self.logs: LogReader = logs or LocalLogs()

    @activity.defn(name="verify_progress")
    async def verify_progress(self, inp: VerifyInput) -> VerifyResult:
        """Returns ``recovered=True`` with the resume point, or ``recovered=False`` with why."""
        await chaos.apoint(chaos.Point.verify)  # test-only fault point: inert unless REVIVE_CHAOS_HOOK names it
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
        profiled = ProfileResumeTracker(inp.checkpoint_iteration)
        restarts: int | None = None
        profiled_attempt: int | None = None
        reader: LogReader | None = None
        followed: str | None = None
        while True:
            log_path = inp.log_path
            try:
                job = await self.scheduler.get_job(inp.job.job_id)
                state, nodes, restarts = job.state, job.nodes, job.restart_count
                log_path = inp.log_path or job.std_out
            except SchedulerError as e:
                detail = f"job unavailable: {e}"
            if log_path:
                new: list[tuple[int, str]] = []
                try:
                    if reader is None or followed != log_path:
                        tracker = ResumeTracker(inp.after_attempt)
                        profiled = ProfileResumeTracker(inp.checkpoint_iteration)
                        reader, new = await _open(self.logs, log_path, start_offset, inp.job.job_id)
                        followed = log_path
                    fresh = await reader.read_new(log_path, job_id=inp.job.job_id, hosts=tuple(nodes))
                except ReviveError as e:  # the login node is unreachable: keep polling
                    detail = f"log unreadable: {e}"
                    fresh = []
                for _, text in new:
                    profiled.seen(text)
                for _, text in new + fresh:
                    tracker.feed(text)
                if restarts is not None and restarts > inp.after_attempt:
                    if profiled_attempt is not None and restarts > profiled_attempt:
                        profiled.new_attempt()  # requeued once more: the latest attempt must prove it
                    profiled_attempt = restarts
                    for _, text in fresh:  # written after the requeue, by the new attempt
                        profiled.feed(text)
            res = tracker.res
            if res.first_after is not None:
                bad = sorted(set(inp.excluded_nodes) & (set(nodes) | set(res.host_set)))
                ok_resume = inp.checkpoint_iteration is None or res.resumed_from is not None
                if bad:
                    detail = f"resumed but on excluded node(s) {bad}"
                elif ok_resume:
                    return VerifyResult(
                        recovered=True, job_state=state, nodes=nodes, resumed_from=res.resumed_from,
                        first_iteration_after=res.first_after, resumed_at=res.first_after_at, rule="revive_markers",
                        detail=f"attempt {res.attempt} resumed from checkpoint at iteration {res.resumed_from} "
                               f"and reached iteration {res.first_after} on {','.join(sorted(res.host_set or nodes))}",
                    )
                else:
                    detail = "training restarted from scratch: no 'resumed from checkpoint' line"
            elif profiled.rule is not None and state == "RUNNING":
                bad = sorted(set(inp.excluded_nodes) & (set(nodes) | profiled.hosts))
                if bad:
                    detail = f"resumed but on excluded node(s) {bad}"
                else:
                    return VerifyResult(
                        recovered=True, job_state=state, nodes=nodes, resumed_from=profiled.loaded,
                        first_iteration_after=profiled.first_after,
                        # a bar line has no timestamp (HF Trainer, Lightning): when this poll read it
                        resumed_at=profiled.first_after_at or datetime.now(UTC),
                        rule=profiled.rule,
                        detail=f"attempt {restarts} reached iteration {profiled.first_after} ({profiled.rule}; "
                               f"loaded {profiled.loaded}, last saved {inp.checkpoint_iteration}) on {','.join(nodes)}")
            if time.monotonic() >= deadline:
                if state == "RUNNING" and res.first_after is None and not profiled.matched_profile \
                        and restarts is not None and restarts > inp.after_attempt:
                    return VerifyResult(recovered=False, unverified=True, job_state=state, nodes=nodes,
                                        detail=f"the job runs again (attempt {restarts}) but its log matched no "
                                               "progress profile: resumption could not be checked")
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
        reader, pending = await _open(self.logs, inp.log_path, None)
        while True:
            saved: int | None = None
            try:
                pending += await reader.read_new(inp.log_path)
            except ReviveError:
                pass  # unreachable for now: the deadline bounds the wait
            batch, pending = pending, []
            for _, line in batch:
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
