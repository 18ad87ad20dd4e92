"""Cost of the checkpoint steps a runbook adds before its requeue (issue 9).

Usage: .venv/bin/python benchmarks/bench_checkpoint.py [--quick]

- ``checkpoint_loop`` on a log whose tail is the whole ``LOOP_TAIL_BYTES`` (1 MiB; two ranks of the
  demo job's lines), the worst case read per requeue;
- ``wait_for_save`` latency: from the saved line landing in the log to the activity returning
  (poll interval 0.1 s), over N saves.

    BENCH checkpoint loop_ms=… log_mib=… save_latency_p50_ms=… save_latency_max_ms=… saves=N
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.testing import ActivityEnvironment  # noqa: E402

from activities.checkpoint import LOOP_TAIL_BYTES, CheckpointActivities  # noqa: E402
from revive.models import JobIdentity, JobRecord, LoopCheckInput, SavePlan, WaitSaveInput  # noqa: E402
from revive.scheduler.fake import FakeScheduler  # noqa: E402
from tests.helpers.ckpt_logs import attempt, crash  # noqa: E402

JOB = JobIdentity(job_id="7", user="root", name="train", restart_count=1)


async def main(quick: bool) -> None:
    tmp = Path(tempfile.mkdtemp())
    log = tmp / "train-7.out"
    lines: list[str] = []
    size, n = 0, 0
    while size < LOOP_TAIL_BYTES:  # attempt 0: many iterations, a save every 100
        chunk = attempt(0, n + 1, n + 500, saves=tuple(range(n + 100, n + 501, 100)))[1 if n else 0:]
        lines += chunk
        size += sum(len(x) + 1 for x in chunk)
        n += 500
    lines += crash() + attempt(1, n + 1, n + 2, resumed=n) + crash()
    log.write_text("\n".join(lines) + "\n")
    sched = FakeScheduler(jobs=[JobRecord(job_id="7", name="train", user="root", state="RUNNING", restart_count=1)])
    ck = CheckpointActivities(sched)
    t = time.perf_counter()
    v = await ck.checkpoint_loop(LoopCheckInput(incident_id="b", cluster="fake", job=JOB, log_path=str(log),
                                                category="crash"))
    loop_ms = (time.perf_counter() - t) * 1000
    assert v.suspect == n, v
    lat = []
    for i in range(3 if quick else 10):
        plan = SavePlan(signal="USR1", profile="revive_demo", log_offset=log.stat().st_size, restart_count=1)
        landed: list[float] = []

        async def save(it: int = n + 10 + i, landed: list[float] = landed) -> None:
            await asyncio.sleep(0.25)
            with log.open("a") as f:
                f.write(f"2026-11-29T15:05:00+00:00 [rank 0 host node1] saved checkpoint at iteration {it}\n")
            landed.append(time.perf_counter())

        task = asyncio.create_task(save())
        got = await ActivityEnvironment().run(ck.wait_for_save, WaitSaveInput(
            incident_id="b", job=JOB, log_path=str(log), plan=plan, timeout_s=10, poll_s=0.1))
        done = time.perf_counter()
        await task
        assert got.saved, got
        lat.append((done - landed[0]) * 1000)
    print(f"BENCH checkpoint loop_ms={loop_ms:.1f} log_mib={log.stat().st_size / 2**20:.2f} "
          f"save_latency_p50_ms={statistics.median(lat):.1f} save_latency_max_ms={max(lat):.1f} saves={len(lat)}")


if __name__ == "__main__":
    asyncio.run(main("--quick" in sys.argv))
