"""Time bounds that used to be asserted in tests: attribution on huge input, the matcher on benign
lines, and a webhook fan-out with dead and slow URLs. Prints ``BENCH`` lines; exits 1 when a bound
is exceeded (bounds sized for 2 cores).

Usage: .venv/bin/python benchmarks/bench_bounds.py
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from revive.attribution.engine import attribute  # noqa: E402
from revive.models import EvidenceBundle  # noqa: E402
from revive.notify import send  # noqa: E402
from revive.signatures.matcher import default_matcher  # noqa: E402

BOUNDS = {"huge_line_s": 5.0, "million_lines_s": 10.0, "benign_match_us": 200.0, "notify_fanout_s": 3.0}


def huge_line() -> float:
    big = "A" * 10_000_000
    text = big + "\nsrun: error: Node failure on n1\n" + big + "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    t = time.perf_counter()
    attribute(EvidenceBundle(job_log=text))
    return time.perf_counter() - t


def million_lines() -> float:
    lines = [f"iteration {i}/1000000 | loss 0.5 | step_time_ms 25.0" for i in range(1_000_000)]
    lines[700_000] = "[rank3]: RuntimeError: CUDA error: unknown error"
    text = "\n".join(lines)
    t = time.perf_counter()
    attribute(EvidenceBundle(job_log=text))
    return time.perf_counter() - t


def benign_match_us() -> float:
    m = default_matcher()
    lines = ["2026-11-29T15:04:05.123+00:00 [rank 1 host node2] iteration 12/400 | loss 0.4321 | step_time_ms 25.0",
             "gpu-node-007:44295:52633 [4] NCCL INFO Channel 04/0 : 4[4] -> 12[4] [send] via NET/IBext_v8/4/GDRDMA"]
    worst = 0.0
    for line in lines:
        t = time.perf_counter()
        for _ in range(2000):
            m.match(line)
        worst = max(worst, (time.perf_counter() - t) / 2000 * 1e6)
    return worst


def notify_fanout() -> float:
    from revive.models import NotifyEvent

    ev = NotifyEvent(kind="recovered", incident_id="bench")
    t = time.perf_counter()
    asyncio.run(send(["http://127.0.0.1:9/hook", "http://127.0.0.1:9/other"], ev, timeout_s=0.5, retries=1,
                     backoff_s=0.05))
    return time.perf_counter() - t


def main() -> int:
    got = {"huge_line_s": huge_line(), "million_lines_s": million_lines(), "benign_match_us": benign_match_us(),
           "notify_fanout_s": notify_fanout()}
    ok = all(got[k] <= BOUNDS[k] for k in got)
    print("BENCH bounds " + " ".join(f"{k}={v:.3f}" for k, v in got.items()) + f" ok={int(ok)}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
