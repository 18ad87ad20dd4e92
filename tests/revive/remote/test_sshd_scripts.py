"""scripts/sshd-up.sh and sshd-down.sh: idempotent, busy port named, files it writes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SSHD_UP = Path(__file__).resolve().parents[3] / "scripts" / "sshd-up.sh"


def test_up_again_reuses_the_running_sshd(login_node):
    pid = login_node.listener_pid()
    p = login_node.up()
    assert "already running" in p.stdout and login_node.listener_pid() == pid
    s = login_node.ssh_dir
    cfg = (s / "sshd_config").read_text()
    for want in (f"Port {login_node.port}", "ListenAddress 127.0.0.1", "PasswordAuthentication no",
                 "PermitRootLogin prohibit-password", "UsePAM no", "PermitUserEnvironment no",
                 f"PidFile {s}/sshd.pid", f"AuthorizedKeysFile {s}/authorized_keys"):
        assert want in cfg.splitlines()
    assert (s / "known_hosts").read_text().startswith(f"[127.0.0.1]:{login_node.port} ssh-ed25519 ")
    assert oct((s / "id_ed25519").stat().st_mode & 0o777) == "0o600"
    # started by absolute path, in the foreground (-D), with its own config (sshd rewrites its title)
    title = open(f"/proc/{pid}/cmdline", "rb").read().decode()
    assert os.readlink(f"/proc/{pid}/exe").endswith("/sshd")
    assert f"sshd: /usr/sbin/sshd -D -f {s}/sshd_config -E {s}/sshd.log" in title or \
        f" -D -f {s}/sshd_config" in title


def test_busy_port_is_reported_by_name(login_node, tmp_path):
    env = {**os.environ, "REVIVE_CLUSTER_DIR": str(tmp_path / "other"), "REVIVE_SSHD_PORT": str(login_node.port),
           "REVIVE_INSTALL": "0"}
    p = subprocess.run([str(SSHD_UP)], env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert p.returncode != 0
    assert f"port {login_node.port} on 127.0.0.1 is already in use" in p.stderr and "REVIVE_SSHD_PORT" in p.stderr


def test_refuses_a_foreign_dir(tmp_path):
    d = tmp_path / "foreign"
    d.mkdir()
    (d / "precious.txt").write_text("x")
    env = {**os.environ, "REVIVE_CLUSTER_DIR": str(d), "REVIVE_INSTALL": "0"}
    p = subprocess.run([str(SSHD_UP)], env=env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and "refusing" in p.stderr
    assert sorted(x.name for x in d.iterdir()) == ["precious.txt"]
