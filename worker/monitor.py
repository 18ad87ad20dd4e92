"""The monitor: finds opted-in jobs, follows their logs and states, and opens incidents.

One loop, every ``poll_interval_s`` (≤ 0.5 s): list jobs (``scontrol show job -o``: squeue and REST
22.05 give only the unexpanded StdOut pattern), follow each watched job's StdOut, feed the detect
stage, and start an ``IncidentWorkflow`` on the first trigger of an attempt:

- a root log signature (catalog role ``root``) in the current attempt;
- the job leaving RUNNING abnormally (``FAILED``, ``NODE_FAIL``, ``TIMEOUT``, ``OUT_OF_MEMORY`` …);
- a hang: no progress line for max(k × median step interval, floor).

Incident id = cluster + job id + the job's first SubmitTime (Slurm 22.05 resets it on requeue,
and job ids restart at 1 on a fresh cluster) + attempt (``revive.ids.incident_id``). One incident
per attempt, whatever the family of its first trigger: the id does not name the family, so a second
trigger of the attempt (a state change after a fault line, another monitor, a restarted one) finds
the workflow id taken and goes to the open incident as an ``add_trigger`` signal; lines from
earlier attempts never open one; 10 000 repeats of a fault make one incident.

Restarts (issue #12 item 4, issue #9 item 2). Nothing the monitor needs lives only in its memory:

- the attempt is the scheduler's restart count (``JobRecord.restarts``: Slurm ``Restarts=``), never
  a count kept here nor Revive's ``=== attempt restart=N`` marker (the marker is only a hint);
- the first SubmitTime of a job the scheduler has restarted (its SubmitTime now is the requeue's)
  comes back from visibility: the job's incidents (``ReviveCluster`` + ``ReviveJobId``) carry it in
  their id and memo (``_rebuild_identity`` says which incident counts as this job's);
- incidents open on this cluster are listed once at start (``ExecutionStatus='Running'``), so a
  re-read fault line of an attempt that has its incident is a trigger for it, not a new start;
- the current attempt's first line is found by re-reading the log's last ``REBUILD_MAX_BYTES``
  (``worker.detect.find_attempt_start``: the marker, or the attempt's ``attempt_started_at`` against
  the lines' own stamps), each time the job starts an attempt (on first sight too), and the hang
  clock is set back to the last progress line's stamp (``worker.detect.restore_clock``);
- a job first seen already ended abnormally (it failed while the monitor started, or while no
  monitor ran) is handled as a job seen leaving RUNNING when it ended after ``catch_up_since``
  (``CATCH_UP_S`` before the start, or back to an earlier monitor's last pass, at most
  ``CATCH_UP_MAX_S``): its attempt's lines are read once and its end opens the incident.

A log file belongs to one job at a time: when several watched jobs name the same StdOut (a
resubmitted job writing to the old job's file), only the job running the latest attempt reads it;
a job that left RUNNING reads its last lines for ``FINAL_LINES_S`` and stops.

Two monitors on one cluster are safe: both compute the same incident id for an attempt, Temporal
starts it once (``WorkflowIDConflictPolicy.FAIL`` + ``REJECT_DUPLICATE``), the other's start
becomes a trigger signal (``tests/worker/test_monitor_restart.py``).

Scale (issue #13): ``shard=(i, n)`` watches only the jobs whose stable hash (sha256 of cluster and
job id) is ``i`` modulo ``n``, so ``n`` monitors split a cluster's jobs with no overlap (and the
incident's workflow id dedupes anything that slips through, e.g. while re-sharding). The job list
can be polled less often than the logs (``jobs_poll_s``); each log's new bytes are scanned as one
chunk (``worker.detect.ChunkScanner``) and only the lines that can matter reach Python.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from activities.guard import guard_settings
from revive import chaos
from revive import metrics as rm
from revive import search_attributes as sa
from revive.config import ClusterConfig
from revive.decide.settings import GuardSettings, effective_mode
from revive.errors import ReviveError, SchedulerError
from revive.ids import incident_id
from revive.models import (
    ABNORMAL_END,
    FAMILY_BY_END,
    WATCH_START,
    IncidentInput,
    JobIdentity,
    JobRecord,
    JobState,
    Trigger,
    TriggerKind,
)
from revive.policy import RecoveryPolicy
from revive.scheduler.base import Scheduler
from revive.site import LocalLogs, LogReader, build_site
from revive.tail import Follower, TailState
from worker.detect import (
    AttemptRule,
    AttemptTracker,
    default_scanner,
    fault_family,
    find_attempt_start,
    last_checkpoint,
    restore_clock,
    root_hit,
)

log = logging.getLogger("revive.monitor")

GUARD_REFRESH_S = 30.0
"""Seconds between reads of the cluster guard's policy and mode (a ``settings`` query)."""

