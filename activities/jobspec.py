"""Save a job's spec at detection, so a job that can no longer be requeued can be resubmitted.

``scontrol requeue`` is impossible when the job was submitted with ``--no-requeue`` (slurmctld
answers ``Requested operation is presently disabled``) or when slurmctld has already purged the
finished job (``MinJobAge`` passed, e.g. while a plan waited for approval: ``Invalid job id``).
Revive then resubmits the job from what it saved when the incident opened:

- the batch script (``scontrol write batch_script <id> -``), and
- the job record (``scontrol show job -o``): the options the script may not carry (name,
  partition, node count, tasks, GRES/``TresPerNode``, time limit, working dir, StdOut/StdErr,
  comment, requeue flag, ``ExcNodeList``) and the script's arguments (``Command=``).

Layout (one directory per incident, under ``<state_dir>/jobspec/``)::

    <root>/<incident_id>/job.json     # SavedJobSpec (JobRecord + script arguments + raw line)
    <root>/<incident_id>/script.sh    # the batch script, byte for byte

Limits (Slurm 22.05 without slurmdbd): the *submit environment* (``sbatch --export`` default
ALL) is not recoverable — the resubmitted job gets the worker's environment; script arguments
are recovered by splitting ``Command=`` on whitespace (arguments containing spaces are split);
``--open-mode`` is not reported by scontrol, so the resubmission always appends (it never
truncates the old log).

Activity name: ``save_job_spec``. Register ``JobSpecActivities(scheduler, root).save_job_spec``
on the worker and call it from the incident workflow's gather stage.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field
from temporalio import activity

from activities.blocking import with_heartbeats
from revive.errors import JobNotFound, SchedulerError, SchedulerUnavailable
from revive.models import JobIdentity, JobRecord, JobSpecSaved, SaveJobSpecInput
from revive.scheduler.base import Scheduler
from revive.scheduler.hostlist import compress_hostlist

ENV_NOTE = ("the submit environment cannot be recovered on Slurm 22.05 without slurmdbd: the "
            "resubmitted job runs with the Revive worker's environment")

_SAFE_ID = re.compile(r"[^A-Za-z0-9_.\-]")
_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE"}


class SavedJobSpec(BaseModel):
    """What ``job.json`` holds."""

    incident_id: str
    cluster: str
    saved_at: datetime
    """UTC."""
    job: JobRecord
    script_args: list[str] = Field(default_factory=list)
    """Arguments after the script in ``Command=`` (whitespace-split)."""
    raw: str | None = None
    """Older specs kept the raw ``scontrol show job -o`` line; no longer written (``job.command``)."""
    script_file: str = "script.sh"


def spec_dir(root: Path, incident_id: str) -> Path:
    """``<root>/<incident_id>`` with unsafe characters replaced by ``_``."""
    return Path(root) / _SAFE_ID.sub("_", incident_id)


def write_job_spec(root: Path, spec: SavedJobSpec, script: str) -> Path:
    """Write ``script.sh`` then ``job.json`` atomically (temp file + rename). Returns the dir.
    Raises ``OSError``."""
    d = spec_dir(root, spec.incident_id)
    d.mkdir(parents=True, exist_ok=True)
    for name, text in ((spec.script_file, script), ("job.json", spec.model_dump_json(indent=1))):
        tmp = d / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, d / name)
    return d


def load_job_spec(root: Path, incident_id: str) -> tuple[SavedJobSpec, str] | None:
    """The incident's saved spec and script, or None when nothing (readable) was saved."""
    d = spec_dir(root, incident_id)
    try:
        spec = SavedJobSpec.model_validate_json((d / "job.json").read_text(encoding="utf-8"))
        script = (d / spec.script_file).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    return spec, script


def find_job_spec(root: Path, job: JobIdentity) -> tuple[SavedJobSpec, str] | None:
    """The newest saved spec whose job matches ``job`` (id, and user/name where both are known),
    for callers that do not know the incident id (``check_identity``). None when none matches."""
    best: tuple[SavedJobSpec, str] | None = None
    try:
        dirs = [p for p in Path(root).iterdir() if p.is_dir()]
    except OSError:
        return None
    for d in dirs:
        got = load_job_spec(root, d.name)
        if got is None:
            continue
        j = got[0].job
        if j.job_id != job.job_id:
            continue
        if job.user and j.user and job.user != j.user:
            continue
        if job.name and j.name and job.name != j.name:
            continue
        if best is None or got[0].saved_at > best[0].saved_at:
            best = got
    return best


def command_args(command: str | None) -> list[str]:
    """Arguments after the script path in ``Command=`` (``(null)`` for a script read from stdin)."""
    if not command or command.strip() in ("(null)", ""):
        return []
    return command.split()[1:]


def with_args(script: str, args: list[str]) -> str:
    """The script with ``set -- <args>`` inserted after its leading comment block (so ``#SBATCH``
    lines still parse), restoring positional parameters for a script submitted on stdin."""
    if not args:
        return script
    lines = script.splitlines(keepends=True)
    i = 0
    while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("#")):
        i += 1
    ins = f"# revive: arguments of the original submission\nset -- {shlex.join(args)}\n"
    return "".join(lines[:i]) + ins + "".join(lines[i:])


