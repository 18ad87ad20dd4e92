"""Chaos suite (``make chaos``): every fault point of ``tests/chaos/harness.py`` ``--runs`` times on
the real local testbed (Slurm, Temporal dev server, worker and monitor processes).

Prints one ``BENCH chaos point=<name> runs=N passed=N duplicate_actions=N lost_incidents=N
mean_s=S`` line per fault point, a progress line per run with where its time went (seconds from
the run's start to ``fault``, first ``drain``, first ``requeue``, ``resumed``, ``closed``, ``end``),
a ``FAIL <point>: <why>`` line per failed run, and the total::

    BENCH reliability runs=N passed=N duplicate_actions=0 lost_incidents=0

Exit status 1 when any run failed (2: the testbed could not start). ``--points a,b``: only those.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos.harness import CASES, Outcome, run_case, services_up  # noqa: E402


async def main(points: list[str], runs: int) -> int:
    results: dict[str, list[Outcome]] = {p: [] for p in points}
    t0 = time.monotonic()
    for i in range(runs):
        for p in points:
            out = await run_case(p)
            results[p].append(out)
            status = "ok" if out.ok else "FAIL"
            phases = " ".join(f"{k}@{v:.0f}" for k, v in out.phases.items())
            print(f"[chaos {time.strftime('%H:%M:%S')}] run {i + 1}/{runs} {p}: {status} "
                  f"drains={out.drains} requeues={out.requeues} {out.seconds:.0f}s ({phases})", flush=True)
            for w in out.why:
                print(f"FAIL {p}: {w}", flush=True)
    total = [o for p in points for o in results[p]]
    for p in points:
        rs = results[p]
        print(f"BENCH chaos point={p} runs={len(rs)} passed={sum(o.ok for o in rs)} "
              f"duplicate_actions={sum(o.duplicate for o in rs)} lost_incidents={sum(o.lost for o in rs)} "
              f"mean_s={sum(o.seconds for o in rs) / max(len(rs), 1):.1f}")
    passed = sum(o.ok for o in total)
    print(f"BENCH reliability runs={len(total)} passed={passed} duplicate_actions={sum(o.duplicate for o in total)} "
          f"lost_incidents={sum(o.lost for o in total)} wall_s={time.monotonic() - t0:.0f}")
    failed = sorted({o.point for o in total if not o.ok})
    if failed:
        print(f"chaos: failed points: {', '.join(failed)}", file=sys.stderr)
    return 0 if passed == len(total) else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=int(os.environ.get("CHAOS_RUNS", "5")), help="runs per fault point")
    ap.add_argument("--points", default="", help=f"comma-separated subset of: {', '.join(CASES)}")
    a = ap.parse_args()
    pts = [p for p in a.points.split(",") if p] or list(CASES)
    bad = [p for p in pts if p not in CASES]
    if bad:
        sys.exit(f"chaos: unknown point(s) {bad}; choose from {', '.join(CASES)}")
    try:
        services_up()
    except RuntimeError as e:
        print(f"chaos: testbed not up: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(main(pts, a.runs)))
