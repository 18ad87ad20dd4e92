"""Workflow, update and activity payloads: one ``<Verb><Noun>Input`` / ``<Noun>Result`` model each.

They live here, beside the domain models, so that workflows, activities, runbooks and the CLI
share them without importing each other. Pure data (stdlib + pydantic), safe in the sandbox.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from revive.models.domain import (
    ActionResult,
    Attribution,
    Category,
    Decision,
    IncidentOutcome,
    IncidentResult,
    JobIdentity,
    JobRecord,
    Plan,
    RunbookName,
    Trigger,
    VerifyResult,
)
from revive.policy import RecoveryPolicy
from revive.signals import SignalScope

# ---- workflow and activity payloads (one input model per workflow/activity) -------------------



class IncidentInput(BaseModel):
    """Input of ``IncidentWorkflow``; the history records it, so it is the incident's opening record."""

    incident_id: str
    cluster: str
    job: JobIdentity
    job_submit_time: datetime | None = None
    """SubmitTime Revive first saw for the job (Slurm 22.05 resets it on every requeue)."""
    attempt: int = 0
    """Restart count of the attempt in which the fault happened."""
    fault_family: str
    trigger: Trigger
    partition: str | None = None
    nodes: list[str] = Field(default_factory=list)
    log_path: str | None = None
    detected_at: datetime
    policy: RecoveryPolicy = Field(default_factory=RecoveryPolicy)
    policy_path: str | None = None
    """Where the mode is re-read at each gate (None: the snapshot's mode stands)."""
    checkpoint_iteration: int | None = None
    """Last ``saved checkpoint at iteration N`` the monitor saw before the fault."""
    last_progress: dict[str, str] = Field(default_factory=dict)
    """Last progress line per rank (``"rank 0"`` → line), for hang diagnostics."""
    ui_url: str | None = None


class GatherEvidenceInput(BaseModel):
    incident_id: str
    cluster: str
    job_id: str
    trigger: Trigger
    log_path: str | None = None
    nodes: list[str] = Field(default_factory=list)
    window_lines: int = 400
    """Lines of job log kept in the bundle (the full window goes to a file)."""
    attempt: int | None = None
    """The attempt the fault happened in: the log window ends where the next attempt begins
    (Slurm may already have requeued the job itself, e.g. after a node failure)."""
    settle_s: float = 2.0
    """The longest wait, in seconds, for a failing job to finish writing before reading (0: none)."""
    settle_quiet_s: float = 0.5
    """The wait ends earlier once the job log has not grown for this many seconds (the dying job
    has written its last lines), or at once when the job no longer runs (nothing of the attempt
    writes any more). ``settle_quiet_s >= settle_s`` restores a fixed ``settle_s`` wait."""
    settle_poll_s: float = 0.1
    """Seconds between two looks (log size, job state) during the wait."""


class RunbookInput(BaseModel):
    """Input of every runbook child workflow."""

    incident_id: str
    cluster: str
    job: JobIdentity
    plan: Plan
    category: Category
    log_path: str | None = None
    attempt: int = 0
    checkpoint_iteration: int | None = None
    policy: RecoveryPolicy = Field(default_factory=RecoveryPolicy)
    last_progress: dict[str, str] = Field(default_factory=dict)
    root_signature: str | None = None
    """The attribution's root signature (same-root-cause check of ``checkpoint_loop``); None: the
    category stands for the root cause."""
    rollback: LoopVerdict | None = None
    """Set when a person approved resuming from ``rollback.previous`` instead of the suspect
    checkpoint: the runbook performs the layout's reversible step, then requeues."""
    rollback_approved_by: str | None = None
    loop_checked: dict[str, str] | None = None
    """Set when the incident ran the bad-checkpoint check itself just before starting the runbook
    (no person's decision in between) and it found no suspect checkpoint: the check's diagnostics
    (possibly empty). The runbook then does not run it again (``runbooks.steps.PATCH_LOOP_CHECKED``)."""


class RunbookResult(BaseModel):
    runbook: RunbookName
    actions: list[ActionResult] = Field(default_factory=list)
    verify: VerifyResult | None = None
    outcome: IncidentOutcome
    reason: str = ""
    first_action_at: datetime | None = None
    diagnostics: dict[str, str] = Field(default_factory=dict)
    saved_checkpoint: int | None = None
    """The checkpoint the job saved on Revive's save signal just before the requeue (None: none)."""
    suspect_checkpoint: int | None = None
    """Set when the runbook refused to requeue onto a checkpoint the job keeps failing from."""
    dependents: list[str] = Field(default_factory=list)
    """Jobs waiting on this one (``afterok`` …) that will never start because it stopped for good
    (Slurm shows them pending with ``DependencyNeverSatisfied``)."""


