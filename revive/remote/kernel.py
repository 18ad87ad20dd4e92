"""A node's kernel log, read through the login node used as a jump host.

``KernelLogReader`` opens ONE connection to the login node and, per node, one SSH connection
tunnelled through it (``asyncssh.connect(node_host, tunnel=login_conn)``; the node's host key is
checked against the same known_hosts file). Per node it either

- runs a configured command (an argv list, ``{node}`` and ``{since}`` replaced, quoted with
  ``shlex.join``), e.g. ``[journalctl, -k, -o, short-iso, --no-pager, --since, "{since}"]`` or
  ``[dmesg, -T]``; or
- reads a file named by a path template (``/var/log/kern.log``,
  ``/tmp/revive-cluster/nodes/{node}/kern.log``) with SFTP: its last ``tail_bytes`` bytes.

The answer is a :class:`KernelLog`. ``available=False`` (with ``why``) means the kernel log could
not be read at all -- the node has no journal (``journalctl`` prints "No journal files were
found" and exits 0), the command is missing or failed, the file is missing, the node is
unreachable -- which is a different statement from "read it, and it has no Xid line".
``read`` never raises for a node problem.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from revive.errors import ConfigError
from revive.logline import LINE_CAP, cap_bytes, decode_line
from revive.remote import (
    ConnFactory,
    HostKeyRejected,
    RemoteUnavailable,
    SSHEndpoint,
    connect,
    valid_node_name,
)

__all__ = ["KernelLog", "KernelLogReader", "build_command", "since_arg"]

_NO_JOURNAL = "No journal files were found"
_JOURNAL_MARKER = re.compile(r"^-- .* --$")  # "-- No entries --", "-- Boot 3f… --"


@dataclass(frozen=True)
class KernelLog:
    node: str
    lines: list[str] = field(default_factory=list)
    available: bool = True
    why: str | None = None
    """Why the log is unavailable (``available=False``), or a note (e.g. cut to the tail)."""
    source: str = ""
    """What was read: the command line or ``sftp:<path>``."""


def since_arg(since: datetime | str | None) -> str | None:
    """``--since`` text journalctl 252+ parses: ``YYYY-MM-DD HH:MM:SS UTC`` (no ``T``)."""
    if since is None or isinstance(since, str):
        return since
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return since.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def build_command(template: Sequence[str], node: str, since: datetime | str | None = None) -> list[str]:
    """The argv for ``node``: ``{node}`` and ``{since}`` replaced in each element. Without a
    ``since``, an element holding ``{since}`` is dropped, with the option right before it when
    the element is exactly ``{since}`` (``--since {since}``)."""
    s = since_arg(since)
    out: list[str] = []
    for a in template:
        if "{since}" in a and s is None:
            if a == "{since}" and out and out[-1].startswith("-"):
                out.pop()
            continue
        out.append(a.replace("{node}", node).replace("{since}", s or ""))
    for a in out:
        if "\x00" in a:
            raise ValueError("NUL byte in a command argument")
    return out


def _clean(raw: bytes | str) -> str:
    if isinstance(raw, str):
        raw = raw.encode("utf-8", errors="replace")
    return decode_line(cap_bytes(raw, 4 * LINE_CAP))  # one line-cap policy (revive.logline)


NodeAddress = Callable[[str], "tuple[str, int] | None"]


class KernelLogReader:
    """Reads kernel logs of compute nodes through a login node.

    ``login``: a connection factory for the login node (:func:`revive.remote.connector`).
    ``node_endpoint``: the login endpoint (user, key, known_hosts) reused for the nodes.
    ``nodes``: ``{node: (host, port)}`` (``scripts/sshd-up.sh`` writes one as nodes.yaml); a
    node not in it is reached by its own name on ``node_endpoint.port`` (``nodes=None``) or
    refused (a mapping that lacks it).
    Exactly one of ``command`` (argv template) or ``path_template`` (must contain ``{node}`` or be
    the same path on every node, e.g. ``/var/log/kern.log``).
    """

    def __init__(
        self,
        login: ConnFactory,
        node_endpoint: SSHEndpoint,
        *,
        nodes: Mapping[str, tuple[str, int]] | None = None,
        command: Sequence[str] | None = None,
        path_template: str | None = None,
        tail_bytes: int = 256 * 1024,
        max_lines: int = 5000,
        timeout_s: float = 30.0,
    ) -> None:
        if bool(command) == bool(path_template):
            raise ConfigError("kernel log: exactly one of command or path_template is required")
        if command:
            cmd = [str(a) for a in command]
            if cmd and cmd[0].rsplit("/", 1)[-1] == "journalctl" and ({"-q", "--quiet"} & set(cmd)):
                raise ConfigError("kernel log: journalctl -q/--quiet hides 'No journal files were found' "
                                  "(a node without a journal would read as an empty kernel log); drop it")
            self.command: list[str] | None = cmd
        else:
            self.command = None
        self.path_template = path_template
        self.login = login
        self.node_endpoint = node_endpoint
        self.nodes = dict(nodes) if nodes is not None else None
        self.tail_bytes = tail_bytes
        self.max_lines = max_lines
        self.timeout_s = timeout_s
        self._login_conn: Any = None
        self._node_conns: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    # ---------------------------------------------------------------- connections --
    def _address(self, node: str) -> tuple[str, int] | None:
        if self.nodes is None:
            return node, self.node_endpoint.port
        return self.nodes.get(node)

    async def _login(self) -> Any:
        if self._login_conn is None or self._login_conn.is_closed():
            self._login_conn = await asyncio.wait_for(self.login(), self.timeout_s)
        return self._login_conn

    async def _node_conn(self, node: str, addr: tuple[str, int]) -> Any:
        async with self._lock:
            conn = self._node_conns.get(node)
            if conn is not None and not conn.is_closed():
                return conn
            login = await self._login()
            ep = self.node_endpoint.with_host(addr[0], addr[1])
            try:
                conn = await connect(ep, tunnel=login)
            except HostKeyRejected:
                raise
            except RemoteUnavailable:
                if not login.is_closed():
                    raise
                self._login_conn = None  # the login connection was what dropped: once more
                conn = await connect(ep, tunnel=await self._login())
            self._node_conns[node] = conn
            return conn

    async def close(self) -> None:
        conns = [*self._node_conns.values(), self._login_conn]
        self._node_conns, self._login_conn = {}, None
        for c in conns:
            if c is not None:
                c.close()
        for c in conns:
            if c is not None:
                try:
                    await asyncio.wait_for(c.wait_closed(), 5)
                except (TimeoutError, OSError):
                    pass

    async def __aenter__(self) -> KernelLogReader:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # --------------------------------------------------------------------- reads --
    async def read(self, node: str, since: datetime | str | None = None) -> KernelLog:
        """The kernel log of ``node`` (since ``since`` for a command with ``{since}``)."""
        import asyncssh

        if not valid_node_name(node):
            return KernelLog(node, [], False, f"invalid node name {node!r}; not contacted")
        addr = self._address(node)
        if addr is None:
            return KernelLog(node, [], False, f"node {node} is not in the nodes map")
        for attempt in (0, 1):
            try:
                conn = await self._node_conn(node, addr)
                if self.command:
                    return await self._run(conn, node, since)
                return await self._tail(conn, node)
            except HostKeyRejected as e:
                return KernelLog(node, [], False, f"kernel log unavailable: {e}")
            except RemoteUnavailable as e:
                return KernelLog(node, [], False, f"kernel log unavailable: {e}")
            except TimeoutError:
                old = self._node_conns.pop(node, None)
                if old is not None:
                    old.close()  # a hung command or link: not retried (it would hang again)
                return KernelLog(node, [], False, f"kernel log unavailable: ssh {node}: no answer in "
                                                  f"{self.timeout_s:g}s")
            except (OSError, EOFError, asyncssh.Error) as e:
                old = self._node_conns.pop(node, None)
                if old is not None:
                    old.close()
                if attempt == 1:
                    return KernelLog(node, [], False,
                                     f"kernel log unavailable: ssh {node}: {type(e).__name__}: {e}")
        raise AssertionError("unreachable")

    async def _run(self, conn: Any, node: str, since: datetime | str | None) -> KernelLog:
        import asyncssh

        argv = build_command(self.command or [], node, since)
        line = shlex.join(argv)
        res = await asyncio.wait_for(conn.run(line, stdin=asyncssh.DEVNULL, check=False, encoding=None),
                                     self.timeout_s)
        out: bytes = res.stdout or b""
        err: bytes = res.stderr or b""
        rc = res.exit_status if res.exit_status is not None else 255
        errtext = err.decode("utf-8", errors="replace").strip()
        if _NO_JOURNAL.encode() in out or _NO_JOURNAL.encode() in err:
            return KernelLog(node, [], False, f"kernel log unavailable: {argv[0]}: {_NO_JOURNAL} (exit {rc})", line)
        if rc == 127:
            return KernelLog(node, [], False, f"kernel log unavailable: {argv[0]}: command not found on {node}", line)
        if rc != 0:
            return KernelLog(node, [], False,
                             f"kernel log unavailable: {line} exited {rc}: {errtext[-500:]}", line)
        lines = [_clean(r) for r in out.split(b"\n")]
        lines = [x for x in lines if x and not _JOURNAL_MARKER.match(x)]
        why = None
        if len(lines) > self.max_lines:
            why = f"cut to the last {self.max_lines} of {len(lines)} lines"
            lines = lines[-self.max_lines:]
        return KernelLog(node, lines, True, why, line)

    async def _tail(self, conn: Any, node: str) -> KernelLog:
        import asyncssh

        path = (self.path_template or "").replace("{node}", node)
        src = f"sftp:{path}"
        t = self.timeout_s
        try:
            sftp = await asyncio.wait_for(conn.start_sftp_client(), t)
        except asyncssh.SFTPError as e:
            return KernelLog(node, [], False, f"kernel log unavailable: no SFTP on {node}: {e.reason}", src)
        try:
            try:
                attrs = await asyncio.wait_for(sftp.stat(path), t)
                size = attrs.size or 0
                start = max(0, size - self.tail_bytes)
                async with await asyncio.wait_for(sftp.open(path, "rb"), t) as f:
                    data = await asyncio.wait_for(f.read(size - start, start), t) if size > start else b""
            except asyncssh.SFTPNoSuchFile:
                return KernelLog(node, [], False, f"kernel log unavailable: {path}: no such file on {node}", src)
            except (asyncssh.SFTPPermissionDenied, asyncssh.SFTPFailure, asyncssh.SFTPBadMessage) as e:
                return KernelLog(node, [], False, f"kernel log unavailable: {path}: {e.reason}", src)
            except asyncssh.SFTPError as e:
                if isinstance(e, (asyncssh.SFTPConnectionLost, asyncssh.SFTPNoConnection)):
                    raise
                return KernelLog(node, [], False, f"kernel log unavailable: {path}: {e.reason}", src)
        finally:
            sftp.exit()
        parts = data.split(b"\n")
        why = None
        if start > 0:
            parts = parts[1:]  # the first one is cut
            why = f"last {self.tail_bytes} bytes of {size}"
        if parts and parts[-1] == b"":
            parts.pop()
        lines = [_clean(p) for p in parts]
        if len(lines) > self.max_lines:
            lines = lines[-self.max_lines:]
            why = f"last {self.max_lines} lines"
        return KernelLog(node, lines, True, why, src)
