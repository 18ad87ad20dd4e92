"""``Scheduler`` over the Slurm CLI (``scontrol``, ``scancel``, ``sbatch``), locally or over SSH.

Reads parse ``scontrol show job -o`` / ``scontrol show node -o`` (one record per line,
``Key=Value`` pairs; some values contain spaces, e.g. ``Comment``, ``OS`` and node ``Reason``).
22.05 has no ``scontrol --json``, and ``squeue``/REST report the *unexpanded* StdOut pattern, so
``scontrol`` is the source of truth for the monitor.

Errors: a controller that cannot be reached → ``SchedulerUnavailable``; ``Invalid job id
specified`` → ``JobNotFound``; any other refusal → ``SchedulerCommandError``.

``run_on_node``: ``srun --overlap --jobid=<job> -w <node>`` needs a live allocation on the node,
which a diagnostic for a failed job does not have. So:

- local testbed (``local_testbed=True``: every node is a ``slurmd -N nodeN`` on this machine):
  the command runs locally with ``SLURMD_NODENAME=<node>`` in its environment;
- otherwise: a runner for the node from ``node_runner`` (``SlurmCLI.from_config`` builds an
  ``SSHRunner`` to the node with the cluster's SSH settings). Without one, ``run_on_node``
  raises ``SchedulerCommandError``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime

from revive.config import ClusterConfig
from revive.errors import JobNotFound, SchedulerCommandError, SchedulerUnavailable
from revive.models import JobRecord, NodeRecord
from revive.scheduler.hostlist import compress_hostlist, expand_hostlist
from revive.scheduler.runners import CommandRunner, LocalRunner, SSHRunner
from revive.signals import SignalScope, scancel_argv

__all__ = ["SlurmCLI", "parse_kv_line", "parse_job_line", "parse_node_line", "parse_slurm_time"]

log = logging.getLogger(__name__)

_KEY_RE = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_/:.]*)=")

_UNAVAILABLE_PATTERNS = (
    "unable to contact slurm controller",
    "slurm_receive_msg",
    "socket timed out",
    "zero bytes were transmitted",
    "communication connection failure",
    "could not establish a configuration source",
    "unable to establish",
    "connection refused",
    "backup controller in standby",
)
_NULL = {"", "(null)", "None", "N/A", "Unknown", "n/a"}


def parse_kv_line(line: str) -> dict[str, str]:
    """Split one ``-o`` record into ``{key: value}``.

    A new field starts at ``<space>Key=`` where Key starts with an upper-case letter and has not
    been seen yet in the record; anything else (spaces, ``x=y`` inside a comment) belongs to the
    current value. The first key is the record's id (``JobId`` / ``NodeName``).
    """
    line = line.rstrip("\n")
    bounds: list[tuple[str, int, int]] = []  # key, match start, value start
    seen: set[str] = set()
    for m in _KEY_RE.finditer(line):
        key = m.group(1)
        if key in seen:
            continue
        seen.add(key)
        bounds.append((key, m.start(), m.end()))
    out: dict[str, str] = {}
    for i, (key, _start, vstart) in enumerate(bounds):
        vend = bounds[i + 1][1] if i + 1 < len(bounds) else len(line)
        out[key] = line[vstart:vend].strip()
    return out


def _none(v: str | None) -> str | None:
    if v is None:
        return None
    v = v.strip()
    return None if v in _NULL else v


def _int(v: str | None) -> int | None:
    v = _none(v)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        return None


def parse_slurm_time(v: str | None) -> datetime | None:
    """``2026-11-29T16:22:57`` (controller local time, no zone) → aware UTC datetime."""
    v = _none(v)
    if v is None:
        return None
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.astimezone()  # the naive value is this machine's local time
    return dt.astimezone(UTC)


def _user(v: str | None) -> str | None:
    v = _none(v)
    if v is None:
        return None
    return v.split("(", 1)[0] or None


_JOB_ID = re.compile(r"^[0-9]+$")
_RES_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_RES_LINE = re.compile(r"^ReservationName=(\S+)")
_NODE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _parse_all(out: str, prefix: str, parse):
    """Parse every record line; a garbled one is logged and skipped, so one bad record never hides
    every other job or node from the monitor."""
    recs = []
    for line in out.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            recs.append(parse(line))
        except ValueError as e:
            log.warning("skipping unparsable scontrol record: %s", e)
    return recs


def parse_job_line(line: str) -> JobRecord:
    """One ``scontrol show job -o`` line → ``JobRecord``."""
    kv = parse_kv_line(line)
    if "JobId" not in kv:
        raise ValueError(f"not a job record: {line[:200]!r}")
    if not _JOB_ID.match(kv["JobId"]) or "JobState" not in kv:  # truncated or garbled output
        raise ValueError(f"garbled job record: {line[:200]!r}")
    state = (kv.get("JobState") or "UNKNOWN").split("+", 1)[0].strip() or "UNKNOWN"
    reason = _none(kv.get("Reason"))
    priority = _int(kv.get("Priority"))
    hold = (state == "PENDING" and priority == 0) or bool(
        reason and (reason.startswith("JobHeld") or reason == "job_requeued_in_held_state")
    )
    requeue = kv.get("Requeue")
    array_job, array_task = _none(kv.get("ArrayJobId")), _none(kv.get("ArrayTaskId"))
    job_id = kv["JobId"]
    if array_job and array_task and _JOB_ID.match(array_job):
        # an array task is addressed as <ArrayJobId>_<ArrayTaskId> (its own JobId may equal the
        # ArrayJobId, and `scontrol requeue <ArrayJobId>` acts on every task)
        job_id = f"{array_job}_{array_task if array_task.isdigit() else '[' + array_task + ']'}"
    else:
        array_job = array_task = None
    return JobRecord(
        job_id=job_id,
        name=_none(kv.get("JobName")),
        user=_user(kv.get("UserId")),
        state=state,
        reason=reason,
        exit_code=_none(kv.get("ExitCode")),
        nodes=expand_hostlist(_none(kv.get("NodeList"))),
        partition=_none(kv.get("Partition")),
        restart_count=_int(kv.get("Restarts")) or 0,
        submit_time=parse_slurm_time(kv.get("SubmitTime")),
        start_time=parse_slurm_time(kv.get("StartTime")),
        end_time=parse_slurm_time(kv.get("EndTime")),
        std_out=_none(kv.get("StdOut")),
        std_err=_none(kv.get("StdErr")),
        work_dir=_none(kv.get("WorkDir")),
        command=_none(kv.get("Command")),
        comment=_none(kv.get("Comment")),
        requeue=None if _none(requeue) is None else requeue == "1",
        exc_nodes=expand_hostlist(_none(kv.get("ExcNodeList"))),
        batch_host=_none(kv.get("BatchHost")),
        time_limit=_none(kv.get("TimeLimit")),
        elapsed=_none(kv.get("RunTime")),
        num_nodes=_int(kv.get("NumNodes")),
        num_tasks=_int(kv.get("NumTasks")),
        tres_per_node=_none(kv.get("TresPerNode")),
        hold=hold,
        array_job_id=array_job,
        array_task_id=array_task,
        dependency=_none(kv.get("Dependency")),
    )


_REASON_SUFFIX = re.compile(r"\s*\[[^\[\]@]*@[^\[\]]*\]\s*$")


def parse_node_line(line: str) -> NodeRecord:
    """One ``scontrol show node -o`` line → ``NodeRecord``.

    ``Reason`` loses Slurm's ``[user@time]`` suffix, so ``revive:<incident> <category>`` reads
    back exactly as it was set.
    """
    kv = parse_kv_line(line)
    if "NodeName" not in kv:
        raise ValueError(f"not a node record: {line[:200]!r}")
    if not _NODE_NAME.match(kv["NodeName"]) or "State" not in kv:  # truncated or garbled output
        raise ValueError(f"garbled node record: {line[:200]!r}")
    reason = _none(kv.get("Reason"))
    if reason:
        reason = _REASON_SUFFIX.sub("", reason) or None
    parts = _none(kv.get("Partitions"))
    return NodeRecord(
        name=kv["NodeName"],
        state=kv.get("State") or "UNKNOWN",
        reason=reason,
        partitions=[p for p in (parts or "").split(",") if p],
    )


class SlurmCLI:
    """The Slurm CLI as a ``Scheduler``. ``runner`` runs scontrol/scancel/sbatch."""

    def __init__(
        self,
        runner: CommandRunner,
        cluster: str,
        slurm_conf: str | None = None,
        *,
        local_testbed: bool = False,
        node_runner: Callable[[str], CommandRunner] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.runner = runner
        self.cluster = cluster
        self.slurm_conf = slurm_conf
        self.local_testbed = local_testbed
        self.node_runner = node_runner
        self.timeout_s = timeout_s

    @classmethod
    def from_config(cls, cfg: ClusterConfig, runner: CommandRunner | None = None) -> SlurmCLI:
        """From a ``revive.config.ClusterConfig``. ``runner`` reuses an existing login-node
        runner (``revive.site``); by default one is built from the config."""
        sched = cfg.scheduler
        if sched.mode == "ssh" and sched.ssh is not None:
            ssh = sched.ssh
            runner = runner or SSHRunner.from_config(ssh, slurm_conf=cfg.slurm_conf)
            addresses = ssh.node_addresses() or {}
            node_runners: dict[str, CommandRunner] = {}

            def node_runner(node: str) -> CommandRunner:
                if node not in node_runners:  # one (lazily opened) connection per node
                    host, port = addresses.get(node, (node, ssh.port))
                    node_runners[node] = SSHRunner.from_config(ssh, host=host, port=port)
                return node_runners[node]

            return cls(runner, cfg.name, cfg.slurm_conf, local_testbed=cfg.local_testbed,
                       node_runner=node_runner, timeout_s=sched.command_timeout_s)
        return cls(runner or LocalRunner(cfg.slurm_conf), cfg.name, cfg.slurm_conf,
                   local_testbed=cfg.local_testbed, timeout_s=sched.command_timeout_s)

    # ---- plumbing -----------------------------------------------------------------------------
    async def _run(self, argv: list[str], input: str | None = None, job_id: str | None = None) -> str:
        rc, out, err = await self.runner.run(argv, input=input, timeout_s=self.timeout_s)
        if rc == 0:
            return out
        text = (err + "\n" + out).strip()
        low = text.lower()
        if any(p in low for p in _UNAVAILABLE_PATTERNS):
            raise SchedulerUnavailable(
                f"slurmctld of cluster {self.cluster!r} is not reachable "
                f"({argv[0]} exited {rc}: {text[:300]})"
            )
        if "invalid job id specified" in low:
            raise JobNotFound(f"job {job_id} not found on cluster {self.cluster!r} ({text[:200]})")
        raise SchedulerCommandError(argv, rc, text)

    # ---- reads --------------------------------------------------------------------------------
    async def get_job(self, job_id: str) -> JobRecord:
        job_id = str(job_id)
        out = await self._run(["scontrol", "show", "job", "-o", job_id], job_id=job_id)
        for line in out.splitlines():
            if line.startswith("JobId="):
                rec = parse_job_line(line)
                # an array task's record answers to its own numeric JobId too; it keeps the
                # <ArrayJobId>_<ArrayTaskId> id, so an identity check on the plain id refuses to act
                if rec.job_id == job_id or (rec.array_job_id and line.startswith(f"JobId={job_id} ")):
                    return rec
        raise JobNotFound(f"job {job_id} not found on cluster {self.cluster!r}")

    async def list_jobs(self) -> list[JobRecord]:
        out = await self._run(["scontrol", "show", "job", "-o"])
        return _parse_all(out, "JobId=", parse_job_line)

    async def get_nodes(self, names: list[str] | None = None) -> list[NodeRecord]:
        out = await self._run(["scontrol", "show", "node", "-o"])
        nodes = _parse_all(out, "NodeName=", parse_node_line)
        if names is None:
            return nodes
        wanted = set(names)
        return [n for n in nodes if n.name in wanted]

    async def ping(self) -> bool:
        try:
            rc, out, _err = await self.runner.run(["scontrol", "ping"], timeout_s=self.timeout_s)
        except SchedulerUnavailable:
            return False
        return rc == 0 and "is UP" in out

    # ---- actions ------------------------------------------------------------------------------
    async def drain_nodes(self, nodes: list[str], reason: str) -> list[str]:
        if not nodes:
            raise ValueError("drain_nodes: no nodes")
        if not reason.strip():
            raise ValueError("drain_nodes: Slurm requires a reason")
        argv = ["scontrol", "update", f"NodeName={compress_hostlist(nodes)}", "State=DRAIN",
                f"Reason={reason}"]
        await self._run(argv)
        return argv

    async def resume_nodes(self, nodes: list[str]) -> list[str]:
        if not nodes:
            raise ValueError("resume_nodes: no nodes")
        argv = ["scontrol", "update", f"NodeName={compress_hostlist(nodes)}", "State=RESUME"]
        try:
            await self._run(argv)
        except SchedulerCommandError as e:
            # RESUME on a node that is not drained/down is refused; already resumed = done
            if "invalid node state" not in e.output.lower():
                raise
            live = await self.get_nodes(nodes)
            if any(n.drained or "DOWN" in n.state.upper() for n in live):
                raise
        return argv

    async def requeue(self, job_id: str, hold: bool = False) -> list[str]:
        argv = ["scontrol", "requeuehold" if hold else "requeue", str(job_id)]
        await self._run(argv, job_id=str(job_id))
        return argv

    async def update_job(self, job_id: str, **fields: str) -> list[str]:
        if not fields:
            raise ValueError("update_job: no fields")
        argv = ["scontrol", "update", f"JobId={job_id}", *(f"{k}={v}" for k, v in fields.items())]
        await self._run(argv, job_id=str(job_id))
        return argv

    async def hold(self, job_id: str) -> list[str]:
        argv = ["scontrol", "hold", str(job_id)]
        await self._run(argv, job_id=str(job_id))
        return argv

    async def release(self, job_id: str) -> list[str]:
        argv = ["scontrol", "release", str(job_id)]
        await self._run(argv, job_id=str(job_id))
        return argv

    async def cancel(self, job_id: str, signal: str | None = None) -> list[str]:
        argv = ["scancel", *([f"--signal={signal}"] if signal else []), str(job_id)]
        await self._run(argv, job_id=str(job_id))
        return argv

    async def signal_job(self, job_id: str, signal: str, scope: SignalScope = SignalScope.steps) -> list[str]:
        argv = scancel_argv(str(job_id), signal, scope)
        await self._run(argv, job_id=str(job_id))
        return argv

    async def submit(self, script: str, options: list[str]) -> str:
        argv = ["sbatch", "--parsable", *options]
        out = await self._run(argv, input=script)
        job_id = out.strip().splitlines()[-1].split(";", 1)[0].strip() if out.strip() else ""
        if not job_id.isdigit():
            raise SchedulerCommandError(argv, 0, f"unexpected sbatch output: {out!r}")
        return job_id

    async def batch_script(self, job_id: str) -> str:
        return await self._run(["scontrol", "write", "batch_script", str(job_id), "-"],
                               job_id=str(job_id))

    async def run_on_node(self, node: str, argv: list[str], timeout_s: float = 30.0) -> tuple[int, str]:
        if self.node_runner is not None:
            # on the local testbed every node is this machine: SLURMD_NODENAME picks its slurmd
            env = {"SLURMD_NODENAME": node} if self.local_testbed else None
            rc, out, err = await self.node_runner(node).run(argv, timeout_s=timeout_s, env=env)
        elif self.local_testbed:
            runner: CommandRunner = (
                self.runner if isinstance(self.runner, LocalRunner) else LocalRunner(self.slurm_conf)
            )
            rc, out, err = await runner.run(argv, timeout_s=timeout_s, env={"SLURMD_NODENAME": node})
        else:
            raise SchedulerCommandError(
                list(argv), -1,
                f"run_on_node({node}): no way to reach the node (not a local testbed, no SSH config)",
            )
        return rc, out + err

    # ---- maintenance windows = Slurm reservations ------------------------------------------
    async def create_maintenance_window(self, name: str, nodes: list[str], duration_s: float,
                                        users: list[str]) -> list[str]:
        """``scontrol create reservation ReservationName=<name> Flags=MAINT,IGNORE_JOBS Nodes=<n>
        StartTime=now Duration=<minutes, at least 1> Users=<u,…>`` (Slurm 22.05 ``scontrol(1)``:
        ``Duration`` is in minutes; ``MAINT`` marks the nodes as in maintenance for accounting,
        ``IGNORE_JOBS`` lets the reservation be made over running jobs). An existing window of the
        same name is kept (a retried activity)."""
        if not nodes:
            raise ValueError("create_maintenance_window: no nodes")
        if not _RES_NAME.match(name):
            raise ValueError(f"create_maintenance_window: invalid name {name!r}")
        if not users or any(not _RES_NAME.match(u) for u in users):
            raise ValueError(f"create_maintenance_window: invalid users {users!r}")
        minutes = max(1, int((duration_s + 59) // 60))
        argv = ["scontrol", "create", "reservation", f"ReservationName={name}", "Flags=MAINT,IGNORE_JOBS",
                f"Nodes={compress_hostlist(nodes)}", "StartTime=now", f"Duration={minutes}",
                f"Users={','.join(users)}"]
        try:
            await self._run(argv)
        except SchedulerCommandError:
            if name not in await self.list_maintenance_windows():
                raise
        return argv

    async def delete_maintenance_window(self, name: str) -> list[str]:
        if not _RES_NAME.match(name):
            raise ValueError(f"delete_maintenance_window: invalid name {name!r}")
        argv = ["scontrol", "delete", f"ReservationName={name}"]
        try:
            await self._run(argv)
        except SchedulerCommandError:
            if name in await self.list_maintenance_windows():
                raise
        return argv

    async def list_maintenance_windows(self) -> list[str]:
        out = await self._run(["scontrol", "show", "reservation", "-o"])
        names = []
        for line in out.splitlines():
            m = _RES_LINE.match(line.strip())
            if m:
                names.append(m.group(1))
        return names