class CheckIdentityInput(BaseModel):
    cluster: str
    job: JobIdentity


class DrainInput(BaseModel):
    incident_id: str
    job: JobIdentity
    nodes: list[str]
    reason: str


class RequeueInput(BaseModel):
    incident_id: str
    job: JobIdentity
    exclude_nodes: list[str] = Field(default_factory=list)
    hold_release_after_s: float = 30.0
    """Fail-open: a detached process releases Revive's hold after this many seconds."""


class DiagnoseInput(BaseModel):
    incident_id: str
    job: JobIdentity
    nodes: list[str] = Field(default_factory=list)
    last_progress: dict[str, str] = Field(default_factory=dict)


class WaitCheckpointInput(BaseModel):
    incident_id: str
    log_path: str | None
    after_iteration: int | None
    """Wait for ``saved checkpoint at iteration N`` with N above this (None: any)."""
    timeout_s: float = 600.0
    poll_s: float = 1.0


class SavePlanInput(BaseModel):
    """Input of ``plan_save``: may the running job save on a signal before its requeue?"""

    incident_id: str
    job: JobIdentity
    log_path: str | None = None
    signal: str | None = None
    """The policy's signal (``save_before_requeue.signal``); None: the job's profile decides."""
    scope: SignalScope | None = None


class SavePlan(BaseModel):
    """Result of ``plan_save``. ``signal`` None: no save signal (``reason`` says why)."""

    signal: str | None = None
    scope: SignalScope = SignalScope.steps
    profile: str | None = None
    requeues_itself: bool = False
    log_offset: int | None = None
    """Log size when planned: only lines written after it prove the save."""
    checkpoint_dir: str | None = None
    """Where new checkpoint files prove the save (the job's ``--comment`` ``checkpoint_dir``)."""
    restart_count: int = 0
    reason: str = ""


class SignalJobInput(BaseModel):
    incident_id: str
    job: JobIdentity
    signal: str
    scope: SignalScope = SignalScope.steps


class WaitSaveInput(BaseModel):
    incident_id: str
    job: JobIdentity
    log_path: str | None
    plan: SavePlan
    after_iteration: int | None = None
    """Only a save above this iteration counts (the checkpoint known at detection)."""
    timeout_s: float = 120.0
    poll_s: float = 1.0


class SaveOutcome(BaseModel):
    """Result of ``wait_for_save``: which checkpoint the signal produced, if any."""

    saved: bool
    iteration: int | None = None
    path: str | None = None
    proof: str = ""
    """``log_line`` (the profile's saved line), ``new_file`` (a checkpoint file appeared), or ''."""
    requeued_by_job: bool = False
    """The job requeued itself (its restart count rose, or the profile's requeue line appeared)."""
    detail: str = ""


class LoopCheckInput(BaseModel):
    """Input of ``checkpoint_loop``: is the job about to resume from the checkpoint it keeps failing on?"""

    incident_id: str
    cluster: str
    job: JobIdentity
    log_path: str | None
    category: Category
    root_signature: str | None = None
    checkpoint_iteration: int | None = None
    within_iterations: int = 20


class RollbackInput(BaseModel):
    """Input of ``rollback_checkpoint``: the approved verdict (``suspect``, ``previous``, ``profile``)."""

    incident_id: str
    cluster: str
    job: JobIdentity
    verdict: LoopVerdict
    approved_by: str | None = None


class LoopVerdict(BaseModel):
    """Result of ``checkpoint_loop``. ``suspect`` None: no loop (``detail`` says what was seen)."""

    suspect: int | None = None
    previous: int | None = None
    """The checkpoint before the suspect one, when the profile's layout names it (a proposal)."""
    proposal: str = ""
    """The documented, reversible step a person may run to resume from ``previous``."""
    profile: str | None = None
    detail: str = ""


class DependentsInput(BaseModel):
    job_id: str


class DependentJob(BaseModel):
    job_id: str
    name: str | None = None
    user: str | None = None
    state: str
    reason: str | None = None
    dependency: str


class VerifyInput(BaseModel):
    incident_id: str
    job: JobIdentity
    log_path: str | None
    after_attempt: int
    """Only attempts with a restart count above this one count."""
    checkpoint_iteration: int | None = None
    timeout_s: float = 600.0
    poll_s: float = 1.0
    excluded_nodes: list[str] = Field(default_factory=list)


class ModeInput(BaseModel):
    policy_path: str | None = None
    partition: str | None = None
    fallback: str = "observe"


