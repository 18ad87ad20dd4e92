"""``revive health …`` as a real subprocess: help, a bad policy refused before anything is sent,
and the schedule created, updated and deleted on a dev server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from revive import ids

ROOT = Path(__file__).resolve().parents[2]


def revive(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_help_lists_the_health_verbs():
    r = revive("health", "--help")
    assert r.returncode == 0, r.stderr
    for verb in ("schedule", "run", "status"):
        assert verb in r.stdout


def test_a_bad_return_to_service_section_is_refused_with_the_field(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: t\naudit_file: {tmp_path}/a.jsonl\nstate_dir: {tmp_path}/s\ntemporal: {{address: '127.0.0.1:1'}}\n")
    pol = tmp_path / "p.yaml"
    pol.write_text("return_to_service: {enabled: true, method: ssh, command: []}\n")
    r = revive("health", "run", "--config", str(cfg), "--policy", str(pol))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "return_to_service.method" in r.stderr and "return_to_service.command" in r.stderr


@pytest.mark.temporal
async def test_schedule_created_updated_deleted_from_the_cli(local_env, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: cli-{tmp_path.name[-6:]}\naudit_file: {tmp_path}/a.jsonl\nstate_dir: {tmp_path}/s\n"
                   f"temporal: {{address: '{local_env.client.service_client.config.target_host}'}}\n")
    pol = tmp_path / "p.yaml"
    pol.write_text("return_to_service: {enabled: true, interval: 120, command: ['true']}\n")
    r = revive("health", "schedule", "--config", str(cfg), "--policy", str(pol))
    assert r.returncode == 0 and "created: every 0:02:00" in r.stdout, (r.stdout, r.stderr)
    r = revive("health", "schedule", "--config", str(cfg), "--policy", str(pol))
    assert r.returncode == 0 and "updated" in r.stdout, (r.stdout, r.stderr)
    sid = ids.rts_schedule_id(f"cli-{tmp_path.name[-6:]}")
    desc = await local_env.client.get_schedule_handle(sid).describe()
    assert not desc.schedule.state.paused
    r = revive("health", "schedule", "--config", str(cfg), "--delete")
    assert r.returncode == 0 and "deleted" in r.stdout, (r.stdout, r.stderr)