def _gres(tres_per_node: str | None) -> str | None:
    if not tres_per_node:
        return None
    items = [t.strip() for t in tres_per_node.split(",") if t.strip()]
    items = [t[len("gres:"):] if t.startswith("gres:") else t for t in items]
    items = [t.replace("gres/", "", 1) if t.startswith("gres/") else t for t in items]
    return ",".join(items) or None


def _current_user() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None


def sbatch_options(job: JobRecord, exclude: list[str], *, submit_user: str | None = None) -> list[str]:
    """``sbatch`` options (argv items) that rebuild ``job`` on resubmission.

    Carries name, partition, node count, task count, GRES (``TresPerNode``), time limit (unless
    unlimited), working dir, StdOut/StdErr (expanded paths of the old job), ``--open-mode=append``
    (always: never truncate the old log), comment, the requeue flag, and ``--exclude`` = the old
    ``ExcNodeList`` ∪ ``exclude``. ``--uid=<user>`` is added when the job's user differs from
    ``submit_user`` (default: the user running Revive), so root resubmits as the job's owner.
    Pure; raises nothing.
    """
    o: list[str] = []
    if job.name:
        o.append(f"--job-name={job.name}")
    if job.partition:
        o.append(f"--partition={job.partition}")
    if job.num_nodes:
        o.append(f"--nodes={job.num_nodes}")
    if job.num_tasks:
        o.append(f"--ntasks={job.num_tasks}")
    if g := _gres(job.tres_per_node):
        o.append(f"--gres={g}")
    if job.time_limit and job.time_limit.upper() not in _UNLIMITED:
        o.append(f"--time={job.time_limit}")
    if job.work_dir:
        o.append(f"--chdir={job.work_dir}")
    if job.std_out:
        o.append(f"--output={job.std_out}")
    if job.std_err and job.std_err != job.std_out:
        o.append(f"--error={job.std_err}")
    o.append("--open-mode=append")
    if job.comment:
        o.append(f"--comment={job.comment}")
    if job.requeue is not None:
        o.append("--requeue" if job.requeue else "--no-requeue")
    exc = sorted(set(job.exc_nodes) | set(exclude))
    if exc:
        o.append(f"--exclude={compress_hostlist(exc)}")
    me = submit_user if submit_user is not None else _current_user()
    if job.user and me and job.user != me:
        o.append(f"--uid={job.user}")
    return o


class JobSpecActivities:
    """``save_job_spec``: read-only on the cluster, writes under ``root`` (``<state_dir>/jobspec``)."""

    def __init__(self, scheduler: Scheduler, root: Path) -> None:
        self.scheduler = scheduler
        self.root = Path(root)

    @activity.defn(name="save_job_spec")
    async def save_job_spec(self, inp: SaveJobSpecInput) -> JobSpecSaved:
        """Save the job's batch script and record under ``<root>/<incident_id>/``.

        Idempotent: an existing spec for the incident is kept (the first save is the one taken
        at detection). A purged job (``JobNotFound``) or an unreadable script is reported with
        ``saved=False``, never raised; ``SchedulerUnavailable`` propagates (retryable).
        Heartbeats every 5 s while it waits on the scheduler (the incident gives it a 15 s
        heartbeat timeout: a killed worker's save is retried then, not after its 60 s
        start-to-close, while the incident waits for it beside the gather).
        """
        return await with_heartbeats(self._save_job_spec(inp))

    async def _save_job_spec(self, inp: SaveJobSpecInput) -> JobSpecSaved:
        have = load_job_spec(self.root, inp.incident_id)
        if have is not None:
            return JobSpecSaved(saved=True, path=str(spec_dir(self.root, inp.incident_id)),
                                detail="already saved")
        try:
            job = await self.scheduler.get_job(inp.job_id)
        except JobNotFound as e:
            return JobSpecSaved(saved=False, detail=f"job record unavailable: {e}")
        try:
            script = await self.scheduler.batch_script(inp.job_id)
        except JobNotFound as e:
            return JobSpecSaved(saved=False, detail=f"batch script unavailable: {e}")
        except SchedulerUnavailable:
            raise
        except SchedulerError as e:
            return JobSpecSaved(saved=False, detail=f"batch script unavailable: {e}")
        if not script.strip():
            return JobSpecSaved(saved=False, detail="batch script is empty (not a batch job?)")
        spec = SavedJobSpec(incident_id=inp.incident_id, cluster=inp.cluster, saved_at=datetime.now(UTC),
                            job=job, script_args=command_args(job.command))
        try:
            d = write_job_spec(self.root, spec, script)
        except OSError as e:
            return JobSpecSaved(saved=False, detail=f"cannot write job spec: {e}")
        return JobSpecSaved(saved=True, path=str(d), detail=f"saved script ({len(script)} B) and job record")


__all__ = [
    "ENV_NOTE", "JobSpecActivities", "SavedJobSpec", "command_args",
    "find_job_spec", "load_job_spec", "sbatch_options", "spec_dir", "with_args", "write_job_spec",
]

