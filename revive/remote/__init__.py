"""Reading a cluster from outside: SSH to a login node (and through it, as a jump host, to the
compute nodes), nothing installed on the cluster.

- :class:`SSHEndpoint` / :func:`connect`: one asyncssh connection with the host key checked
  against a known_hosts file (pin on first use only when asked), errors mapped to
  :class:`RemoteUnavailable` (back off and retry) and :class:`HostKeyRejected` (a person must act).
- :mod:`revive.remote.follow`: :class:`~revive.remote.follow.RemoteFollower`, job logs followed
  over SFTP on one multiplexed connection.
- :mod:`revive.remote.kernel`: :class:`~revive.remote.kernel.KernelLogReader`, a node's kernel
  log (a command or a file) through the login node.

Nothing here builds a shell string from untrusted text: files are read with SFTP requests, and
a command is an argv list quoted with ``shlex.join`` (the remote sshd hands the command line to
the user's login shell, which must be a POSIX shell).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from revive.appendfile import append_line
from revive.errors import ReviveError

__all__ = [
    "RemoteUnavailable",
    "HostKeyRejected",
    "SSHEndpoint",
    "ConnFactory",
    "connect",
    "connector",
    "valid_node_name",
    "load_nodes_map",
]

ConnFactory = Callable[[], Awaitable[Any]]
"""``async () -> asyncssh.SSHClientConnection``: how a follower or reader gets a connection."""

_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


class RemoteUnavailable(ReviveError):
    """The remote host cannot be reached or used right now (refused, timed out, dropped, auth
    failed). Back off and try again; ``retry_after_s`` says when the next attempt will be made
    (``0`` = now)."""

    def __init__(self, message: str, host: str = "", retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.host = host
        self.retry_after_s = retry_after_s


class HostKeyRejected(RemoteUnavailable):
    """The server's host key is not the one pinned in the known_hosts file (unknown or changed).
    Retrying does not help: a person must check the key and add it."""


def valid_node_name(node: str) -> bool:
    """A Slurm-style node name (letters, digits, ``.``, ``_``, ``-``; no shell metacharacters)."""
    return isinstance(node, str) and bool(_NODE_RE.match(node))


@dataclass(frozen=True)
class SSHEndpoint:
    """Where and how to log in. ``key`` is key text (from ``SSHAccess.key_env``), never logged."""

    host: str
    port: int = 22
    user: str | None = None
    known_hosts: str | None = None
    """Path of the known_hosts file; ``None`` = ``~/.ssh/known_hosts``."""
    key_file: str | None = None
    key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 10.0
    pin_unknown_host: bool = False
    """Trust-on-first-use: a host with NO entry in known_hosts is accepted once and its key is
    appended to the file. A host whose pinned key differs is always refused."""
    keepalive_interval_s: float = 10.0
    keepalive_count_max: int = 3

    @classmethod
    def from_config(cls, ssh: Any, host: str | None = None, port: int | None = None,
                    pin_unknown_host: bool | None = None) -> SSHEndpoint:
        """From a ``revive.config.SSHAccess`` (``pin_unknown_host`` read when the model has it);
        ``host``/``port`` override (a compute node)."""
        return cls(
            host=host or ssh.host,
            port=port or ssh.port,
            user=ssh.user,
            known_hosts=ssh.known_hosts,
            key_file=ssh.key_file,
            key=ssh.private_key(),
            connect_timeout_s=ssh.connect_timeout_s,
            pin_unknown_host=bool(getattr(ssh, "pin_unknown_host", False)
                                  if pin_unknown_host is None else pin_unknown_host),
        )

    def with_host(self, host: str, port: int | None = None) -> SSHEndpoint:
        return replace(self, host=host, port=port or self.port)

    @property
    def label(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"

    @property
    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts or "~/.ssh/known_hosts").expanduser()

    @property
    def host_pattern(self) -> str:
        """How OpenSSH names this host in known_hosts."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


def _client_class(endpoint: SSHEndpoint, seen: dict):
    import asyncssh

    class _Client(asyncssh.SSHClient):
        # called only for a key that is not among the known_hosts keys for this host
        def validate_host_public_key(self, host: str, addr: str, port: int, key) -> bool:
            seen["key"] = key
            try:
                known = asyncssh.read_known_hosts(str(endpoint.known_hosts_path))
                pinned = known.match(host, addr or "", port if port != 22 else None)[0]
            except (OSError, ValueError, asyncssh.Error):
                pinned = []
            if pinned:
                seen["changed"] = True
                return False
            if endpoint.pin_unknown_host:
                seen["pin"] = key
                return True
            return False

    return _Client


