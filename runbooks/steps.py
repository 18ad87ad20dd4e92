"""Shared runbook steps: each one is a single activity call with its retry policy and timeout.

Runbooks compose these; they read like the on-call procedure. Workflow code: no I/O here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from activities.checkpoint import CheckpointActivities
    from activities.guard import GuardActivities
    from activities.remediation import RemediationActivities
    from activities.rollback import RollbackActivities
    from activities.verification import VerificationActivities
    from revive import retry
    from revive.decide.budgets import root_key
    from revive.models import (
        ActionKind,
        ActionResult,
        Category,
        CheckIdentityInput,
        DependentJob,
        DependentsInput,
        DiagnoseInput,
        DrainInput,
        IncidentHistoryInput,
        IncidentOutcome,
        JobIdentity,
        JobRecord,
        JobState,
        LoopCheckInput,
        LoopVerdict,
        RequeueInput,
        RollbackInput,
        RunbookInput,
        RunbookName,
        RunbookResult,
        SaveOutcome,
        SavePlanInput,
        SignalJobInput,
        VerifyInput,
        VerifyResult,
        WaitCheckpointInput,
        WaitSaveInput,
    )


PATCH_SAVE_BEFORE_REQUEUE = "save-before-requeue"
"""Runbooks send the job's save signal and wait for the save before requeueing a running job."""
PATCH_BAD_CHECKPOINT = "bad-checkpoint-loop"
"""Runbooks refuse to requeue onto a checkpoint the job failed from twice (``checkpoint_loop``)."""
PATCH_ROLLBACK_ON_APPROVAL = "rollback-on-approval"
"""A person approved resuming from the checkpoint before the suspect one (``RunbookInput.rollback``):
the runbook runs ``rollback_checkpoint`` before its requeue instead of escalating."""
PATCH_DEPENDENTS = "dependents"
"""Runbooks make a requeued job's dependents wait again, and report them when the job stays down."""
PATCH_OUTAGE_RETRY = "act-retry-after-outage"
"""A drain or requeue that ran out of ``MUTATING_DEADLINE`` against an unreachable cluster is tried
again after ``OUTAGE_PAUSE``, until ``OUTAGE_WINDOW`` (the marker is written only on that path:
histories where every act step succeeded are unchanged). Can go once no incident started before
it can still be replayed (retention: 30 days)."""

PATCH_LOOP_CHECKED = "loop-checked-by-incident"
"""A runbook whose incident has just run the bad-checkpoint check (``RunbookInput.loop_checked``)
does not run ``checkpoint_loop`` again before acting. Can go once no runbook started before it can
still be replayed (retention: 30 days)."""

OUTAGE_WINDOW = timedelta(hours=1)
"""How long a drain/requeue keeps trying against an unreachable cluster (slurmctld down, the SSH
login node gone) before the runbook gives up and says so."""
OUTAGE_PAUSE = timedelta(seconds=60)
"""Wait between two rounds of ``MUTATING_DEADLINE`` retries (a durable timer: a worker restart keeps it)."""


class StepRefused(Exception):
    """A step refused to act (identity mismatch, job gone): the runbook stops and records why."""


def _cause(e: ActivityError) -> str:
    c = e.cause
    if isinstance(c, ApplicationError):
        return f"{c.type}: {c.message}"
    return str(c or e)


async def check_same_job(inp: RunbookInput) -> JobRecord:
    """Refuse to act unless the live job is the incident's job (id, user, name, restart count)."""
    try:
        return await workflow.execute_activity_method(
            RemediationActivities.check_identity,
            CheckIdentityInput(cluster=inp.cluster, job=inp.job),
            start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="same job?",
        )
    except ActivityError as e:
        raise StepRefused(_cause(e)) from None


def _unreachable(e: ActivityError) -> bool:
    """The step ran out of time against an unreachable cluster (every retry failed retryably:
    slurmctld or the transport down), as opposed to a refusal (non-retryable: wrong job, disabled)."""
    c = e.cause
    if isinstance(c, ActivityTimeout):
        return True  # schedule-to-close: every retry inside MUTATING_DEADLINE failed retryably
    return (isinstance(c, ApplicationError) and not c.non_retryable
            and (c.type or "") not in (retry.MUTATING.non_retryable_error_types or ()))


