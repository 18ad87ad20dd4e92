"""A log with no Slurm record that names the one host it ran on (catalog-free engine rule).

Incidents as an operator meets them in a bug report or a bare container log: no node list, but a
banner (``Hostname gpu-node-007``), torch.elastic's failure table (``host : …``) or a scheduler's
``scheduled on …`` line says where the job ran. A node-local fault is placed on that host; a log
that names two hosts places nothing; a bind address (``--host 0.0.0.0``) is not a host."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle

NVLINK_FAULT = ("torch.AcceleratorError: CUDA error: Invalid access of peer GPU memory over nvlink or a "
                "hardware error\n")


def run(log: str) -> object:
    return attribute(EvidenceBundle(job_log=log))


def test_a_hardware_fault_is_placed_on_the_one_host_the_banner_names():
    a = run("Torch distributed initialized. Hostname gpu-node-007, pid 15276, rank 0 / size 4\n" + NVLINK_FAULT)
    assert a.domain.value == "hardware", a.explanation
    assert a.culprit_nodes == ["gpu-node-007"], a.explanation


def test_a_scheduler_line_names_the_host_too():
    a = run("[hived] task index 307 scheduled on gpu-node-011, 1 GPU (minor 0) allocated\n" + NVLINK_FAULT)
    assert a.culprit_nodes == ["gpu-node-011"], a.explanation


def test_a_log_naming_two_hosts_places_the_fault_nowhere():
    a = run("host: gpu-node-007 rank 0\nhost: gpu-node-008 rank 1\n" + NVLINK_FAULT)
    assert a.domain.value == "hardware"
    assert a.culprit_nodes == [], a.explanation


def test_a_bind_address_on_the_command_line_is_not_a_host():
    a = run("$ vllm serve /model --host 0.0.0.0 --port 8082\n(host gpu-node-003, 4 x A100)\n" + NVLINK_FAULT)
    assert a.culprit_nodes == ["gpu-node-003"], a.explanation


def test_an_application_error_names_no_culprit_even_on_one_host():
    a = run("Hostname gpu-node-007\nTraceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
            "KeyError: 'optimizer'\n")
    assert a.culprit_nodes == [], a.explanation
