"""What a monitor restart costs: the first pass of a fresh ``Monitor`` over N running, requeued jobs.

Each job (``FakeScheduler``, RUNNING, ``Restarts=1``) has a local log of ``--log-kib`` KiB: attempt 0
(Revive's marker, two ranks' demo progress lines, a fault) then attempt 1 (marker, resume line,
progress until now). The first pass adopts every job: it rebuilds the job's identity (a stub
Temporal client whose visibility holds each job's closed attempt-0 incident), re-reads the log's
last bytes, finds attempt 1's first line (``worker.detect.find_attempt_start``), feeds it and sets
the hang clock back. Half the jobs' attempt 1 went silent 120 s ago (floor 60 s): those must open
exactly one hang incident each on that first pass, the others none.

Prints

    BENCH rebuild jobs=<N> log_kib=<K> first_pass_s=<s> per_job_ms=<ms> hangs_opened=<n> expected=<n>
          wrong=<n>

and exits non-zero when an incident is missing or wrong. ``--quick``: 200 jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from revive.config import ClusterConfig  # noqa: E402
from revive.models import JobRecord  # noqa: E402
from revive.policy import RecoveryPolicy  # noqa: E402
from revive.scheduler.fake import FakeScheduler  # noqa: E402
from worker.monitor import Monitor  # noqa: E402


class _Wf:
    def __init__(self, wid: str, start: datetime, close: datetime, memo: dict) -> None:
        self.id, self.start_time, self.close_time, self.memo = wid, start, close, memo
        self.typed_search_attributes: dict = {}

    async def memo_value(self, key: str, default=None):
        return self.memo.get(key, default)


class _Client:
    """Records starts; visibility answers each job's closed attempt-0 incident."""

    def __init__(self, by_job: dict[str, _Wf]) -> None:
        self.by_job, self.started = by_job, []

    async def list_workflows(self, query: str, limit: int | None = None):
        if "ExecutionStatus='Running'" in query:
            return
        job = query.rsplit("ReviveJobId='", 1)[-1].rstrip("'")
        if job in self.by_job:
            yield self.by_job[job]

    async def start_workflow(self, fn, inp, id: str, **kw):
        self.started.append((id, inp.trigger.kind.value))

        class H:
            pass

        h = H()
        h.id = id  # type: ignore[attr-defined]
        return h

    def get_workflow_handle(self, wid: str):
        class H:
            async def signal(self, *a):
                return None

        return H()


def prog(it: int, rank: int, t: datetime) -> str:
    return (f"{t.isoformat(timespec='milliseconds')} [rank {rank} host node{rank + 1}] iteration {it}/100000 | "
            f"loss 0.5 | compute_ms 10.0 | step_time_ms 20.0\n")


def write_log(path: Path, kib: int, s0: datetime, t1: datetime, last: datetime) -> None:
    a0 = [f"=== attempt restart=0 {s0.isoformat()}\n"]
    n = max(20, kib * 1024 // 2 // 200)
    for it in range(1, n + 1):
        t = s0 + timedelta(seconds=it * 0.1)
        a0 += [prog(it, 0, t), prog(it, 1, t)]
    a0.append("[rank1]: RuntimeError: CUDA error: unknown error\n")
    a1 = [f"=== attempt restart=1 {t1.isoformat()}\n",
          f"{t1.isoformat()} [rank 0 host node3] resumed from checkpoint at iteration {n - 5}\n"]
    steps = max(2, int((last - t1).total_seconds() / 0.5))
    for i in range(steps + 1):
        t = t1 + (last - t1) * (i / steps)
        a1 += [prog(n - 4 + i, 0, t), prog(n - 4 + i, 1, t)]
    path.write_text("".join(a0 + a1))


async def run(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-rebuild-"))
    now = datetime.now(UTC).replace(microsecond=0)
    s0, t1 = now - timedelta(hours=1), now - timedelta(minutes=10)
    jobs, by_job, hung = [], {}, set()
    for i in range(1, args.jobs + 1):
        log = tmp / f"train-{i}.out"
        silent = i % 2 == 0
        write_log(log, args.log_kib, s0, t1, now - timedelta(seconds=120 if silent else 1))
        if silent:
            hung.add(str(i))
        jobs.append(JobRecord(job_id=str(i), name=f"train-{i}", user="u", state="RUNNING", partition="gpu",
                              nodes=["node3", "node2"], restart_count=1, submit_time=t1 - timedelta(seconds=5),
                              start_time=t1, std_out=str(log)))
        wid = f"bench-{i}-{s0.strftime('%Y%m%dT%H%M%S')}-a0"
        by_job[str(i)] = _Wf(wid, s0 + timedelta(minutes=30), t1 + timedelta(minutes=1),
                             {"revive_job": {"name": f"train-{i}", "user": "u", "first_submit": s0.isoformat()}})
    cfg = ClusterConfig(name="bench", partitions=["gpu"], audit_file=str(tmp / "audit.jsonl"),
                        state_dir=str(tmp / "state"))
    client = _Client(by_job)
    mon = Monitor(cfg, RecoveryPolicy(hang={"k": 5, "floor": 60}), client, FakeScheduler(cluster="bench", jobs=jobs))  # type: ignore[arg-type]
    from worker.detect import default_scanner, root_hit

    default_scanner(), root_hit(0, "warm-up")  # the catalog is compiled once per process, not per restart
    t0 = time.perf_counter()
    await mon.poll_once()
    dt = time.perf_counter() - t0
    stamp = s0.strftime("%Y%m%dT%H%M%S")
    expected = {f"bench-{j}-{stamp}-a1" for j in hung}
    got = {i for i, kind in client.started if kind == "no_progress"}
    wrong = len(got ^ expected) + sum(1 for _, kind in client.started if kind != "no_progress")
    print(f"BENCH rebuild jobs={args.jobs} log_kib={args.log_kib} first_pass_s={dt:.3f} "
          f"per_job_ms={1000 * dt / args.jobs:.2f} hangs_opened={len(got)} expected={len(expected)} wrong={wrong}")
    return 1 if wrong else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--log-kib", type=int, default=128)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.jobs = 200
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
