"""How scheduler commands are run: locally (asyncio subprocess) or on a login node over SSH.

Always argv lists, never a shell on this side. ``SSHRunner`` quotes the argv with
``shlex.join`` because the remote sshd hands the command line to the user's shell.

A transport failure (binary missing, SSH connection refused, timeout) raises
``SchedulerUnavailable``; a command that ran and failed is reported through its return code,
and the caller (``SlurmCLI``) decides what the failure means.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from revive.errors import SchedulerUnavailable

__all__ = ["CommandRunner", "LocalRunner", "SSHRunner"]


@runtime_checkable
class CommandRunner(Protocol):
    async def run(
        self,
        argv: Sequence[str],
        input: str | None = None,
        timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> tuple[int, str, str]:
        """Run ``argv``; return ``(returncode, stdout, stderr)``. ``env`` adds variables."""
        ...


class LocalRunner:
    """asyncio subprocess on this machine. ``slurm_conf`` is exported as ``SLURM_CONF``."""

    def __init__(self, slurm_conf: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.slurm_conf = slurm_conf
        self.base_env = dict(env or {})

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("SLURM_JWT", None)  # a stray token switches the Slurm clients to JWT auth
        env.update(self.base_env)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        if extra:
            env.update(extra)
        return env

    async def run(
        self,
        argv: Sequence[str],
        input: str | None = None,
        timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> tuple[int, str, str]:
        argv = [str(a) for a in argv]
        if not argv:
            raise ValueError("empty argv")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env(env),
                start_new_session=True,
            )
        except FileNotFoundError as e:
            raise SchedulerUnavailable(f"{argv[0]}: command not found ({e.strerror})") from e
        except PermissionError as e:
            raise SchedulerUnavailable(f"{argv[0]}: not executable ({e.strerror})") from e
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(input.encode() if input is not None else None), timeout_s
            )
        except (TimeoutError, asyncio.CancelledError) as e:
            if proc.returncode is None:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
                await proc.wait()
            if isinstance(e, asyncio.CancelledError):
                raise
            raise SchedulerUnavailable(f"{shlex.join(argv)} timed out after {timeout_s:g}s") from e
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


class SSHRunner:
    """Runs commands on one host over SSH (asyncssh). One connection, opened lazily and reused.

    ``key_file`` / ``key`` (key text, e.g. read from an env var by the config) select the
    client key; with neither, asyncssh's defaults (agent, ~/.ssh/id_*) apply. ``known_hosts``
    is a file path; ``known_hosts=None`` uses ~/.ssh/known_hosts. Host keys are always checked.
    ``env`` values are passed as ``VAR=value`` assignments before the command (via ``env``), so
    they work without the server's ``AcceptEnv``.
    """

    def __init__(
        self,
        host: str,
        user: str | None = None,
        port: int = 22,
        known_hosts: str | None = None,
        key_file: str | None = None,
        key: str | None = None,
        connect_timeout_s: float = 10.0,
        slurm_conf: str | None = None,
    ) -> None:
        self.host, self.user, self.port = host, user, port
        self.known_hosts, self.key_file, self._key = known_hosts, key_file, key
        self.connect_timeout_s = connect_timeout_s
        self.slurm_conf = slurm_conf
        self._conn = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_config(cls, ssh, slurm_conf: str | None = None, host: str | None = None,  # noqa: ANN001
                    port: int | None = None) -> SSHRunner:
        """From a ``revive.config.SSHAccess``; ``host``/``port`` override (e.g. a compute node)."""
        return cls(
            host=host or ssh.host,
            user=ssh.user,
            port=port or ssh.port,
            known_hosts=ssh.known_hosts,
            key_file=ssh.key_file,
            key=ssh.private_key(),
            connect_timeout_s=ssh.connect_timeout_s,
            slurm_conf=slurm_conf,
        )

    async def _connect(self):
        import asyncssh

        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            kwargs: dict = {"port": self.port, "known_hosts": self.known_hosts or ()}
            if self.known_hosts is None:
                kwargs.pop("known_hosts")  # asyncssh default: ~/.ssh/known_hosts
            if self.user:
                kwargs["username"] = self.user
            if self._key:
                kwargs["client_keys"] = [asyncssh.import_private_key(self._key)]
            elif self.key_file:
                kwargs["client_keys"] = [self.key_file]
            try:
                self._conn = await asyncio.wait_for(
                    asyncssh.connect(self.host, **kwargs), self.connect_timeout_s
                )
            except (TimeoutError, OSError, asyncssh.Error) as e:
                raise SchedulerUnavailable(
                    f"ssh {self.user + '@' if self.user else ''}{self.host}:{self.port}: {e}"
                ) from e
            return self._conn

    def command_line(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        full_env = {}
        if self.slurm_conf:
            full_env["SLURM_CONF"] = self.slurm_conf
        full_env.update(env or {})
        prefix = ["env", *(f"{k}={v}" for k, v in full_env.items())] if full_env else []
        return shlex.join([*prefix, *[str(a) for a in argv]])

    async def run(
        self,
        argv: Sequence[str],
        input: str | None = None,
        timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> tuple[int, str, str]:
        import asyncssh

        if not argv:
            raise ValueError("empty argv")
        conn = await self._connect()
        cmd = self.command_line(argv, env)
        try:
            res = await asyncio.wait_for(
                # no input: stdin is /dev/null (EOF at once), as LocalRunner does
                conn.run(cmd, input=input, check=False)
                if input
                else conn.run(cmd, stdin=asyncssh.DEVNULL, check=False),
                timeout_s,
            )
        except TimeoutError as e:
            raise SchedulerUnavailable(f"ssh {self.host}: {cmd} timed out after {timeout_s:g}s") from e
        except (OSError, asyncssh.Error) as e:
            self._conn = None
            raise SchedulerUnavailable(f"ssh {self.host}: {e}") from e
        rc = res.exit_status if res.exit_status is not None else 255
        out = res.stdout if isinstance(res.stdout, str) else (res.stdout or b"").decode(errors="replace")
        err = res.stderr if isinstance(res.stderr, str) else (res.stderr or b"").decode(errors="replace")
        return rc, out or "", err or ""

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            await self._conn.wait_closed()
            self._conn = None
