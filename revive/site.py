"""The site: how Revive reaches one cluster, built once from its ``ClusterConfig``.

One object per concern, each behind an interface, so the worker, the monitor and the CLI never
branch on "local or SSH":

- ``scheduler``: the ``Scheduler`` (Slurm CLI, locally or on the login node over SSH; reads from
  slurmrestd when ``scheduler.read`` is ``rest``);
- ``runner``: where Revive's own commands run on the controller side (the fail-open hold release,
  a node's health check): this machine, or the login node;
- ``logs``: a ``LogReader`` — job logs followed from an offset, and the tail of a log for evidence;
  local files, or the login node's files over SFTP (``logs.over_ssh``);
- ``kernel``: a ``KernelLogs`` reader — each node's kernel log (Xid lines): a local path template,
  or the node's file / command through the login node as a jump host (``kernel_log.over_ssh``).

Nothing is installed on the cluster: SSH mode needs only sshd on the login node (and on the nodes,
for kernel logs and diagnostics).
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Protocol

import httpx

from revive.config import ClusterConfig
from revive.config import LogSource as LogSourceConfig
from revive.scheduler.base import Scheduler
from revive.scheduler.runners import CommandRunner, LocalRunner, SSHRunner
from revive.tail import Follower

KERNEL_TAIL_BYTES = 1024 * 1024
"""Bytes of a node's kernel log read per incident (the newest)."""