class AuditRecord(BaseModel):
    """One JSONL line appended to the audit file when an incident closes."""

    incident_id: str
    cluster: str
    job_id: str
    attempt: int
    mode: str
    trigger: Trigger
    attribution: Attribution | None = None
    external_attribution: Attribution | None = None
    plan: Plan | None = None
    decision: Decision | None = None
    runbook: RunbookResult | None = None
    result: IncidentResult
    policy: RecoveryPolicy
    ignored_decisions: list[str] = Field(default_factory=list)
    """Invalid, late or duplicate approve/reject signals, recorded and ignored."""
    extra_triggers: list[str] = Field(default_factory=list)
    # ---- for ``revive report`` (issue 11); optional, older records stay valid ----
    partition: str | None = None
    """The job's partition at detection."""
    job: JobRecord | None = None
    """The job record gathered as evidence (nodes, ``tres_per_node``: GPUs for the goodput ledger)."""
    last_progress: dict[str, str] = Field(default_factory=dict)
    """Last progress line per rank before the fault (iteration reached, step time)."""
    # ---- issue 12: where the gate's mode came from; optional, older records stay valid ----
    mode_source: str | None = None
    """``guard:partition`` / ``guard:global`` (set with ``revive mode set``), ``input`` (the guard had
    none: the incident input policy's mode), ``policy_file`` (before the guard held the mode)."""
    policy_version: int | None = None
    """The guard's policy version at the gate (0: none applied there)."""


# ---- notifications (revive.notify, activities.notify) -----------------------------------------

EventKind = Literal["approval_needed", "stopped", "breaker_tripped", "recovered", "not_recovered", "unverified",
                    "escalated", "node_resumed", "node_check_failed"]


class NotifyEvent(BaseModel):
    """One notification. ``detail`` holds extra key/values (rule, plan, evidence lines …)."""

    kind: EventKind
    incident_id: str
    cluster: str = ""
    job_id: str | None = None
    summary: str = ""
    """One line: what happened and what Revive did or wants."""
    rule: str | None = None
    nodes: list[str] = Field(default_factory=list)
    at: datetime | None = None
    detail: dict[str, str] = Field(default_factory=dict)
    link: str | None = None
    """Where to look (Temporal Web UI URL of the incident)."""


class Delivery(BaseModel):
    """The outcome for one webhook."""

    index: int
    """Position in the webhook list."""
    url: str
    """Redacted URL."""
    ok: bool
    status_code: int | None = None
    attempts: int = 0
    error: str | None = None


class NotifyResult(BaseModel):
    deliveries: list[Delivery] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every webhook accepted the event (vacuously true with none)."""
        return all(d.ok for d in self.deliveries)


class NotifyInput(BaseModel):
    """Input of ``notify``: the event plus the policy's notify settings (seconds)."""

    event: NotifyEvent
    webhooks: list[str] = Field(default_factory=list)
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.5


# ---- job history (activities.guard) and job specs (activities.jobspec) ---------------------------

class IncidentHistoryInput(BaseModel):
    """Input of ``incident_history``.

    ``job_submit_time_iso`` (ISO-8601, UTC) bounds the query to incidents started after the job
    was submitted, so a recycled Slurm job id never inherits another job's history.
    ``nodes`` + ``nodes_since_iso`` additionally fetch recent incidents of any job on the cluster
    that implicated those nodes (``JobIncidentHistory.node_incidents``, for repeat offenders).
    """

    cluster: str
    job_id: str
    job_submit_time_iso: str | None = None
    exclude_incident_id: str | None = None
    nodes: list[str] = Field(default_factory=list)
    nodes_since_iso: str | None = None


class SaveJobSpecInput(BaseModel):
    """Input of ``save_job_spec``: which job to save, for which incident."""

    incident_id: str
    cluster: str
    job_id: str


class JobSpecSaved(BaseModel):
    """Result of ``save_job_spec`` (small: the script itself stays on disk, out of history)."""

    saved: bool
    path: str | None = None
    """The incident's spec directory."""
    detail: str = ""


__all__ = [
    "IncidentInput",
    "GatherEvidenceInput",
    "RunbookInput",
    "RollbackInput",
    "RunbookResult",
    "CheckIdentityInput",
    "DrainInput",
    "RequeueInput",
    "DiagnoseInput",
    "WaitCheckpointInput",
    "VerifyInput",
    "SavePlanInput",
    "SavePlan",
    "SignalJobInput",
    "WaitSaveInput",
    "SaveOutcome",
    "LoopCheckInput",
    "LoopVerdict",
    "DependentsInput",
    "DependentJob",
    "ModeInput",
    "AuditRecord",
    "NotifyEvent",
    "Delivery",
    "NotifyResult",
    "NotifyInput",
    "IncidentHistoryInput",
    "SaveJobSpecInput",
    "JobSpecSaved",
    "EventKind",
]

RunbookInput.model_rebuild()
RollbackInput.model_rebuild()
