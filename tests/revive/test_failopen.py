"""Fail-open hold release: the detached guard releases a held job after its parent is killed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from revive.failopen import arm_hold_release, held_by_revive, hold_release_argv, release_stranded_holds
from revive.models import JobRecord

ROOT = Path(__file__).resolve().parents[2]

FAKE_SCONTROL = r"""#!/bin/sh
# records every call; `show job -o ID` prints $FAKE_DIR/job.txt
echo "$*" >> "$FAKE_DIR/calls.log"
if [ "$1" = "show" ]; then cat "$FAKE_DIR/job.txt"; exit 0; fi
if [ "$1" = "release" ]; then echo "JobId=$2 JobState=PENDING Reason=None" > "$FAKE_DIR/job.txt"; fi
exit 0
"""

HELD = "JobId=123 JobName=train JobState=PENDING Reason=job_requeued_in_held_state Priority=0\n"
RUNNING = "JobId=123 JobName=train JobState=RUNNING Reason=None\n"


@pytest.fixture
def fake_slurm(tmp_path):  # type: ignore[no-untyped-def]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    sc = bindir / "scontrol"
    sc.write_text(FAKE_SCONTROL)
    sc.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", FAKE_DIR=str(tmp_path))
    return tmp_path, env


def _wait_for(pred, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def _calls(d: Path) -> list[str]:
    f = d / "calls.log"
    return f.read_text().splitlines() if f.exists() else []


PARENT = textwrap.dedent("""
    import asyncio, sys, time
    sys.path.insert(0, {root!r})
    from revive.failopen import arm_hold_release
    try:
        from revive.scheduler.runners import LocalRunner
        runner = LocalRunner()
    except ImportError:
        runner = None
    pid = asyncio.run(arm_hold_release(runner, "123", {after}, None))
    print(pid, flush=True)
    time.sleep(600)   # "the worker": killed by the test
""")


def _spawn_parent(env: dict, after: float) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-c", PARENT.format(root=str(ROOT), after=after)],
                         env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stdout.readline().strip()  # type: ignore[union-attr]
    return p, int(line)


def test_guard_releases_held_job_after_parent_killed(fake_slurm) -> None:  # type: ignore[no-untyped-def]
    d, env = fake_slurm
    (d / "job.txt").write_text(HELD)
    parent, pid = _spawn_parent(env, after=1.5)
    assert pid > 0
    assert os.getsid(pid) != os.getsid(parent.pid)  # its own session: survives the worker's
    os.killpg(parent.pid, signal.SIGKILL)  # the worker and its whole process group die
    parent.wait()
    assert _calls(d) == []  # nothing before the delay
    assert _wait_for(lambda: "release 123" in _calls(d)), _calls(d)
    assert _calls(d) == ["show job -o 123", "release 123"]


def test_guard_leaves_unheld_job_alone(fake_slurm) -> None:  # type: ignore[no-untyped-def]
    d, env = fake_slurm
    (d / "job.txt").write_text(RUNNING)
    parent, pid = _spawn_parent(env, after=0.2)
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait()
    assert _wait_for(lambda: _calls(d) == ["show job -o 123"])
    time.sleep(0.5)
    assert _calls(d) == ["show job -o 123"]


def test_operator_script(fake_slurm) -> None:  # type: ignore[no-untyped-def]
    d, env = fake_slurm
    (d / "job.txt").write_text(HELD)
    out = subprocess.run([str(ROOT / "scripts/release-hold.sh"), "123", "0.2"], env=env,
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.strip().isdigit()
    assert _wait_for(lambda: "release 123" in _calls(d)), _calls(d)
    bad = subprocess.run([str(ROOT / "scripts/release-hold.sh"), "12;rm -rf /"], env=env,
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2


class _FailingRunner:
    async def run(self, argv, input=None, timeout_s=30.0, env=None):  # type: ignore[no-untyped-def]
        raise OSError("ssh: connection refused")


class _BadRC:
    async def run(self, argv, input=None, timeout_s=30.0, env=None):  # type: ignore[no-untyped-def]
        return 127, "", "setsid: not found"


async def test_arm_returns_zero_when_not_armed() -> None:
    assert await arm_hold_release(_FailingRunner(), "123", 5, None) == 0
    assert await arm_hold_release(_BadRC(), "123", 5, None) == 0
    with pytest.raises(ValueError):
        hold_release_argv("123; reboot", 5, None)
    argv = hold_release_argv("123_4", 2.5, "/etc/slurm/slurm.conf")
    assert argv[0] == "sh" and argv[-3:] == ["123_4", "2.5", "/etc/slurm/slurm.conf"]


class _Sched:
    def __init__(self, jobs: list[JobRecord]) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        self.released: list[str] = []

    async def list_jobs(self) -> list[JobRecord]:
        return list(self.jobs.values())

    async def release(self, job_id: str) -> list[str]:
        self.released.append(job_id)
        self.jobs[job_id] = self.jobs[job_id].model_copy(update={"hold": False, "reason": None})
        return ["scontrol", "release", job_id]


async def test_watchdog_releases_only_old_revive_holds() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    old = now - timedelta(minutes=10)
    s = _Sched([
        JobRecord(job_id="1", state="PENDING", hold=True, reason="job_requeued_in_held_state", submit_time=old),
        JobRecord(job_id="2", state="PENDING", hold=True, reason="job_requeued_in_held_state", submit_time=now),
        JobRecord(job_id="3", state="PENDING", hold=True, reason="JobHeldUser", submit_time=old),
        JobRecord(job_id="4", state="RUNNING", submit_time=old),
        JobRecord(job_id="5", state="PENDING", hold=True, reason="job_requeued_in_held_state"),
    ])
    assert held_by_revive(s.jobs["1"]) and not held_by_revive(s.jobs["3"])
    seen: dict[str, float] = {}
    assert await release_stranded_holds(s, 300, now=now, seen=seen) == ["1"]
    assert set(seen) == {"2", "5"}
    assert await release_stranded_holds(s, 300, now=now) == []
    # seen long enough ago → released even without a usable submit_time
    seen["5"] -= 1000
    assert await release_stranded_holds(s, 300, now=now, seen=seen) == ["5"]
    assert s.released == ["1", "5"]


async def test_guard_via_local_runner_inprocess(fake_slurm) -> None:  # type: ignore[no-untyped-def]
    from revive.scheduler import runners
    d, env = fake_slurm
    (d / "job.txt").write_text(HELD)
    runner = runners.LocalRunner(env={"PATH": env["PATH"], "FAKE_DIR": env["FAKE_DIR"]})
    pid = await arm_hold_release(runner, "123", 0.2, None)
    assert pid > 0
    for _ in range(100):
        if "release 123" in _calls(d):
            break
        await asyncio.sleep(0.1)
    assert "release 123" in _calls(d)
