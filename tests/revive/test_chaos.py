"""The test-only chaos hook (revive/chaos.py): inert without its env var, fires once per marker dir,
really SIGKILLs its own process, and a pause waits for the harness's go file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from revive import chaos

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_a_point_is_inert_when_the_hook_is_not_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIVE_CHAOS")}
    env["PYTHONPATH"] = str(ROOT)  # this checkout, run from an empty dir (a marker would land there)
    r = subprocess.run([sys.executable, "-c", "from revive import chaos; chaos.point('gather'); print('alive')"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "alive"
    assert list(tmp_path.iterdir()) == []  # no marker written


def test_the_named_point_kills_its_process_once_and_other_points_pass(tmp_path: Path) -> None:
    env = {chaos.ENV_HOOK: "after-drain", chaos.ENV_DIR: str(tmp_path)}
    code = "from revive import chaos; chaos.point('gather'); print('past gather', flush=True); chaos.point('after-drain'); print('past drain')"
    first = _run(code, env)
    assert first.returncode == -signal.SIGKILL and first.stdout == "past gather\n"
    marker = json.loads((tmp_path / "after-drain.fired").read_text())
    assert marker["point"] == "after-drain" and marker["action"] == "kill"
    again = _run(code, env)  # the restarted process passes the point
    assert again.returncode == 0 and again.stdout.splitlines() == ["past gather", "past drain"]


def test_no_marker_dir_never_kills(tmp_path: Path) -> None:
    r = _run("from revive import chaos; chaos.point('gather'); print('alive')",
             {chaos.ENV_HOOK: "gather", chaos.ENV_DIR: str(tmp_path / "missing")})
    assert r.returncode == 0 and r.stdout.strip() == "alive"


async def test_pause_waits_for_the_go_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(chaos.ENV_HOOK, "before-requeue")
    monkeypatch.setenv(chaos.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(chaos.ENV_ACTION, "pause")
    task = asyncio.create_task(chaos.apoint(chaos.Point.before_requeue))
    for _ in range(50):
        if (tmp_path / "before-requeue.fired").exists():
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    assert not task.done()  # held at the point while the harness injects its fault
    (tmp_path / "before-requeue.go").write_text("go\n")
    await asyncio.wait_for(task, 5)
    await chaos.apoint(chaos.Point.before_requeue)  # fired already: passes at once
