"""The benchmarks run and print parseable BENCH lines (quick modes; no timing assertions)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(script: str, *args: str, timeout: float = 180, line: str = "") -> dict[str, str]:
    """The fields of the script's last ``BENCH <line>`` line (any BENCH line when ``line`` is empty)."""
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    lines = [x for x in p.stdout.splitlines() if x.startswith(f"BENCH {line}")]
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


@pytest.mark.slurm
def test_bench_schedpoll_quick_times_every_access_path(slurm_cluster):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_schedpoll.py"), "--quick"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    rows = [dict(kv.split("=", 1) for kv in x.split()[2:]) for x in p.stdout.splitlines() if x.startswith("BENCH ")]
    assert {r["path"] for r in rows} == {"scontrol", "squeue_json", "rest"}
    for r in rows:
        assert int(r["jobs"]) >= 100  # the held jobs it submitted are all listed
        assert _num(r["rpcs_per_poll"]) >= 1  # each poll is at least one REQUEST_JOB_INFO at slurmctld
        for k in ("poll_s_p50", "poll_s_p99", "ctld_us_per_poll", "load"):
            _num(r[k])


@pytest.mark.e2e
def test_bench_mttd_quick_times_one_real_recovery(slurm_cluster):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_mttd.py"), "--quick"], capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    bench = {ln.split()[1]: dict(kv.split("=", 1) for kv in ln.split()[2:])
             for ln in p.stdout.splitlines() if ln.startswith("BENCH ")}
    f = bench["mttd"]
    assert f["fault"] == "xid79" and f["runs"] == "1" and f["ok"] == "1"
    detect, action, resume = _num(f["detect_p50_s"]), _num(f["action_p50_s"]), _num(f["resume_p50_s"])
    assert 0 < detect < action < resume  # fault → incident → drain/requeue → progress past the checkpoint
    stages = bench["action_stages"]  # where the time to the first action went
    assert stages["fault"] == "xid79" and _num(stages["gather_p50_s"]) > 0
