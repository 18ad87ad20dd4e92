"""Checkpoint-aware act steps: save before requeue, bad-checkpoint loops, dependents of a job.

- ``plan_save`` (read-only): does the running job save on a signal? The policy's
  ``save_before_requeue.signal`` wins, else the job's profile (``revive/profiles/profiles.yaml``
  ``save_signal``, detected from the job's log). Returns the signal, the ``scancel`` scope, the log
  size now (only lines written after it prove the save) and the checkpoint folder to watch (the
  job's ``--comment`` JSON ``{"revive": {"checkpoint_dir": ...}}``, when given).
- ``wait_for_save`` (read-only): after the signal, follow the log for the profile's
  ``checkpoint_saved`` line (or, for a framework that saves inline and then requeues itself, its
  requeue line), or a new checkpoint file in the folder — bounded by ``timeout_s``.
- ``checkpoint_loop`` (read-only): the current attempt resumed from checkpoint C and failed within
  ``within_iterations`` of it without saving a newer one, and the previous incident of this job
  (same root cause) was detected with C as its last checkpoint → C is suspect. When the profile
  knows the layout, the verdict carries the previous checkpoint and the reversible step that
  resumes from it (a person runs it).
- ``job_dependents`` (read-only): jobs whose ``Dependency`` names this one (``afterok`` …).

The mutating half (the signal itself) is ``RemediationActivities.signal_job``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from temporalio import activity

from activities.verification import _open
from revive.errors import ReviveError, SchedulerError
from revive.models import (
    DependentJob,
    DependentsInput,
    LoopCheckInput,
    LoopVerdict,
    SaveOutcome,
    SavePlan,
    SavePlanInput,
    WaitSaveInput,
)
from revive.profiles import load_builtin_profiles, summarize
from revive.profiles.extract import CheckpointSaved, CheckpointSaving, ProgressExtractor, Requeued, detect_profile
from revive.profiles.model import Profile
from revive.scheduler.arrays import depends_on
from revive.scheduler.base import Scheduler
from revive.signals import SignalScope
from revive.site import LocalLogs, LogReader

PLAN_TAIL_BYTES = 256 * 1024
"""Bytes of the log's tail read to find the job's profile (``plan_save``)."""
LOOP_TAIL_BYTES = 1024 * 1024
"""Bytes of the log's tail read for its last attempts (``checkpoint_loop``): the failed attempt and
the one before it; ~2 s of CPU for the demo job's lines (``benchmarks/bench_checkpoint.py``)."""
MAX_DIR_ENTRIES = 10_000
"""Entries of a checkpoint folder looked at (a huge folder is not walked)."""
LEFT_RUNNING_GRACE_S = 3.0
"""Seconds the log is still read for the saved line after the job left RUNNING (srun delivers a
step's last output after the job's state changed)."""


def _comment_dir(comment: str | None, key: str = "revive") -> str | None:
    """``checkpoint_dir`` from the job's ``--comment`` JSON (``{"revive": {"checkpoint_dir": "/x"}}``).
    Anything else (not JSON, not a dict, a relative or odd path) → None."""
    try:
        data = json.loads(comment or "")
    except ValueError:
        return None
    sub = data.get(key) if isinstance(data, dict) else None
    d = sub.get("checkpoint_dir") if isinstance(sub, dict) else None
    if isinstance(d, str) and d.startswith("/") and len(d) < 4096 and "\0" not in d:
        return d
    return None


def _layout_iter(profile: Profile | None, name: str) -> int | None:
    """The iteration (or save counter) a checkpoint file/folder name carries under ``profile``'s layout."""
    import re2

    lay = profile.checkpoint_layout if profile else None
    if lay is None:
        return None
    for pat in ([lay.dir_pattern] if lay.dir_pattern else []) + list(lay.file_patterns):
        m = re2.search(pat, name)
        if m:
            g = m.groupdict()
            for k in ("iter", "n"):
                if g.get(k) and str(g[k]).isdigit():
                    return int(g[k])
            return -1
    return None


def _new_files(folder: str, since: float) -> list[tuple[float, str]]:
    """(mtime, path) of entries of ``folder`` modified at or after ``since`` (unix seconds)."""
    out = []
    try:
        with os.scandir(folder) as it:
            for i, e in enumerate(it):
                if i >= MAX_DIR_ENTRIES:
                    break
                try:
                    m = e.stat().st_mtime
                except OSError:
                    continue
                if m >= since:
                    out.append((m, e.path))
    except OSError:
        return []
    return sorted(out)


