"""The site: one object per concern, chosen from the cluster config (local, SSH, slurmrestd reads)."""

from __future__ import annotations

import pytest

from revive.config import parse_cluster_config
from revive.errors import ConfigError
from revive.scheduler.slurm_cli import SlurmCLI
from revive.scheduler.slurm_rest import SlurmREST
from revive.site import LocalKernelLogs, LocalLogs, RemoteKernelLogs, RemoteLogs, build_site

BASE = {"name": "c", "audit_file": "/tmp/a.jsonl", "state_dir": "/tmp/s"}
SSH = {"mode": "ssh", "ssh": {"host": "login1", "user": "revive", "key_file": "/k", "known_hosts": "/kh",
                              "node_hosts": {"node1": "10.0.0.1", "node2": "10.0.0.2:2200"}}}


def test_local_site_reads_local_files(tmp_path) -> None:
    site = build_site(parse_cluster_config({**BASE, "kernel_log": {"path_template": str(tmp_path / "{node}.kern")}}))
    assert isinstance(site.scheduler, SlurmCLI) and isinstance(site.logs, LocalLogs)
    assert isinstance(site.kernel, LocalKernelLogs) and not site.ssh


async def test_local_logs_seek_then_follow(tmp_path) -> None:
    log = tmp_path / "job.out"
    log.write_bytes(b"old 1\nold 2\npart")
    logs = LocalLogs().fresh()
    data, size = await logs.read_tail(str(log), 1 << 20)
    logs.seek(str(log), data, size)
    with log.open("ab") as f:
        f.write(b"ial\nnew\n")
    assert [t for _, t in await logs.read_new(str(log))] == ["partial", "new"]


async def test_local_kernel_log_missing_file_is_available_but_empty(tmp_path) -> None:
    k = LocalKernelLogs(str(tmp_path / "{node}.kern"))
    got = await k.read("node9")
    assert got.available and got.lines == []
    (tmp_path / "node1.kern").write_text("Dec  1 10:00:00 node1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, x\n")
    assert "Xid" in (await k.read("node1")).lines[0]
    assert not (await LocalKernelLogs(None).read("node1")).available  # nothing configured: unknown, not "no Xid"


def test_ssh_site_reaches_everything_through_the_login_node() -> None:
    cfg = parse_cluster_config({**BASE, "scheduler": SSH, "logs": {"over_ssh": True},
                                "kernel_log": {"path_template": "/var/log/kern.log", "over_ssh": True}})
    site = build_site(cfg)
    assert site.ssh and isinstance(site.logs, RemoteLogs) and isinstance(site.kernel, RemoteKernelLogs)
    assert cfg.scheduler.ssh.node_addresses() == {"node1": ("10.0.0.1", 22), "node2": ("10.0.0.2", 2200)}
    assert type(site.runner).__name__ == "SSHRunner"


def test_rest_reads_with_cli_actions(tmp_path) -> None:
    tok = tmp_path / "jwt"
    tok.write_text("secret-token\n")
    cfg = parse_cluster_config({**BASE, "scheduler": {"read": "rest", "rest": {"url": "http://127.0.0.1:6820",
                                                                               "token_file": str(tok)}}})
    site = build_site(cfg)
    assert isinstance(site.scheduler, SlurmREST) and isinstance(site.scheduler.cli, SlurmCLI)
    assert "secret-token" not in repr(cfg)  # the config holds the path, never the token


@pytest.mark.parametrize("bad, why", [
    ({"scheduler": {"read": "rest"}}, "read 'rest' needs a 'rest' section"),
    ({"kernel_log": {"command": ["dmesg", "-T"]}}, "command needs over_ssh"),
    ({"kernel_log": {"path_template": "/var/log/kern.log"}}, "must contain '{node}'"),
    ({"logs": {"offsets_file": "/x"}}, "offsets_file"),
])
def test_config_says_what_is_wrong(bad, why) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_cluster_config({**BASE, **bad})


async def test_loki_backend_feeds_the_monitor_and_the_evidence_window() -> None:
    """logs.backend: loki — one job's stream by its labels, read through the same LogReader the
    monitor, evidence and verify use (replies shaped as Loki's /loki/api/v1/query_range documents)."""
    import httpx

    from revive.site import StoreLogs

    seen: list[str] = []
    import time

    t0 = int((time.time() - 600) * 1e9)  # ten minutes ago, in ns

    def handler(req: httpx.Request) -> httpx.Response:
        assert req.url.path == "/loki/api/v1/query_range"
        seen.append(req.url.params["query"])
        start = int(req.url.params["start"])
        values = [[str(t0 + i * 1_000_000_000), f"[rank 0 host node1] iteration {i}/100"] for i in range(3)
                  if t0 + i * 1_000_000_000 >= start]
        if len(seen) > 1:
            values = [v for v in values if int(v[0]) > t0 + 1_000_000_000]
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "streams", "result": [
            {"stream": {"slurm_job_id": "42"}, "values": values}] if values else []}})

    cfg = parse_cluster_config({**BASE, "logs": {"backend": "loki", "url": "http://loki:3100",
                                                 "labels": {"slurm_job_id": "{job_id}"}}})
    logs = StoreLogs(cfg.logs, transport=httpx.MockTransport(handler))
    data, size = await logs.read_tail("/home/u/slurm-42.out", 1 << 20, job_id="42")
    assert data.decode().splitlines()[0].endswith("iteration 0/100") and size == len(data)
    assert 'slurm_job_id="42"' in seen[0]
    await logs.close()
