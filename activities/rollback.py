"""``rollback_checkpoint``: on a person's approval, make the job resume from the checkpoint before
the suspect one (``revive.rollback`` plans the layout's reversible step), and record exactly what
changed and how to undo it.

The checkpoint directory is the job's own (``--comment`` ``{"revive": {"checkpoint_dir": …}}``,
else the ``--save``/``--output_dir``/… folder on its command line: ``revive.profiles.disk``). The
directory is read and changed on the login node through the site's runner (``LocalRunner`` or
``SSHRunner``: the nodes and the login share the file system), with argument lists only — never a
shell string — and every path is ``<checkpoint dir>/<one entry name>``.

Record: ``<root>/<incident_id>.json`` (``RollbackRecord``), written before the first change (so a
crashed activity leaves the undo behind) and again when done. ``revive checkpoint undo
<incident>`` runs ``undo`` from it (``undo_rollback``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.exceptions import ApplicationError

from revive.errors import JobNotFound, SchedulerError
from revive.models import ActionResult, RollbackInput
from revive.rollback import FileOp, RollbackPlan, RollbackRefused, argv_for, describe, plan_rollback, safe_dir, under
from revive.scheduler.base import Scheduler
from revive.scheduler.runners import CommandRunner

_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


class RollbackRecord(BaseModel):
    """What ``rollback_checkpoint`` changed (``<root>/<incident>.json``)."""

    incident_id: str
    cluster: str
    job_id: str
    approved_by: str | None = None
    at: datetime
    plan: RollbackPlan
    done: list[str] = Field(default_factory=list)
    """The operations performed, in order (``revive.rollback.describe``)."""
    completed: bool = False
    undone_at: datetime | None = None


def record_path(root: Path, incident_id: str) -> Path:
    return Path(root) / f"{_SAFE.sub('_', incident_id)}.json"


def load_record(root: Path, incident_id: str) -> RollbackRecord | None:
    """The incident's record, or None when there is none (or it does not parse)."""
    try:
        return RollbackRecord.model_validate_json(record_path(root, incident_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def save_record(root: Path, rec: RollbackRecord) -> None:
    """Write atomically (temp + rename). Raises ``OSError``."""
    p = record_path(root, rec.incident_id)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(rec.model_dump_json(indent=1), encoding="utf-8")
    tmp.replace(p)


async def run_ops(runner: CommandRunner, ops: list[FileOp]) -> list[str]:
    """Run ``ops`` in order; stop at the first failure. Returns the descriptions of those done.
    Raises ``RollbackRefused`` naming the failed one (and what was done before it)."""
    done: list[str] = []
    for op in ops:
        argv, stdin = argv_for(op)
        if op.op == "move" and op.dest:
            rc, _o, _e = await runner.run(["test", "!", "-e", op.dest], timeout_s=20)
            if rc != 0:
                raise RollbackRefused(f"{op.dest} already exists: not moving {op.path} over it (done: {done})")
        rc, _out, err = await runner.run(argv, input=stdin, timeout_s=60)
        if rc != 0:
            raise RollbackRefused(f"{describe(op)} failed (rc {rc}: {err.strip()[:200]}); done before it: {done}")
        done.append(describe(op))
    return done


class RollbackActivities:
    """``rollback_checkpoint`` (changes files in the job's checkpoint directory)."""

    def __init__(self, scheduler: Scheduler, runner: CommandRunner, root: Path, comment_key: str = "revive") -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.root = Path(root)
        """``<state_dir>/rollback``: one record per incident."""
        self.comment_key = comment_key

    async def _dirs(self, job_id: str) -> list[str]:
        from revive.profiles.disk import checkpoint_dirs, comment_checkpoint_dir

        try:
            live = await self.scheduler.get_job(job_id)
        except JobNotFound:
            raise ApplicationError(f"job {job_id} is gone: its checkpoint directory is unknown",
                                   type="JobNotFound", non_retryable=True) from None
        dirs = checkpoint_dirs(live.command)
        if (cd := comment_checkpoint_dir(live.comment, self.comment_key)) is not None:
            dirs.insert(0, cd)
        return list(dict.fromkeys(dirs))

    async def _list(self, d: str) -> list[str] | None:
        rc, out, _err = await self.runner.run(["ls", "-1A", "--", d], timeout_s=30)
        return out.splitlines() if rc == 0 else None

    async def _read(self, path: str) -> str | None:
        rc, out, _err = await self.runner.run(["head", "-c", "256", "--", path], timeout_s=30)
        return out if rc == 0 else None

    async def plan(self, inp: RollbackInput) -> RollbackPlan:
        """The plan for the job's first checkpoint directory that matches the layout. Raises
        ``RollbackRefused`` with every directory's reason."""
        from revive.profiles import load_builtin_profiles

        v = inp.verdict
        if v.suspect is None or v.previous is None:
            raise RollbackRefused("the verdict names no suspect and previous checkpoint")
        prof = load_builtin_profiles().get(v.profile) if v.profile else None
        tracker = prof.checkpoint_layout.tracker_file if prof and prof.checkpoint_layout else None
        why: list[str] = []
        for d in await self._dirs(inp.job.job_id):
            try:
                d = safe_dir(d)
                entries = await self._list(d)
                if entries is None:
                    why.append(f"{d}: unreadable")
                    continue
                text = await self._read(under(d, tracker)) if tracker and tracker in entries else None
                return plan_rollback(v.profile, tracker, d, entries, text, v.suspect, v.previous, inp.incident_id)
            except RollbackRefused as e:
                why.append(str(e))
        raise RollbackRefused("; ".join(why) or "the job names no checkpoint directory (--comment "
                              "checkpoint_dir, --save, --output_dir …)")

    @activity.defn(name="rollback_checkpoint")
    async def rollback_checkpoint(self, inp: RollbackInput) -> ActionResult:
        """Perform the approved step once. Idempotent: a completed record returns ``changed=False``.
        Raises ``ApplicationError`` type ``RollbackRefused`` (non-retryable) when the directory does
        not hold what the layout says or an operation fails (the record says what was done)."""
        have = load_record(self.root, inp.incident_id)
        if have is not None and have.completed:
            return ActionResult(action="rollback_checkpoint", ok=True, changed=False, at=datetime.now(UTC),
                                detail=f"already done: {have.plan.detail}")
        try:
            plan = have.plan if have is not None else await self.plan(inp)
        except (RollbackRefused, SchedulerError) as e:
            raise ApplicationError(f"cannot resume from checkpoint {inp.verdict.previous}: {e}",
                                   type="RollbackRefused", non_retryable=True) from None
        rec = have or RollbackRecord(incident_id=inp.incident_id, cluster=inp.cluster, job_id=inp.job.job_id,
                                     approved_by=inp.approved_by, at=datetime.now(UTC), plan=plan)
        try:
            save_record(self.root, rec)  # the undo exists before the first change
        except OSError as e:
            raise ApplicationError(f"cannot write the rollback record, not changing anything: {e}",
                                   type="RollbackRefused", non_retryable=True) from None
        for op in plan.ops[len(rec.done):]:  # a retry resumes after the last recorded operation
            try:
                rec.done += await run_ops(self.runner, [op])
            except RollbackRefused as e:
                raise ApplicationError(f"{e}; done: {rec.done}", type="RollbackRefused", non_retryable=True) from None
            save_record(self.root, rec)
        rec.completed = True
        save_record(self.root, rec)
        undo = "; ".join(describe(o) for o in plan.undo)
        return ActionResult(
            action="rollback_checkpoint", ok=True, at=datetime.now(UTC),
            commands=[argv_for(o)[0] for o in plan.ops],
            detail=(f"resume from checkpoint {plan.previous} instead of suspect {plan.suspect}"
                    f" (approved by {inp.approved_by or '-'}): {plan.detail}; undo: `revive checkpoint undo "
                    f"{inp.incident_id}` ({undo})"))


async def undo_rollback(runner: CommandRunner, root: Path, incident_id: str) -> RollbackRecord:
    """Run the record's ``undo`` operations and mark it undone. Raises ``RollbackRefused`` when
    there is no record, it was already undone, or an operation fails."""
    rec = load_record(root, incident_id)
    if rec is None:
        raise RollbackRefused(f"no checkpoint change recorded for incident {incident_id} under {root}")
    if rec.undone_at is not None:
        raise RollbackRefused(f"already undone at {rec.undone_at.isoformat()}")
    await run_ops(runner, rec.plan.undo)
    rec.undone_at = datetime.now(UTC)
    save_record(root, rec)
    return rec


__all__ = ["RollbackActivities", "RollbackRecord", "load_record", "record_path", "run_ops", "undo_rollback"]
