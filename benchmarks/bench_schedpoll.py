"""Scheduler load of one full job-list poll, per access path, on the real local Slurm testbed.

Submits ``--jobs`` (default 1,000) tiny held jobs (``sbatch --hold``: they stay PENDING and never
run), then times ``--polls`` full job listings through each path Revive can read jobs with,
using the project's own readers so what is measured is what the monitor runs:

- ``scontrol``: ``revive.scheduler.slurm_cli.SlurmCLI.list_jobs`` (``scontrol show job -o`` + parse)
- ``squeue_json``: ``squeue --json`` through the same ``LocalRunner``, parsed with
  ``revive.scheduler.slurm_rest.job_from_rest`` (22.05's squeue prints the data_parser v0.0.38
  document slurmrestd serves)
- ``rest``: ``revive.scheduler.slurm_rest.SlurmREST.list_jobs`` (``GET /slurm/v0.0.38/jobs``, the
  OpenAPI version Slurm 22.05's slurmrestd serves)

and reads slurmctld's cost from ``sdiag`` before and after each path's polls ("Remote Procedure Call
statistics by message type": ``count`` and ``total_time``, in microseconds, summed over the
message types; the sdiag call itself is one REQUEST_STATS_INFO and is subtracted, and the RPCs
slurmd sends on its own, such as node registrations, are left out). Prints per path::

    BENCH schedpoll path=<p> jobs=<n> poll_s_p50=<s> poll_s_p99=<s> bytes=<b> rpcs_per_poll=<x> ctld_us_per_poll=<us> load=<1-min loadavg>

Needs ``REVIVE_CLUSTER_DIR`` (the testbed started by ``scripts/cluster-up.sh``; started here when
missing). Cancels the jobs it submitted on the way out, whatever happens. Exits non-zero when a path
fails or lists fewer jobs than submitted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from revive.config import load_cluster_config  # noqa: E402
from revive.scheduler.runners import LocalRunner  # noqa: E402
from revive.scheduler.slurm_cli import SlurmCLI  # noqa: E402
from revive.scheduler.slurm_rest import SlurmREST, job_from_rest  # noqa: E402

_RPC = re.compile(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)", re.M)
_NOT_OURS = frozenset({"MESSAGE_NODE_REGISTRATION_STATUS", "MESSAGE_EPILOG_COMPLETE", "REQUEST_COMPLETE_PROLOG"})
"""RPCs slurmd sends on its own (periodic node registration, job end), not caused by a poll."""


def sdiag(env: dict[str, str]) -> dict[str, tuple[int, int]]:
    """slurmctld RPC statistics by message type: name → (count, total_time µs)."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, env=env, check=True).stdout
    part = out.split("by message type", 1)[-1].split("by user", 1)[0]
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _RPC.finditer(part)}