class CheckpointActivities:
    """Read-only checkpoint activities. ``logs``: the site's job-log reader (local by default)."""

    def __init__(self, scheduler: Scheduler, logs: LogReader | None = None) -> None:
        self.scheduler = scheduler
        self.logs: LogReader = logs or LocalLogs()
        self.profiles = load_builtin_profiles()

    def _profile(self, pid: str | None) -> Profile | None:
        return self.profiles.get(pid) if pid else None

    async def _tail(self, path: str | None, max_bytes: int = PLAN_TAIL_BYTES) -> tuple[list[str], int | None]:
        if not path:
            return [], None
        try:
            data, size = await self.logs.fresh().read_tail(path, max_bytes)
        except (OSError, ReviveError):
            return [], None
        return data.decode("utf-8", "replace").splitlines(), size

    @activity.defn(name="plan_save")
    async def plan_save(self, inp: SavePlanInput) -> SavePlan:
        """Never raises for bad input: an unknown job, log or profile gives ``signal=None`` and why."""
        try:
            live = await self.scheduler.get_job(inp.job.job_id)
        except SchedulerError as e:
            return SavePlan(reason=f"job unreadable: {e}")
        if live.state != "RUNNING":
            return SavePlan(reason=f"job is {live.state}, not running: nothing to save", restart_count=live.restart_count)
        lines, size = await self._tail(inp.log_path)
        found = await asyncio.to_thread(detect_profile, lines, self.profiles)
        framework = next((p for p in (self._profile(i) for i in found) if p and p.save_signal), None)
        profile = framework or self._profile(found[0] if found else None)
        ckdir = _comment_dir(live.comment)
        base = dict(profile=profile.id if profile else None, log_offset=size, checkpoint_dir=ckdir,
                    restart_count=live.restart_count)
        if inp.signal:
            return SavePlan(signal=inp.signal, scope=inp.scope or (framework.save_signal.scope if framework
                                                                    and framework.save_signal else SignalScope.steps),
                            reason="policy save_before_requeue.signal", **base)
        if framework is None or framework.save_signal is None:
            return SavePlan(reason=f"no save signal: the log's profile ({', '.join(found) or 'none matched'}) "
                                   "names none and the policy sets none", **base)
        ss = framework.save_signal
        return SavePlan(signal=ss.signal.upper().removeprefix("SIG"), scope=inp.scope or ss.scope,
                        requeues_itself=ss.requeues_itself,
                        reason=f"profile {framework.id}: {ss.handler or ss.signal}", **base)

    @activity.defn(name="wait_for_save")
    async def wait_for_save(self, inp: WaitSaveInput) -> SaveOutcome:
        """Heartbeats every ``poll_s``; returns ``saved=False`` after ``timeout_s`` (never raises for
        a missing log or folder: the runbook requeues anyway and records that nothing was saved)."""
        started = time.time()
        deadline = time.monotonic() + inp.timeout_s
        ex = ProgressExtractor(self.profiles)
        reader, pending = (await _open(self.logs, inp.log_path, inp.plan.log_offset)) if inp.log_path else (None, [])
        saving = False
        requeued = False
        found: SaveOutcome | None = None
        base = inp.plan.restart_count
        left_at: float | None = None
        while True:
            if reader is not None and inp.log_path:
                try:
                    pending += await reader.read_new(inp.log_path)
                except ReviveError:
                    pass
            batch, pending = pending, []
            for _, line in batch:
                for ev in ex.events(line):
                    if found is None and isinstance(ev, CheckpointSaved) and (
                            ev.iter is None or inp.after_iteration is None or ev.iter > inp.after_iteration):
                        found = SaveOutcome(saved=True, iteration=ev.iter, proof="log_line",
                                            detail=f"saved line ({ev.profile}): {line.strip()[:200]}")
                    if isinstance(ev, CheckpointSaving):
                        saving = True
                    if isinstance(ev, Requeued):
                        requeued = True
                        if found is None and saving:  # an inline save (Lightning's hpc_ckpt) ends before it requeues
                            found = SaveOutcome(saved=True, iteration=ev_iter(ev), proof="log_line",
                                                detail=f"the job saved and requeued itself ({ev.profile}): "
                                                       f"{line.strip()[:200]}")
            if found is None and inp.plan.checkpoint_dir:
                prof = self._profile(inp.plan.profile)
                for _m, path in _new_files(inp.plan.checkpoint_dir, started):
                    n = _layout_iter(prof, Path(path).name) if prof and prof.checkpoint_layout else None
                    if prof is None or not prof.checkpoint_layout or n is not None:
                        found = SaveOutcome(saved=True, iteration=n if n is not None and n >= 0 else None, path=path,
                                            proof="new_file", detail=f"new checkpoint file {path}")
                        break
            live_state = None
            try:
                live = await self.scheduler.get_job(inp.job.job_id)
                live_state = live.state
                if live.restart_count > base:
                    requeued = True
            except SchedulerError:
                pass
            # a job that requeues itself after its save: wait for that requeue too (never requeue twice)
            if found is not None and (requeued or not inp.plan.requeues_itself):
                return found.model_copy(update={"requeued_by_job": requeued})
            if found is None and live_state is not None and live_state != "RUNNING" and (
                    requeued or live_state in ("FAILED", "CANCELLED", "COMPLETED")):
                # srun delivers a step's last lines after the job's state changed (seen on the
                # testbed: the saved line landed ~0.1 s after COMPLETING): read a little longer
                left_at = left_at if left_at is not None else time.monotonic()
                if time.monotonic() - left_at >= LEFT_RUNNING_GRACE_S:
                    return SaveOutcome(saved=False, requeued_by_job=requeued,
                                       detail=f"the job left RUNNING ({live_state}) without a saved line "
                                              f"(log read {LEFT_RUNNING_GRACE_S:.0f} s longer)")
            if time.monotonic() >= deadline:
                if found is not None:
                    return found.model_copy(update={"requeued_by_job": requeued,
                                                    "detail": found.detail + "; the job did not requeue itself"})
                return SaveOutcome(saved=False, requeued_by_job=requeued,
                                   detail=f"no save within {inp.timeout_s:.0f} s of the signal")
            activity.heartbeat()
            await asyncio.sleep(inp.poll_s)

    @activity.defn(name="checkpoint_loop")
    async def checkpoint_loop(self, inp: LoopCheckInput) -> LoopVerdict:
        """Read the log's attempts (``revive.profiles.summarize``); never raises for bad input."""
        lines, _ = await self._tail(inp.log_path, LOOP_TAIL_BYTES)
        if not lines:
            return LoopVerdict(detail="no log: cannot tell which checkpoint the job resumed from")
        s = await asyncio.to_thread(summarize, lines, self.profiles)  # CPU: off the event loop
        if not s.attempts:
            return LoopVerdict(detail="the log matched no profile")
        # the attempt that failed: the one whose restart count is the incident's (a later one may
        # already be running when Slurm requeued the job itself); else the log's last attempt
        idx = next((i for i, a in enumerate(s.attempts) if a.restart == inp.job.restart_count), len(s.attempts) - 1)
        cur, before = s.attempts[idx], s.attempts[:idx]
        prof = self._profile(s.profiles[0] if s.profiles else None)
        if cur.loaded is None or cur.loaded.iter is None:
            return LoopVerdict(profile=prof.id if prof else None,
                               detail="the failed attempt did not resume from a checkpoint")
        c = cur.loaded.iter
        newer = [r.iter for r in cur.saved if r.iter is not None and r.iter > c]
        reached = cur.last_iteration if cur.last_iteration is not None else c
        if newer:
            return LoopVerdict(detail=f"attempt saved checkpoint {max(newer)} after resuming from {c}")
        if reached - c > inp.within_iterations:
            return LoopVerdict(detail=f"attempt ran {reached - c} iterations past checkpoint {c} before failing")
        # the attempt before: did it fail with the same root cause, with C as its last checkpoint?
        prev = [a for a in before if a.iterations or a.loaded or a.saved]
        if not prev:
            return LoopVerdict(detail=f"first failure after resuming from {c}")
        p = prev[-1]
        p_last_saved = max((r.iter for r in p.saved if r.iter is not None), default=None)
        p_point = p_last_saved if p_last_saved is not None else (p.loaded.iter if p.loaded else None)
        if p_point != c:
            return LoopVerdict(detail=f"the previous attempt ended at checkpoint {p_point}, not {c}")
        if inp.checkpoint_iteration is not None and inp.checkpoint_iteration > c:
            return LoopVerdict(detail=f"checkpoint {inp.checkpoint_iteration} is newer than {c}")
        olders = sorted({r.iter for a in s.attempts for r in a.saved if r.iter is not None and r.iter < c})
        previous = olders[-1] if olders else None
        proposal = ""
        if previous is not None and prof and prof.checkpoint_layout:
            lay = prof.checkpoint_layout
            if lay.tracker_file:
                proposal = (f"resume from checkpoint {previous}: back up <save>/{lay.tracker_file}, write "
                            f"'{previous}' into it, requeue (undo: restore the backup)")
            else:
                proposal = (f"resume from checkpoint {previous}: move the checkpoint of {c} aside "
                            f"(layout: {lay.description[:160]}), requeue (undo: move it back)")
        return LoopVerdict(suspect=c, previous=previous, proposal=proposal, profile=prof.id if prof else None,
                           detail=f"attempt {cur.index} resumed from checkpoint {c} and failed at iteration "
                                  f"{reached} without saving a newer one, after attempt {p.index} also ended at {c}")

    @activity.defn(name="job_dependents")
    async def job_dependents(self, inp: DependentsInput) -> list[DependentJob]:
        """Jobs (not finished) whose ``Dependency`` waits on ``inp.job_id``. [] when slurmctld is unreachable."""
        try:
            jobs = await self.scheduler.list_jobs()
        except SchedulerError as e:
            activity.logger.warning("cannot list jobs for the dependents of %s: %s", inp.job_id, e)
            return []
        out = []
        for j in jobs:
            if j.job_id == inp.job_id or j.state not in ("PENDING", "RUNNING", "SUSPENDED"):
                continue
            if depends_on(j.dependency, inp.job_id):
                out.append(DependentJob(job_id=j.job_id, name=j.name, user=j.user, state=str(j.state),
                                        reason=j.reason, dependency=j.dependency or ""))
        return out


def ev_iter(ev: object) -> int | None:
    """The event's iteration, when it carries one."""
    it = getattr(ev, "iter", None)
    return it if isinstance(it, int) else None
