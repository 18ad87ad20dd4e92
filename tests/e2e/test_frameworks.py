"""End to end with real frameworks: an unmodified Hugging Face Trainer job and an unmodified
PyTorch Lightning job (``examples/hf``, ``examples/lightning``: DDP over gloo, two nodes of the local
Slurm cluster), a fault injected from outside the job (SIGKILL or SIGSTOP of rank 1's process), and
Revive's production worker and monitor. Neither job prints a Revive marker: detection, the hang
window and the resume check come from the frameworks' own lines (``revive/profiles``). These fail
(never skip) when transformers or pytorch-lightning is missing: ``make test`` installs the
``frameworks`` extra."""

from __future__ import annotations

import asyncio
import json

import pytest

from revive.models import IncidentOutcome
from revive.policy import RecoveryPolicy
from revive.scheduler.slurm_cli import SlurmCLI
from tests.helpers import frameworks as fw
from tests.helpers import slurm as hs
from tests.helpers.harness import Harness

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.temporal]


def test_framework_packages_are_installed() -> None:
    import accelerate  # noqa: F401  -- the frameworks extra: fail loudly, never skip
    import pytorch_lightning  # noqa: F401
    import transformers  # noqa: F401


def auto_policy() -> RecoveryPolicy:
    return RecoveryPolicy.model_validate({"mode": "auto", "hang": {"k": 5, "floor": 15}, "verify": {"timeout": 300}})


@pytest.fixture
def job_box(slurm_cluster):
    box: dict[str, str | None] = {"job": None}
    yield box
    hs.cleanup(slurm_cluster, box["job"])


@pytest.mark.parametrize("framework", fw.FRAMEWORKS)
@pytest.mark.parametrize("fault", ["crash", "hang"])
async def test_framework_job_recovers_from_its_own_checkpoint(framework, fault, slurm_cluster, local_env,
                                                               tmp_path, job_box):
    cfg = slurm_cluster
    pol = auto_policy()
    marker = tmp_path / "fault.json"
    async with Harness(cfg, local_env.client, pol, tmp_path) as h:
        job, log, ckpt = fw.submit(cfg, framework, tmp_path / "run", comment=h.comment)
        job_box["job"] = job
        injected = asyncio.create_task(asyncio.to_thread(fw.inject, framework, job, ckpt, fault, marker))
        iid = await h.incident(job, timeout=420)
        rec = await injected
        res = await h.result(iid, timeout=500)
    text = log.read_text(errors="replace")
    assert res.outcome == IncidentOutcome.recovered, (res, text[-3000:])
    assert "=== attempt" not in text and "resumed from checkpoint at iteration" not in text  # no Revive marker
    assert res.category.value == ("crash" if fault == "crash" else "hang"), res
    assert res.executed.value == "restart_in_place", res
    calls = [c[0] for c in h.sched.mutating_calls]
    # one requeue, no drain and no exclusion; a crash seen while Slurm still shows the job RUNNING (the
    # process is exiting) may first get the save-before-requeue signal, which is the runbook's own step
    assert [c for c in calls if c != "signal_job"] == ["requeue"], calls
    assert calls.count("signal_job") <= 1 and (fault == "crash" or "signal_job" not in calls), calls
    # verify proved the resume from the framework's own lines (and the checkpoint it left on disk)
    audit = next(json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines() if iid in x)
    verify = audit["runbook"]["verify"]
    assert verify["rule"] in ("resumed_past_loaded_checkpoint", "past_last_saved_checkpoint"), verify
    saved_before = max(rec["saved_steps"])
    assert res.checkpoint_iteration == saved_before, (res, rec)
    assert verify["first_iteration_after"] > saved_before, verify
    assert verify["resumed_from"] is None or verify["resumed_from"] <= saved_before, verify
    if fault == "hang":  # detected from the framework's own cadence, within the window
        detect_s = res.detected_at.timestamp() - hs.fault_time(marker)
        window = pol.hang.floor.total_seconds()
        assert window <= detect_s + 1 and detect_s < window + 15, detect_s
    live = await SlurmCLI.from_config(cfg).get_job(job)
    assert live.state == "RUNNING" and live.restart_count >= 1
