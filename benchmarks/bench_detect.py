"""Detect-stage cost: how many log lines per second the monitor can classify on one core.

Feeds a generated multi-rank log (progress lines, NCCL INFO chatter, a few warnings) through the
monitor's per-line path (``AttemptTracker.feed`` + ``root_hit``) and prints
``BENCH detect lines_per_s=<x> mb_per_s=<y>``. A 1,000-rank job printing one line per rank per
second needs 1,000 lines/s.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.detect import AttemptTracker, root_hit  # noqa: E402


def lines(n: int) -> list[str]:
    t0 = datetime(2026, 11, 29, tzinfo=UTC)
    out = ["=== attempt restart=0 2026-11-29T00:00:00+00:00"]
    for i in range(n):
        r = i % 64
        t = (t0 + timedelta(milliseconds=10 * i)).isoformat(timespec="milliseconds")
        if i % 50 == 7:
            out.append(f"gpu-node-{r:03d}:4429:4429 [{r % 8}] NCCL INFO Channel 06/0 : {r}[{r % 8}] -> {r + 1} via P2P/IPC")
        elif i % 997 == 3:
            out.append("[W socket.cpp:601] [c10d] The client socket has failed to connect to [gpu-node-037]:22456 (errno: 22 - Invalid argument).")
        else:
            out.append(f"{t} [rank {r} host node{r // 8}] iteration {i // 64}/100000 | loss 0.5 | compute_ms 9.9 | step_time_ms 20.1")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=300_000)
    args, _ = ap.parse_known_args()
    data = lines(args.lines)
    size = sum(len(x) + 1 for x in data)
    tr = AttemptTracker()
    t = time.perf_counter()
    hits = 0
    for i, x in enumerate(data):
        tr.feed(x, float(i))
        if root_hit(i, x):
            hits += 1
    dt = time.perf_counter() - t
    assert hits == 0, f"benign lines opened {hits} incidents"
    print(f"BENCH detect lines_per_s={len(data) / dt:.0f} mb_per_s={size / dt / 1e6:.1f} lines={len(data)}")


if __name__ == "__main__":
    main()