class LogReader(Protocol):
    """Job logs. Paths are the job's ``StdOut`` as slurmctld reports it (a path on the login node's
    file system in SSH mode). Lines are ``(1-based line number, text)``, capped (``revive.logline``)."""

    async def read_new(self, path: str, job_id: str = "", hosts: tuple[str, ...] = ()) -> list[tuple[int, str]]:
        """Complete lines ``path`` gained since the last call (missing file → ``[]``). ``job_id`` and
        ``hosts`` select the stream in a log store (files ignore them)."""
        ...

    async def read_tail(self, path: str, max_bytes: int, job_id: str = "") -> tuple[bytes, int]:
        """The last ``max_bytes`` bytes and the file size. Raises ``OSError`` for the file."""
        ...

    def fresh(self) -> LogReader:
        """A reader with its own offsets (verify follows one log without moving the monitor's)."""
        ...

    def seek(self, path: str, data: bytes, size: int) -> None:
        """Continue ``path`` after ``data``, the file's last bytes read at ``size`` (``read_tail``):
        the next ``read_new`` returns only what was written after them."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class KernelLogLines:
    node: str
    lines: list[str]
    available: bool = True
    why: str | None = None
    """Why the kernel log could not be read: ``available=False`` is "unknown", never "no Xid"."""


class KernelLogs(Protocol):
    async def read(self, node: str, since: datetime | None = None) -> KernelLogLines: ...

    async def close(self) -> None: ...


class LocalLogs:
    """Local files through ``revive.tail.Follower`` (reads in a thread)."""

    def __init__(self, follower: Follower | None = None) -> None:
        self.follower = follower or Follower()

    async def read_new(self, path: str, job_id: str = "", hosts: tuple[str, ...] = ()) -> list[tuple[int, str]]:
        return await asyncio.to_thread(self.follower.read_new, path)

    async def read_tail(self, path: str, max_bytes: int, job_id: str = "") -> tuple[bytes, int]:
        def tail() -> tuple[bytes, int]:
            with Path(path).open("rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                return f.read(), size

        return await asyncio.to_thread(tail)

    def fresh(self) -> LocalLogs:
        return LocalLogs()

    def seek(self, path: str, data: bytes, size: int) -> None:
        from revive.tail import TailState

        try:
            inode = Path(path).stat().st_ino
        except OSError:
            return
        nl = data.rfind(b"\n")
        self.follower.states[path] = TailState(path=path, inode=inode, offset=size,
                                               partial=data[nl + 1:] if nl >= 0 else b"")

    async def close(self) -> None:
        self.follower.save()


KERNEL_SINCE_SKEW_S = 2.0
"""Seconds a kernel line may be stamped before ``since`` and still be kept (clock skew between the
node's syslog and the scheduler's StartTime)."""
_SYSLOG_TS = re.compile(r"^(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d)\b")
_ISO_TS = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                       "Nov", "Dec"), 1)}


def line_time(line: str, ref: datetime, utc_offset_s: int) -> datetime | None:
    """The UTC instant a kernel-log line is stamped with, or None (no stamp we know). Syslog's
    ``Mon DD HH:MM:SS`` (RFC 3164: no year, no zone) is read in the zone ``utc_offset_s`` with
    ``ref``'s year (the year before when that lands more than a day after ``ref``); ISO 8601
    stamps (``journalctl -o short-iso``, rsyslog's high-precision format) without a zone likewise."""
    zone = timezone(timedelta(seconds=utc_offset_s))
    m = _SYSLOG_TS.match(line)
    if m:
        mon = _MONTHS.get(m.group("mon"))
        if mon is None:
            return None
        try:
            h, mi, se = (int(x) for x in m.group("hms").split(":"))
            t = datetime(ref.year, mon, int(m.group("day")), h, mi, se, tzinfo=zone)
        except ValueError:
            return None
        if t > ref + timedelta(days=1):
            t = t.replace(year=t.year - 1)
        return t.astimezone(UTC)
    m = _ISO_TS.match(line)
    if m:
        try:
            t = datetime.fromisoformat(m.group("ts").replace("Z", "+00:00"))
        except ValueError:
            return None
        return (t if t.tzinfo else t.replace(tzinfo=zone)).astimezone(UTC)
    return None


def lines_since(lines: list[str], since: datetime | None, utc_offset_s: int) -> list[str]:
    """``lines`` without those stamped before ``since`` (less ``KERNEL_SINCE_SKEW_S``): an Xid from
    before the attempt started (an earlier job's fault, already handled) is not this incident's
    evidence. Lines without a stamp we know are kept."""
    if since is None:
        return lines
    ref = since if since.tzinfo else since.replace(tzinfo=UTC)
    cut = ref - timedelta(seconds=KERNEL_SINCE_SKEW_S)
    out = []
    for x in lines:
        t = line_time(x, ref, utc_offset_s)
        if t is None or t >= cut:
            out.append(x)
    return out


class LocalKernelLogs:
    """``kernel_log.path_template`` on this machine (the local testbed, or a shared syslog).
    ``read(node, since)`` keeps the lines stamped at or after ``since`` (``lines_since``); stamps
    without a zone are read in ``utc_offset_s`` (default: this machine's zone — syslog writes
    local time)."""

    def __init__(self, template: str | None, utc_offset_s: int | None = None) -> None:
        self.template = template
        self.utc_offset_s = time.localtime().tm_gmtoff if utc_offset_s is None else utc_offset_s

    async def read(self, node: str, since: datetime | None = None) -> KernelLogLines:
        if not self.template:
            return KernelLogLines(node, [], False, "no kernel_log configured")
        path = Path(self.template.replace("{node}", node))

        def tail() -> bytes:
            with path.open("rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - KERNEL_TAIL_BYTES))
                return f.read()

        try:
            data = await asyncio.to_thread(tail)
        except FileNotFoundError:
            return KernelLogLines(node, [], True, f"{path} does not exist (no kernel lines yet)")
        except OSError as e:
            return KernelLogLines(node, [], False, f"kernel log of {node} unreadable: {e.strerror or e}")
        lines = data.decode("utf-8", "replace").replace("\x00", "").splitlines()
        return KernelLogLines(node, lines_since(lines, since, self.utc_offset_s))

    async def close(self) -> None:
        return None


class RemoteLogs:
    """The login node's files over SFTP (``revive.remote.follow.RemoteFollower``)."""

    def __init__(self, factory, offsets_file: str | None = None, cluster: str = "local") -> None:  # noqa: ANN001
        from revive.remote.follow import RemoteFollower

        self._factory = factory
        self.follower = RemoteFollower(factory, offsets_file=offsets_file, cluster=cluster)

    async def read_new(self, path: str, job_id: str = "", hosts: tuple[str, ...] = ()) -> list[tuple[int, str]]:
        return await self.follower.read_new(path)

    async def read_tail(self, path: str, max_bytes: int, job_id: str = "") -> tuple[bytes, int]:
        return await self.follower.read_tail(path, max_bytes)

    def fresh(self) -> RemoteLogs:
        return RemoteLogs(self._factory)

    def seek(self, path: str, data: bytes, size: int) -> None:
        from revive.remote.follow import ANCHOR, RemoteTailState

        nl = data.rfind(b"\n")
        line_offset = size - (len(data) - nl - 1) if nl >= 0 else size - len(data)
        self.follower.states[path] = RemoteTailState(
            path=path, offset=size, anchor=data[-ANCHOR:], partial=data[nl + 1:] if nl >= 0 else data,
            line_offset=line_offset, line_anchor=data[: nl + 1][-ANCHOR:] if nl >= 0 else b"", size=size)

    async def close(self) -> None:
        await self.follower.close()


class StoreLogs:
    """Job logs in Loki or VictoriaLogs (``revive.logsources``), selected by the configured labels.

    A stream is one job's log (``{job_id}``, ``{path}``, ``{hosts}`` in the label template). Line
    numbers are the store's per-stream sequence. ``read_tail`` reads the stream from ``lookback_s``
    ago up to now on this reader's own cursor, so a following ``read_new`` continues from there.
    """

    def __init__(self, cfg: LogSourceConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        from revive.logsources import from_config

        self.cfg = cfg
        self.transport = transport
        c = cfg
        data = {"backend": c.backend, "url": c.url, "labels": dict(c.labels), "tenant": c.tenant,
                "token_file": c.token_file, "lookback_s": c.lookback_s}
        self.source = from_config(data, **({"transport": transport} if transport is not None else {}))

    def _sel(self, path: str, job_id: str, hosts: tuple[str, ...]):  # noqa: ANN202
        from revive.logsources import StreamSelector

        return StreamSelector(job_id=job_id, hosts=tuple(hosts), path=path)

    async def read_new(self, path: str, job_id: str = "", hosts: tuple[str, ...] = ()) -> list[tuple[int, str]]:
        return [(ln.seq, ln.text) for ln in await self.source.read_new(self._sel(path, job_id, hosts))]

    async def read_tail(self, path: str, max_bytes: int, job_id: str = "") -> tuple[bytes, int]:
        lines: list[str] = []
        for _ in range(100):  # bounded catch-up: a store pages at its limit
            got = await self.source.read_new(self._sel(path, job_id, ()))
            if not got:
                break
            lines += [ln.text for ln in got]
        data = ("\n".join(lines) + "\n").encode() if lines else b""
        return data[-max_bytes:], len(data)

    def fresh(self) -> StoreLogs:
        return StoreLogs(self.cfg, self.transport)

    def seek(self, path: str, data: bytes, size: int) -> None:
        return None  # read_tail already moved this reader's cursor to the end

    async def close(self) -> None:
        await self.source.close()


class RemoteKernelLogs:
    """Each node's kernel log through the login node as a jump host (``revive.remote.kernel``)."""

    def __init__(self, reader) -> None:  # noqa: ANN001
        self.reader = reader

    async def read(self, node: str, since: datetime | None = None) -> KernelLogLines:
        got = await self.reader.read(node, since=since)
        return KernelLogLines(node, list(got.lines), got.available, got.why)

    async def close(self) -> None:
        await self.reader.close()


@dataclass
class Site:
    cfg: ClusterConfig
    scheduler: Scheduler
    runner: CommandRunner
    logs: LogReader
    kernel: KernelLogs

    @property
    def ssh(self) -> bool:
        return self.cfg.scheduler.mode == "ssh"

    async def close(self) -> None:
        await self.logs.close()
        await self.kernel.close()
        close = getattr(self.runner, "close", None)
        if close is not None:
            await close()


def build_site(cfg: ClusterConfig, scheduler: Scheduler | None = None) -> Site:
    """The site for ``cfg``. ``scheduler`` replaces the configured one (tests wrap it to record calls)."""
    from revive.scheduler.slurm_cli import SlurmCLI

    sched_cfg = cfg.scheduler
    runner: CommandRunner
    logs: LogReader
    kernel: KernelLogs
    store = cfg.logs.backend != "file"
    if sched_cfg.mode == "ssh" and sched_cfg.ssh is not None:
        from revive.remote import SSHEndpoint, connector

        runner = SSHRunner.from_config(sched_cfg.ssh, slurm_conf=cfg.slurm_conf)
        login = SSHEndpoint.from_config(sched_cfg.ssh)
        factory = connector(login)
        logs = RemoteLogs(factory, cluster=cfg.name) if cfg.logs.over_ssh else LocalLogs()
        kl = cfg.kernel_log
        if kl is not None and kl.over_ssh:
            from revive.remote.kernel import KernelLogReader

            nodes = sched_cfg.ssh.node_addresses()
            kernel = RemoteKernelLogs(KernelLogReader(factory, login, nodes=nodes, command=kl.command,
                                                      path_template=kl.path_template))
        else:
            kernel = LocalKernelLogs(kl.path_template if kl else None)
    else:
        runner = LocalRunner(slurm_conf=cfg.slurm_conf)
        logs = LocalLogs()
        kernel = LocalKernelLogs(cfg.kernel_log.path_template if cfg.kernel_log else None)
    if scheduler is None:
        cli = SlurmCLI.from_config(cfg, runner=runner)
        scheduler = cli
        if sched_cfg.read == "rest" and sched_cfg.rest is not None:
            import httpx

            from revive.scheduler.slurm_rest import SlurmREST

            rest = sched_cfg.rest  # the JWT is read here, at start-up, and never leaves this process
            scheduler = SlurmREST(httpx.AsyncClient(timeout=sched_cfg.command_timeout_s), rest.url, rest.user,
                                  rest.token(), cli, api_version=rest.api_version)
    if store:
        logs = StoreLogs(cfg.logs)
    return Site(cfg=cfg, scheduler=scheduler, runner=runner, logs=logs, kernel=kernel)
