"""Root conftest. Makes the repository root importable (tests run with --import-mode=importlib)
and loads the shared fixtures: Temporal (``ts_env``, ``local_env``) and the local Slurm cluster
(``slurm_cluster``)."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

pytest_plugins = ["tests.fixtures_temporal", "tests.fixtures_slurm"]
