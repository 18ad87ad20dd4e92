"""``revive config check`` on the testbed's configs: local access, slurmrestd reads, and the SSH login node."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tests.fixtures_slurm import ROOT

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]


def test_config_check_tries_every_endpoint(cluster, local_env, tmp_path) -> None:
    target = local_env.client.service_client.config.target_host
    data = cluster.model_dump(mode="json", exclude_none=True)
    data["temporal"]["address"] = target
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(yaml.safe_dump(data))
    r = subprocess.run([sys.executable, "-m", "cli.main", "config", "check", "--config", str(cfg)], cwd=ROOT,
                       capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "250"})
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    for row in ("slurm cli", "job list", "temporal", "kernel log"):
        assert row in out
    assert "FAIL" not in out
    if cluster.scheduler.mode == "ssh":
        assert "ssh root@127.0.0.1" in out and "known_hosts" in out
    if cluster.scheduler.read == "rest":
        assert "reads from slurmrestd" in out
    assert "eyJ" not in out  # the JWT is resolved, never printed
