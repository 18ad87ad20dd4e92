"""Detect-stage cost: how fast the monitor classifies new log bytes, against grep on the same bytes.

Writes a generated multi-rank log (progress lines, NCCL INFO chatter, a few warnings) to a temp
file and runs the monitor's path over it: ``Follower.read_chunk`` (8 MiB reads), the chunk scan
(``worker.detect.ChunkScanner.feed``) and ``root_hit`` on each line it yields (as ``Monitor._follow``).
The chunk scan gates each buffer with the catalog's multi-pattern matcher (one RE2 alternation of
the literals that can open an incident, plus the tracker's own: attempt marker, checkpoint,
profile lines); the lines it hits go one by one through ``AttemptTracker.feed``; the stretches
between them are fed in bulk (``ChunkScanner._bulk``: RE2 passes prove every line a demo progress
line or one ``feed`` ignores, and Python reads only the stretch's tail). A chunk whose first line is
the attempt marker and the rest such a stretch (all but the first here) takes one RE2 ``Set`` pass
for both the gate and that proof. Then times ``LC_ALL=C grep -c -F -f <ALL the catalog's prefilter
literals>`` over the same file. Prints

    BENCH detect lines_per_s=<x> mb_per_s=<y> grep_mb_per_s=<z> ratio=<y/z> cpu_ratio=<c> lines=<n> load=<l>

(best of 3 wall-clock passes; ``cpu_ratio`` = grep's CPU seconds / the monitor path's CPU seconds,
which a loaded shared machine disturbs less than wall time; ``load`` = 1-minute load average)

(``--per-line`` adds ``per_line_lines_per_s``: the old path, every line through feed + root_hit).
A 1,000-rank job printing one line per rank per second needs 1,000 lines/s. Exits non-zero when a
benign line opens an incident or grep fails.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from revive.signatures.matcher import default_matcher  # noqa: E402
from revive.tail import Follower  # noqa: E402
from worker.detect import AttemptTracker, default_scanner, root_hit  # noqa: E402


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


def monitor_path(path: str) -> tuple[int, int, float, float]:
    """(lines, root hits, seconds, CPU seconds) for the monitor's chunk path over the whole file."""
    f, tr, sc = Follower(), AttemptTracker(), default_scanner()
    hits = n = 0
    c = time.process_time()
    t = time.perf_counter()
    while True:
        got = f.read_chunk(path)
        if got is None:
            break
        first, data = got
        n = first - 1 + data.count(b"\n")
        for line_no, text in sc.feed(tr, data, first, 0.0):  # as Monitor._follow
            if root_hit(line_no, text):
                hits += 1
    return n, hits, time.perf_counter() - t, time.process_time() - c


def per_line_path(data: list[str]) -> float:
    tr = AttemptTracker()
    t = time.perf_counter()
    for i, x in enumerate(data):
        tr.feed(x, float(i))
        root_hit(i, x)
    return time.perf_counter() - t


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def grep_s(path: str, patterns: str, repeat: int = 3) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds) of grep over the file."""
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("BENCH detect failed: grep not found")
    best = best_cpu = float("inf")
    for _ in range(repeat):
        c = _children_cpu()
        t = time.perf_counter()
        p = subprocess.run([grep, "-c", "-F", "-f", patterns, path], capture_output=True,
                           env={**os.environ, "LC_ALL": "C"})
        dt = time.perf_counter() - t
        best_cpu = min(best_cpu, _children_cpu() - c)
        if p.returncode not in (0, 1):
            raise SystemExit(f"BENCH detect failed: grep exited {p.returncode}: {p.stderr.decode()[:200]}")
        best = min(best, dt)
    return best, best_cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--per-line", action="store_true", help="also time the old per-line path")
    args, _ = ap.parse_known_args()
    data = lines(args.lines)
    with tempfile.TemporaryDirectory(prefix="revive-bench-detect-") as tmp:
        path = os.path.join(tmp, "job.log")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(data) + "\n")
        pats = os.path.join(tmp, "literals.txt")
        with open(pats, "w", encoding="utf-8") as fh:
            fh.write("\n".join(default_matcher().literals) + "\n")
        size = os.path.getsize(path)
        runs = [monitor_path(path) for _ in range(3)]
        n, hits, dt, _ = min(runs, key=lambda r: r[2])
        cpu = min(r[3] for r in runs)
        g, gcpu = grep_s(path, pats)
    if hits:
        print(f"BENCH detect failed: benign lines opened {hits} incidents", file=sys.stderr)
        return 1
    if n != len(data):
        print(f"BENCH detect failed: read {n} lines of {len(data)}", file=sys.stderr)
        return 1
    mb, gmb = size / dt / 1e6, size / g / 1e6
    extra = ""
    if args.per_line:
        extra = f" per_line_lines_per_s={len(data) / per_line_path(data):.0f}"
    cpu_ratio = gcpu / cpu if cpu > 0 and gcpu > 0 else float("nan")
    print(f"BENCH detect lines_per_s={n / dt:.0f} mb_per_s={mb:.1f} grep_mb_per_s={gmb:.1f} ratio={mb / gmb:.3f} "
          f"cpu_ratio={cpu_ratio:.3f} lines={n}{extra} load={open('/proc/loadavg').read().split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
