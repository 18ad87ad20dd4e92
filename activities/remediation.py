"""Act stage: drain, requeue (with or without exclusions), hang diagnostics, the identity check.

Requeue impossible → resubmit: when the job was submitted with ``--no-requeue`` (slurmctld:
``Requested operation is presently disabled``) or was purged after ``MinJobAge`` (``JobNotFound``),
``requeue_job`` resubmits it with ``sbatch`` from the spec saved at detection
(``activities.jobspec``: batch script + job record + exclusions) and links the new job id in
``ActionResult.new_job_id``. The submit environment cannot be recovered on 22.05 without slurmdbd;
the result's ``detail`` says so.

Every activity that changes the cluster checks live state first, so a retried activity never acts
twice (``ActionResult.changed`` is False when nothing was left to do), and checks that the live job
is still the incident's job before acting.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.blocking import with_heartbeats
from activities.jobspec import (
    ENV_NOTE,
    JobSpecActivities,
    SavedJobSpec,
    find_job_spec,
    load_job_spec,
    sbatch_options,
    spec_dir,
    with_args,
)
from revive import chaos
from revive import metrics as rm
from revive.errors import JobNotFound, SchedulerCommandError, SchedulerError
from revive.models import (
    TERMINAL,
    ActionResult,
    CheckIdentityInput,
    DependentsInput,
    DiagnoseInput,
    DrainInput,
    JobIdentity,
    JobRecord,
    JobState,
    ModeInput,
    RequeueInput,
    SaveJobSpecInput,
    SignalJobInput,
)
from revive.scheduler.base import Scheduler

REQUEUE_DISABLED = "presently disabled"
"""slurmctld's answer to ``scontrol requeue`` for a job submitted with ``--no-requeue``."""
RESUBMITTED_FILE = "resubmitted.json"
DEPENDENTS_FILE = "dependents.json"
"""``<spec dir>/dependents.json``: the dependents ``_resubmit`` held, written before the holds so a
retried activity re-points and releases them (``{"old": id, "jobs": {dep id: Dependency value}}``)."""



_PIDS_BY_ENV = r"""exec 2>/dev/null
for e in /proc/[0-9]*/environ; do
  p=${e%/environ}; p=${p#/proc/}
  tr '\0' '\n' < "$e" 2>/dev/null | grep -qx "SLURM_JOB_ID=$1" || continue
  tr '\0' '\n' < "$e" 2>/dev/null | grep -qx "SLURMD_NODENAME=$2" || continue
  echo "$p"
done"""
"""Pids of the tasks of job ``$1`` on node ``$2`` (Slurm sets both variables in every task)."""


def _task_ref(job_id: str) -> tuple[str, str] | None:
    """(ArrayJobId, ArrayTaskId) of an array task id ``123_4``, else None."""
    from revive.scheduler.arrays import parse_job_ref

    try:
        ref = parse_job_ref(job_id)
    except ValueError:
        return None
    return (ref.job, ref.task) if ref.is_task and ref.task else None


def _read_dependents(path: Path, old_id: str) -> HeldDependents:
    """The dependents ``_hold_dependents`` recorded for ``old_id`` (empty when none or unreadable)."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return HeldDependents()
    if not isinstance(rec, dict) or rec.get("old") != old_id or not isinstance(rec.get("jobs"), dict):
        return HeldDependents()
    return HeldDependents(jobs={str(k): str(v) for k, v in rec["jobs"].items()},
                          held_by_others={str(x) for x in rec.get("held_by_others") or []})


@dataclass
class HeldDependents:
    """The pending jobs that waited on a resubmitted job: ``jobs`` = {id: its ``Dependency=`` value
    at hold time}; ``held_by_others`` = those already held before Revive (re-pointed, never released)."""

    jobs: dict[str, str] = field(default_factory=dict)
    held_by_others: set[str] = field(default_factory=set)


def identity_problem(want: JobIdentity, live: JobRecord) -> str | None:
    """Why ``live`` is not the incident's job, or None."""
    if live.job_id != want.job_id:
        return f"job id {live.job_id} != {want.job_id}"
    if want.user and live.user and live.user != want.user:
        return f"user {live.user} != {want.user}"
    if want.name and live.name and live.name != want.name:
        return f"name {live.name!r} != {want.name!r}"
    if live.restart_count < want.restart_count:
        return f"restart count {live.restart_count} < recorded {want.restart_count} (a different job with a reused id?)"
    return None