def _fingerprint(key) -> str:
    try:
        return f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"
    except Exception:  # noqa: BLE001 - only for a message
        return "?"


def _pin(endpoint: SSHEndpoint, key) -> None:
    path = endpoint.known_hosts_path
    line = f"{endpoint.host_pattern} {key.export_public_key('openssh').decode().strip()}\n"
    append_line(path, line, mode=0o600)


async def connect(endpoint: SSHEndpoint, tunnel: Any = None):
    """One SSH connection to ``endpoint`` (through the connection ``tunnel`` when given: the
    login node as a jump host). Raises :class:`HostKeyRejected` or :class:`RemoteUnavailable`."""
    import asyncssh

    where = endpoint.label + (" (through the login node)" if tunnel is not None else "")
    kh = endpoint.known_hosts_path
    if not kh.is_file():
        if not endpoint.pin_unknown_host:
            raise HostKeyRejected(f"ssh {where}: known_hosts file {kh} does not exist; "
                                  "add the host key to it (or pin it on first use)", endpoint.host)
        kh.parent.mkdir(parents=True, exist_ok=True)
        kh.touch(mode=0o600)
    seen: dict = {}
    kwargs: dict = {
        "port": endpoint.port,
        "known_hosts": str(kh),
        "client_factory": _client_class(endpoint, seen),
        "keepalive_interval": endpoint.keepalive_interval_s,
        "keepalive_count_max": endpoint.keepalive_count_max,
        "agent_path": None,
    }
    if endpoint.user:
        kwargs["username"] = endpoint.user
    if endpoint.key:
        kwargs["client_keys"] = [asyncssh.import_private_key(endpoint.key)]
    elif endpoint.key_file:
        kwargs["client_keys"] = [endpoint.key_file]
    else:
        kwargs.pop("agent_path")  # asyncssh defaults: agent, ~/.ssh/id_*
    if tunnel is not None:
        kwargs["tunnel"] = tunnel
    try:
        conn = await asyncio.wait_for(asyncssh.connect(endpoint.host, **kwargs), endpoint.connect_timeout_s)
    except asyncssh.HostKeyNotVerifiable as e:
        key = seen.get("key")
        fp = f" {_fingerprint(key)}" if key is not None else ""
        what = "does not match the key pinned" if seen.get("changed") else "is not"
        raise HostKeyRejected(
            f"ssh {where}: host key{fp} for {endpoint.host_pattern} {what} in {kh}; refusing to "
            f"connect (check the key out of band, then add it: {e})", endpoint.host) from None
    except asyncssh.PermissionDenied as e:
        raise RemoteUnavailable(f"ssh {where}: authentication failed ({e.reason or e})", endpoint.host) from None
    except asyncssh.ChannelOpenError as e:
        raise RemoteUnavailable(f"ssh {where}: the login node could not open the tunnel: {e.reason or e}",
                                endpoint.host) from None
    except TimeoutError:
        raise RemoteUnavailable(f"ssh {where}: no answer in {endpoint.connect_timeout_s:g}s", endpoint.host) from None
    except (OSError, asyncssh.Error) as e:
        raise RemoteUnavailable(f"ssh {where}: {getattr(e, 'strerror', None) or e}", endpoint.host) from None
    if "pin" in seen:
        try:
            _pin(endpoint, seen["pin"])
        except OSError as e:
            conn.close()
            raise RemoteUnavailable(f"ssh {where}: cannot pin host key into {kh}: {e.strerror}", endpoint.host) from None
    return conn


def connector(endpoint: SSHEndpoint, tunnel: ConnFactory | None = None) -> ConnFactory:
    """A connection factory for :class:`~revive.remote.follow.RemoteFollower` and friends."""

    async def factory():
        return await connect(endpoint, tunnel=(await tunnel()) if tunnel else None)

    factory.label = endpoint.label  # type: ignore[attr-defined]
    return factory


def load_nodes_map(path: str | os.PathLike[str]) -> dict[str, tuple[str, int]]:
    """``nodes.yaml`` as written by ``scripts/sshd-up.sh``: ``{node: (host, port)}``."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ReviveError(f"{path}: cannot read nodes map: {e}") from None
    nodes = data.get("nodes") if isinstance(data, Mapping) else None
    if not isinstance(nodes, Mapping):
        raise ReviveError(f"{path}: no 'nodes' mapping")
    out: dict[str, tuple[str, int]] = {}
    for name, v in nodes.items():
        if not valid_node_name(str(name)) or not isinstance(v, Mapping) or "host" not in v:
            raise ReviveError(f"{path}: bad entry for node {name!r}")
        out[str(name)] = (str(v["host"]), int(v.get("port", 22)))
    return out
