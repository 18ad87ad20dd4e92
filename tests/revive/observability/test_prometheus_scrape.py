"""A real Prometheus (Debian's ``prometheus`` package) scrapes ReviveMetrics.serve on loopback; the
values are read back through Prometheus's HTTP query API.

CI: ``apt-get install -y prometheus`` (the test fails, naming the package, when the binary is missing).
Only 127.0.0.1 is used; Prometheus's data lives in the test's tmp_path.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from revive.metrics import ReviveMetrics
from revive.models import Category, IncidentOutcome, IncidentResult

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_binary() -> str:
    path = os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.access(path, os.X_OK):
        pytest.fail(f"prometheus binary not found ({path}): install Debian's package with "
                    "`apt-get install -y prometheus` (or set PROMETHEUS_BIN)", pytrace=False)
    return path


def closed(iid: str, category: Category, outcome: IncidentOutcome, mttr: float | None) -> IncidentResult:
    return IncidentResult(incident_id=iid, outcome=outcome, category=category, fault_time=T0,
                          detected_at=T0 + timedelta(seconds=0.3), first_action_at=T0 + timedelta(seconds=4),
                          resumed_at=None if mttr is None else T0 + timedelta(seconds=mttr))


class Prometheus:
    def __init__(self, binary: str, tmp: Path, target: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tmp / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: revive\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        self.log = tmp / "prometheus.log"
        self.proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"],
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.http = httpx.Client(base_url=self.url, timeout=5)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited {self.proc.returncode}:\n{self.tail()}")
            try:
                if self.http.get("/-/ready").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail(f"prometheus not ready after {timeout}s:\n{self.tail()}")

    def query(self, q: str) -> list[dict]:
        r = self.http.get("/api/v1/query", params={"query": q})
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def scalar(self, q: str) -> float | None:
        res = self.query(q)
        return float(res[0]["value"][1]) if res else None

    def wait_value(self, q: str, want: float, timeout: float = 30) -> float:
        deadline, got = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            got = self.scalar(q)
            if got is not None and got == pytest.approx(want):
                return got
            time.sleep(0.3)
        targets = self.http.get("/api/v1/targets").text[:2000]
        pytest.fail(f"{q} = {got}, wanted {want} after {timeout}s; targets: {targets}\n{self.tail()}")

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


@pytest.fixture
def revive_metrics_server():
    m = ReviveMetrics(version="0.1.0-scrape-test")
    stop = m.serve(free_port(), addr="127.0.0.1")
    try:
        yield m, stop
    finally:
        stop()


@pytest.fixture
def prometheus_factory(tmp_path):
    started: list[Prometheus] = []

    def start(target: str) -> Prometheus:
        p = Prometheus(prometheus_binary(), tmp_path, target)
        started.append(p)
        p.wait_ready()
        return p

    yield start
    for p in started:
        p.stop()
        assert p.proc.returncode is not None


def test_prometheus_scrapes_revive_metrics(revive_metrics_server, prometheus_factory):
    prometheus_binary()  # fails (not skips) naming the apt package when Prometheus is missing
    m, server = revive_metrics_server
    # four recoveries (MTTR 8, 12, 20, 40 s), one rejection (no MTTR)
    m.observe_incident_closed(closed("i1", Category.gpu_hardware, IncidentOutcome.recovered, 8), "auto")
    m.observe_incident_closed(closed("i2", Category.gpu_hardware, IncidentOutcome.recovered, 12), "auto")
    m.observe_incident_closed(closed("i3", Category.gpu_hardware, IncidentOutcome.recovered, 20), "auto")
    m.observe_incident_closed(closed("i4", Category.crash, IncidentOutcome.recovered, 40), "observe")
    m.observe_incident_closed(closed("i5", Category.hang, IncidentOutcome.rejected, None), "observe")
    for fam in ("gpu", "gpu", "gpu", "crash", "hang"):
        m.incident_opened(fam)
    m.action_issued("drain", 3)
    m.action_issued("requeue", 4)
    m.set_breaker("h200-a", True)
    m.set_approvals([30.0, 90.0])
    m.monitor_pass(0.04, {"/logs/a.out": 4096, "/logs/b.out": 10}, jobs_watched=2)

    prom = prometheus_factory(f"127.0.0.1:{server.port}")
    prom.wait_value('up{job="revive"}', 1)
    prom.wait_value("sum(revive_incidents_total)", 5)

    by_labels = {(r["metric"]["category"], r["metric"]["outcome"], r["metric"]["mode"]): float(r["value"][1])
                 for r in prom.query("revive_incidents_total")}
    assert by_labels == {("gpu_hardware", "recovered", "auto"): 3, ("crash", "recovered", "observe"): 1,
                         ("hang", "rejected", "observe"): 1}
    assert all(r["metric"]["job"] == "revive" for r in prom.query("revive_incidents_total"))

    # Prometheus interpolates inside the bucket: buckets …10, 15, 30, 60… hold 1, 1, 1, 1 incidents
    # median: rank 2 → the (10, 15] bucket, all of it → 15; p90: rank 3.6 → (30, 60] at 0.6 → 48
    assert prom.scalar("histogram_quantile(0.5, sum by (le) (revive_mttr_seconds_bucket))") == pytest.approx(15)
    assert prom.scalar("histogram_quantile(0.9, sum by (le) (revive_mttr_seconds_bucket))") == pytest.approx(48)
    assert prom.scalar("revive_mttr_seconds_count") == 4
    assert prom.scalar("revive_mttr_seconds_sum") == pytest.approx(80)
    assert prom.scalar("revive_mttd_seconds_count") == 5
    assert prom.scalar("revive_mttd_seconds_sum / revive_mttd_seconds_count") == pytest.approx(0.3)
    assert prom.scalar('revive_incident_timings_skipped_total{metric="mttr",reason="missing"}') == 1
    assert prom.scalar('revive_incidents_opened_total{family="gpu"}') == 3
    assert prom.scalar("revive_drains_total") == 3
    assert prom.scalar("revive_requeues_total") == 4
    assert prom.scalar('revive_breaker_open{cluster="h200-a"}') == 1
    assert prom.scalar("revive_approvals_pending") == 2
    assert prom.scalar("revive_oldest_approval_age_seconds") == 90
    assert prom.scalar('revive_monitor_lag_bytes{log="/logs/a.out"}') == 4096
    assert prom.scalar("revive_monitor_lag_bytes_max") == 4096
    assert prom.scalar("revive_jobs_watched") == 2
    assert prom.scalar('revive_build_info{version="0.1.0-scrape-test"}') == 1

    # later changes arrive with the next scrapes
    m.observe_incident_closed(closed("i6", Category.gpu_hardware, IncidentOutcome.recovered, 700), "auto")
    m.set_breaker("h200-a", False)
    prom.wait_value("sum(revive_incidents_total)", 6)
    prom.wait_value('revive_breaker_open{cluster="h200-a"}', 0)
    # 5 MTTRs now: rank 4.5 → the (600, 900] bucket holding 1 → 600 + 300 × 0.5
    assert prom.scalar("histogram_quantile(0.9, sum by (le) (revive_mttr_seconds_bucket))") == pytest.approx(750)
