"""Watch-scale benchmark: one monitor following N jobs' logs while one writer appends to them.

- a ``FakeScheduler`` listing N RUNNING, opted-in jobs (default 10,000; ``--jobs``), each with its
  own log file under a temp dir;
- ONE writer process appending to every file about once a second (rank-prefixed progress lines in
  the demo format ``<iso> [rank R host H] iteration N/M | loss L | compute_ms C | step_time_ms T``,
  plus NCCL INFO / warning noise), and once a second a fault (an NCCL error or an Xid line) into a
  random file it has not faulted yet, noting the job and the wall time of the write;
- this process: the production ``Monitor`` (``poll_interval_s`` 0.5, job list every
  ``--jobs-poll-s``) with a stub Temporal client that records each ``start_workflow`` call.

Prints

    BENCH watch jobs=<N> cpu_cores=<monitor CPU s / wall s> rss_mib=<monitor max RSS> lag_p99_s=<x>
          mttd_p99_s=<y> faults=<f> missed=<m> ...

``lag``: for a sample of the chunks the monitor reads, now minus the write time stamped in the
chunk's last line. ``mttd``: fault write → ``start_workflow`` call. Exits non-zero when a fault is
missed or a benign line opens an incident. ``--quick``: 500 jobs, 20 s (CI).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FAULTS = [
    "[rank{r}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process "
    "exited or there was a network error, NCCL version 2.21.5",
    "{ts} [rank {r} host {h}] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
]
NOISE = [
    "{h}:4429:4429 [{r}] NCCL INFO Channel 06/0 : {r}[{r}] -> {r1}[{r1}] via P2P/IPC",
    "[W socket.cpp:601] [c10d] The client socket has failed to connect to [{h}]:22456 (errno: 22 - Invalid argument).",
    "{ts} [rank {r} host {h}] data loader: prefetch queue depth 4",
]


def log_path(d: str, i: int) -> str:
    return os.path.join(d, f"job-{i}.out")


# ----------------------------------------------------------------------------- writer process
def writer(d: str, n: int, duration: float, faults_file: str, seed: int) -> None:
    rnd = random.Random(seed)
    it = [0] * n
    pending = list(range(n))
    rnd.shuffle(pending)
    t0 = time.time()
    tick = 0.05
    per_tick = max(1, round(n * tick))
    cursor, next_fault = 0, t0 + 1.0
    with open(faults_file, "a", encoding="utf-8") as ff:
        while True:
            now = time.time()
            if now - t0 >= duration:
                return
            for _ in range(per_tick):
                i = cursor
                cursor = (cursor + 1) % n
                it[i] += 1
                ts = datetime.now(UTC).isoformat(timespec="microseconds")
                h = f"node{i % 997}"
                lines = [f"{ts} [rank {r} host {h}] iteration {it[i]}/100000 | loss 0.{rnd.randrange(9999):04d} "
                         f"| compute_ms 9.{rnd.randrange(9)} | step_time_ms 20.{rnd.randrange(9)}" for r in (0, 1)]
                if rnd.random() < 0.1:
                    lines.append(rnd.choice(NOISE).format(ts=ts, r=1, r1=0, h=h))
                with open(log_path(d, i), "a", encoding="utf-8") as f:
                    f.write("\n".join(lines) + "\n")
            if now >= next_fault and pending:
                next_fault += 1.0
                i = pending.pop()
                line = rnd.choice(FAULTS).format(ts=datetime.now(UTC).isoformat(), r=1, h=f"node{i % 997}")
                with open(log_path(d, i), "a", encoding="utf-8") as f:
                    f.write(line + "\n")
                    f.flush()
                    t = time.time()
                ff.write(f"{i} {t:.6f}\n")
                ff.flush()
            sleep = tick - (time.time() - now)
            if sleep > 0:
                time.sleep(sleep)


# ----------------------------------------------------------------------------- monitor side
class StubClient:
    """Records ``start_workflow`` calls (job id → wall time); no Temporal server."""

    def __init__(self) -> None:
        self.starts: dict[str, float] = {}
        self.ids: list[str] = []

    async def start_workflow(self, fn, inp, id: str, **kw):  # noqa: A002
        self.starts.setdefault(inp.job.job_id, time.time())
        self.ids.append(id)

        class Handle:
            pass

        h = Handle()
        h.id = id  # type: ignore[attr-defined]
        return h

    def get_workflow_handle(self, wid: str):
        class Handle:
            async def signal(self, *a: object) -> None:
                return None

        return Handle()


def bench_scheduler(jobs: list) -> object:
    """``FakeScheduler`` whose ``list_jobs`` hands out the records themselves: its deep copies cost
    ~120 µs a job (1.2 s at 10,000), the test double's cost, not the monitor's (the monitor never
    mutates a record)."""
    from revive.scheduler.fake import FakeScheduler

    class BenchScheduler(FakeScheduler):
        async def list_jobs(self) -> list:
            self._check()
            return list(self.jobs.values())

    return BenchScheduler(cluster="bench", jobs=jobs)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def run(args: argparse.Namespace) -> int:
    from revive.config import ClusterConfig
    from revive.models import JobRecord
    from revive.policy import RecoveryPolicy
    from revive.scheduler.fake import FakeScheduler
    from worker.monitor import Monitor
    from workflows.incident import IncidentWorkflow  # noqa: F401  (imported by the first incident otherwise)

    n = args.jobs
    tmp = tempfile.TemporaryDirectory(prefix="revive-bench-watch-", dir=args.dir)
    d = tmp.name
    logs = os.path.join(d, "logs")
    os.makedirs(logs)
    t_sub = datetime(2026, 12, 1, tzinfo=UTC)
    jobs = []
    for i in range(n):
        p = log_path(logs, i)
        with open(p, "w", encoding="utf-8") as f:
            f.write(f"=== attempt restart=0 {t_sub.isoformat()}\n")
        jobs.append(JobRecord(job_id=str(i), name=f"train-{i}", user="u", state="RUNNING", partition="bench",
                              nodes=[f"node{i % 997}"], submit_time=t_sub, std_out=p))
    sched = FakeScheduler(cluster="bench", jobs=jobs) if args.deep_copy else bench_scheduler(jobs)
    cfg = ClusterConfig(name="bench", partitions=["bench"], state_dir=os.path.join(d, "state"),
                        audit_file=os.path.join(d, "audit.jsonl"), logs={"poll_interval_s": args.poll_s})
    client = StubClient()
    mon = Monitor(cfg, RecoveryPolicy(), client, sched, jobs_poll_s=args.jobs_poll_s)  # type: ignore[arg-type]
    mon.prefetch_threads = args.prefetch_threads

    lags: list[float] = []
    real_read = mon.follower.read_chunk
    counter = [0]

    def sampled_read(path: str, st_hint: os.stat_result | None = None):
        got = real_read(path, st_hint)
        counter[0] += 1
        if got is not None and counter[0] % 50 == 0:
            data = got[1]
            last = data[data.rfind(b"\n", 0, len(data) - 1) + 1:]
            try:
                ts = datetime.fromisoformat(last[:32].decode())
                lags.append(time.time() - ts.timestamp())
            except ValueError:
                pass
        return got

    mon.follower.read_chunk = sampled_read  # type: ignore[method-assign]
    passes: list[float] = []
    pass_cpu: list[float] = []
    real_poll = mon.poll_once

    async def timed_poll() -> None:
        t, c = time.perf_counter(), time.process_time()
        await real_poll()
        passes.append(time.perf_counter() - t)
        pass_cpu.append(time.process_time() - c)
        if args.verbose:
            print(f"pass {len(passes)} wall {passes[-1]:.3f} cpu {pass_cpu[-1]:.3f}", file=sys.stderr)

    mon.poll_once = timed_poll  # type: ignore[method-assign]

    t_first = time.perf_counter()
    await real_poll()  # first list + first read of every log (warm-up, not measured)
    first_pass_s = time.perf_counter() - t_first
    faults_file = os.path.join(d, "faults.txt")
    open(faults_file, "w").close()
    w = subprocess.Popen([sys.executable, __file__, "--writer", logs, str(n), str(args.duration), faults_file,
                          str(args.seed)])
    stop = asyncio.Event()
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    cpu0, wall0 = time.process_time(), time.monotonic()
    task = asyncio.create_task(mon.run(stop))
    try:
        while w.poll() is None:
            await asyncio.sleep(0.2)
        await asyncio.sleep(3.0)  # let the last faults be seen
    finally:
        stop.set()
        await task
        if w.poll() is None:
            w.kill()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    faults = {}
    for line in open(faults_file, encoding="utf-8"):
        job, t = line.split()
        faults[job] = float(t)
    mttd = [client.starts[j] - t for j, t in faults.items() if j in client.starts]
    missed = sorted(set(faults) - set(client.starts), key=int)
    spurious = sorted(set(client.starts) - set(faults), key=int)
    tmp.cleanup()
    print(f"BENCH watch jobs={n} cpu_cores={cpu / wall:.3f} rss_mib={rss_mib:.0f} lag_p99_s={pct(lags, 99):.3f} "
          f"mttd_p99_s={pct(mttd, 99):.3f} mttd_p50_s={pct(mttd, 50):.3f} lag_p50_s={pct(lags, 50):.3f} "
          f"faults={len(faults)} missed={len(missed)} spurious={len(spurious)} wall_s={wall:.1f} "
          f"pass_p50_s={pct(passes, 50):.3f} pass_cpu_p50_s={pct(pass_cpu, 50):.3f} pass_max_s={max(passes, default=0):.3f} first_pass_s={first_pass_s:.2f} "
          f"writer_rc={w.returncode} nproc={os.cpu_count()} prefetch_threads={args.prefetch_threads} "
          f"load={open('/proc/loadavg').read().split()[0]}")
    if missed or spurious or w.returncode != 0 or not faults:
        print(f"BENCH watch failed: missed={missed[:10]} spurious={spurious[:10]} writer_rc={w.returncode}",
              file=sys.stderr)
        return 1
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        d, n, duration, faults_file, seed = sys.argv[2:7]
        writer(d, int(n), float(duration), faults_file, int(seed))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of writing")
    ap.add_argument("--jobs-poll-s", type=float, default=5.0)
    ap.add_argument("--poll-s", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--verbose", action="store_true", help="print each pass's wall and CPU time (stderr)")
    ap.add_argument("--profile", action="store_true", help="cProfile the monitor (stderr)")
    ap.add_argument("--dir", default=None, help="where the logs go (default: the system temp dir)")
    ap.add_argument("--prefetch-threads", type=int, default=0,
                    help="Monitor.prefetch_threads: stat + read the logs on this many threads (0: inline)")
    ap.add_argument("--deep-copy", action="store_true", help="the stock FakeScheduler (deep-copies every record)")
    ap.add_argument("--quick", action="store_true", help="500 jobs, 20 s (CI)")
    args = ap.parse_args()
    if args.quick:
        args.jobs, args.duration = 500, 20.0
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
