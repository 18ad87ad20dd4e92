"""A crashed Lightning DDP job (recorded: ``tests/data/progress/lightning/real_crash_2.6.6.log``):
srun holds rank 0's unfinished progress-bar line until the task exits, so bar updates from before the
crash land in the log after the error, after Slurm's step teardown. That flush is not recovery."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord, Trigger, TriggerKind

LOG = Path(__file__).resolve().parents[2] / "data" / "progress" / "lightning" / "real_crash_2.6.6.log"


def bundle(text: str) -> EvidenceBundle:
    line_no = next(i for i, x in enumerate(text.split("\n"), 1) if x.startswith("srun: error: node2: task 1: Killed"))
    trig = Trigger(kind=TriggerKind.log_signature, at=datetime(2026, 12, 1, 12, 53, 34, tzinfo=UTC),
                   signature_id="host.killed", text="srun: error: node2: task 1: Killed", line_no=line_no)
    return EvidenceBundle(job_log=text, trigger=trig,
                          job=JobRecord(job_id="5", nodes=["node1", "node2"], state="RUNNING"))  # srun winding down


def test_bar_lines_flushed_after_the_step_teardown_are_not_recovery():
    text = LOG.read_text(encoding="utf-8")
    assert "CANCELLED AT" in text and text.rstrip("\n").rsplit("\n", 1)[-1].count("%|") >= 1  # the flush
    a = attribute(bundle(text))
    assert a.category.value == "crash" and a.action.value == "restart_in_place", a.explanation


def test_progress_before_any_teardown_still_counts_as_survived():
    text = LOG.read_text(encoding="utf-8")
    head = text[: text.index("slurmstepd-node1: error: *** STEP")]  # the error, then more training, no teardown
    more = "\n".join(f"Epoch {e}: 100%|██████████| 3/3 [00:00<00:00,  4.00it/s, train_loss=0.5]" for e in range(6, 12))
    a = attribute(bundle(head + more + "\n"))
    assert a.category.value == "none", a.explanation
