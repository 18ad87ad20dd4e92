"""Verify stage: the requeued job runs and prints an iteration past its checkpoint.

Polls every ``poll_s`` seconds inside one heartbeating activity (samples-python's "frequent
polling" pattern) until the job's log shows, after an ``=== attempt restart=N`` line with N above
the incident's attempt, ``resumed from checkpoint at iteration K`` and then a progress line with an
iteration above K — or until ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from temporalio import activity

from activities.evidence import read_tail
from revive.errors import SchedulerError
from revive.models import VerifyInput, VerifyResult, WaitCheckpointInput
from revive.progress import find_resume, parse_checkpoint
from revive.scheduler.base import Scheduler


class VerificationActivities:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    @activity.defn(name="verify_progress")
    async def verify_progress(self, inp: VerifyInput) -> VerifyResult:
        """Returns ``recovered=True`` with the resume point, or ``recovered=False`` with why."""
        deadline = time.monotonic() + inp.timeout_s
        state, nodes, detail = None, [], ""
        # A resubmitted job (after_attempt -1) appends to the old log from restart 0: only lines
        # written after verification began count. The offset survives activity retries.
        start_offset = 0
        if inp.after_attempt < 0 and inp.log_path:
            details = activity.info().heartbeat_details
            if details and isinstance(details[0], dict) and "offset" in details[0]:
                start_offset = int(details[0]["offset"])
            else:
                try:
                    start_offset = Path(inp.log_path).stat().st_size
                except OSError:
                    start_offset = 0
        while True:
            try:
                job = await self.scheduler.get_job(inp.job.job_id)
                state, nodes = job.state, job.nodes
                log_path = inp.log_path or job.std_out
            except SchedulerError as e:
                detail = f"job unavailable: {e}"
                log_path = inp.log_path
            res = None
            if log_path:
                try:
                    data, size = read_tail(Path(log_path), 16 * 1024 * 1024)
                    if start_offset:
                        data = data[max(0, len(data) - max(0, size - start_offset)):]
                    res = find_resume(data.decode("utf-8", "replace").splitlines(), inp.after_attempt)
                except OSError as e:
                    detail = f"log unreadable: {e}"
            if res and res.first_after is not None:
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
                                    resumed_from=res.resumed_from if res else None,
                                    detail=detail or f"no iteration past the checkpoint within {inp.timeout_s:.0f} s "
                                                     f"(job state {state})")
            activity.heartbeat({"state": state, "offset": start_offset})
            await asyncio.sleep(inp.poll_s)

    @activity.defn(name="wait_for_checkpoint")
    async def wait_for_checkpoint(self, inp: WaitCheckpointInput) -> int | None:
        """Wait for the next ``saved checkpoint at iteration N`` (N > ``after_iteration``) in the job
        log, so that a requeue loses no work. Returns N, or None after ``timeout_s`` seconds."""
        deadline = time.monotonic() + inp.timeout_s
        while inp.log_path:
            try:
                data, _ = read_tail(Path(inp.log_path), 4 * 1024 * 1024)
                for line in reversed(data.decode("utf-8", "replace").splitlines()):
                    ck = parse_checkpoint(line)
                    if ck and ck[0] == "saved" and (inp.after_iteration is None or ck[1] > inp.after_iteration):
                        return ck[1]
                    if line.startswith("=== attempt"):
                        break  # only the current attempt's checkpoints
            except OSError:
                pass
            if time.monotonic() >= deadline:
                return None
            activity.heartbeat()
            await asyncio.sleep(inp.poll_s)
        return None
