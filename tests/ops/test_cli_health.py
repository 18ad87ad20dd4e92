"""``revive health …`` as a real subprocess: help, a bad policy refused before anything is sent,
and the schedule created, updated and deleted on a dev server."""

from __future__ import annotations

import asyncio
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


@pytest.mark.temporal
async def test_a_manual_pass_waits_for_the_running_scheduled_pass_instead_of_starting_a_second(local_env, tmp_path):
    """Two passes at once would run up to 2 x max_concurrent node checks. Nobody polls this task
    queue, so the triggered scheduled pass stays running while `revive health run` is asked."""
    name, tq = f"cli2-{tmp_path.name[-6:]}", f"tq-{tmp_path.name[-6:]}"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: {name}\naudit_file: {tmp_path}/a.jsonl\nstate_dir: {tmp_path}/s\n"
                   f"temporal: {{address: '{local_env.client.service_client.config.target_host}', task_queue: {tq}}}\n")
    pol = tmp_path / "p.yaml"
    pol.write_text("return_to_service: {enabled: true, interval: 3600, command: ['true']}\n")
    assert revive("health", "schedule", "--config", str(cfg), "--policy", str(pol)).returncode == 0
    handle = local_env.client.get_schedule_handle(ids.rts_schedule_id(name, tq))
    try:
        await handle.trigger()
        running: list[str] = []
        for _ in range(100):
            running = [a.workflow_id for a in (await handle.describe()).info.running_actions]
            if running:
                break
            await asyncio.sleep(0.1)
        assert running, "the triggered pass never showed as running"
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "health", "run", "--config", str(cfg),
                                 "--policy", str(pol)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        said = ""
        try:
            while "a second one" not in said:  # rich wraps the line at 80 columns
                line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout=60)
                assert line, said
                said += line
        finally:
            proc.kill()
            proc.wait()
        assert "a scheduled pass is running" in said and running[0] in "".join(said.split()), said
        # and no second pass was started under the manual run's id
        manual = [wf.id async for wf in local_env.client.list_workflows(f"WorkflowId='{ids.rts_run_id(name, tq)}'")]
        assert manual == []
    finally:
        for wid in running:
            await local_env.client.get_workflow_handle(wid).terminate("test over")
        await handle.delete()
