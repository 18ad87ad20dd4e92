"""``revive checkpoint undo <incident>`` as an operator runs it (a real subprocess): it reads the
record ``rollback_checkpoint`` left and puts the suspect checkpoint back; a second undo and an
unknown incident are clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from activities.rollback import RollbackActivities
from revive.models import JobIdentity, JobRecord, LoopVerdict, RollbackInput
from revive.scheduler.fake import FakeScheduler
from revive.scheduler.runners import LocalRunner

ROOT = Path(__file__).resolve().parents[2]


def revive(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


async def test_undo_puts_the_suspect_hf_checkpoint_back(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: cli\naudit_file: {tmp_path}/a.jsonl\nstate_dir: {tmp_path}/s\n")
    out = tmp_path / "hf"
    for n in (10, 20):
        (out / f"checkpoint-{n}").mkdir(parents=True)
    sched = FakeScheduler(jobs=[JobRecord(job_id="7", state="FAILED", command=f"/x/t.sbatch --output_dir {out}")])
    await RollbackActivities(sched, LocalRunner(), tmp_path / "s" / "rollback").rollback_checkpoint(
        RollbackInput(incident_id="cli-7-a1", cluster="cli", job=JobIdentity(job_id="7"),
                      verdict=LoopVerdict(suspect=20, previous=10, profile="hf_trainer")))
    assert (out / "checkpoint-20.revive-suspect").is_dir()
    dry = revive("checkpoint", "undo", "cli-7-a1", "-c", str(cfg), "--dry-run")
    assert dry.returncode == 0 and "mv -f -T" not in dry.stdout and "checkpoint-20.revive-suspect" in dry.stdout
    assert (out / "checkpoint-20.revive-suspect").is_dir()
    r = revive("checkpoint", "undo", "cli-7-a1", "-c", str(cfg))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-10", "checkpoint-20"]
    again = revive("checkpoint", "undo", "cli-7-a1", "-c", str(cfg))
    assert again.returncode == 1 and "already undone" in again.stderr
    none = revive("checkpoint", "undo", "cli-9-a0", "-c", str(cfg))
    assert none.returncode == 1 and "no checkpoint change recorded" in none.stderr
