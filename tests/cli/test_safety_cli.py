"""``revive mode set|show`` and ``revive policy apply|show`` as an operator runs them (real
subprocesses) against the dev server, with a worker serving the cluster's guard; a decision for an
unknown incident; ``revive config check``'s rows for Temporal secrets (paths and lengths only)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.worker import Worker

from activities.guard import guard_settings
from revive.config import load_cluster_config
from revive.config_check import _secret_rows
from workflows.guard import ClusterGuardWorkflow

ROOT = Path(__file__).resolve().parents[2]


async def revive(*args: str) -> tuple[int, str, str]:
    """The CLI in a subprocess, without blocking the event loop the test's worker runs on."""
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "cli.main", *args, cwd=ROOT,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(), 120)
    return p.returncode or 0, out.decode(), err.decode()


def _config(tmp: Path, address: str, tq: str, extra: str = "") -> Path:
    cfg = tmp / "c.yaml"
    cfg.write_text(f"name: cli\naudit_file: {tmp}/a.jsonl\nstate_dir: {tmp}/s\n"
                   f"temporal: {{address: '{address}', task_queue: '{tq}'{extra}}}\n")
    return cfg


@pytest.mark.temporal
async def test_an_operator_sets_the_mode_and_applies_a_policy_through_the_guard(local_env, tmp_path):
    tq = f"cli-{uuid.uuid4().hex[:8]}"
    cfg = _config(tmp_path, local_env.client.service_client.config.target_host, tq)
    good = tmp_path / "policy.yaml"
    good.write_text("name: canary\nmode: observe\nbudgets: {max_requeues_per_job: 2}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: sometimes\n")
    async with Worker(local_env.client, task_queue=tq, workflows=[ClusterGuardWorkflow]):
        rc, out, err = await revive("mode", "show", "-c", str(cfg))
        assert rc == 0 and "no mode set in the guard" in out, (out, err)
        rc, out, err = await revive("mode", "set", "auto", "--partition", "gpu", "--as", "oncall-alice",
                                    "--note", "canary week", "--update-id", "m-1", "-c", str(cfg))
        assert rc == 0 and "mode auto for partition gpu (canary week)" in out, (out, err)
        rc, out, _ = await revive("mode", "set", "auto", "--partition", "gpu", "--as", "oncall-alice",
                                  "--update-id", "m-1", "-c", str(cfg))
        assert rc == 0 and "already applied" in out  # a retried call with the same id applies once
        rc, out, err = await revive("mode", "show", "-c", str(cfg))
        assert rc == 0 and "partition gpu" in out and "oncall-alice" in out and "auto" in out, (out, err)

        rc, out, err = await revive("policy", "apply", str(good), "--as", "oncall-alice", "-c", str(cfg))
        assert rc == 0 and "policy 'canary' applied as version 1" in out, (out, err)
        rc, out, err = await revive("policy", "apply", str(bad), "--as", "oncall-alice", "-c", str(cfg))
        assert rc == 2 and "mode" in err and "invalid policy" in err, (out, err)
        rc, out, err = await revive("policy", "show", "-c", str(cfg))
        assert rc == 0 and "version 1" in out and '"max_requeues_per_job": 2' in out, (out, err)

        rc, out, err = await revive("mode", "set", "yolo", "--as", "x", "-c", str(cfg))
        assert rc == 2 and "mode must be one of" in err
        rc, out, err = await revive("mode", "set", "auto", "-c", str(cfg), "--as", "")
        assert rc == 2 and "--as" in err
        s = await guard_settings(local_env.client, "cli", tq)
    assert s is not None and s.policy_version == 1 and set(s.modes) == {"gpu"}


@pytest.mark.temporal
async def test_a_decision_for_an_unknown_incident_is_a_clear_error(local_env, tmp_path):
    cfg = _config(tmp_path, local_env.client.service_client.config.target_host, "revive")
    for verb in ("approve", "reject"):
        rc, out, err = await revive(verb, "cli-999-nosubmit-a0-gpu", "--as", "alice", "-c", str(cfg))
        assert rc == 2 and "no incident 'cli-999-nosubmit-a0-gpu'" in err, (verb, out, err)


def test_config_check_shows_temporal_secret_paths_and_lengths_never_the_content(tmp_path):
    key = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjbGkifQ.c2lnbmF0dXJl"
    (tmp_path / "api.key").write_text(key)
    (tmp_path / "client.key").write_text("-----BEGIN PRIVATE KEY-----\nTOPSECRETKEYBYTES\n-----END PRIVATE KEY-----\n")
    (tmp_path / "client.pem").write_text("cert")
    cfg = load_cluster_config(_config(tmp_path, "127.0.0.1:1", "revive",
                                      f", api_key_file: '{tmp_path}/api.key', tls: {{cert_file: '{tmp_path}/client.pem', "
                                      f"key_file: '{tmp_path}/client.key', ca_file: '{tmp_path}/missing-ca.pem'}}"))
    rows = {r.what: r for r in _secret_rows(cfg)}
    assert rows["temporal api key"].ok and rows["temporal api key"].detail == f"{len(key)} bytes (not shown)"
    assert rows["temporal tls key"].ok and not rows["temporal tls ca"].ok
    shown = " ".join(f"{r.target} {r.detail}" for r in rows.values())
    assert key not in shown and "TOPSECRET" not in shown and str(tmp_path / "api.key") in shown
