from __future__ import annotations

import json
from pathlib import Path

from revive.attribution.cases import expand_nodelist, load_case
from revive.attribution.engine import attribute

CASES = Path(__file__).resolve().parents[2] / "data" / "cases"


def test_case_folder_with_dmesg_and_slurm():
    b = load_case(CASES / "024-xid79-fallen-off-bus-gsp")
    assert b.job and b.job.job_id == "55120" and b.job.nodes == ["gpu-node-001"]
    assert b.job.state == "FAILED" and b.job.exit_code == "1:0"
    assert "" in b.kernel_logs and any("Xid" in line for line in b.kernel_logs[""])
    assert "fallen off the bus" not in b.job_log


def test_per_node_dmesg_and_gpu_metrics(tmp_path):
    (tmp_path / "job.log").write_text("iteration 1/10 | step_time_ms 20\n")
    (tmp_path / "dmesg.node2.log").write_text("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    (tmp_path / "slurm.json").write_text(json.dumps({"job_id": 7, "nodes": "node[1-2]", "state": "FAILED",
                                                    "exit_code": "1:0", "node_states": {"node2": "DOWN"}}))
    (tmp_path / "gpu_metrics.csv").write_text(
        "timestamp, name, pci.bus_id, index, uuid, utilization.gpu [%], memory.used [MiB]\n"
        "2026/11/29 15:04:00.000, NVIDIA H100, 00000000:3B:00.0, 1, GPU-abc, 97 %, 70000 MiB\n")
    b = load_case(tmp_path)
    assert b.job.nodes == ["node1", "node2"]
    assert b.kernel_logs == {"node2": ["NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."]}
    assert b.node_states == {"node2": "DOWN"}
    assert b.gpu_metrics[0].index == 1 and b.gpu_metrics[0].uuid == "GPU-abc"
    assert b.gpu_metrics[0].metrics["utilization.gpu"] == 97.0
    a = attribute(b)
    assert a.culprit_nodes == ["node2"] and a.action.value == "drain_and_requeue"
    assert a.gpus and a.gpus[0].index == 1 and a.gpus[0].uuid == "GPU-abc"


def test_trigger_json(tmp_path):
    (tmp_path / "job.log").write_text("iteration 1/10 | step_time_ms 20\n")
    (tmp_path / "trigger.json").write_text(json.dumps({"kind": "no_progress", "at": "2026-11-29T15:10:00Z",
                                                      "since": "2026-11-29T15:04:00Z", "threshold_s": 300}))
    a = attribute(load_case(tmp_path))
    assert (a.category.value, a.action.value) == ("hang", "restart_in_place")


def test_plain_log_file(tmp_path):
    p = tmp_path / "run.out"
    p.write_text("[rank3]: OSError: [Errno 28] No space left on device\n")
    b = load_case(p)
    assert b.job_log_source == "run.out"
    assert attribute(b).category.value == "io_error"


def test_missing_path_gives_note():
    b = load_case("/nonexistent/revive/case")
    assert b.notes and attribute(b).category.value == "none"


def test_binary_file_gives_note(tmp_path):
    p = tmp_path / "core"
    p.write_bytes(bytes(range(256)) * 400)
    b = load_case(p)
    assert b.notes and b.job_log == ""


def test_invalid_utf8_and_bad_json(tmp_path):
    (tmp_path / "job.log").write_bytes(b"\xff\xfe ok \xc3\x28\nsrun: error: Node failure on n1\n")
    (tmp_path / "slurm.json").write_text("{not json")
    (tmp_path / "gpu_metrics.csv").write_bytes(b"\x00\x01garbage")
    b = load_case(tmp_path)
    assert b.job is None and b.notes
    assert attribute(b).category.value == "node_failure"


def test_long_lines_are_capped(tmp_path):
    (tmp_path / "job.log").write_text("x" * 100000 + "\n")
    b = load_case(tmp_path)
    assert max(len(line) for line in b.job_log.split("\n")) <= 4096


def test_expand_nodelist():
    assert expand_nodelist("gpu-node-[001-003,007],login1") == [
        "gpu-node-001", "gpu-node-002", "gpu-node-003", "gpu-node-007", "login1"]
    assert expand_nodelist(["a", "b[1-2]"]) == ["a", "b1", "b2"]
    assert expand_nodelist(None) == []


def _straggler_log() -> str:
    times = [25.0, 25.1, 24.9, 25.0] + [28.0] * 12
    return "\n".join(f"iteration {i + 1}/400 | loss 0.9 | step_time_ms {t}" for i, t in enumerate(times)) + "\n"


def test_straggler_names_slow_node_from_gpu_metrics(tmp_path):
    (tmp_path / "job.log").write_text(_straggler_log())
    rows = ["timestamp, node, pci.bus_id, index, clocks.sm [MHz]"]
    for node, clk in (("n1", 1980), ("n2", 1975), ("n3", 1410), ("n4", 1980)):
        for idx in range(2):
            rows.append(f"2026/11/29 15:04:00.000, {node}, 00000000:3B:00.0, {idx}, {clk} MHz")
    (tmp_path / "gpu_metrics.csv").write_text("\n".join(rows) + "\n")
    a = attribute(load_case(tmp_path))
    assert (a.category.value, a.domain.value, a.culprit_nodes, a.action.value) == (
        "straggler", "hardware", ["n3"], "requeue_exclude_nodes")


def test_straggler_without_metrics_names_no_node(tmp_path):
    (tmp_path / "job.log").write_text(_straggler_log())
    a = attribute(load_case(tmp_path))
    assert (a.category.value, a.culprit_nodes) == ("straggler", [])