async def _act(what: str, call: Callable[[], Awaitable[ActionResult]]) -> ActionResult:
    """Run one mutating step; while the cluster is unreachable, try again every ``OUTAGE_PAUSE``
    for up to ``OUTAGE_WINDOW`` (``PATCH_OUTAGE_RETRY``), then give up with ``StepRefused`` saying
    how long it tried. Every try checks live state first (the activities are idempotent)."""
    started = workflow.now()
    rounds = 0
    while True:
        try:
            return await call()
        except ActivityError as e:
            if not _unreachable(e) or not workflow.patched(PATCH_OUTAGE_RETRY):
                raise StepRefused(_cause(e)) from None
            rounds += 1
            waited = workflow.now() - started
            if waited >= OUTAGE_WINDOW:
                raise StepRefused(f"{what}: cluster unreachable for {waited.total_seconds():.0f} s "
                                  f"({rounds} rounds of retries), gave up: {_cause(e)}") from None
            workflow.logger.warning("%s: cluster unreachable (round %d, %.0f s so far), trying again in %s",
                                    what, rounds, waited.total_seconds(), OUTAGE_PAUSE)
            await workflow.sleep(OUTAGE_PAUSE, summary=f"{what}: wait for the cluster")


async def drain(inp: RunbookInput, nodes: list[str]) -> ActionResult:
    reason = f"{inp.policy.drain_reason_prefix}{inp.incident_id} {inp.category.value}"
    return await _act(f"drain {','.join(nodes)}", lambda: workflow.execute_activity_method(
        RemediationActivities.drain_nodes,
        DrainInput(incident_id=inp.incident_id, job=inp.job, nodes=nodes, reason=reason),
        start_to_close_timeout=retry.SHORT, schedule_to_close_timeout=retry.MUTATING_DEADLINE,
        heartbeat_timeout=retry.ACT_HEARTBEAT, retry_policy=retry.MUTATING, summary=f"drain {','.join(nodes)}",
    ))


async def requeue(inp: RunbookInput, exclude: list[str] | None = None) -> ActionResult:
    what = "requeue" + (f" excluding {','.join(exclude)}" if exclude else "")
    return await _act(what, lambda: workflow.execute_activity_method(
        RemediationActivities.requeue_job,
        RequeueInput(incident_id=inp.incident_id, job=inp.job, exclude_nodes=exclude or []),
        start_to_close_timeout=timedelta(minutes=2), schedule_to_close_timeout=retry.MUTATING_DEADLINE,
        heartbeat_timeout=retry.ACT_HEARTBEAT, retry_policy=retry.MUTATING, summary=what,
    ))


async def drain_offenders_and_requeue_excluding(inp: RunbookInput, log: RunbookLog) -> ActionResult:
    """Drain the plan's repeat offenders (if any), then requeue with the plan's exclusions."""
    if inp.plan.drain_nodes:
        log.add(await drain(inp, inp.plan.drain_nodes))
    requeued = await requeue(inp, exclude=inp.plan.exclude_nodes)
    log.add(requeued)
    return requeued


async def diagnose(inp: RunbookInput, nodes: list[str]) -> dict[str, str]:
    try:
        return await workflow.execute_activity_method(
            RemediationActivities.diagnose_hang,
            DiagnoseInput(incident_id=inp.incident_id, job=inp.job, nodes=nodes, last_progress=inp.last_progress),
            start_to_close_timeout=timedelta(minutes=2), retry_policy=retry.PROBE, summary="hang diagnostics",
        )
    except ActivityError as e:
        return {"error": _cause(e)}


async def verify(inp: RunbookInput, excluded: list[str], requeued: ActionResult | None = None) -> VerifyResult:
    """Wait for the requeued job to run and print an iteration past its checkpoint. After a
    resubmission (``requeued.new_job_id``) the new job is followed, from its first attempt."""
    timeout = inp.policy.verify.timeout
    job, after = inp.job, inp.attempt
    if requeued is not None and requeued.new_job_id:
        job, after = JobIdentity(job_id=requeued.new_job_id, user=inp.job.user, name=inp.job.name), -1
    return await workflow.execute_activity_method(
        VerificationActivities.verify_progress,
        VerifyInput(
            incident_id=inp.incident_id, job=job, log_path=inp.log_path, after_attempt=after,
            checkpoint_iteration=inp.checkpoint_iteration, timeout_s=timeout.total_seconds(),
            poll_s=inp.policy.verify.poll_interval.total_seconds(), excluded_nodes=excluded,
        ),
        start_to_close_timeout=timeout + timedelta(seconds=60),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=retry.READ_ONLY,
        summary="verify progress resumes",
    )


