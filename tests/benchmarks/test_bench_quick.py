"""The benchmarks run and print parseable BENCH lines (quick modes; no timing assertions)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(script: str, *args: str, timeout: float = 180) -> dict[str, str]:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    lines = [x for x in p.stdout.splitlines() if x.startswith("BENCH ")]
    assert lines, p.stdout
    fields = dict(kv.split("=", 1) for kv in lines[-1].split()[2:])
    return fields


def _num(v: str) -> float:
    assert re.fullmatch(r"-?[0-9.]+(e-?[0-9]+)?|nan", v), v
    return float(v)


def test_bench_watch_quick_prints_its_bench_line():
    f = _bench("bench_watch.py", "--quick")
    for k in ("cpu_cores", "rss_mib", "lag_p99_s", "mttd_p99_s"):
        _num(f[k])
    assert f["jobs"] == "500" and f["missed"] == "0" and int(f["faults"]) > 0


def test_bench_detect_small_prints_its_bench_line():
    f = _bench("bench_detect.py", "--lines", "20000")
    for k in ("lines_per_s", "mb_per_s", "grep_mb_per_s", "ratio"):
        _num(f[k])


def test_bench_checkpoint_quick_prints_its_bench_line():
    f = _bench("bench_checkpoint.py", "--quick")
    for k in ("loop_ms", "log_mib", "save_latency_p50_ms", "save_latency_max_ms"):
        _num(f[k])
    assert f["saves"] == "3"
