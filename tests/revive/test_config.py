import os
import textwrap

import pytest

from revive.config import ClusterConfig, load_cluster_config, parse_cluster_config
from revive.errors import ConfigError

BASE = {"name": "c1", "audit_file": "/tmp/a.jsonl", "state_dir": "/tmp/s"}


def write(tmp_path, text):
    p = tmp_path / "cluster.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_full_config(tmp_path, monkeypatch):
    tok = tmp_path / "tok"
    tok.write_text("jwt-abc\n")
    p = write(tmp_path, f"""
        name: prod-a
        slurm_conf: /etc/slurm/slurm.conf
        scheduler:
          mode: ssh
          ssh: {{host: login1, user: revive, port: 2222, known_hosts: /etc/revive/known_hosts, key_env: REVIVE_SSH_KEY}}
          rest: {{url: "http://127.0.0.1:6820", user: root, token_file: {tok}}}
        logs: {{poll_interval_s: 0.25, over_ssh: true}}
        kernel_log: {{command: [journalctl, -k, --no-pager, -o, short-iso], over_ssh: true}}
        temporal:
          address: temporal.example:7233
          namespace: revive
          tls: {{cert_file: /c.pem, key_file: /k.pem, ca_file: /ca.pem}}
        audit_file: /var/lib/revive/audit.jsonl
        state_dir: /var/lib/revive
        ip_to_node: {{10.0.0.12: node2}}
        partitions: [gpu, debug]
    """)
    cfg = load_cluster_config(p)
    assert isinstance(cfg, ClusterConfig)
    assert cfg.scheduler.mode == "ssh" and cfg.scheduler.ssh.port == 2222
    assert cfg.scheduler.rest.token() == "jwt-abc"
    assert cfg.kernel_log.command_for("node2")[0] == "journalctl" and cfg.kernel_log.over_ssh
    assert cfg.temporal.tls.ca_file == "/ca.pem"
    assert cfg.ip_to_node == {"10.0.0.12": "node2"}
    assert cfg.partitions == ["gpu", "debug"]
    monkeypatch.setenv("REVIVE_SSH_KEY", "KEYTEXT")
    assert cfg.scheduler.ssh.private_key() == "KEYTEXT"


def test_minimal_and_path_template():
    cfg = parse_cluster_config({**BASE, "kernel_log": {"path_template": "/d/nodes/{node}/kern.log"}})
    assert cfg.scheduler.mode == "local" and cfg.partitions is None
    assert cfg.kernel_log.path_for("node3") == "/d/nodes/node3/kern.log"
    assert cfg.temporal.address == "127.0.0.1:7233"


@pytest.mark.parametrize(
    "data, field",
    [
        ({"audit_file": "/a", "state_dir": "/s"}, "name"),
        ({**BASE, "scheduler": {"mode": "slurmrestd"}}, "scheduler.mode"),
        ({**BASE, "scheduler": {"mode": "ssh"}}, "scheduler"),
        ({**BASE, "scheduler": {"rest": {"url": "http://x", "token_file": "/t", "token_env": "T"}}},
         "scheduler.rest"),
        ({**BASE, "scheduler": {"rest": {"url": "http://x", "token": "inline-secret"}}},
         "scheduler.rest.token"),
        ({**BASE, "scheduler": {"mode": "ssh", "ssh": {"host": "h", "password": "x"}}},
         "scheduler.ssh.password"),
        ({**BASE, "kernel_log": {"path_template": "/var/log/kern.log"}}, "kernel_log"),
        ({**BASE, "kernel_log": {}}, "kernel_log"),
        ({**BASE, "temporal": {"tls": {"cert_file": "/c"}}}, "temporal.tls.key_file"),
        ({**BASE, "logs": {"poll_interval_s": 5}}, "logs.poll_interval_s"),
    ],
)
def test_errors_name_the_field(data, field):
    with pytest.raises(ConfigError) as e:
        parse_cluster_config(data)
    assert field in str(e.value)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_cluster_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_cluster_config(write(tmp_path, "name: [unclosed\n"))
    with pytest.raises(ConfigError, match="mapping"):
        load_cluster_config(write(tmp_path, "- a\n- b\n"))


def test_secret_errors(monkeypatch):
    cfg = parse_cluster_config({**BASE, "scheduler": {"rest": {"url": "http://x", "token_env": "NOPE_T"}}})
    monkeypatch.delenv("NOPE_T", raising=False)
    with pytest.raises(ConfigError, match="NOPE_T"):
        cfg.scheduler.rest.token()


@pytest.mark.slurm
def test_cluster_up_writes_a_valid_config(slurm_cluster):
    assert slurm_cluster.local_testbed
    assert slurm_cluster.kernel_log.path_template.endswith("/nodes/{node}/kern.log")
    assert slurm_cluster.scheduler.rest.token()
    for n in ("node1", "node2", "node3", "node4"):
        assert os.path.isfile(slurm_cluster.kernel_log.path_for(n))