async def wait_for_checkpoint(inp: RunbookInput, timeout: timedelta) -> int | None:
    """The next checkpoint the job saves (its iteration), or None when none came in ``timeout``."""
    return await workflow.execute_activity_method(
        VerificationActivities.wait_for_checkpoint,
        WaitCheckpointInput(incident_id=inp.incident_id, log_path=inp.log_path,
                            after_iteration=inp.checkpoint_iteration, timeout_s=timeout.total_seconds()),
        start_to_close_timeout=timeout + timedelta(seconds=60), heartbeat_timeout=timedelta(seconds=30),
        retry_policy=retry.READ_ONLY, summary="wait for the next checkpoint",
    )


async def save_before_requeue(inp: RunbookInput, log: RunbookLog, job: JobRecord) -> RunbookInput:
    """Ask a still-running job to save, then return ``inp`` with the saved checkpoint (if any).

    Runs when ``policy.save_before_requeue.enabled``, the job is RUNNING, and the policy or the
    job's profile names a save signal (not for hangs unless ``on_hang``: a stuck collective cannot
    save). Signal (``scancel --signal``, the profile's scope) → wait up to ``timeout`` for the
    saved line / a new checkpoint file → record which checkpoint was saved, or that none was, and
    go on (the requeue never waits longer than the timeout). A job that requeued itself (Lightning)
    is not requeued again: ``requeue`` sees the restart count above the recorded one.
    """
    if not workflow.patched(PATCH_SAVE_BEFORE_REQUEUE):
        return inp
    p = inp.policy.save_before_requeue
    if not p.enabled or job.state != JobState.RUNNING or (inp.category == Category.hang and not p.on_hang):
        return inp
    plan = await workflow.execute_activity_method(
        CheckpointActivities.plan_save,
        SavePlanInput(incident_id=inp.incident_id, job=inp.job, log_path=inp.log_path, signal=p.signal, scope=p.scope),
        start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="save signal?",
    )
    if plan.signal is None:
        log.diagnostics["save_before_requeue"] = plan.reason
        return inp
    try:
        sent = await workflow.execute_activity_method(
            RemediationActivities.signal_job,
            SignalJobInput(incident_id=inp.incident_id, job=inp.job, signal=plan.signal, scope=plan.scope),
            start_to_close_timeout=retry.SHORT, schedule_to_close_timeout=retry.MUTATING_DEADLINE,
            retry_policy=retry.MUTATING, summary=f"SIG{plan.signal} ({plan.scope}): save",
        )
    except ActivityError as e:
        log.diagnostics["save_before_requeue"] = f"signal failed: {_cause(e)}; requeueing without a save"
        return inp
    log.add(sent)
    if not sent.changed:
        return inp
    timeout = p.timeout
    got: SaveOutcome = await workflow.execute_activity_method(
        CheckpointActivities.wait_for_save,
        WaitSaveInput(incident_id=inp.incident_id, job=inp.job, log_path=inp.log_path, plan=plan,
                      after_iteration=inp.checkpoint_iteration, timeout_s=timeout.total_seconds()),
        start_to_close_timeout=timeout + timedelta(seconds=60), heartbeat_timeout=timedelta(seconds=30),
        retry_policy=retry.READ_ONLY, summary="wait for the save",
    )
    what = (f"checkpoint {got.iteration}" if got.iteration is not None else "a checkpoint") if got.saved else "none"
    log.add(ActionResult(action=ActionKind.wait_for_checkpoint, ok=got.saved, changed=False, at=workflow.now(),
                         detail=f"saved on SIG{plan.signal}: {what} ({got.proof or got.detail})"
                                + ("; the job requeued itself" if got.requeued_by_job else "")
                                + ("" if got.saved else "; requeueing without it")))
    log.saved_checkpoint = got.iteration if got.saved else None
    if got.saved and got.iteration is not None:
        return inp.model_copy(update={"checkpoint_iteration": got.iteration})
    return inp


def start_loop_check(inp: LoopCheckInput) -> workflow.ActivityHandle[LoopVerdict]:
    """Start ``checkpoint_loop`` (read-only) and return its handle: the incident starts it beside
    its other reads and hands it to ``bad_checkpoint`` once the plan is known."""
    return workflow.start_activity_method(
        CheckpointActivities.checkpoint_loop, inp,
        start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="resuming from a bad checkpoint?",
    )