def rpc_delta(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> tuple[int, int, dict[str, int]]:
    """(RPCs, µs, per-type counts) between two sdiag readings, less the second sdiag's own RPC."""
    n = us = 0
    per: dict[str, int] = {}
    for k, (c, t) in b.items():
        if k in _NOT_OURS:
            continue
        c0, t0 = a.get(k, (0, 0))
        if c - c0:
            per[k] = c - c0
        n, us = n + c - c0, us + t - t0
    if per.get("REQUEST_STATS_INFO"):
        per["REQUEST_STATS_INFO"] -= 1
        n -= 1
        us -= max(0, b["REQUEST_STATS_INFO"][1] - a.get("REQUEST_STATS_INFO", (0, 0))[1])
        if not per["REQUEST_STATS_INFO"]:
            del per["REQUEST_STATS_INFO"]
    return n, us, per


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def submit_held(n: int, env: dict[str, str], tag: str) -> list[str]:
    """``n`` held single jobs (``sbatch --hold --wrap true``): one job record each. (A held array
    stays one record until its tasks start, so arrays would not load the listing.)"""
    from concurrent.futures import ThreadPoolExecutor

    def one(_: int) -> str:
        r = subprocess.run(["sbatch", "--parsable", "--hold", f"--job-name={tag}", "-o", "/dev/null",
                            "--wrap", "true"], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch: {r.stderr.strip()[:300]}")
        return r.stdout.strip().split(";")[0]

    with ThreadPoolExecutor(4) as ex:
        return list(ex.map(one, range(n)))


async def run(args: argparse.Namespace) -> int:
    cdir = Path(os.environ.get("REVIVE_CLUSTER_DIR", "/tmp/revive-cluster"))
    if not (cdir / "cluster.yaml").exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "cluster-up.sh")], check=True)
    cfg = load_cluster_config(cdir / "cluster.yaml")
    env = dict(os.environ, **({"SLURM_CONF": cfg.slurm_conf} if cfg.slurm_conf else {}))
    runner = LocalRunner(cfg.slurm_conf)
    cli = SlurmCLI(runner, cfg.name, cfg.slurm_conf, local_testbed=cfg.local_testbed, timeout_s=120)
    import httpx

    rest_cfg = cfg.scheduler.rest
    client = httpx.AsyncClient(timeout=120)
    rest = SlurmREST(client, rest_cfg.url, rest_cfg.user, rest_cfg.token(), cli) if rest_cfg else None

    async def squeue_json() -> tuple[int, int]:
        rc, out, err = await runner.run(["squeue", "--json"], timeout_s=120)
        if rc != 0:
            raise RuntimeError(f"squeue --json exited {rc}: {err[:200]}")
        return len([job_from_rest(j) for j in json.loads(out).get("jobs") or []]), len(out)

    async def scontrol() -> tuple[int, int]:
        return len(await cli.list_jobs()), 0

    async def rest_jobs() -> tuple[int, int]:
        assert rest is not None
        return len(await rest.list_jobs()), 0

    tag = f"revive-bench-schedpoll-{os.getpid()}"
    failed = False
    try:
        before = len(await cli.list_jobs())
        t_sub = time.perf_counter()
        ids = submit_held(args.jobs, env, tag)
        print(f"  submitted {len(ids)} held jobs in {time.perf_counter() - t_sub:.1f} s", flush=True)
        want = before + args.jobs
        paths = {"scontrol": scontrol, "squeue_json": squeue_json, **({"rest": rest_jobs} if rest else {})}
        for name, fn in paths.items():
            try:
                n, size = await fn()  # warm-up (slurmrestd's first request, page cache)
                if name == "scontrol":
                    _rc, out, _ = await runner.run(["scontrol", "show", "job", "-o"], timeout_s=120)
                    size = len(out)
                elif name == "rest" and rest_cfg is not None:
                    r = await client.get(f"{rest_cfg.url.rstrip('/')}/slurm/v0.0.38/jobs", headers=rest.headers)
                    size = len(r.content)
                s0 = sdiag(env)
                times = []
                for _ in range(args.polls):
                    t = time.perf_counter()
                    n, _ = await fn()
                    times.append(time.perf_counter() - t)
                s1 = sdiag(env)
            except Exception as e:  # one failing path must not hide the others
                print(f"BENCH schedpoll path={name} failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
                failed = True
                continue
            rpcs, us, per = rpc_delta(s0, s1)
            load = open("/proc/loadavg").read().split()[0]
            print(f"BENCH schedpoll path={name} jobs={n} poll_s_p50={statistics.median(times):.3f} "
                  f"poll_s_p99={pct(times, 99):.3f} bytes={size} rpcs_per_poll={rpcs / args.polls:.1f} "
                  f"ctld_us_per_poll={us / args.polls:.0f} load={load}", flush=True)
            print(f"  rpc types per {args.polls} polls: {per}", flush=True)
            if n < want:
                print(f"BENCH schedpoll path={name} failed: listed {n} jobs, expected ≥ {want}", file=sys.stderr)
                failed = True
    finally:
        # by name: also the jobs of a submission that failed half-way
        subprocess.run(["scancel", "--name", tag], env=env, capture_output=True)
        await client.aclose()
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="100 jobs, 5 polls")
    args, _ = ap.parse_known_args()
    if args.quick:
        args.jobs, args.polls = 100, 5
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
