"""``revive agent`` (typer sub-app): help anywhere, a clear non-zero exit without NVML, and the
commands on the fake NVML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from revive.gpu import agent_cli
from revive.gpu.agent_cli import EXIT_NVML_UNAVAILABLE, app
from revive.gpu.fake_nvml import FakeNvml

from .conftest import FAKE_FIXTURE, nvml_library_present

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[3]


def test_help_works_anywhere():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0, r.output
    for cmd in ("run", "check", "dump", "dcgm"):
        assert cmd in r.output
    for cmd in ("run", "check", "dump", "dcgm"):
        assert runner.invoke(app, [cmd, "--help"]).exit_code == 0


def test_help_as_a_separate_process():
    p = subprocess.run([sys.executable, "-m", "revive.gpu.agent_cli", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "GPU node agent" in p.stdout


@pytest.mark.parametrize("cmd", [["check"], ["dump"], ["run", "--no-metrics"]])
def test_no_nvml_exits_non_zero_with_a_clear_message(monkeypatch, cmd):
    monkeypatch.setattr(agent_cli, "load_nvml",
                        lambda fake: FakeNvml(init_error="NVML_ERROR_LIBRARY_NOT_FOUND"))
    r = runner.invoke(app, cmd)
    assert r.exit_code == EXIT_NVML_UNAVAILABLE
    assert "NVML unavailable: NVML Shared Library Not Found" in r.output
    assert "Traceback" not in r.output


@pytest.mark.skipif(nvml_library_present(), reason="this machine has libnvidia-ml")
def test_no_nvml_on_this_machine_real_pynvml():
    r = runner.invoke(app, ["check"])
    assert r.exit_code == EXIT_NVML_UNAVAILABLE and "NVML unavailable" in r.output


def test_check_on_the_fake():
    r = runner.invoke(app, ["check", "--fake", str(FAKE_FIXTURE), "--node", "gpu-node-07"])
    assert r.exit_code == 0, r.output
    assert "gpu-node-07: 2 GPU(s), driver 550.90.07" in r.output
    assert "unavailable retired_pages_sbe: Not Supported (NVML 3)" in r.output
    r = runner.invoke(app, ["check", "--json", "--fake", str(FAKE_FIXTURE)])
    d = json.loads(r.stdout)
    assert [g["pci_bus_id"] for g in d["gpus"]] == ["00000000:18:00.0", "00000000:2a:00.0"]
    assert d["gpus"][1]["values"]["sm_clock_mhz"] == 1035 and d["gpus"][0]["xid_events"] == "registered"


def test_dump_on_the_fake_is_prometheus_text():
    r = runner.invoke(app, ["dump", "--fake", str(FAKE_FIXTURE), "--node", "n1"])
    assert r.exit_code == 0
    names = {f.name for f in text_string_to_metric_families(r.stdout)}
    assert {"revive_gpu_sm_clock_mhz", "revive_gpu_ecc_errors", "revive_gpu_nvlink_errors"} <= names


def test_bad_fake_fixture_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = runner.invoke(app, ["check", "--fake", str(bad)])
    assert r.exit_code == 2 and "cannot load NVML" in r.output


def test_run_forwards_xid_to_jsonl(tmp_path):
    out = tmp_path / "xid.jsonl"
    r = runner.invoke(app, ["run", "--fake", str(FAKE_FIXTURE), "--node", "gpu-node-07", "--no-metrics",
                            "--xid-jsonl", str(out), "--wait-ms", "10", "--max-events", "1"])
    assert r.exit_code == 0, r.output
    (ev,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert (ev["node"], ev["gpu_index"], ev["xid"], ev["pci_bus_id"]) == ("gpu-node-07", 0, 79, "00000000:18:00.0")


def test_run_writes_xid_as_a_kernel_line_the_attribution_engine_reads(tmp_path):
    """--xid-kernel-log: the agent's Xid events reach Revive as kernel-log evidence (kernel_log.path_template)."""
    from revive.attribution.engine import attribute
    from revive.models import EvidenceBundle, JobRecord

    out = tmp_path / "gpu-node-07.kern"
    r = runner.invoke(app, ["run", "--fake", str(FAKE_FIXTURE), "--node", "gpu-node-07", "--no-metrics",
                            "--xid-kernel-log", str(out), "--wait-ms", "10", "--max-events", "1"])
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert len(lines) == 1 and "NVRM: Xid" in lines[0] and ": 79," in lines[0]
    a = attribute(EvidenceBundle(kernel_logs={"gpu-node-07": lines},
                                 job=JobRecord(job_id="1", nodes=["gpu-node-07", "gpu-node-08"])))
    assert (a.category.value, a.culprit_nodes, a.action.value) == ("gpu_hardware", ["gpu-node-07"], "drain_and_requeue")


def test_run_serves_metrics_on_a_port(tmp_path):
    r = runner.invoke(app, ["run", "--fake", str(FAKE_FIXTURE), "--port", "0", "--addr", "127.0.0.1",
                            "--wait-ms", "10", "--max-events", "1"])
    assert r.exit_code == 0, r.output
    assert "serving /metrics on 127.0.0.1:0" in r.output and "stopped after 1 Xid event(s)" in r.output


def test_dcgm_command(monkeypatch, data_dir):
    texts = {"a": (data_dir / "dcgm_h100_scrape1.prom").read_text(),
             "b": (data_dir / "dcgm_h100_scrape2.prom").read_text()}
    calls = {"n": 0}

    def handler(req):
        calls["n"] += 1
        if req.url.host == "down":
            raise httpx.ConnectError("refused", request=req)
        return httpx.Response(200, text=texts["a" if calls["n"] <= 2 else "b"])

    real = httpx.AsyncClient
    monkeypatch.setattr(httpx, "AsyncClient", lambda **kw: real(transport=httpx.MockTransport(handler), **kw))
    r = runner.invoke(app, ["dcgm", "http://gpu-node-a:9400/metrics", "http://down:9400/metrics",
                            "--count", "2", "--interval", "0"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    kinds = sorted(x["kind"] for x in lines)
    assert kinds.count("scrape_error") == 2
    assert {"xid", "ecc_dbe", "row_remap_failure"} <= set(kinds)