async def bad_checkpoint(inp: RunbookInput, log: RunbookLog,
                         pending: workflow.ActivityHandle[LoopVerdict] | None = None) -> LoopVerdict | None:
    """The checkpoint the job keeps failing from, or None (requeue as planned). ``pending``: a
    ``checkpoint_loop`` already started for ``inp`` (``start_loop_check``; the caller checked
    ``PATCH_BAD_CHECKPOINT`` and the policy).

    Suspect when the failed attempt resumed from checkpoint C and failed within
    ``policy.bad_checkpoint.within_iterations`` of it without saving a newer one, the attempt
    before it also ended at C, and the newest prior incident of this job had the same root cause
    (the signature when the incident passes it, else the category). Then the runbook requeues
    nothing: it escalates with "checkpoint C suspect" and, when the profile knows the layout, a
    proposal to resume from the previous checkpoint that a person runs (Revive never rewrites a
    checkpoint; moving a tracker file is reversible, and a person decides it).
    """
    if pending is None:
        if not workflow.patched(PATCH_BAD_CHECKPOINT):
            return None
        if not inp.policy.bad_checkpoint.enabled or not inp.log_path:
            return None
        pending = start_loop_check(LoopCheckInput(
            incident_id=inp.incident_id, cluster=inp.cluster, job=inp.job, log_path=inp.log_path,
            category=inp.category, root_signature=inp.root_signature, checkpoint_iteration=inp.checkpoint_iteration,
            within_iterations=inp.policy.bad_checkpoint.within_iterations))
    v: LoopVerdict = await pending
    if v.suspect is None:
        return None
    try:
        hist = await workflow.execute_activity_method(
            GuardActivities.incident_history,
            IncidentHistoryInput(cluster=inp.cluster, job_id=inp.job.job_id, exclude_incident_id=inp.incident_id),
            start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="prior incidents",
        )
    except ActivityError as e:
        log.diagnostics["bad_checkpoint"] = f"{v.detail}; prior incidents unreadable ({_cause(e)}): requeueing"
        return None
    last = hist.prior[-1] if hist.prior else None
    if last is None:
        log.diagnostics["bad_checkpoint"] = f"{v.detail}; no prior incident: not a repeat"
        return None
    same = (root_key(last.category, last.root_signature) == root_key(inp.category, inp.root_signature)
            if inp.root_signature else last.category == inp.category)
    if not same or (last.checkpoint_iteration is not None and last.checkpoint_iteration != v.suspect):
        log.diagnostics["bad_checkpoint"] = (f"{v.detail}; prior incident {last.incident_id} was "
                                             f"{last.category} at checkpoint {last.checkpoint_iteration}: not a repeat")
        return None
    if not inp.policy.bad_checkpoint.propose_previous:
        v = v.model_copy(update={"proposal": ""})
    log.add(ActionResult(action=ActionKind.report, ok=True, changed=False, at=workflow.now(),
                         detail=f"checkpoint {v.suspect} suspect: {v.detail}; same root cause as "
                                f"{last.incident_id}" + (f"; proposal: {v.proposal}" if v.proposal else "")))
    return v


async def rewait_dependents(inp: RunbookInput, log: RunbookLog, requeued: ActionResult) -> None:
    """After a requeue (not a resubmission), dependents Slurm marked failed wait for the job again."""
    if not workflow.patched(PATCH_DEPENDENTS) or requeued.new_job_id:
        return
    try:
        r = await workflow.execute_activity_method(
            RemediationActivities.rewait_dependents, DependentsInput(job_id=inp.job.job_id),
            start_to_close_timeout=retry.SHORT, schedule_to_close_timeout=retry.MUTATING_DEADLINE,
            retry_policy=retry.MUTATING, summary="dependents wait again",
        )
    except ActivityError as e:
        log.diagnostics["dependents"] = f"could not re-point dependents: {_cause(e)}"
        return
    if r.changed:
        log.add(r)


async def report_dependents(inp: RunbookInput, log: RunbookLog) -> list[DependentJob]:
    """The jobs that wait on this one, recorded when it stays down (they would pend forever)."""
    if not workflow.patched(PATCH_DEPENDENTS):
        return []
    deps: list[DependentJob] = await workflow.execute_activity_method(
        CheckpointActivities.job_dependents, DependentsInput(job_id=inp.job.job_id),
        start_to_close_timeout=retry.SHORT, retry_policy=retry.READ_ONLY, summary="dependents",
    )
    log.dependents = [d.job_id for d in deps]
    if deps:
        log.add(ActionResult(action=ActionKind.report, ok=True, changed=False, at=workflow.now(),
                             detail="dependents that will never start (DependencyNeverSatisfied): "
                                    + ", ".join(f"{d.job_id} ({d.name or '-'}, {d.reason or d.state})" for d in deps)))
    return deps