def _now() -> datetime:
    return datetime.now(UTC)


_REQUEUED_NOT_STARTED = frozenset({"PENDING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
"""States of a job whose restart count went up (it was requeued) that have not started the new
attempt yet: a requeued job shows COMPLETING while the old attempt's steps end (Slurm 22.05,
seen on the testbed), then PENDING (Reason=BeginTime for a few seconds)."""


class RemediationActivities:
    """Cluster-changing activities. ``scheduler`` is a SlurmCLI (or a RecordingScheduler around it)."""

    def __init__(self, scheduler: Scheduler, arm_hold_release: Callable[[str, float], Awaitable[int]] | None = None,
                 jobspec_dir: str | Path | None = None, py_spy: str = "py-spy") -> None:
        self.scheduler = scheduler
        self.py_spy = py_spy
        """py-spy on the nodes (a path on the local testbed, where nodes are this machine)."""
        self.arm_hold_release = arm_hold_release
        """``async (job_id, after_s) -> pid``: fail-open release of Revive's hold (revive.failopen)."""
        self.jobspec_dir = Path(jobspec_dir) if jobspec_dir else None
        """Where ``save_job_spec`` stored job specs (``<state_dir>/jobspec``); None = no resubmission."""

    def _saved(self, job: JobIdentity, incident_id: str | None = None) -> tuple[SavedJobSpec, str] | None:
        """The spec saved at detection for this incident (else the newest one matching ``job``)."""
        if self.jobspec_dir is None:
            return None
        got = load_job_spec(self.jobspec_dir, incident_id) if incident_id else None
        if got is not None and got[0].job.job_id != job.job_id:
            got = None
        return got or find_job_spec(self.jobspec_dir, job)

    async def _live(self, job: JobIdentity, incident_id: str | None = None, allow_purged: bool = False) -> JobRecord:
        """The live job record if it is the incident's job.

        ``allow_purged``: a job slurmctld no longer knows, but whose spec was saved at detection
        and matches ``job``, yields the saved record with ``state="PURGED"`` (the act stage may
        still drain its node and resubmit it). Raises ``ApplicationError`` types ``JobNotFound``
        / ``JobIdentityMismatch`` (non-retryable).
        """
        try:
            live = await self.scheduler.get_job(job.job_id)
        except JobNotFound as e:
            saved = self._saved(job, incident_id) if allow_purged else None
            if saved is not None and identity_problem(job, saved[0].job) is None:
                return saved[0].job.model_copy(update={"state": JobState.PURGED, "nodes": []})
            raise ApplicationError(str(e), type="JobNotFound", non_retryable=True) from None
        why = identity_problem(job, live)
        if why:
            raise ApplicationError(f"refusing to act: live job is not the incident's job: {why}",
                                   type="JobIdentityMismatch", non_retryable=True)
        return live

    @activity.defn(name="check_identity")
    async def check_identity(self, inp: CheckIdentityInput) -> JobRecord:
        """The live job record, if it is the incident's job. Raises JobIdentityMismatch/JobNotFound.

        A purged job whose spec was saved at detection passes with the saved record
        (``state="PURGED"``): ``requeue_job`` will resubmit it."""
        return await self._live(inp.job, allow_purged=True)

    @activity.defn(name="drain_nodes")
    async def drain_nodes(self, inp: DrainInput) -> ActionResult:
        """Heartbeats while it acts (see ``_drain_nodes``)."""
        return await with_heartbeats(self._drain_nodes(inp))

    async def _drain_nodes(self, inp: DrainInput) -> ActionResult:
        """Drain ``inp.nodes`` with ``inp.reason`` unless already drained (never overwrite another
        drain reason: a node someone else drained stays as it is). A purged job with a saved
        spec still has its node drained (it will be resubmitted)."""
        await self._live(inp.job, inp.incident_id, allow_purged=True)
        await chaos.apoint(chaos.Point.before_drain)  # test-only fault points: inert unless REVIVE_CHAOS_HOOK
        current = {n.name: n for n in await self.scheduler.get_nodes(inp.nodes)}
        todo = [n for n in inp.nodes if not (n in current and current[n].drained)]
        skipped = [f"{n} ({current[n].reason})" for n in inp.nodes if n not in todo]
        if not todo:
            return ActionResult(action="drain", ok=True, changed=False, at=_now(),
                                detail=f"already drained: {', '.join(skipped)}")
        try:
            argv = await self.scheduler.drain_nodes(todo, inp.reason)
        except SchedulerCommandError as e:
            raise ApplicationError(str(e), type="SchedulerCommandError", non_retryable=True) from None
        rm.action_issued("drain", len(todo))
        await chaos.apoint(chaos.Point.after_drain)
        return ActionResult(action="drain", ok=True, at=_now(), commands=[argv],
                            detail=f"drained {', '.join(todo)} reason={inp.reason!r}"
                            + (f"; already drained: {', '.join(skipped)}" if skipped else ""))

    @activity.defn(name="requeue_job")
    async def requeue_job(self, inp: RequeueInput) -> ActionResult:
        """Heartbeats while it acts (see ``_requeue_job``)."""
        return await with_heartbeats(self._requeue_job(inp))

    async def _requeue_job(self, inp: RequeueInput) -> ActionResult:
        """Requeue the job (from its last checkpoint: the job resumes by itself).

        - already requeued (restart count above the recorded attempt, or PENDING): only add the
          exclusions to ``ExcNodeList`` if any, holding the pending job while it is set (a job that
          requeued itself, e.g. Lightning on SIGUSR1, is eligible again within seconds); no second
          requeue — unless the new attempt already started on an excluded node (the exclusion came
          too late: Slurm 22.05 refuses ``ExcNodeList`` on a running job), then that attempt is
          requeued once more with the exclusion (requeuehold → ExcNodeList → release);
        - with exclusions on a live job: requeuehold → ExcNodeList → release, after arming a
          detached fail-open release;
        - else a plain ``scontrol requeue``;
        - requeue impossible (``--no-requeue`` job, or purged from slurmctld) → ``_resubmit``
          from the spec saved at detection; ``new_job_id`` is set.
        """
        await chaos.apoint(chaos.Point.before_requeue)  # test-only fault points: inert unless REVIVE_CHAOS_HOOK
        try:
            live = await self._live(inp.job)
        except ApplicationError as e:
            if e.type != "JobNotFound" or self._saved(inp.job, inp.incident_id) is None:
                raise
            return await self._resubmit(inp, None, "job purged from slurmctld (older than MinJobAge)")
        if live.requeue is False:
            return await self._resubmit(inp, live, "job submitted with --no-requeue")
        cmds: list[list[str]] = []
        exc = sorted(set(live.exc_nodes) | set(inp.exclude_nodes))
        try:
            landed_on = sorted(set(inp.exclude_nodes) & set(live.nodes)) if live.state == "RUNNING" else []
            if live.restart_count > inp.job.restart_count or live.state == "PENDING":
                if live.state == "RUNNING" and not landed_on:
                    # Slurm requeued the job itself and the new attempt already runs elsewhere;
                    # 22.05 refuses ExcNodeList on a running job, and none of its nodes is excluded
                    return ActionResult(action="requeue", ok=True, changed=False, at=_now(),
                                        detail=f"Slurm already requeued the job (restarts {live.restart_count}); "
                                               f"it runs on {','.join(live.nodes)}, none of the excluded nodes "
                                               f"({','.join(inp.exclude_nodes) or '-'}): nothing to change")
                waiting = live.state == "PENDING" or (live.restart_count > inp.job.restart_count
                                                      and live.state in _REQUEUED_NOT_STARTED)
                if waiting and inp.exclude_nodes and set(inp.exclude_nodes) - set(live.exc_nodes):
                    # the job requeued itself (Lightning's SIGUSR1 handler, Slurm's own requeue): hold
                    # it first so the scheduler cannot start it on an excluded node while
                    # ExcNodeList is being set (a requeued job is eligible again within seconds)
                    held_here = False
                    if not live.hold:
                        try:
                            cmds.append(await self.scheduler.hold(live.job_id))
                            held_here = True
                        except SchedulerCommandError:
                            pass  # it started meanwhile: the next attempt of this activity sees it RUNNING
                    try:
                        cmds.append(await self.scheduler.update_job(live.job_id, ExcNodeList=",".join(exc)))
                    except SchedulerCommandError as e:
                        # it started between the read and the update: the retry finds it running
                        # (and requeues it once more if it runs on an excluded node)
                        raise ApplicationError(f"setting ExcNodeList on the self-requeued job {live.job_id} "
                                               f"failed ({e.output.strip()[:200]}); retrying",
                                               type="JobStartedMeanwhile") from None
                    if live.hold or held_here:
                        cmds.append(await self.scheduler.release(live.job_id))
                    return ActionResult(action="requeue", ok=True, at=_now(), commands=cmds,
                                        detail=f"job already requeued by Slurm; ExcNodeList={','.join(exc)}"
                                               + (" (held while set)" if held_here else ""))
                if not landed_on:
                    return ActionResult(action="requeue", ok=True, changed=False, at=_now(),
                                        detail=f"already requeued (state {live.state}, restarts {live.restart_count})")
                # the job requeued itself and Slurm started the new attempt on a node it must avoid
                # before the exclusion could be set: requeue that attempt once more, excluding it
                requeued_itself_onto = landed_on
            else:
                requeued_itself_onto = []
            if inp.exclude_nodes:
                # fail-open: no hold without an armed release (a hold nobody lifts strands the job)
                armed = await self.arm_hold_release(live.job_id, inp.hold_release_after_s) if self.arm_hold_release else 0
                if not armed:
                    raise ApplicationError(
                        f"the fail-open hold release could not be armed for job {live.job_id}: not taking the "
                        f"hold that excluding {','.join(inp.exclude_nodes)} needs; a person decides",
                        type="HoldReleaseNotArmed", non_retryable=True)
                cmds.append(await self.scheduler.requeue(live.job_id, hold=True))
                cmds.append(await self.scheduler.update_job(live.job_id, ExcNodeList=",".join(exc)))
                cmds.append(await self.scheduler.release(live.job_id))
                detail = f"requeuehold → ExcNodeList={','.join(exc)} → release"
                if requeued_itself_onto:
                    detail = (f"the job requeued itself (restarts {live.restart_count}) and started on excluded "
                              f"{','.join(requeued_itself_onto)} before the exclusion was set; " + detail)
            else:
                cmds.append(await self.scheduler.requeue(live.job_id))
                detail = f"requeued (was {live.state})"
        except SchedulerCommandError as e:
            if REQUEUE_DISABLED in e.output and not cmds:
                return await self._resubmit(inp, live, f"requeue refused: {e.output.strip()[:200]}")
            raise ApplicationError(str(e), type="SchedulerCommandError", non_retryable=True) from None
        rm.action_issued("requeue")
        await chaos.apoint(chaos.Point.after_requeue)
        return ActionResult(action="requeue", ok=True, at=_now(), commands=cmds, detail=detail)

    async def _resubmit(self, inp: RequeueInput, live: JobRecord | None, why: str) -> ActionResult:
        """Resubmit the job with ``sbatch`` from its saved spec (saved now if the job is still
        known and nothing was saved at detection).

        Exclusions: the old ``ExcNodeList`` ∪ ``inp.exclude_nodes`` ∪ nodes drained by this
        incident (drain reason contains the incident id). A still-running old attempt is cancelled
        first (never two copies). Idempotent: the new job id is written to
        ``<spec dir>/resubmitted.json`` right after ``sbatch``; a retry returns it with
        ``changed=False``. Raises ``ApplicationError`` (non-retryable) when no spec is available
        (type ``JobNotFound``) or sbatch refuses (``SchedulerCommandError``).
        """
        if self.jobspec_dir is None:
            raise ApplicationError(f"{why}; resubmission is not configured (no job spec dir)",
                                   type="RequeueImpossible", non_retryable=True)
        got = self._saved(inp.job, inp.incident_id)
        source = "saved at detection"
        if got is None and live is not None:
            saver = JobSpecActivities(self.scheduler, self.jobspec_dir)
            res = await saver.save_job_spec(SaveJobSpecInput(incident_id=inp.incident_id,
                                                             cluster=self.scheduler.cluster, job_id=live.job_id))
            got = load_job_spec(self.jobspec_dir, inp.incident_id) if res.saved else None
            source = "saved at action time (nothing saved at detection)"
        if got is None:
            raise ApplicationError(f"{why}; no job spec was saved at detection, cannot resubmit",
                                   type="JobNotFound", non_retryable=True)
        spec, script = got
        marker = spec_dir(self.jobspec_dir, inp.incident_id) / RESUBMITTED_FILE
        if marker.exists():
            try:
                done = ActionResult.model_validate_json(marker.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                done = None
            if done is not None and done.new_job_id:
                # a retry after sbatch: finish what the first run left (dependents held, not released)
                held = _read_dependents(spec_dir(self.jobspec_dir, inp.incident_id) / DEPENDENTS_FILE,
                                        spec.job.job_id)
                more: list[list[str]] = []
                note = await self._repoint_dependents(spec.job.job_id, done.new_job_id, held, more) if held.jobs else ""
                return done.model_copy(update={"changed": bool(more), "commands": done.commands + more,
                                               "detail": "already resubmitted: " + done.detail
                                               + (f"; {note}" if more else "")})
        cmds: list[list[str]] = []
        deps_file = spec_dir(self.jobspec_dir, inp.incident_id) / DEPENDENTS_FILE
        held = await self._hold_dependents(spec.job.job_id, deps_file, cmds)
        try:
            if live is not None and live.state not in TERMINAL and live.state != JobState.PURGED:
                cmds.append(await self.scheduler.cancel(live.job_id))
            drained: list[str] = []
            try:
                drained = [n.name for n in await self.scheduler.get_nodes(None)
                           if n.drained and inp.incident_id in (n.reason or "")]
            except SchedulerError as e:
                activity.logger.warning("cannot list nodes drained by %s: %s", inp.incident_id, e)
            exclude = sorted(set(inp.exclude_nodes) | set(drained))
            opts = sbatch_options(spec.job, exclude)
            new_id = await self.scheduler.submit(with_args(script, spec.script_args), opts)
        except SchedulerCommandError as e:
            raise ApplicationError(f"{why}; resubmission failed: {e}", type="SchedulerCommandError",
                                   non_retryable=True) from None
        rm.action_issued("requeue")  # a resubmission counts as the job's requeue
        cmds.append(["sbatch", "--parsable", *opts])
        exc = next((o for o in opts if o.startswith("--exclude=")), "no exclusions")
        ref = _task_ref(spec.job.job_id)
        task = (f"array task {spec.job.job_id} (ArrayJobId {ref[0]}, ArrayTaskId {ref[1]}) is now job {new_id}; "
                if ref else "")
        result = ActionResult(
            action="resubmit", ok=True, at=_now(), commands=cmds, new_job_id=new_id,
            detail=(f"{why}: resubmitted job {spec.job.job_id} as job {new_id} from the batch script and job record "
                    f"{source} ({spec.saved_at.isoformat()}); {task}{exc}; {ENV_NOTE}"),
        )
        self._mark(marker, result, spec.job.job_id)
        if held.jobs:
            note = await self._repoint_dependents(spec.job.job_id, new_id, held, cmds)
            result = result.model_copy(update={"commands": cmds, "detail": f"{result.detail}; {note}"})
            self._mark(marker, result, spec.job.job_id)
        return result

    @staticmethod
    def _mark(marker: Path, result: ActionResult, job_id: str) -> None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(result.model_dump_json(), encoding="utf-8")
        except OSError as e:
            activity.logger.warning("cannot record resubmission of %s: %s", job_id, e)

    async def _hold_dependents(self, old_id: str, deps_file: Path, cmds: list[list[str]]) -> HeldDependents:
        """Hold (``scontrol hold``) every pending job that waits on ``old_id``, before the old job
        is cancelled or replaced: once slurmctld purges it, Slurm drops the dependency and they
        would start. Returns them (a dependent someone already held is re-pointed but stays
        held), written to ``deps_file`` first so a retry finds them. A listing that fails holds
        nothing (logged)."""
        from revive.scheduler.arrays import depends_on

        try:
            jobs = await self.scheduler.list_jobs()
        except SchedulerError as e:
            activity.logger.warning("cannot list the dependents of %s: %s", old_id, e)
            return HeldDependents()
        deps = {j.job_id: (j.dependency or "") for j in jobs
                if j.state == JobState.PENDING and j.job_id != old_id and depends_on(j.dependency, old_id)}
        if not deps:
            return HeldDependents()
        already = {j.job_id for j in jobs if j.job_id in deps and j.hold}
        record = {"old": old_id, "jobs": deps, "held_by_others": sorted(already)}
        try:
            deps_file.parent.mkdir(parents=True, exist_ok=True)
            deps_file.write_text(json.dumps(record), encoding="utf-8")
        except OSError as e:
            activity.logger.warning("cannot record the dependents of %s: %s", old_id, e)
        for dep in sorted(set(deps) - already):
            try:
                cmds.append(await self.scheduler.hold(dep))
            except SchedulerCommandError as e:  # it started meanwhile: nothing left to hold
                activity.logger.warning("cannot hold dependent %s of %s: %s", dep, old_id, e)
        return HeldDependents(jobs=deps, held_by_others=already)

    async def _repoint_dependents(self, old_id: str, new_id: str, held: HeldDependents,
                                  cmds: list[list[str]]) -> str:
        """Point each held dependent at ``new_id`` (``scontrol update JobId=<d> Dependency=…``: the
        terms on ``old_id`` become ``new_id``, the others stay, states dropped) and release the ones
        Revive held. A dependent whose only wait is the whole array of a resubmitted task
        (``afterok:123`` for ``123_4``) cannot be re-pointed by one id: it stays held, reported.
        Returns the sentence for the audit."""
        from revive.scheduler.arrays import depends_on, parse_dependency

        moved: list[str] = []
        kept: list[str] = []
        gone: list[str] = []
        for dep, value in sorted(held.jobs.items()):
            try:
                live = await self.scheduler.get_job(dep)
            except JobNotFound:
                gone.append(dep)
                continue
            if live.state != JobState.PENDING:
                gone.append(f"{dep} ({live.state})")
                continue
            if not depends_on(value, old_id):
                gone.append(f"{dep} (no longer waits on {old_id})")
                continue
            # the terms on old_id become new_id; a whole-array term (123 for task 123_4) is kept
            terms = [f"{d.kind}:{new_id if d.job == old_id else d.job}" for d in parse_dependency(value) if d.job]
            if not any(d.job == old_id for d in parse_dependency(value)):
                kept.append(dep)
                continue
            sep = "?" if "?" in value else ","
            want = sep.join(dict.fromkeys(terms))
            current = [f"{d.kind}:{d.job}" for d in parse_dependency(live.dependency) if d.job]
            try:
                if sep.join(current) != want:
                    cmds.append(await self.scheduler.update_job(dep, Dependency=want))
                if live.hold and dep not in held.held_by_others:
                    cmds.append(await self.scheduler.release(dep))
            except SchedulerCommandError as e:
                activity.logger.warning("cannot re-point dependent %s at %s: %s", dep, new_id, e)
                kept.append(dep)
                continue
            moved.append(f"{dep} (Dependency={want})")
        parts = []
        if moved:
            parts.append(f"dependents held, re-pointed at job {new_id} and released: {', '.join(moved)}")
        if kept:
            parts.append(f"dependents left held for a person (they wait on the whole array or refused the "
                         f"update; `scontrol update JobId=<id> Dependency=…` then `scontrol release <id>`): "
                         f"{', '.join(kept)}")
        if gone:
            parts.append(f"dependents no longer pending: {', '.join(gone)}")
        return "; ".join(parts) or "no dependents"


    @activity.defn(name="signal_job")
    async def signal_job(self, inp: SignalJobInput) -> ActionResult:
        """Send the save signal to the incident's job while it still runs (``scancel --signal``,
        scope per ``inp.scope``). Only the incident's attempt is signalled: a job that already left
        RUNNING, or was requeued since (restart count above the recorded one), gets nothing
        (``changed=False``). An array task ``123_4`` is signalled alone. A bad signal name raises
        ``ApplicationError`` type ``BadSignal`` (non-retryable)."""
        live = await self._live(inp.job, inp.incident_id)
        if live.state != JobState.RUNNING or live.restart_count > inp.job.restart_count:
            return ActionResult(action="signal", ok=True, changed=False, at=_now(),
                                detail=f"not signalled: job is {live.state} (restarts {live.restart_count})")
        try:
            argv = await self.scheduler.signal_job(live.job_id, inp.signal, inp.scope)
        except ValueError as e:
            raise ApplicationError(str(e), type="BadSignal", non_retryable=True) from None
        except SchedulerCommandError as e:
            raise ApplicationError(str(e), type="SchedulerCommandError", non_retryable=True) from None
        return ActionResult(action="signal", ok=True, at=_now(), commands=[argv],
                            detail=f"sent SIG{inp.signal} to {inp.scope} of job {live.job_id} (save before requeue)")

    @activity.defn(name="rewait_dependents")
    async def rewait_dependents(self, inp: DependentsInput) -> ActionResult:
        """After the job was requeued, make its dependents wait for it again.

        Slurm 22.05 (measured on the testbed): a job whose ``afterok`` parent FAILED is marked
        ``Dependency=afterok:<p>(failed)`` / ``Reason=DependencyNeverSatisfied``, and requeueing the
        parent does not undo it — the dependent would pend forever. For each pending job with a
        ``(failed)`` term on ``inp.job_id``: ``scontrol update JobId=<d> Dependency=<terms>``
        (same terms, states dropped; ``?`` kept), which slurmctld re-evaluates (``unfulfilled``).
        Idempotent: a dependent already waiting is left alone (``changed=False`` when none)."""
        from revive.scheduler.arrays import depends_on, parse_dependency

        try:
            jobs = await self.scheduler.list_jobs()
        except SchedulerError as e:
            raise ApplicationError(f"cannot list jobs: {e}", type="SchedulerUnavailable") from None
        cmds: list[list[str]] = []
        fixed: list[str] = []
        for j in jobs:
            if j.state != JobState.PENDING or j.job_id == inp.job_id:
                continue
            hits = depends_on(j.dependency, inp.job_id)
            if not any(d.never for d in hits):
                continue
            sep = "?" if "?" in (j.dependency or "") else ","
            terms = [d for d in parse_dependency(j.dependency) if d.job is not None]
            value = sep.join(f"{d.kind}:{d.job}" for d in terms)
            try:
                cmds.append(await self.scheduler.update_job(j.job_id, Dependency=value))
            except SchedulerCommandError as e:
                activity.logger.warning("cannot re-point %s at %s: %s", j.job_id, inp.job_id, e)
                continue
            fixed.append(j.job_id)
        if not fixed:
            return ActionResult(action="dependents", ok=True, changed=False, at=_now(),
                                detail=f"no dependent of job {inp.job_id} needed re-pointing")
        return ActionResult(action="dependents", ok=True, at=_now(), commands=cmds,
                            detail=f"dependents {', '.join(fixed)} wait for job {inp.job_id} again "
                                   "(Slurm had marked their dependency failed)")

    @activity.defn(name="diagnose_hang")
    async def diagnose_hang(self, inp: DiagnoseInput) -> dict[str, str]:
        """Hang diagnostics: the job record, the last progress line per rank, and a py-spy dump of
        the job's Python processes on each node (where py-spy runs). Output capped at 16 KB each."""
        out: dict[str, str] = {}
        try:
            out["job"] = (await self.scheduler.get_job(inp.job.job_id)).model_dump_json()[:16384]
        except Exception as e:  # diagnostics are best effort
            out["job"] = f"unavailable: {e}"
        if inp.last_progress:
            out["last_progress"] = "\n".join(f"{k}: {v}" for k, v in sorted(inp.last_progress.items()))[:16384]
        for node in inp.nodes:
            pids = await self._job_pids(inp.job.job_id, node)
            if not pids:
                out[f"py-spy {node}"] = "no training process found for this job on the node"
                continue
            dumps = []
            for pid in pids[:4]:
                try:
                    rc, text = await self.scheduler.run_on_node(node, [self.py_spy, "dump", "--pid", str(pid)], timeout_s=20)
                except Exception as e:
                    rc, text = -1, f"{type(e).__name__}: {e}"
                dumps.append(f"--- pid {pid} (rc {rc})\n{text}")
            out[f"py-spy {node}"] = "\n".join(dumps)[:16384]
        return out

    async def _job_pids(self, job_id: str, node: str) -> list[int]:
        """Python processes of ``job_id`` on ``node``, asked on the node itself (locally on the
        testbed, over SSH otherwise): ``scontrol listpids <job>`` (the job's processes that node's
        slurmd tracks), then ``ps`` to keep the Python ones (not srun, not the batch shell)."""
        try:
            rc, out = await self.scheduler.run_on_node(node, ["scontrol", "listpids", str(job_id)], timeout_s=20)
        except Exception as e:  # diagnostics are best effort
            activity.logger.warning("listpids of job %s on %s failed: %s", job_id, node, e)
            return []
        pids = [int(tok[0]) for tok in (ln.split() for ln in out.splitlines()) if tok and tok[0].isdigit()]
        if rc != 0 or not pids:
            # listpids asks the host's own slurmd; where several slurmd share a host (the local
            # testbed) it sees only one of them: find the job's tasks by their environment instead
            try:
                rc, out = await self.scheduler.run_on_node(node, ["sh", "-c", _PIDS_BY_ENV, "revive-pids",
                                                                  str(job_id), node], timeout_s=20)
            except Exception:
                return []
            pids = [int(x) for x in out.split() if x.isdigit()]
        if not pids:
            return []
        try:
            rc, out = await self.scheduler.run_on_node(
                node, ["ps", "-o", "pid=,args=", "-p", ",".join(map(str, pids))], timeout_s=20)
        except Exception:
            return []
        keep = []
        for ln in out.splitlines():
            pid, _, args = ln.strip().partition(" ")
            argv0 = args.split(" ", 1)[0] if args else ""
            if pid.isdigit() and "python" in args and "srun" not in argv0 and not argv0.endswith("sh"):
                keep.append(int(pid))
        return sorted(keep)

    @activity.defn(name="read_mode")
    async def read_mode(self, inp: ModeInput) -> str:
        """The effective mode, read fresh from the policy file (so rolling back to observe applies
        to running incidents). An unreadable file keeps the snapshot's mode (``fallback``)."""
        if not inp.policy_path:
            return inp.fallback
        from revive.errors import ConfigError
        from revive.policy import load_policy

        try:
            return load_policy(inp.policy_path).mode_for(inp.partition).value
        except ConfigError as e:
            activity.logger.warning("policy unreadable, keeping %s: %s", inp.fallback, e)
            return inp.fallback

