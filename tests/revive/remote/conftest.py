"""A REAL OpenSSH login node for the ``revive.remote`` tests.

``login_node`` (session scope) runs ``scripts/sshd-up.sh`` on a free port with its own
``REVIVE_CLUSTER_DIR`` under pytest's tmp dir, and ``scripts/sshd-down.sh --purge`` at the end.
When sshd cannot be installed or started the fixture FAILS (never skips), with the script's
output. ``REVIVE_INSTALL=0`` in the environment is passed on (no apt-get).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from revive.remote import SSHEndpoint, connector, load_nodes_map

ROOT = Path(__file__).resolve().parents[3]
SSHD_UP = ROOT / "scripts" / "sshd-up.sh"
SSHD_DOWN = ROOT / "scripts" / "sshd-down.sh"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LoginNode:
    dir: Path
    """The REVIVE_CLUSTER_DIR given to the scripts."""
    ssh_dir: Path
    port: int
    env: dict
    up_output: str

    @property
    def endpoint(self) -> SSHEndpoint:
        return SSHEndpoint("127.0.0.1", self.port, user=_user(), known_hosts=str(self.ssh_dir / "known_hosts"),
                           key_file=str(self.ssh_dir / "id_ed25519"), connect_timeout_s=10)

    def connector(self, **changes):
        from dataclasses import replace

        return connector(replace(self.endpoint, **changes))

    @property
    def nodes(self) -> dict[str, tuple[str, int]]:
        return load_nodes_map(self.ssh_dir / "nodes.yaml")

    @property
    def bin(self) -> Path:
        """First on the remote user's PATH (stand-in commands)."""
        return self.ssh_dir / "bin"

    def listener_pid(self) -> int:
        return int((self.ssh_dir / "sshd.pid").read_text().strip())

    def session_pids(self) -> list[int]:
        """Per-connection sshd processes (children of the listener)."""
        lp = self.listener_pid()
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == lp:
                out.append(int(stat.parent.name))
        return out

    def kill_sessions(self) -> list[int]:
        """Drop every live SSH connection to this sshd (the listener stays)."""
        pids = self.session_pids()
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def run_script(self, script: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), *args], env=self.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)

    def down(self) -> subprocess.CompletedProcess:
        return self.run_script(SSHD_DOWN)

    def up(self) -> subprocess.CompletedProcess:
        p = self.run_script(SSHD_UP)
        if p.returncode != 0:
            raise AssertionError(f"sshd-up.sh exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture(scope="session")
def login_node(tmp_path_factory) -> LoginNode:
    d = tmp_path_factory.mktemp("login-node") / "cluster"
    port = _free_port()
    env = {**os.environ, "REVIVE_CLUSTER_DIR": str(d), "REVIVE_SSHD_PORT": str(port), "REVIVE_SLURM_NODES": "4"}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([str(SSHD_UP)], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=300, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"scripts/sshd-up.sh did not finish in 300 s: {e.stdout!s}{e.stderr!s}")
    if proc.returncode != 0:
        pytest.fail(f"scripts/sshd-up.sh exited {proc.returncode}; no login node for the SSH tests "
                    f"(openssh-server missing and not installable?):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    node = LoginNode(dir=d, ssh_dir=d / "ssh", port=port, env=env, up_output=proc.stdout)
    print(f"\nlogin node up in {time.monotonic() - t0:.1f}s on 127.0.0.1:{port}")
    yield node
    down = subprocess.run([str(SSHD_DOWN), "--purge"], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert down.returncode == 0, down.stdout + down.stderr
