"""``revive report`` on synthetic audit records with answers worked out by hand (see each comment)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from revive import report as rr

ROOT = Path(__file__).resolve().parents[2]
D1 = datetime(2026, 11, 20, tzinfo=UTC)
D2 = datetime(2026, 11, 21, tzinfo=UTC)


def at(day: datetime, hms: str) -> datetime:
    h, m, s = map(int, hms.split(":"))
    return day + timedelta(hours=h, minutes=m, seconds=s)


def rec(iid, job, partition, fault, detected, outcome, resumed=None, closed=None, tres=None, nodes=1,
        ckpt=None, last_it=None, step_ms=None, culprits=(), drained=(), job_record=True) -> dict:
    closed = closed or resumed or detected
    lp = {"rank 0": f"iteration {last_it}/1000 | loss 0.5 | step_time_ms {step_ms}"} if last_it else {}
    r = {"incident_id": iid, "cluster": "c", "job_id": job, "attempt": 0, "mode": "auto", "partition": partition,
         "trigger": {"kind": "job_state", "at": detected.isoformat()},
         "result": {"incident_id": iid, "outcome": outcome, "detected_at": detected.isoformat(),
                    "fault_time": fault.isoformat() if fault else None,
                    "resumed_at": resumed.isoformat() if resumed else None, "closed_at": closed.isoformat(),
                    "culprit_nodes": list(culprits), "checkpoint_iteration": ckpt, "job_id": job},
         "plan": {"drain_nodes": list(drained)}, "runbook": {"runbook": "x"} if outcome in ("recovered", "not_recovered") else None,
         "last_progress": lp, "policy": {}}
    if job_record:
        r["job"] = {"job_id": job, "nodes": [f"n{i}" for i in range(nodes)], "num_nodes": nodes,
                    "tres_per_node": tres, "partition": partition}
    return r


def records() -> list[dict]:
    return [
        # A: 2 nodes × gres/gpu:8 = 16 GPUs; window 10:00:00 → resumed 10:10:00 + (150-100) it × 2 s = 10:11:40
        #    = 700 s → 3.1111 GPU-h; MTTD 30 s, MTTR 600 s
        rec("A", "100", "gpu", at(D1, "10:00:00"), at(D1, "10:00:30"), "recovered", resumed=at(D1, "10:10:00"),
            tres="gres/gpu:8", nodes=2, ckpt=100, last_it=150, step_ms=2000, culprits=["n2"], drained=["n2"]),
        # B: same job, fault inside A's window; window 10:05:00 → 10:15:00 + 10 × 2 s = 10:15:20; only
        #    10:11:40 → 10:15:20 = 220 s is new → 0.9778 GPU-h (job 100 total 920 s × 16 = 4.0889, not 1320 s)
        rec("B", "100", "gpu", at(D1, "10:05:00"), at(D1, "10:05:10"), "recovered", resumed=at(D1, "10:15:00"),
            tres="gres/gpu:8", nodes=2, ckpt=150, last_it=160, step_ms=2000),
        # C: 4 nodes, no GPU TRES → 4 GPUs assumed; never resumed: 12:00 → closed 12:30 = 1800 s → 2.0 GPU-h
        rec("C", "200", "gpu", at(D1, "12:00:00"), at(D1, "12:01:00"), "not_recovered", closed=at(D1, "12:30:00"),
            nodes=4),
        # D: rejected, 1 node × gres:gpu:a100:4; 13:00 → closed 13:05 = 300 s × 4 → 0.3333 GPU-h
        rec("D", "300", "gpu", at(D1, "13:00:00"), at(D1, "13:00:20"), "rejected", closed=at(D1, "13:05:00"),
            tres="gres:gpu:a100:4"),
        # E: gpu=8, 120 s → 0.2667 GPU-h
        rec("E", "400", "big", at(D2, "09:00:00"), at(D2, "09:00:05"), "recovered", resumed=at(D2, "09:02:00"),
            tres="gpu=8", culprits=["n7"], drained=["n7"]),
        # F: no job record → 1 GPU; 300 s → 0.0833 GPU-h; blames n7 after n7 was resumed
        rec("F", "401", "big", at(D2, "11:00:00"), at(D2, "11:00:15"), "recovered", resumed=at(D2, "11:05:00"),
            culprits=["n7"], job_record=False),
    ]


RESUMES = [
    {"node": "n2", "at": at(D1, "11:00:00").isoformat(), "incident_id": "A"},   # nothing blamed n2 later: false
    {"node": "n7", "at": at(D2, "10:00:00").isoformat(), "incident_id": "E"},   # F blamed n7 later: not false
]


def test_percentile_matches_numpy_linear():
    assert rr.percentile([10, 20, 30, 60], 50) == 25
    assert rr.percentile([10, 20, 30, 60], 95) == pytest.approx(55.5)
    assert rr.percentile([], 50) is None and rr.percentile([7], 95) == 7


def test_gpus_from_tres():
    assert rr.gpus_per_node("gres/gpu:8") == 8 and rr.gpus_per_node("gres:gpu:a100:4") == 4
    assert rr.gpus_per_node("cpu=4,gpu=8") == 8 and rr.gpus_per_node("cpu=4") is None and rr.gpus_per_node(None) is None


def test_report_known_answers():
    rep = rr.build(records() + [records()[0]], RESUMES, until=at(D2, "23:00:00"))  # A twice: counted once
    g = {(x["period"], x["partition"]): x for x in rep.groups}
    d1 = g[("2026-11-20", "gpu")]
    assert d1["incidents"] == 4 and d1["recovered"] == 2 and d1["runbooks_run"] == 3
    assert d1["recovery_rate"] == pytest.approx(0.667, abs=1e-3)
    assert (d1["mttd_p50_s"], d1["mttd_p95_s"]) == (25.0, 55.5)
    assert (d1["mttr_p50_s"], d1["mttr_p95_s"]) == (600.0, 600.0)
    assert d1["false_isolations"] == 1 and d1["drained_nodes"] == 1
    assert d1["gpu_h_lost"] == pytest.approx(3.1111 + 0.9778 + 2.0 + 0.3333, abs=1e-3)
    d2 = g[("2026-11-21", "big")]
    assert d2["incidents"] == 2 and d2["recovery_rate"] == 1.0
    assert (d2["mttd_p50_s"], d2["mttd_p95_s"]) == (10.0, 14.5)
    assert (d2["mttr_p50_s"], d2["mttr_p95_s"]) == (210.0, 291.0)
    assert d2["false_isolations"] == 0
    assert d2["gpu_h_lost"] == pytest.approx(0.2667 + 0.0833, abs=1e-3)
    jobs = {j["job_id"]: j for j in rep.jobs}
    assert jobs["100"]["gpu_h_lost"] == pytest.approx(920 / 3600 * 16, abs=1e-3)  # 4.0889, overlap not doubled
    assert jobs["100"]["iterations_lost"] == 60 and jobs["100"]["gpus"] == [16]
    assert jobs["100"]["downtime_h"] == pytest.approx(900 / 3600, abs=1e-4)  # 10:00 → 10:15, overlap once
    assert jobs["200"]["iterations_lost"] is None  # no progress lines: unknown, not 0
    assert jobs["200"]["gpus_source"] == ["assumed 1 per node"] and jobs["200"]["open_ended"]
    inc = {x.incident_id: x for x in rep.incidents}
    assert inc["A"].recompute_s == 100 and inc["A"].counted_gpu_h == pytest.approx(700 / 3600 * 16)
    assert inc["B"].counted_gpu_h == pytest.approx(220 / 3600 * 16)
    assert inc["F"].gpus == 1 and inc["F"].gpus_source == "assumed 1 per node"
    assert [f["node"] for f in rep.false_isolations] == ["n2"]
    assert any("assumed 1 GPU per node" in n for n in rep.notes)
    week = rr.build(records(), RESUMES, period="week", until=at(D2, "23:00:00"))
    assert {x["period"] for x in week.groups} == {"2026-W47"}


def test_cli_report_json_table_and_png(tmp_path):
    audit = tmp_path / "audit.jsonl"
    audit.write_text("\n".join(json.dumps(r) for r in records()) + "\nnot json\n")
    for r in RESUMES:
        rr.record_resume(audit, r["node"], f"revive:{r['incident_id']} gpu_hardware", "revive:",
                         at=datetime.fromisoformat(r["at"]))
    assert rr.read_resumes(audit)[0]["incident_id"] == "A"
    png = tmp_path / "report.png"
    base = [sys.executable, "-m", "cli.main", "report", "--audit", str(audit)]
    r = subprocess.run([*base, "--json", "--png", str(png)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert sum(g["incidents"] for g in data["groups"]) == 6
    assert {j["job_id"]: j["gpu_h_lost"] for j in data["jobs"]}["100"] == pytest.approx(4.0889, abs=1e-3)
    assert "skipped 1 unreadable line" in r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    r = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=120, env={"COLUMNS": "200",
                                                                                          "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "2026-11-20" in r.stdout and "67%" in r.stdout and "4.09" in r.stdout and "goodput ledger" in r.stdout


def test_job_ids_reused_on_a_fresh_cluster_stay_different_jobs() -> None:
    from revive.report import job_key_of

    a = job_key_of("local-1-20261201T112303-a0-gpu", "local", "1")
    b = job_key_of("local-1-20261201T112337-a1-crash", "local", "1")
    assert a == "local-1-20261201T112303" and b == "local-1-20261201T112337" and a != b
    assert job_key_of("odd-id", "c", "7") == "c-7"
