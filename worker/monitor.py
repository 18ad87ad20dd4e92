"""The monitor: finds opted-in jobs, follows their logs and states, and opens incidents.

One loop, every ``poll_interval_s`` (≤ 0.5 s): list jobs (``scontrol show job -o``: squeue and REST
22.05 give only the unexpanded StdOut pattern), follow each watched job's StdOut, feed the detect
stage, and start an ``IncidentWorkflow`` on the first trigger of an attempt:

- a root log signature (catalog role ``root``) in the current attempt;
- the job leaving RUNNING abnormally (``FAILED``, ``NODE_FAIL``, ``TIMEOUT``, ``OUT_OF_MEMORY`` …);
- a hang: no progress line for max(k × median step interval, floor).

Incident id = cluster + job id + the SubmitTime first seen for the job (Slurm 22.05 resets it on
requeue, and job ids restart at 1 on a fresh cluster) + attempt + fault family. One incident per
attempt: later triggers of the same attempt are sent to it as ``add_trigger`` signals; lines from
earlier attempts never open one; 10 000 repeats of a fault make one incident.

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
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError

from revive import chaos
from revive import metrics as rm
from revive import search_attributes as sa
from revive.config import ClusterConfig
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
from revive.tail import Follower
from worker.detect import AttemptTracker, default_scanner, fault_family, root_hit

log = logging.getLogger("revive.monitor")


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
        self.logs: LogReader | None = None if isinstance(logs, LocalLogs) else logs
        """Job logs elsewhere (the login node over SFTP, a log store); None: local files, read as
        chunks through ``self.follower`` and the chunk scanner."""
        self.scanner = default_scanner()
        self._jobs: list[JobRecord] = []
        self._last_list: float | None = None
        self._last_save: float | None = None
        self.watches: dict[str, Watch] = {}
        self.started: list[str] = []
        self._last_watchdog = 0.0
        self.pending: list[tuple] = []
        """Triggers whose incident could not be started yet (Temporal down): retried each pass."""

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

    async def poll_once(self) -> None:
        now = time.monotonic()
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
            if w is None and opted_in(j, self.cfg, self.policy) and j.state in WATCH_START:
                w = Watch(job=j, first_submit=j.submit_time,
                          tracker=AttemptTracker(k=self.policy.hang.k, floor_s=self.policy.hang.floor.total_seconds()),
                          last_state=j.state, last_restart=j.restart_count)
                self.watches[j.job_id] = w
                log.info("watching job %s (%s) log %s", j.job_id, j.name, j.std_out)
        for job_id, w in list(self.watches.items()):
            j = live.get(job_id)
            if j is None:
                self.watches.pop(job_id)
                continue
            await self._follow(w, j, now)
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

    async def _follow(self, w: Watch, j: JobRecord, now: float) -> None:
        t = w.tracker
        if j.std_out:
            for line_no, text in await self._new_lines(t, j, now):
                if t.attempt_seen and t.attempt < j.restart_count:
                    continue  # lines of an earlier attempt never open an incident
                hit = root_hit(line_no, text)
                if hit:
                    await self._trigger(w, j, Trigger(
                        kind=TriggerKind.log_signature, at=datetime.now(UTC), signature_id=hit.signature_id,
                        text=hit.text, source=j.std_out, line_no=line_no), fault_family(hit.category))
        if j.state == "RUNNING" and t.hung(now) and t.attempt >= j.restart_count:
            since = t.last_progress_ts
            await self._trigger(w, j, Trigger(
                kind=TriggerKind.no_progress, at=datetime.now(UTC), since=since,
                threshold_s=round(t.threshold_s(), 3), source=j.std_out,
                text=f"no progress line for {t.silent_for(now):.1f} s (threshold {t.threshold_s():.1f} s)"), "hang")
        if j.state == "RUNNING" and t.attempt >= j.restart_count and t.slowed():
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
        attempt = w.tracker.attempt if attempt is None else attempt
        attempt = max(attempt, 0)
        existing = w.opened.get(attempt)
        if existing:
            n = w.signalled.get(attempt, 0)
            if trig.kind in (TriggerKind.no_progress, TriggerKind.slow_progress) or n >= 20:
                return  # a hang keeps 'triggering' every pass; repeats beyond 20 add nothing
            w.signalled[attempt] = n + 1
            try:
                # an Update, not a Signal: once the incident keeps MAX_EXTRA_TRIGGERS its validator
                # refuses, which writes no history event (the storm is coalesced, not recorded)
                await asyncio.wait_for(self.client.get_workflow_handle(existing).execute_update(
                    "add_trigger", (trig.text or trig.kind.value)[:4096], result_type=int), timeout=10)
            except WorkflowUpdateFailedError:
                pass  # refused: coalesced (the incident keeps enough triggers already)
            except Exception:
                pass  # closed already: the trigger is a repeat of a handled fault
            return
        iid = incident_id(self.cfg.name, j.job_id, w.first_submit, attempt, family)
        inp = IncidentInput(
            incident_id=iid, cluster=self.cfg.name,
            job=JobIdentity(job_id=j.job_id, user=j.user, name=j.name, restart_count=attempt),
            job_submit_time=w.first_submit, attempt=attempt, fault_family=family, trigger=trig,
            partition=j.partition, nodes=j.nodes, log_path=j.std_out, detected_at=trig.at,
            policy=self.policy, policy_path=self.policy_path, checkpoint_iteration=w.tracker.checkpoint,
            last_progress=dict(w.tracker.last_by_rank),
            ui_url=(f"{self.ui_base}/namespaces/{self.cfg.temporal.namespace}/workflows/{iid}" if self.ui_base else None),
        )
        from workflows.incident import IncidentWorkflow

        try:
            handle: WorkflowHandle = await self.client.start_workflow(
                IncidentWorkflow.run, inp, id=iid, task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes([
                    SearchAttributePair(sa.CLUSTER, self.cfg.name), SearchAttributePair(sa.JOB_ID, j.job_id),
                    SearchAttributePair(sa.STATE, "opened"), SearchAttributePair(sa.INCIDENT_ID, iid),
                    SearchAttributePair(sa.NODES, list(j.nodes)),
                    SearchAttributePair(sa.MODE, self.policy.mode_for(j.partition).value),
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
            w.opened[attempt] = iid
            log.info("incident %s already handled", iid)
        except Exception as e:  # Temporal unreachable: keep the trigger, retry on the next pass
            log.warning("cannot open incident %s yet (%s); will retry", iid, e)
            self.pending.append((w, j, trig, family, attempt))


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
