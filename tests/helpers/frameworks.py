"""Real-framework jobs for the e2e tests: ``cli.framework_jobs`` (shared with ``make demo FRAMEWORK=…``)
with the tests' own Slurm environment."""

from __future__ import annotations

from pathlib import Path

from cli.framework_jobs import FRAMEWORKS, inject, rank_process, saved_steps
from cli.framework_jobs import submit as _submit
from tests.helpers.slurm import slurm_env

__all__ = ["FRAMEWORKS", "inject", "rank_process", "saved_steps", "submit"]


def submit(cfg, framework: str, out_dir: Path, comment: str) -> tuple[str, Path, Path]:
    """``cli.framework_jobs.submit`` as the cluster's user (the tests' Slurm environment)."""
    return _submit(slurm_env(cfg), framework, out_dir, comment)
