"""Gather stage: the evidence bundle an incident's attribution reads.

Reads the job record, node states, a capped window of the job log and the kernel-log lines of the
job's nodes. Each line is capped at 4096 characters (head and tail, ``revive.logline``) and the bundle's log text at ``window_lines`` lines (well
under Temporal's 2 MB payload limit); the full window (up to 8 MB of the log's tail) goes to a file
under the evidence dir, and its path and sha256 go into history. Unreadable sources become notes in
the bundle (attribution then says ``unknown``); nothing here raises for bad input.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from temporalio import activity

from activities.blocking import run_blocking, with_heartbeats
from revive import chaos
from revive.config import GpuSignals
from revive.errors import JobNotFound, ReviveError, SchedulerError
from revive.logline import cap_line
from revive.models import EvidenceBundle, GatherEvidenceInput, GpuSample, JobRecord, JobState, PriorIncident
from revive.scheduler.base import Scheduler
from revive.site import KernelLogs, LocalKernelLogs, LocalLogs, LogReader

TAIL_BYTES = 8 * 1024 * 1024
"""Bytes of a log's tail read into the evidence window file."""
KERNEL_LINES = 200
"""Kernel-log lines kept per node (the newest)."""
STILL_WRITING: frozenset[JobState] = frozenset({
    JobState.RUNNING, JobState.COMPLETING, JobState.CONFIGURING, JobState.SIGNALING, JobState.RESIZING,
    JobState.STAGE_OUT, JobState.STOPPED, JobState.SUSPENDED, JobState.UNKNOWN,
})
"""Job states in which the attempt's processes may still write to its log (the settle wait goes on)."""
NODE_HISTORY_WINDOW = timedelta(days=30)
"""How far back earlier incidents on the job's nodes are read (the engine's own window,
``revive.attribution.verdict.NODE_HISTORY_WINDOW``, decides what counts)."""

NodeHistory = Callable[[str, list[str], datetime, str], Awaitable[dict[str, list[PriorIncident]]]]
"""``(cluster, nodes, since, incident_id) → {node: [PriorIncident]}``: earlier incidents on the
nodes (``activities.guard.hardware_history`` over Temporal visibility in the worker)."""
HistoryRead = tuple[dict[str, list[PriorIncident]], str | None]
"""A node-history read: ``({node: [PriorIncident]}, None)``, or ``({}, note)`` when unreadable."""


def read_tail(path: Path, max_bytes: int = TAIL_BYTES) -> tuple[bytes, int]:
    """Last ``max_bytes`` of a file → (bytes, file size). Raises OSError."""
    with path.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        return f.read(), size


def decode_lines(data: bytes) -> list[str]:
    """Bytes → lines; invalid UTF-8 replaced, NULs dropped, each line capped (``revive.logline``)."""
    text = data.decode("utf-8", errors="replace").replace("\x00", "")
    return [cap_line(x) for x in text.splitlines()]


def cut_to_attempt(lines: list[str], attempt: int | None) -> list[str]:
    """Drop the lines of attempts after ``attempt`` (from the first ``=== attempt restart=N`` line
    with N > attempt): the evidence is the failed attempt's, not its successor's."""
    if attempt is None:
        return lines
    from revive.progress import parse_attempt

    for i, line in enumerate(lines):
        n = parse_attempt(line) if line.startswith("=== attempt") else None
        if n is not None and n > attempt:
            return lines[:i]
    return lines


