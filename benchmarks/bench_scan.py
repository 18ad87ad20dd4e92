"""Scan-throughput benchmark: Revive's signature matcher vs ``LC_ALL=C grep -E -c``.

Generates a multi-rank training log (default 1 GiB; ``--size-mb`` to change), scans it with
``default_matcher().scan_file`` and times ``LC_ALL=C grep -E -c -f <patterns>`` on the same file
with the catalog's regexes translated to POSIX ERE. Prints:

    BENCH scan mb_per_s=<x> grep_mb_per_s=<y> ratio=<x/y>

Usage: .venv/bin/python benchmarks/bench_scan.py [--size-mb 1024] [--file PATH] [--keep] [--pure-python]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from revive.signatures.matcher import Matcher, default_matcher, load_catalog  # noqa: E402

ERRORS = [
    "[rank{r}]: RuntimeError: CUDA error: unknown error",
    "[rank{r}]:[E1129 10:10:00.000000 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=2070, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 "
    "milliseconds before timing out.",
    "[rank{r}]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    "srun: error: node{n}: task {r}: Killed",
    "[rank{r}]: OSError: [Errno 28] No space left on device",
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.63 GiB.",
]


def generate(path: Path, size_mb: int, seed: int = 7) -> int:
    rnd = random.Random(seed)
    target = size_mb * 1024 * 1024
    # one ~4 MiB block of realistic lines, re-used with a varying error sprinkle
    lines: list[str] = []
    it = 0
    while sum(len(x) + 1 for x in lines) < 4 * 1024 * 1024:
        it += 1
        for r in range(8):
            lines.append(f"2026-11-29T15:{it // 60 % 60:02d}:{it % 60:02d}.{r:03d}+00:00 [rank {r} host node{r // 4}] "
                         f"iteration {it}/400000 | loss {rnd.random():.4f} | compute_ms {12 + rnd.random():.1f} | "
                         f"step_time_ms {25 + rnd.random():.1f}")
        if it % 50 == 0:
            lines.append(f" {it % 100}%|█▎        | {it}/162600 [57:18<6:03:11, 15.51s/it]")
        if it % 200 == 0:
            lines.append("[W socket.cpp:601] [c10d] The client socket has failed to connect to [node1]:29500 "
                         "(errno: 22 - Invalid argument).")
        if it % 400 == 0:
            lines.append(f"node0:4242:4300 [{it % 8}] NCCL INFO Channel 0{it % 8}/0 : 0[0] -> 1[1] via P2P/IPC")
        if it % 1000 == 0:
            lines.append("[2026-01-01 10:00:00,123] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! "
                         "Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768")
    block = ("\n".join(lines) + "\n").encode()
    written = 0
    with open(path, "wb") as fh:
        while written < target:
            err = rnd.choice(ERRORS).format(r=rnd.randrange(64), n=rnd.randrange(8)).encode() + b"\n"
            chunk = block[: max(0, target - written - len(err))] if written + len(block) > target else block
            fh.write(chunk)
            fh.write(err)
            written += len(chunk) + len(err)
    return written


def to_ere(rx: str) -> str:
    """Translate a catalog regex (RE2/Python syntax) to POSIX ERE for GNU grep."""
    out = []
    i, in_br = 0, False
    while i < len(rx):
        c = rx[i]
        if not in_br and rx.startswith("(?P<", i):
            i = rx.index(">", i) + 1
            out.append("(")
            continue
        if not in_br and rx.startswith("(?:", i):
            out.append("(")
            i += 3
            continue
        if c == "\\" and i + 1 < len(rx):
            n = rx[i + 1]
            cls = {"d": "0-9", "w": "[:alnum:]_", "s": "[:space:]"}.get(n)
            if cls:
                out.append(cls if in_br else f"[{cls}]")
            elif in_br:
                out.append(n)
            else:
                out.append("\\" + n)
            i += 2
            continue
        if c == "[" and not in_br:
            in_br = True
            out.append(c)
            if rx.startswith("^", i + 1):
                out.append("^")
                i += 1
            i += 1
            continue
        if c == "]" and in_br:
            in_br = False
        if not in_br and c in "?+*" and i + 1 < len(rx) and rx[i + 1] == "?" and c != "?":
            out.append(c)
            i += 2
            continue
        if not in_br and c in "^$":
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def grep_patterns() -> list[str]:
    return [to_ere(e["regex"]) for e in load_catalog()["signatures"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--file", type=Path, default=None, help="scan this file instead of generating one")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--pure-python", action="store_true", help="use the stdlib re fallback")
    args, _unknown = ap.parse_known_args()

    tmpdir = Path(tempfile.mkdtemp(prefix="revive-bench-"))
    try:
        path = args.file or tmpdir / "multirank.log"
        if args.file is None:
            t = time.perf_counter()
            generate(path, args.size_mb)
            print(f"# generated {path} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
        size_mb = os.path.getsize(path) / 1e6
        matcher = Matcher(use_re2=False) if args.pure_python else default_matcher()

        # warm the page cache for both contenders
        with open(path, "rb") as fh:
            while fh.read(64 << 20):
                pass

        t = time.perf_counter()
        lines_hit: set[int] = set()
        n = 0
        for line_no, _sm in matcher.scan_file(path):
            lines_hit.add(line_no)
            n += 1
        scan_s = time.perf_counter() - t

        pats = tmpdir / "patterns.ere"
        pats.write_text("\n".join(grep_patterns()) + "\n")
        grep = shutil.which("grep") or "grep"
        env = dict(os.environ, LC_ALL="C")
        t = time.perf_counter()
        res = subprocess.run([grep, "-E", "-c", "-f", str(pats), str(path)], capture_output=True, text=True, env=env)
        grep_s = time.perf_counter() - t
        grep_count = res.stdout.strip() or f"error: {res.stderr.strip()[:200]}"

        x = size_mb / scan_s
        y = size_mb / grep_s
        print(f"# file {size_mb:.0f} MB; revive: {len(lines_hit)} lines with {n} matches in {scan_s:.2f}s "
              f"({'re' if args.pure_python else 're2'}); grep: {grep_count} lines in {grep_s:.2f}s "
              f"(grep also counts benign lines the matcher suppresses)", file=sys.stderr)
        print(f"BENCH scan mb_per_s={x:.1f} grep_mb_per_s={y:.1f} ratio={x / y:.3f}")
    finally:
        if not args.keep:
            shutil.rmtree(tmpdir, ignore_errors=True)
        else:
            print(f"# kept {tmpdir}", file=sys.stderr)


if __name__ == "__main__":
    main()