class RunbookLog:
    """Collects a runbook's actions and turns them into its ``RunbookResult``."""

    def __init__(self, name: RunbookName) -> None:
        self.name = name
        self.actions: list[ActionResult] = []
        self.diagnostics: dict[str, str] = {}
        self.saved_checkpoint: int | None = None
        self.dependents: list[str] = []
        self.suspect: LoopVerdict | None = None

    def add(self, r: ActionResult) -> None:
        self.actions.append(r)

    @property
    def first_action_at(self) -> datetime | None:
        return next((a.at for a in self.actions if a.changed and a.at), None)

    def _extra(self) -> dict:
        return {"saved_checkpoint": self.saved_checkpoint, "dependents": self.dependents,
                "suspect_checkpoint": self.suspect.suspect if self.suspect else None}

    def _deps(self) -> str:
        return f"; dependents never start: {', '.join(self.dependents)}" if self.dependents else ""

    def refused(self, why: str) -> RunbookResult:
        return RunbookResult(runbook=self.name, actions=self.actions, outcome=IncidentOutcome.stopped,
                             reason=f"refused: {why}{self._deps()}", first_action_at=self.first_action_at,
                             diagnostics=self.diagnostics, **self._extra())

    def suspect_checkpoint(self, v: LoopVerdict) -> RunbookResult:
        """Escalate instead of requeueing onto checkpoint ``v.suspect`` (a person decides)."""
        self.suspect = v
        return RunbookResult(
            runbook=self.name, actions=self.actions, outcome=IncidentOutcome.escalated,
            reason=f"checkpoint {v.suspect} suspect: {v.detail}"
                   + (f"; proposal: {v.proposal}" if v.proposal else "; no earlier checkpoint known")
                   + self._deps(),
            first_action_at=self.first_action_at, diagnostics=self.diagnostics, **self._extra())

    def done(self, v: VerifyResult) -> RunbookResult:
        return RunbookResult(
            runbook=self.name, actions=self.actions, verify=v,
            outcome=(IncidentOutcome.recovered if v.recovered
                     else IncidentOutcome.unverified if v.unverified else IncidentOutcome.not_recovered),
            reason=v.detail + ("" if v.recovered else self._deps()), first_action_at=self.first_action_at,
            diagnostics=self.diagnostics, **self._extra(),
        )


async def finish(inp: RunbookInput, log: RunbookLog, requeued: ActionResult, excluded: list[str]) -> RunbookResult:
    """The common tail of every requeueing runbook: dependents wait again, verify, and when the
    job did not come back, report the dependents it leaves pending."""
    await rewait_dependents(inp, log, requeued)
    v = await verify(inp, excluded=excluded, requeued=requeued)
    if not v.recovered and not v.unverified:
        await report_dependents(inp, log)
    return log.done(v)


async def rollback(inp: RunbookInput, log: RunbookLog) -> RunbookResult | None:
    """The approved step back to checkpoint ``inp.rollback.previous`` (``rollback_checkpoint``):
    None when done (the runbook requeues next), else the escalation saying why it was not."""
    v = inp.rollback
    assert v is not None
    try:
        r = await workflow.execute_activity_method(
            RollbackActivities.rollback_checkpoint,
            RollbackInput(incident_id=inp.incident_id, cluster=inp.cluster, job=inp.job, verdict=v,
                          approved_by=inp.rollback_approved_by),
            start_to_close_timeout=timedelta(minutes=2), schedule_to_close_timeout=retry.MUTATING_DEADLINE,
            retry_policy=retry.MUTATING, summary=f"resume from checkpoint {v.previous} (approved)",
        )
    except ActivityError as e:
        await report_dependents(inp, log)
        return log.suspect_checkpoint(v.model_copy(update={
            "detail": f"{v.detail}; the approved rollback to {v.previous} was not done: {_cause(e)}", "proposal": ""}))
    log.add(r)
    return None


async def stop_on_suspect(inp: RunbookInput, log: RunbookLog) -> RunbookResult | None:
    """``bad_checkpoint`` → the escalation (with the dependents left waiting), or None. When a
    person approved the rollback (``inp.rollback``), perform it instead (``rollback``)."""
    if inp.rollback is not None and workflow.patched(PATCH_ROLLBACK_ON_APPROVAL):
        return await rollback(inp, log)
    if inp.loop_checked is not None and workflow.patched(PATCH_LOOP_CHECKED):
        log.diagnostics.update(inp.loop_checked)  # the incident's check, moments ago: no suspect
        return None
    v = await bad_checkpoint(inp, log)
    if v is None:
        return None
    await report_dependents(inp, log)
    return log.suspect_checkpoint(v)
