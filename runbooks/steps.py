"""Shared runbook steps: each one is a single activity call with its retry policy and timeout.

Runbooks compose these; they read like the on-call procedure. Workflow code: no I/O here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.remediation import RemediationActivities
    from activities.verification import VerificationActivities
    from revive import retry
    from revive.models import (
        ActionResult,
        CheckIdentityInput,
        DiagnoseInput,
        DrainInput,
        IncidentOutcome,
        JobIdentity,
        JobRecord,
        RequeueInput,
        RunbookInput,
        RunbookName,
        RunbookResult,
        VerifyInput,
        VerifyResult,
        WaitCheckpointInput,
    )


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


async def drain(inp: RunbookInput, nodes: list[str]) -> ActionResult:
    reason = f"{inp.policy.drain_reason_prefix}{inp.incident_id} {inp.category.value}"
    try:
        return await workflow.execute_activity_method(
            RemediationActivities.drain_nodes,
            DrainInput(incident_id=inp.incident_id, job=inp.job, nodes=nodes, reason=reason),
            start_to_close_timeout=retry.SHORT, schedule_to_close_timeout=retry.MUTATING_DEADLINE,
            heartbeat_timeout=retry.ACT_HEARTBEAT, retry_policy=retry.MUTATING, summary=f"drain {','.join(nodes)}",
        )
    except ActivityError as e:
        raise StepRefused(_cause(e)) from None


async def requeue(inp: RunbookInput, exclude: list[str] | None = None) -> ActionResult:
    try:
        return await workflow.execute_activity_method(
            RemediationActivities.requeue_job,
            RequeueInput(incident_id=inp.incident_id, job=inp.job, exclude_nodes=exclude or []),
            start_to_close_timeout=timedelta(minutes=2), schedule_to_close_timeout=retry.MUTATING_DEADLINE,
            heartbeat_timeout=retry.ACT_HEARTBEAT, retry_policy=retry.MUTATING,
            summary="requeue" + (f" excluding {','.join(exclude)}" if exclude else ""),
        )
    except ActivityError as e:
        raise StepRefused(_cause(e)) from None


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


class RunbookLog:
    """Collects a runbook's actions and turns them into its ``RunbookResult``."""

    def __init__(self, name: RunbookName) -> None:
        self.name = name
        self.actions: list[ActionResult] = []
        self.diagnostics: dict[str, str] = {}

    def add(self, r: ActionResult) -> None:
        self.actions.append(r)

    @property
    def first_action_at(self) -> datetime | None:
        return next((a.at for a in self.actions if a.changed and a.at), None)

    def refused(self, why: str) -> RunbookResult:
        return RunbookResult(runbook=self.name, actions=self.actions, outcome=IncidentOutcome.stopped,
                             reason=f"refused: {why}", first_action_at=self.first_action_at,
                             diagnostics=self.diagnostics)

    def done(self, v: VerifyResult) -> RunbookResult:
        return RunbookResult(
            runbook=self.name, actions=self.actions, verify=v,
            outcome=(IncidentOutcome.recovered if v.recovered
                     else IncidentOutcome.unverified if v.unverified else IncidentOutcome.not_recovered),
            reason=v.detail, first_action_at=self.first_action_at, diagnostics=self.diagnostics,
        )
