"""Session fixture for tests that need the local Slurm cluster (``scripts/cluster-up.sh``).

Import it from ``tests/conftest.py``: ``from tests.fixtures_slurm import slurm_cluster``
(or list ``"tests.fixtures_slurm"`` in ``pytest_plugins``).

``slurm_cluster`` runs ``scripts/cluster-up.sh`` once per session (a no-op when the cluster is
already up with the same settings), yields the ``ClusterConfig`` it wrote, and leaves the cluster
running: CI tears it down (``scripts/cluster-down.sh``). When the cluster cannot start the
fixture FAILS the test (never skips), with the script's output in the message.
The cluster dir and ports follow the script's environment (``REVIVE_CLUSTER_DIR`` …).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from revive.config import ClusterConfig, load_cluster_config

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_UP = ROOT / "scripts" / "cluster-up.sh"


def cluster_dir() -> Path:
    return Path(os.environ.get("REVIVE_CLUSTER_DIR", "/tmp/revive-cluster"))


@pytest.fixture(scope="session")
def slurm_cluster() -> ClusterConfig:
    try:
        proc = subprocess.run(
            [str(CLUSTER_UP)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"scripts/cluster-up.sh did not finish in 300 s: {e.stdout!s}{e.stderr!s}")
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/cluster-up.sh exited {proc.returncode}; the local Slurm cluster is not up:\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return load_cluster_config(cluster_dir() / "cluster.yaml")