class EvidenceActivities:
    """Activities of the gather stage. Built once by the worker with its scheduler and config."""

    def __init__(self, scheduler: Scheduler, kernel: str | KernelLogs | None, evidence_dir: Path,
                 ip_to_node: dict[str, str] | None = None, kernel_log_utc_offset_s: int | None = None,
                 logs: LogReader | None = None, gpu: GpuSignals | None = None,
                 node_history: NodeHistory | None = None) -> None:
        """``kernel``: the site's kernel-log reader (or a local path template with ``{node}``);
        ``logs``: the site's job-log reader (local files by default); ``node_history``: earlier
        incidents per node (none read when None)."""
        self.scheduler = scheduler
        self.kernel: KernelLogs = LocalKernelLogs(kernel) if kernel is None or isinstance(kernel, str) else kernel
        self.logs: LogReader = logs or LocalLogs()
        self.gpu = gpu or GpuSignals()
        self.gpu_transport: httpx.AsyncBaseTransport | None = None
        """Tests replay recorded exporter text through an ``httpx.MockTransport``."""
        self.evidence_dir = evidence_dir
        self.ip_to_node = ip_to_node or {}
        self.kernel_log_utc_offset_s = kernel_log_utc_offset_s
        self.node_history = node_history

    @activity.defn(name="gather_evidence")
    async def gather_evidence(self, inp: GatherEvidenceInput) -> EvidenceBundle:
        """Collect the bundle for ``inp.job_id``. Never raises for unreadable sources.

        Heartbeats every ``activities.blocking.HEARTBEAT_EVERY_S`` while it waits (settle time,
        scheduler, logs, GPU probes): the incident sets a short heartbeat timeout, so a killed
        worker's gather is retried within seconds instead of after its start-to-close timeout."""
        chaos.point(chaos.Point.gather)  # test-only kill point: inert unless REVIVE_CHAOS_HOOK names it
        return await with_heartbeats(self._gather_evidence(inp))

    async def _gather_evidence(self, inp: GatherEvidenceInput) -> EvidenceBundle:
        # the nodes' earlier incidents (a visibility query) need no log line: read for the trigger's
        # nodes while the job finishes writing, not after it (it was on the first action's path)
        early_nodes = list(dict.fromkeys(inp.nodes))
        early = (asyncio.ensure_future(self._read_node_history(inp, early_nodes))
                 if self.node_history is not None and early_nodes and inp.settle_s > 0 else None)
        try:
            return await self._gather_after_settle(inp, early, early_nodes)
        finally:
            if early is not None and not early.done():
                early.cancel()

    async def _gather_after_settle(self, inp: GatherEvidenceInput,
                                   early: asyncio.Future[HistoryRead] | None,
                                   early_nodes: list[str]) -> EvidenceBundle:
        settled, record = await self._settle(inp) if inp.settle_s > 0 else ("", None)
        b = EvidenceBundle(trigger=inp.trigger, ip_to_node=self.ip_to_node,
                           kernel_log_utc_offset_s=self.kernel_log_utc_offset_s, settle=settled)
        if record is not None:
            b.job = record  # read by the settle's last look, moments ago
        else:
            try:
                b.job = await self.scheduler.get_job(inp.job_id)
            except JobNotFound:
                b.notes.append(f"job {inp.job_id} not found in slurmctld (purged after MinJobAge?)")
            except SchedulerError as e:
                b.notes.append(f"job record unavailable: {e}")
        nodes = list(dict.fromkeys((b.job.nodes if b.job and b.job.nodes else []) or inp.nodes))
        covered = early if early is not None and set(nodes) <= set(early_nodes) else None
        history = self._history_part(b, inp, nodes, covered)
        # independent reads side by side; each keeps its notes, added below in a fixed order
        parts = await asyncio.gather(self._node_states(b, nodes), self._job_log(b, inp),
                                     self._kernel_logs(b, nodes), self._gpu_part(b, nodes), history)
        for notes in parts:
            b.notes.extend(notes)
        activity.logger.info("evidence for %s: %d log lines, kernel lines %s, notes %s", inp.incident_id,
                             b.job_log.count("\n") + 1 if b.job_log else 0,
                             {k: len(v) for k, v in b.kernel_logs.items()}, b.notes)
        return b

    async def _node_states(self, b: EvidenceBundle, nodes: list[str]) -> list[str]:
        try:
            all_nodes = await self.scheduler.get_nodes(None)
        except SchedulerError as e:
            return [f"node states unavailable: {e}"]
        part = b.job.partition if b.job else None
        b.node_states = {n.name: n.state for n in all_nodes if n.name in nodes}
        b.partition_size = len([n for n in all_nodes if not part or not n.partitions or part in n.partitions]) or None
        return []

    async def _job_log(self, b: EvidenceBundle, inp: GatherEvidenceInput) -> list[str]:
        log_path = inp.log_path or (b.job.std_out if b.job else None)
        if not log_path:
            return ["no job log path known"]
        b.job_log_source = log_path
        try:
            data, _ = await self.logs.read_tail(log_path, TAIL_BYTES, job_id=inp.job_id)
        except (OSError, ReviveError) as e:
            return [f"job log unreadable: {log_path}: {getattr(e, 'strerror', None) or e}"]
        notes: list[str] = []
        await run_blocking(self._log_window, b, data, inp, notes)
        return notes

    async def _kernel_logs(self, b: EvidenceBundle, nodes: list[str]) -> list[str]:
        """The attempt's kernel lines of every node, the nodes side by side (an earlier job's Xid on
        the node is not this fault's evidence; a StartTime in the future is Slurm's estimate for a
        pending job: read everything)."""
        since = b.job.start_time if b.job else None
        if since is not None and (since if since.tzinfo else since.replace(tzinfo=UTC)) > datetime.now(UTC):
            since = None

        async def one(node: str) -> str | None:
            try:
                got = await self.kernel.read(node, since=since)
            except ReviveError as e:
                return f"kernel log of {node} unavailable: {e}"
            if not got.available:
                return f"kernel log of {node} unavailable: {got.why}"
            b.kernel_logs[node] = [cap_line(x) for x in got.lines[-KERNEL_LINES:]]
            return None

        got = await asyncio.gather(*(one(n) for n in nodes))
        b.kernel_logs = {n: b.kernel_logs[n] for n in nodes if n in b.kernel_logs}  # the job's node order
        return [x for x in got if x]

    async def _gpu_part(self, b: EvidenceBundle, nodes: list[str]) -> list[str]:
        notes: list[str] = []
        if self.gpu.dcgm_url_template and nodes:
            b.gpu_metrics = await self._gpu_samples(nodes, notes)
        return notes

    async def _history_part(self, b: EvidenceBundle, inp: GatherEvidenceInput, nodes: list[str],
                            early: asyncio.Future[HistoryRead] | None = None) -> list[str]:
        """``b.node_history`` for ``nodes``: from ``early`` (the read started beside the settle
        wait for the trigger's nodes, a superset of ``nodes``) when given, else read now."""
        if self.node_history is None or not nodes:
            return []
        got, why = await early if early is not None else await self._read_node_history(inp, nodes)
        b.node_history = {n: v for n, v in got.items() if n in nodes}
        return [why] if why else []

    async def _read_node_history(self, inp: GatherEvidenceInput, nodes: list[str]) -> HistoryRead:
        """The nodes' earlier incidents within ``NODE_HISTORY_WINDOW`` → (history, None), or
        (empty, note) when it cannot be read (history is extra evidence: never raises)."""
        assert self.node_history is not None
        try:
            since = datetime.now(UTC) - NODE_HISTORY_WINDOW
            return await self.node_history(inp.cluster, nodes, since, inp.incident_id), None
        except Exception as e:  # noqa: BLE001 — history is extra evidence: its absence is a note
            return {}, f"node history unavailable: {type(e).__name__}: {str(e)[:200]}"

    async def _settle(self, inp: GatherEvidenceInput) -> tuple[str, JobRecord | None]:
        """Wait for a dying job to finish writing (``GatherEvidenceInput.settle_s`` at most): end
        once the job no longer runs (nothing of the attempt writes any more) or its log has not
        grown for ``settle_quiet_s``. Looks every ``settle_poll_s`` (one log-size read and one job
        read, side by side). Returns ``"<seconds> s: <why it ended>"``; never raises (a source
        that cannot be read just gives no early end), with the job record of the final look (None
        when that read failed)."""
        limit, quiet = max(0.0, inp.settle_s), max(0.0, inp.settle_quiet_s)
        poll = min(max(0.02, inp.settle_poll_s), limit)
        t0 = last_growth = time.monotonic()
        size: int | None = None
        while True:
            got_size, record = await asyncio.gather(self._log_size(inp.log_path, inp.job_id),
                                                    self._job_record(inp.job_id))
            state = JobState(str(record.state)) if record is not None and record.state else None
            now = time.monotonic()
            if got_size is not None and got_size != size:
                if size is not None:
                    last_growth = now
                size = got_size
            elapsed = now - t0
            if state is not None and state not in STILL_WRITING and elapsed > 0:
                return f"{elapsed:.2f} s: job {state.value}", record
            if size is not None and now - last_growth >= quiet and quiet < limit:
                return f"{elapsed:.2f} s: log quiet {quiet:g} s", record
            if elapsed >= limit:
                return f"{elapsed:.2f} s: limit", record
            await asyncio.sleep(min(poll, limit - elapsed))

    async def _log_size(self, path: str | None, job_id: str) -> int | None:
        if not path:
            return None
        try:
            return (await self.logs.read_tail(path, 0, job_id=job_id))[1]
        except (OSError, ReviveError):
            return None

    async def _job_record(self, job_id: str) -> JobRecord | None:
        try:
            return await self.scheduler.get_job(job_id)
        except (ReviveError, OSError):
            return None

    def _log_window(self, b: EvidenceBundle, data: bytes, inp: GatherEvidenceInput, notes: list[str]) -> None:
        """Cut the log's tail to the attempt, write the window file, fill ``b.job_log`` (blocking:
        runs in a thread). An unwritable window file becomes a note in ``notes``."""
        try:
            lines = cut_to_attempt(decode_lines(data), inp.attempt)
            window = self.evidence_dir / f"{inp.incident_id}.log"
            window.parent.mkdir(parents=True, exist_ok=True)
            blob = "\n".join(lines).encode()
            window.write_bytes(blob)
            b.log_window_path = str(window)
            b.log_window_sha256 = hashlib.sha256(blob).hexdigest()
            window_lines = lines[-inp.window_lines:]
            if not any(x.startswith("=== attempt") for x in window_lines):
                # keep the current attempt's boundary: it dates the attempt for the engine
                head = next((x for x in reversed(lines[: -inp.window_lines]) if x.startswith("=== attempt")), None)
                if head:
                    window_lines = [head, *window_lines]
            b.job_log = "\n".join(window_lines)
        except OSError as e:
            notes.append(f"evidence window not written: {e.strerror or e}")

    async def _gpu_samples(self, nodes: list[str], notes: list[str]) -> list[GpuSample]:
        """One scrape of each node's DCGM exporter (or ``revive agent``), concurrently; a node that
        does not answer becomes a note."""
        import httpx

        from revive.gpu.dcgm import DcgmScraper

        template = self.gpu.dcgm_url_template or ""
        async with httpx.AsyncClient(transport=self.gpu_transport) as client:
            scrapers = [DcgmScraper(template.replace("{node}", n), client, node=n, timeout_s=self.gpu.timeout_s)
                        for n in nodes]
            got = await asyncio.gather(*(s.scrape() for s in scrapers), return_exceptions=True)
        out: list[GpuSample] = []
        for node, res in zip(nodes, got, strict=True):
            if isinstance(res, BaseException):
                notes.append(f"GPU metrics of {node} unavailable: {res}")
            else:
                out.extend(res)
        return out