REBUILD_MAX_BYTES = 32 * 1024 * 1024
"""Bytes of a log's tail re-read to find the current attempt's first line (an attempt that wrote
more than this is followed from this many bytes before the end)."""

FINAL_LINES_S = 15.0
"""Seconds a job that left RUNNING keeps reading its log (the dying attempt's last lines)."""

ATTEMPT_WAIT_S = 60.0
"""A restarted job whose log is stamped but shows no line of the new attempt yet is looked at again
each pass for up to this long (the dying attempt keeps writing after the requeue: its lines must not
count as the new attempt's); then the log is followed from where it stands."""

CATCH_UP_S = 60.0
"""A job first seen already ended abnormally (``ABNORMAL_END``) at most this many seconds before the
monitor started is handled as if the monitor had seen it leave RUNNING: it failed while the monitor
was starting (a job that faults in its first seconds, a monitor restarted by systemd)."""

CATCH_UP_MAX_S = 3600.0
"""When an earlier monitor left its offsets file in the state dir, the window reaches back to that
file's last save (its last pass, every 5 s), at most this many seconds: jobs that failed while no
monitor ran still get their incident; older ends are left to the operator."""

ATTEMPT_RUNS = frozenset({JobState.RUNNING, JobState.CONFIGURING})
"""States in which the current attempt (restart count) is known to run, so its StartTime is its own.
Right after a requeue Slurm shows the new restart count while the old attempt is still torn down
(``COMPLETING``, with a StartTime that is not the new attempt's): its last lines are not the new one's."""

MEMO_KEY = "revive_job"
"""Incident memo: ``{"name", "user", "first_submit" (ISO), "attempt"}`` of the job, set at start
(not a workflow command: no replay change), read back by a restarted monitor."""


def opted_in(job: JobRecord, cfg: ClusterConfig, policy: RecoveryPolicy) -> bool:
    """Partition allowlist (cluster config or policy), or ``--comment`` JSON carrying the opt-in key."""
    parts = set(cfg.partitions or []) | set(policy.opt_in.partitions)
    if job.partition and job.partition in parts:
        return True
    if job.comment:
        try:
            data = json.loads(job.comment)
        except ValueError:
            return False
        return isinstance(data, dict) and policy.opt_in.comment_key in data
    return False


