"""SSHRunner against a real in-process asyncssh server on 127.0.0.1 (generated keys).

The test server plays sshd: it hands the received command line to ``/bin/sh -c`` (as sshd hands
it to the user's shell), which is exactly what makes ``SSHRunner``'s ``shlex.join`` quoting
necessary.
"""

from __future__ import annotations

import asyncio

import asyncssh
import pytest

from revive.errors import SchedulerUnavailable
from revive.scheduler.runners import SSHRunner


async def _handle(process: asyncssh.SSHServerProcess) -> None:
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", process.command or "true",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    data = await process.stdin.read()
    out, err = await proc.communicate(data.encode() if data else None)
    process.stdout.write(out.decode())
    process.stderr.write(err.decode())
    process.exit(proc.returncode or 0)


@pytest.fixture
async def ssh_server(tmp_path):
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = tmp_path / "id_ed25519"
    client_key.write_private_key(str(key_file))
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())
    server = await asyncssh.create_server(
        asyncssh.SSHServer, "127.0.0.1", 0,
        server_host_keys=[host_key], authorized_client_keys=authorized,
        process_factory=_handle, encoding="utf-8",
    )
    port = server.sockets[0].getsockname()[1]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}")
    yield {"port": port, "key_file": str(key_file), "known_hosts": str(known_hosts),
           "client_key": client_key}
    server.close()
    await server.wait_closed()


async def test_runs_argv_with_quoting_env_and_stdin(ssh_server):
    r = SSHRunner("127.0.0.1", user="revive", port=ssh_server["port"],
                  known_hosts=ssh_server["known_hosts"], key_file=ssh_server["key_file"],
                  slurm_conf="/etc/slurm/my conf")
    try:
        rc, out, err = await r.run(["printf", "%s|", "a b", "$HOME", "it's; rm -rf /"])
        assert (rc, out, err) == (0, "a b|$HOME|it's; rm -rf /|", "")
        rc, out, _ = await r.run(["sh", "-c", 'echo "$SLURM_CONF/$SLURMD_NODENAME"'],
                                 env={"SLURMD_NODENAME": "node2"})
        assert out == "/etc/slurm/my conf/node2\n"
        rc, out, _ = await r.run(["cat"], input="script body\n")
        assert out == "script body\n"
        rc, out, err = await r.run(["sh", "-c", "echo oops >&2; exit 3"])
        assert (rc, err) == (3, "oops\n")
    finally:
        await r.close()


async def test_key_from_env_text(ssh_server):
    key_text = ssh_server["client_key"].export_private_key().decode()
    r = SSHRunner("127.0.0.1", port=ssh_server["port"], known_hosts=ssh_server["known_hosts"],
                  key=key_text)
    try:
        assert (await r.run(["echo", "ok"]))[:2] == (0, "ok\n")
    finally:
        await r.close()


async def test_unknown_host_key_is_rejected(ssh_server, tmp_path):
    other = tmp_path / "other_known_hosts"
    other.write_text(f"[127.0.0.1]:{ssh_server['port']} "
                     f"{asyncssh.generate_private_key('ssh-ed25519').export_public_key().decode()}")
    r = SSHRunner("127.0.0.1", port=ssh_server["port"], known_hosts=str(other),
                  key_file=ssh_server["key_file"])
    with pytest.raises(SchedulerUnavailable):
        await r.run(["true"])


async def test_connection_refused_is_unavailable(ssh_server):
    r = SSHRunner("127.0.0.1", port=1, key_file=ssh_server["key_file"], connect_timeout_s=5)
    with pytest.raises(SchedulerUnavailable, match="127.0.0.1:1"):
        await r.run(["true"])
