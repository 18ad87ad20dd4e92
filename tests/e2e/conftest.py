"""Access modes for the end-to-end tests: ``local`` (Revive runs the Slurm CLI on this machine),
``rest`` (reads from slurmrestd, actions through the CLI) and ``ssh`` (Revive reaches the cluster
ONLY through the SSH login node started by ``scripts/sshd-up.sh``).

In ``ssh`` mode the test process's PATH starts with failing, recording stand-ins for every Slurm
command, so any Slurm call the worker or the monitor made locally would fail the incident and is
listed; the test asserts none was made. The tests' own cluster operations (sbatch of the training
job, checks with scontrol) act as the cluster's user, not as Revive: ``tests.helpers.slurm`` drops
the stand-ins from the PATH it uses.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from revive.config import ClusterConfig, load_cluster_config
from tests.fixtures_slurm import ROOT, cluster_dir

SLURM_COMMANDS = ("scontrol", "squeue", "sacct", "sbatch", "scancel", "srun", "sinfo", "salloc", "sdiag")


@pytest.fixture(scope="session")
def ssh_login(slurm_cluster: ClusterConfig) -> Path:
    """The login node (scripts/sshd-up.sh); returns the SSH-mode cluster config path."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "sshd-up.sh")], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        pytest.fail(f"scripts/sshd-up.sh exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    path = cluster_dir() / "cluster-ssh.yaml"
    if not path.exists():
        pytest.fail(f"{path} is missing: scripts/cluster-up.sh writes it")
    return path


@pytest.fixture(params=["local", "rest", "ssh"])
def cluster(request, slurm_cluster: ClusterConfig, tmp_path_factory, monkeypatch):  # noqa: ANN201
    """The cluster config for the test's access mode (see the module docstring); ``rest``: local
    access, with every job and node read from slurmrestd (JWT) instead of the CLI."""
    if request.param == "local":
        yield slurm_cluster
        return
    if request.param == "rest":
        yield slurm_cluster.model_copy(update={"scheduler": slurm_cluster.scheduler.model_copy(update={"read": "rest"})})
        return
    cfg_path = request.getfixturevalue("ssh_login")
    standins = tmp_path_factory.mktemp("no-local-slurm")
    calls = standins / "calls.log"
    for c in SLURM_COMMANDS:
        p = standins / c
        p.write_text(f'#!/bin/sh\necho "{c} $*" >> "{calls}"\necho "{c}: Revive must not run Slurm locally in SSH '
                     f'mode" >&2\nexit 97\n')
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{standins}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("REVIVE_TEST_NO_SLURM_DIR", str(standins))
    yield load_cluster_config(cfg_path)
    made = calls.read_text() if calls.exists() else ""
    assert made == "", f"Slurm commands ran locally in SSH mode:\n{made}"