def shard_of(cluster: str, job_id: str, n: int) -> int:
    """The shard (0 … n-1) a job belongs to: sha256 of ``cluster`` and ``job_id``, stable across
    processes, hosts and Python versions (unlike ``hash()``)."""
    d = hashlib.sha256(f"{cluster}\x00{job_id}".encode()).digest()
    return int.from_bytes(d[:8], "big") % n


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` → ``(i, n)`` with 0 ≤ i < n (``revive monitor --shard 0/2``). ValueError otherwise."""
    i_s, sep, n_s = text.strip().partition("/")
    if not sep:
        raise ValueError(f"shard {text!r}: expected i/n, e.g. 0/2 (this monitor is shard i of n)")
    try:
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ValueError(f"shard {text!r}: i and n must be integers, e.g. 0/2") from None
    if n < 1:
        raise ValueError(f"shard {text!r}: n must be at least 1")
    if not 0 <= i < n:
        raise ValueError(f"shard {text!r}: i must be between 0 and n-1 ({n - 1})")
    return i, n


@dataclass
class Watch:
    job: JobRecord
    first_submit: datetime | None
    tracker: AttemptTracker
    opened: dict[int, str] = field(default_factory=dict)
    """attempt → incident id"""
    signalled: dict[int, int] = field(default_factory=dict)
    last_state: str = JobState.UNKNOWN
    last_restart: int = 0
    attempt: int = 0
    """The scheduler's attempt (restart count) the tracker follows."""
    located: bool = False
    """The attempt's first line was found in the log (False until the attempt starts)."""
    start_rule: AttemptRule | None = None
    """How it was found (``worker.detect.AttemptRule``)."""
    catch_up: int | None = None
    """Re-reading the attempt: restore the hang clock from line stamps until the read position
    reaches this byte (local logs)."""
    ended_mono: float | None = None
    """When the job was last seen leaving RUNNING (monotonic s); None while it runs."""
    wait_from: int | None = None
    """The new attempt has printed nothing yet: the byte to look from on the next pass (local logs)."""
    wait_since: float | None = None
    ended_unseen: bool = False
    """First seen already ended abnormally, inside the catch-up window (``catch_up_since``): its
    attempt is located once in the log and read as a job seen leaving RUNNING is."""


def catch_up_since(offsets_file: Path, now: float) -> float:
    """Unix time (s) from which a job that ended abnormally before the monitor first saw it is still
    handled: ``now - CATCH_UP_S``, or an earlier monitor's last pass (the mtime of ``offsets_file``,
    saved every 5 s) when that is earlier, but never before ``now - CATCH_UP_MAX_S``."""
    since = now - CATCH_UP_S
    try:
        since = min(since, offsets_file.stat().st_mtime)
    except OSError:  # no earlier monitor on this state dir
        pass
    return max(since, now - CATCH_UP_MAX_S)


class Monitor:
    """Detect stage daemon. ``poll_once`` is one pass (tests call it directly)."""

    def __init__(self, cfg: ClusterConfig, policy: RecoveryPolicy, client: Client, scheduler: Scheduler,
                 policy_path: str | None = None, task_queue: str | None = None,
                 ui_base: str | None = None, logs: LogReader | None = None,
                 shard: tuple[int, int] | None = None, jobs_poll_s: float | None = None) -> None:
        self.cfg, self.policy, self.client, self.scheduler = cfg, policy, client, scheduler
        self.policy_path = policy_path
        self.task_queue = task_queue or cfg.temporal.task_queue
        self.ui_base = ui_base
        if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
            raise ValueError(f"shard {shard!r}: expected (i, n) with 0 <= i < n")
        self.shard = shard if shard is not None and shard[1] > 1 else None
        self.jobs_poll_s = jobs_poll_s
        """Seconds between job-list polls; None = every pass (logs are followed every pass)."""
        state = Path(cfg.state_dir)
        offsets = "offsets.json" if self.shard is None else f"offsets-{self.shard[0]}of{self.shard[1]}.json"
        self.follower = Follower(offsets_file=state / offsets, cluster=cfg.name)
        self.catch_up_since = catch_up_since(state / offsets, time.time())
        """Unix time (s): a job first seen already ended abnormally after this is handled as seen
        leaving RUNNING (``CATCH_UP_S``, ``CATCH_UP_MAX_S``); before it, it is left alone."""
        self.logs: LogReader | None = None if isinstance(logs, LocalLogs) else logs
        """Job logs elsewhere (the login node over SFTP, a log store); None: local files, read as
        chunks through ``self.follower`` and the chunk scanner."""
        self.scanner = default_scanner()
        self.prefetch_threads = 0
        """Threads a pass stats and reads the local logs on before scanning them
        (``Follower.prefetch``; 0: read inline, the default). Worth it only where file-system calls
        wait on I/O (a network file system): on page-cached local files the threads cost ~2.5× the
        CPU of inline reads (docs/operations/capacity.md)."""
        self._jobs: list[JobRecord] = []
        self._last_list: float | None = None
        self._last_save: float | None = None
        self.watches: dict[str, Watch] = {}
        self.started: list[str] = []
        self._last_watchdog = 0.0
        self.pending: list[tuple] = []
        """Triggers whose incident could not be started yet (Temporal down): retried each pass."""
        self._running: dict[str, dict[int, str]] | None = None
        """Open incidents of this cluster at start (job id → attempt → incident id), from visibility."""
        self.guard_refresh_s = GUARD_REFRESH_S
        self._last_guard: float | None = None
        self.guard: GuardSettings | None = None
        """The cluster guard's settings at the last refresh (``revive mode set`` / ``revive policy
        apply``); None: no guard yet or unreachable — the policy file (the bootstrap) applies."""
        self.policy_version = 0
        """The guard's policy version in use (0: the policy file's)."""

    # ---- loop --------------------------------------------------------------------------------
    def mine(self, job_id: str) -> bool:
        """Whether this monitor's shard watches ``job_id``."""
        return self.shard is None or shard_of(self.cfg.name, job_id, self.shard[1]) == self.shard[0]

    async def run(self, stop: asyncio.Event) -> None:
        interval = min(self.cfg.logs.poll_interval_s, 0.5)
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                await self.poll_once()
            except SchedulerError as e:
                log.warning("scheduler unavailable, retrying: %s", e)
            except Exception:
                log.exception("monitor pass failed; continuing")
            # a pass starts every `interval` s; a pass longer than that is followed by a short breath only
            wait = max(interval - (time.monotonic() - t0), 0.05)
            try:
                await asyncio.wait_for(stop.wait(), timeout=wait)
            except TimeoutError:
                pass
        self.follower.save()

    async def _refresh_guard(self, now: float) -> None:
        """Every ``guard_refresh_s``: the guard's policy (hang settings, opt-in, profiles, budgets
        for new incidents) and mode replace the file's once one was applied there. A guard that
        cannot be read keeps the last settings (logged); detection never waits on it."""
        if self._last_guard is not None and now - self._last_guard < self.guard_refresh_s:
            return
        self._last_guard = now
        try:
            got = await asyncio.wait_for(guard_settings(self.client, self.cfg.name, self.task_queue), timeout=5)
        except Exception as e:  # noqa: BLE001 — no worker to answer the query, Temporal down, a test fake
            log.debug("guard settings unavailable (keeping the current policy): %s", e)
            return
        self.guard = got
        if got is not None and got.policy is not None and got.policy_version != self.policy_version:
            log.info("policy version %d from the cluster guard (applied by %s)", got.policy_version, got.policy_by)
            self.policy, self.policy_version = got.policy, got.policy_version

    def _ended_unseen(self, j: JobRecord) -> bool:
        """``j`` ended abnormally after ``catch_up_since``: the monitor missed it leaving RUNNING."""
        end = j.ended_at
        return j.state in ABNORMAL_END and end is not None and end.timestamp() >= self.catch_up_since

    def mode_for(self, partition: str | None) -> str:
        """The mode an incident opens with (search attribute): the guard's, else the policy's."""
        eff = effective_mode(self.guard, partition) if self.guard is not None else None
        return (eff[0] if eff else self.policy.mode_for(partition)).value

    async def poll_once(self) -> None:
        now = time.monotonic()
        await self._refresh_guard(now)
        retry, self.pending = self.pending, []
        for w, j, trig, family, attempt in retry:
            await self._trigger(w, j, trig, family, attempt=attempt)
        if self._last_list is None or self.jobs_poll_s is None or now - self._last_list >= self.jobs_poll_s:
            jobs = await self.scheduler.list_jobs()
            if self.shard is not None:
                jobs = [j for j in jobs if self.mine(j.job_id)]
            self._jobs, self._last_list, fresh = jobs, now, True
        else:
            jobs, fresh = self._jobs, False
        live = {j.job_id: j for j in jobs}
        for j in jobs if fresh else ():
            w = self.watches.get(j.job_id)
            if w is not None and j.submit_time and w.first_submit and w.job.name != j.name:
                self.watches.pop(j.job_id)  # a reused id (fresh cluster): a different job
                w = None
            unseen = w is None and self._ended_unseen(j)  # only a job not watched yet can have ended unseen
            if w is None and opted_in(j, self.cfg, self.policy) and (j.state in WATCH_START or unseen):
                first, opened = await self._rebuild_identity(j)
                w = Watch(job=j, first_submit=first, tracker=self._tracker(j.restarts), opened=opened,
                          last_state=JobState.RUNNING if unseen else j.state, last_restart=j.restarts,
                          attempt=j.restarts, ended_unseen=unseen)
                self.watches[j.job_id] = w
                log.info("watching job %s (%s) attempt %d log %s%s", j.job_id, j.name, j.restarts, j.std_out,
                         f" (it ended {j.state} at {j.ended_at:%H:%M:%S} before the monitor saw it run)"
                         if unseen and j.ended_at else "")
        readers = self._log_owners(live, now)
        if self.logs is None and self.prefetch_threads > 0:  # local files: stat + read on threads, then scan
            paths = [j.std_out for job_id in self.watches if (j := live.get(job_id)) is not None and j.std_out]
            await asyncio.to_thread(self.follower.prefetch, paths, self.prefetch_threads)
        for job_id, w in list(self.watches.items()):
            j = live.get(job_id)
            if j is None:
                self.watches.pop(job_id)
                continue
            try:
                await self._follow(w, j, now, reads=readers.get(j.std_out or "") == job_id)
            except Exception:  # one job's odd log or record must not blind the monitor to the others
                log.exception("job %s: this pass skipped it", job_id)
        if self._last_save is None or now - self._last_save >= 5.0:  # a cache (re-reads are deduped): every 5 s
            self._last_save = now
            self.follower.save()
        if now - self._last_watchdog > 10 and (self.shard is None or self.shard[0] == 0):
            # one watchdog per cluster: shard 0 runs it
            self._last_watchdog = now
            try:
                from revive.failopen import release_stranded_holds

                released = await release_stranded_holds(self.scheduler, max_age_s=120)
                if released:
                    log.warning("fail-open watchdog released stranded holds: %s", released)
            except Exception as e:  # the watchdog must never stop detection
                log.warning("fail-open watchdog failed: %s", e)
            await rm.refresh_approvals(self.client)  # approvals pending / oldest age (never raises)
        rm.monitor_observed(self, now)  # pass duration, bytes behind per log, jobs watched

    async def _new_lines(self, t: AttemptTracker, j: JobRecord, now: float) -> list[tuple[int, str]]:
        """The lines of ``j``'s log that matter for detection, with ``t`` fed every new line: local
        files as one chunk through the scanner; elsewhere line by line through ``self.logs``."""
        path = j.std_out or ""
        if self.logs is None:
            got = self.follower.read_chunk(path)
            return list(self.scanner.feed(t, got[1], got[0], now)) if got is not None else []
        try:
            new = await self.logs.read_new(path, job_id=j.job_id, hosts=tuple(j.nodes))
        except ReviveError as e:  # the login node (or the log store) is unreachable: no false hang
            log.warning("log of job %s unreadable for now: %s", j.job_id, e)
            t.paused_s += self.cfg.logs.poll_interval_s
            return []
        for _, text in new:
            t.feed(text, now)
        return new

    def _tracker(self, attempt: int) -> AttemptTracker:
        t = AttemptTracker(k=self.policy.hang.k, floor_s=self.policy.hang.floor.total_seconds())
        t.attempt, t.attempt_seen = attempt, True
        return t

    def _log_owners(self, live: dict[str, JobRecord], now: float) -> dict[str, str]:
        """Log path → the job id that reads it this pass: the watched job running the latest attempt
        on that path, else the one that stopped running last (for ``FINAL_LINES_S``)."""
        best: dict[str, tuple[tuple, str]] = {}
        for job_id, w in self.watches.items():
            j = live.get(job_id)
            if j is None or not j.std_out:
                continue
            if j.state == JobState.RUNNING:
                w.ended_mono = None
            elif w.last_state == JobState.RUNNING or (w.ended_mono is None and w.located):
                w.ended_mono = now
            if j.state != JobState.RUNNING and (w.ended_mono is None or now - w.ended_mono > FINAL_LINES_S):
                continue  # not running (pending, or ended a while ago): nothing of its own to read
            started = j.attempt_started_at or j.submit_time or datetime.min.replace(tzinfo=UTC)
            rank = (j.state == JobState.RUNNING, started, -(w.ended_mono or 0.0))
            cur = best.get(j.std_out)
            if cur is None or rank > cur[0]:
                best[j.std_out] = (rank, job_id)
        return {p: jid for p, (_, jid) in best.items()}

    async def _locate(self, w: Watch, j: JobRecord, now: float) -> None:
        """Find the current attempt's first line (``find_attempt_start``) in the log's last
        ``REBUILD_MAX_BYTES`` and follow the log from there with a fresh tracker for the attempt.
        A log that cannot be read yet (not created, login node down) is tried again next pass."""
        path = j.std_out or ""
        started = j.attempt_started_at
        try:
            if self.logs is None:
                base, data, inode = _read_tail(path, REBUILD_MAX_BYTES, w.wait_from)
            else:
                data, size = await self.logs.read_tail(path, REBUILD_MAX_BYTES, job_id=j.job_id)
                base, inode = size - len(data), 0
        except FileNotFoundError:
            data, base, inode = b"", 0, -1
        except (OSError, ReviveError) as e:
            log.warning("log of job %s unreadable for now: %s", j.job_id, e)
            return
        cut = data.rfind(b"\n") + 1  # whole lines only; the partial last line is read later
        at = find_attempt_start(data[:cut], j.restarts, started, whole=base == 0)
        waiting = w.wait_from is not None  # the log is stamped: read on from where the last look stopped
        if (self.logs is None and inode >= 0 and at.offset == cut and (at.rule == AttemptRule.start_time or waiting)
                and (w.wait_since is None or now - w.wait_since < ATTEMPT_WAIT_S)):
            # stamped lines, none of the new attempt yet: what comes next may still be the dying
            # attempt's (srun's last words after the requeue); look again on the next pass
            if w.wait_since is None:
                w.wait_since = now
                log.info("job %s attempt %d started %s; its log has no line of it yet", j.job_id, j.restarts, started)
            w.wait_from = base + cut
            return
        w.wait_from = w.wait_since = None
        keep = w.tracker.checkpoint if w.located else last_checkpoint(data[:at.offset])
        w.tracker, w.attempt, w.located, w.start_rule = self._tracker(j.restarts), j.restarts, True, at.rule
        w.tracker.checkpoint = keep  # the last checkpoint before the attempt (its own lines may say which it loaded)
        log.info("job %s attempt %d starts at byte %d of %s (rule %s)", j.job_id, j.restarts, base + at.offset,
                 path, at.rule.value)
        if self.logs is None:
            if inode < 0:
                self.follower.states.pop(path, None)  # not written yet: read from its first byte
                return
            line_no = data.count(b"\n", 0, at.offset) + (_count_lines(path, base) if base else 0)
            self.follower.states[path] = TailState(path=path, inode=inode, offset=base + at.offset, line_no=line_no)
            w.catch_up = base + cut
            return
        # elsewhere (SFTP, a log store): feed the attempt's lines now, then continue after them
        chunk = data[at.offset:cut]
        if chunk:
            for i, raw in enumerate(chunk.split(b"\n")[:-1]):
                text = raw.decode("utf-8", "replace")
                w.tracker.feed(text, now)
                await self._root(w, j, i + 1, text)
            restore_clock(w.tracker, now, datetime.now(UTC), j.attempt_started_at)
        if inode >= 0:
            self.logs.seek(path, data, base + len(data))

    async def _root(self, w: Watch, j: JobRecord, line_no: int | None, text: str) -> None:
        hit = root_hit(line_no or 0, text)
        if hit:
            await self._trigger(w, j, Trigger(
                kind=TriggerKind.log_signature, at=datetime.now(UTC), signature_id=hit.signature_id,
                text=hit.text, source=j.std_out, line_no=line_no), fault_family(hit.category))

    async def _follow(self, w: Watch, j: JobRecord, now: float, reads: bool = True) -> None:
        if (j.restarts != w.attempt or not w.located) and (j.state in ATTEMPT_RUNS or w.ended_unseen):
            if j.restarts != w.attempt and w.wait_since is None:
                log.info("job %s: attempt %d → %d (scheduler restart count)", j.job_id, w.attempt, j.restarts)
            w.ended_unseen = False  # an ended job's attempt is looked for once
            await self._locate(w, j, now)
        t = w.tracker
        if j.std_out and reads and w.located:
            for line_no, text in await self._new_lines(t, j, now):
                if j.restarts != w.attempt or t.attempt != w.attempt:
                    continue  # lines of an earlier attempt (or after a marker of another) never open an incident
                await self._root(w, j, line_no, text)
            if w.catch_up is not None:
                restore_clock(t, now, datetime.now(UTC), j.attempt_started_at)
                st = self.follower.states.get(j.std_out)
                if st is None or st.offset >= w.catch_up:
                    w.catch_up = None
        current = w.located and j.restarts == w.attempt == t.attempt
        if j.state == "RUNNING" and current and t.hung(now):
            since = t.last_progress_ts
            await self._trigger(w, j, Trigger(
                kind=TriggerKind.no_progress, at=datetime.now(UTC), since=since,
                threshold_s=round(t.threshold_s(), 3), source=j.std_out,
                text=f"no progress line for {t.silent_for(now):.1f} s (threshold {t.threshold_s():.1f} s)"), "hang")
        if j.state == "RUNNING" and current and t.slowed():
            await self._trigger(w, j, Trigger(
                kind=TriggerKind.slow_progress, at=datetime.now(UTC), source=j.std_out,
                text=f"step time ≥ 5% above the attempt's baseline for 10 consecutive steps "
                     f"(last {t.step_ms[-1]:.0f} ms)"), "slow")
        if w.last_state == "RUNNING" and j.state != "RUNNING":
            base = j.state
            if base in ABNORMAL_END:
                await self._trigger(w, j, Trigger(
                    kind=TriggerKind.job_state, at=datetime.now(UTC), state_from="RUNNING", state_to=base,
                    reason=j.reason, text=f"job {j.job_id} RUNNING → {base} (exit {j.exit_code}, reason {j.reason})"),
                    FAMILY_BY_END.get(base, "crash"))
        if j.restart_count > w.last_restart:
            chaos.point(chaos.Point.monitor_new_attempt)  # test-only kill point: inert unless REVIVE_CHAOS_HOOK
        if j.restart_count > w.last_restart and w.last_restart not in w.opened:
            # Slurm requeued the job itself (node failure, preemption): Revive did not, since the
            # attempt has no incident. Seen whatever state the poll caught (COMPLETING, PENDING …).
            await self._trigger(w, j, Trigger(
                kind=TriggerKind.job_state, at=datetime.now(UTC), state_from="RUNNING", state_to="REQUEUED",
                reason=j.reason, text=f"Slurm requeued job {j.job_id} itself (restarts {w.last_restart} → "
                                      f"{j.restart_count}, reason {j.reason})"), "node", attempt=w.last_restart)
        w.last_state, w.last_restart, w.job = j.state, j.restart_count, j

    async def _trigger(self, w: Watch, j: JobRecord, trig: Trigger, family: str, attempt: int | None = None) -> None:
        attempt = w.attempt if attempt is None else attempt
        attempt = max(attempt, 0)
        existing = w.opened.get(attempt)
        if existing:
            n = w.signalled.get(attempt, 0)
            if trig.kind in (TriggerKind.no_progress, TriggerKind.slow_progress) or n >= 20:
                return  # a hang keeps 'triggering' every pass; repeats beyond 20 add nothing
            w.signalled[attempt] = n + 1
            await self._signal(existing, trig)
            return
        iid = incident_id(self.cfg.name, j.job_id, w.first_submit, attempt)
        ckpt = w.tracker.checkpoint
        if ckpt is None:  # the framework printed no checkpoint line (HF, Lightning): its own folders
            from revive.profiles.disk import newest_checkpoint

            on_disk = await asyncio.to_thread(newest_checkpoint, j.command, None, j.comment,
                                              self.policy.opt_in.comment_key)
            ckpt = on_disk[0] if on_disk else None
        inp = IncidentInput(
            incident_id=iid, cluster=self.cfg.name,
            job=JobIdentity(job_id=j.job_id, user=j.user, name=j.name, restart_count=attempt),
            job_submit_time=w.first_submit, attempt=attempt, fault_family=family, trigger=trig,
            partition=j.partition, nodes=j.nodes, log_path=j.std_out, detected_at=trig.at,
            policy=self.policy, policy_path=self.policy_path, checkpoint_iteration=ckpt,
            last_progress=dict(w.tracker.last_by_rank),
            ui_url=(f"{self.ui_base}/namespaces/{self.cfg.temporal.namespace}/workflows/{iid}" if self.ui_base else None),
        )
        from workflows.incident import IncidentWorkflow

        try:
            handle: WorkflowHandle = await self.client.start_workflow(
                IncidentWorkflow.run, inp, id=iid, task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                memo={MEMO_KEY: {"name": j.name, "user": j.user, "attempt": attempt,
                                 "first_submit": w.first_submit.isoformat() if w.first_submit else None}},
                search_attributes=TypedSearchAttributes([
                    SearchAttributePair(sa.CLUSTER, self.cfg.name), SearchAttributePair(sa.JOB_ID, j.job_id),
                    SearchAttributePair(sa.STATE, "opened"), SearchAttributePair(sa.INCIDENT_ID, iid),
                    SearchAttributePair(sa.NODES, list(j.nodes)),
                    SearchAttributePair(sa.MODE, self.mode_for(j.partition)),
                ]),
                static_summary=f"job {j.job_id} ({j.name}) attempt {attempt}: {trig.kind.value} {trig.signature_id or trig.state_to or ''}".strip(),
                static_details=f"trigger: {trig.text or ''}",
            )
            w.opened[attempt] = iid
            self.started.append(handle.id)
            chaos.point(chaos.Point.monitor_opened)  # test-only kill point: inert unless REVIVE_CHAOS_HOOK
            rm.incident_opened(family)
            log.info("incident %s opened (%s: %s)", iid, trig.kind.value, (trig.text or "")[:200])
        except WorkflowAlreadyStartedError:
            # the attempt has its incident (another trigger, another monitor, before a restart):
            # this trigger is later evidence for it (a closed one ignores it)
            w.opened[attempt] = iid
            w.signalled[attempt] = w.signalled.get(attempt, 0) + 1
            log.info("incident %s exists: %s sent to it as a trigger", iid, trig.kind.value)
            await self._signal(iid, trig)
        except Exception as e:  # Temporal unreachable: keep the trigger, retry on the next pass
            log.warning("cannot open incident %s yet (%s); will retry", iid, e)
            self.pending.append((w, j, trig, family, attempt))

    async def _signal(self, iid: str, trig: Trigger) -> None:
        """Later evidence to the attempt's open incident, as the ``add_trigger`` Update: once the
        incident keeps MAX_EXTRA_TRIGGERS its validator refuses, which writes no history event (a
        storm is coalesced, not recorded). A closed incident ignores it."""
        try:
            await asyncio.wait_for(self.client.get_workflow_handle(iid).execute_update(
                "add_trigger", (trig.text or trig.kind.value)[:4096], result_type=int), timeout=10)
        except WorkflowUpdateFailedError:
            pass  # refused: coalesced (the incident keeps enough triggers already)
        except Exception:
            pass  # closed already: the trigger is a repeat of a handled fault

    # ---- rebuild (a restarted monitor) ----------------------------------------------------------
    async def _list(self, query: str) -> list:
        lister = getattr(self.client, "list_workflows", None)
        if lister is None:
            return []
        try:
            return [wf async for wf in lister(query, limit=1000)]
        except Exception as e:  # visibility down: ids still dedupe; the submit time falls back
            log.warning("visibility unavailable for the rebuild (%s): %s", query, e)
            return []

    async def _running_incidents(self) -> dict[str, dict[int, str]]:
        """Job id → attempt → id of the incidents open on this cluster (one query, at first use)."""
        if self._running is None:
            self._running = {}
            q = (f"WorkflowType='IncidentWorkflow' AND {sa.CLUSTER.name}={_quote(self.cfg.name)} "
                 f"AND ExecutionStatus='Running'")
            for wf in await self._list(q):
                job = wf.typed_search_attributes.get(sa.JOB_ID)
                got = parse_incident_id(wf.id, self.cfg.name, job) if job else None
                if got:
                    self._running.setdefault(job, {})[got[1]] = wf.id
        return self._running

    async def _rebuild_identity(self, j: JobRecord) -> tuple[datetime | None, dict[int, str]]:
        """(first SubmitTime, attempt → incident id) for a job seen for the first time.

        A job never restarted: its SubmitTime is the first one. A restarted job: its SubmitTime is
        the last requeue's, so the first one comes from its incidents in visibility
        (``ReviveCluster`` + ``ReviveJobId``), taking only those that belong to this job and not to an
        earlier job with the same id (a fresh cluster): the memo's name and user match, and either
        the incident is about the current attempt and started after it did, or about the attempt
        before and was still open when the job was requeued (closed at or after the SubmitTime the
        requeue set). None found (Slurm restarted the job and no incident was opened): the current
        SubmitTime (so ``job_submit_time`` bounds the budgets from the last requeue on)."""
        running = (await self._running_incidents()).get(j.job_id, {})
        if j.restarts == 0 or j.submit_time is None:
            first_stamp = _stamp(j.submit_time)
            return j.submit_time, {a: i for a, i in running.items() if _stamp_of(i) == first_stamp}
        q = (f"WorkflowType='IncidentWorkflow' AND {sa.CLUSTER.name}={_quote(self.cfg.name)} "
             f"AND {sa.JOB_ID.name}={_quote(j.job_id)}")
        found: list[tuple[str, int, str, datetime | None]] = []
        stamp: str | None = None
        for wf in await self._list(q):
            got = parse_incident_id(wf.id, self.cfg.name, j.job_id)
            if not got:
                continue
            try:
                memo = await wf.memo_value(MEMO_KEY, default={})
            except Exception:
                memo = {}
            memo = memo if isinstance(memo, dict) else {}
            if ("name" in memo and memo["name"] != j.name) or ("user" in memo and memo["user"] != j.user):
                continue  # another job that had this id
            found.append((got[0], got[1], wf.id, _parse_iso(memo.get("first_submit"))))
            a, st, ct, started = got[1], wf.start_time, wf.close_time, j.attempt_started_at
            if stamp is None and (
                    (a == j.restarts and (started is None or st is None or st >= started - timedelta(seconds=1)))
                    or (a == j.restarts - 1 and (ct is None or ct >= j.submit_time - timedelta(seconds=1)))):
                stamp = got[0]
        if stamp is None:
            now_stamp = _stamp(j.submit_time)
            return j.submit_time, {a: i for a, i in running.items() if _stamp_of(i) == now_stamp}
        mine = [x for x in found if x[0] == stamp]
        first = next((x[3] for x in mine if x[3] is not None), None) or _from_stamp(stamp)
        opened = {a: i for a, i in running.items() if _stamp_of(i) == stamp}
        opened.update({x[1]: x[2] for x in mine})
        log.info("job %s: first SubmitTime %s from its incidents %s", j.job_id, first, sorted(x[2] for x in mine))
        return first, opened


_STAMP = re.compile(r"^\d{8}T\d{6}$")


def parse_incident_id(iid: str, cluster: str, job_id: str) -> tuple[str, int] | None:
    """``<cluster>-<job>-<stamp>-a<attempt>[-<family>]`` (``revive.ids.incident_id``; ids from
    before one incident per attempt end with the family) → (stamp, attempt), or None."""
    m = re.fullmatch(rf"{re.escape(cluster)}-{re.escape(job_id)}-(\d{{8}}T\d{{6}}|nosubmit)-a(\d+)(?:-[a-z]+)?", iid)
    return (m.group(1), int(m.group(2))) if m else None


def _stamp(t: datetime | None) -> str:
    return t.strftime("%Y%m%dT%H%M%S") if t else "nosubmit"


def _stamp_of(iid: str) -> str | None:
    m = re.search(r"-(\d{8}T\d{6}|nosubmit)-a\d+(?:-[a-z]+)?$", iid)
    return m.group(1) if m else None


def _from_stamp(stamp: str) -> datetime | None:
    try:
        return datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def _parse_iso(v: object) -> datetime | None:
    if not isinstance(v, str):
        return None
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _quote(v: str) -> str:
    """A visibility query string literal (single quotes, backslash and quote escaped)."""
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _read_tail(path: str, max_bytes: int, start: int | None = None) -> tuple[int, bytes, int]:
    """(offset of the first byte read, the last ``max_bytes`` bytes — or those from ``start`` on
    when that is less —, inode) of a local file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        base = max(0, st.st_size - max_bytes)
        if start is not None and base < start <= st.st_size:
            base = start
        return base, os.pread(fd, st.st_size - base, base), st.st_ino
    finally:
        os.close(fd)


def _count_lines(path: str, upto: int) -> int:
    """Newlines in the first ``upto`` bytes of a local file (line numbers after a tail re-read)."""
    n, pos = 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while pos < upto:
            b = os.pread(fd, min(1 << 20, upto - pos), pos)
            if not b:
                break
            n += b.count(b"\n")
            pos += len(b)
    finally:
        os.close(fd)
    return n


async def run_monitor(cfg: ClusterConfig, policy: RecoveryPolicy, policy_path: str | None = None,
                      ui_base: str | None = None, shard: tuple[int, int] | None = None,
                      jobs_poll_s: float | None = None) -> None:
    """Run until SIGINT/SIGTERM."""
    import signal

    from revive.temporal import connect

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = await connect(cfg.temporal, identity="revive-monitor")
    site = build_site(cfg)
    mon = Monitor(cfg, policy, client, site.scheduler, policy_path=policy_path, ui_base=ui_base,
                  logs=site.logs, shard=shard, jobs_poll_s=jobs_poll_s)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    log.info("revive monitor for cluster %s (mode %s%s)", cfg.name, policy.mode.value,
             f", shard {shard[0]}/{shard[1]}" if shard else "")
    await mon.run(stop)
