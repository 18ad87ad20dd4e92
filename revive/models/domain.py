"""Pydantic payloads shared by the monitor, workflows, activities, runbooks and the CLI.

Everything here is pure data: it is passed through the Temporal workflow sandbox, so this module
imports nothing but the standard library and pydantic. Durations are ``timedelta`` (or seconds
where the field name says ``_s``); instants are timezone-aware ``datetime`` in UTC.

Stage map (the folder names follow it): detect (``Trigger``) → attribute (``EvidenceBundle`` →
``Attribution``) → decide (``Plan``, ``Decision``) → act (``ActionResult``) → verify
(``VerifyResult``) → close (``IncidentResult``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from revive.models.jobstate import NOT_STARTED, TERMINAL, JobState


class Category(StrEnum):
    """What failed: the root cause when the evidence shows it, otherwise the symptom."""

    crash = "crash"
    hang = "hang"
    nccl_error = "nccl_error"
    cuda_error = "cuda_error"
    gpu_hardware = "gpu_hardware"
    gpu_memory_ecc = "gpu_memory_ecc"
    nvlink = "nvlink"
    oom_gpu = "oom_gpu"
    oom_host = "oom_host"
    straggler = "straggler"
    io_error = "io_error"
    app_bug = "app_bug"
    node_failure = "node_failure"
    preempted = "preempted"
    timeout = "timeout"
    none = "none"


class Domain(StrEnum):
    """Whose fault it is. ``unknown`` when the evidence does not settle it (never a guess)."""

    hardware = "hardware"
    system = "system"
    application = "application"
    unknown = "unknown"


class Action(StrEnum):
    """Recovery actions, from least to most invasive for the cluster.

    - ``restart_in_place``: requeue the job as it is (no node excluded).
    - ``requeue_exclude_nodes``: requeue with the culprit nodes in ``ExcNodeList`` (no drain).
    - ``drain_and_requeue``: drain the culprit nodes (reason ``revive:<incident> <category>``), then
      requeue; Slurm never schedules on a drained node.
    - ``stop_no_retry``: a deterministic failure; requeueing only repeats it.
    - ``escalate``: conflicting evidence; a person decides.
    - ``none``: healthy, nothing to do.
    """

    restart_in_place = "restart_in_place"
    requeue_exclude_nodes = "requeue_exclude_nodes"
    drain_and_requeue = "drain_and_requeue"
    stop_no_retry = "stop_no_retry"
    escalate = "escalate"
    none = "none"


class TriggerKind(StrEnum):
    log_signature = "log_signature"
    no_progress = "no_progress"
    job_state = "job_state"
    slow_progress = "slow_progress"
    """Sustained step-time increase (≥ 5 % for ≥ 10 consecutive steps vs the attempt's baseline)."""


class Trigger(BaseModel):
    """What made the monitor open an incident (the detect stage's output)."""

    kind: TriggerKind
    at: datetime
    """When the monitor saw it (UTC)."""
    signature_id: str | None = None
    """Catalog id of the matched root signature (``log_signature``)."""
    text: str | None = None
    """The triggering line, capped at 4 KB."""
    source: str | None = None
    """Path or stream the line came from."""
    line_no: int | None = None
    since: datetime | None = None
    """``no_progress``: time of the last progress line."""
    threshold_s: float | None = None
    """``no_progress``: the silence threshold in seconds that was exceeded."""
    state_from: str | None = None
    """``job_state``: previous Slurm job state, e.g. ``RUNNING``."""
    state_to: str | None = None
    """``job_state``: new Slurm job state, e.g. ``FAILED``, ``NODE_FAIL``, ``TIMEOUT``."""
    reason: str | None = None


class Event(BaseModel):
    """One cited line of evidence."""

    source: str
    """``job.log``, ``kern.log:<node>``, ``slurm``, ``gpu_metrics`` …"""
    line_no: int | None = None
    """1-based line number within ``source``."""
    timestamp: datetime | None = None
    text: str
    """The line, capped at 4 KB."""
    signature_id: str | None = None


class JobRecord(BaseModel):
    """A Slurm job as ``scontrol show job -o`` (or slurmrestd) reports it."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    name: str | None = None
    user: str | None = None
    state: JobState = JobState.UNKNOWN
    """Base state without flags, e.g. ``RUNNING``, ``PENDING``, ``FAILED``, ``NODE_FAIL``
    (``revive.models.jobstate``; an unknown name becomes ``UNKNOWN``)."""
    reason: str | None = None
    exit_code: str | None = None
    """``<exit>:<signal>`` as Slurm prints it."""
    nodes: list[str] = Field(default_factory=list)
    """Expanded node names (``node[1-2]`` → ``node1``, ``node2``)."""
    partition: str | None = None
    restart_count: int = 0
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    """Slurm ``EndTime=`` / ``end_time``: when the job ended; for a job that has not ended Slurm
    prints its expected end (start + time limit), so read it through ``ended_at``."""
    std_out: str | None = None
    """Expanded StdOut path."""
    std_err: str | None = None
    work_dir: str | None = None
    command: str | None = None
    """The batch script path and its arguments (``Command=``), for a resubmission."""
    comment: str | None = None
    requeue: bool | None = None
    exc_nodes: list[str] = Field(default_factory=list)
    batch_host: str | None = None
    time_limit: str | None = None
    elapsed: str | None = None
    num_nodes: int | None = None
    num_tasks: int | None = None
    tres_per_node: str | None = None
    hold: bool = False
    array_job_id: str | None = None
    """``ArrayJobId`` of an array task (then ``job_id`` is ``<ArrayJobId>_<ArrayTaskId>``)."""
    array_task_id: str | None = None
    """``ArrayTaskId``: one task (``4``) or, on the record of the tasks still pending as one,
    their set (``[5-9%2]``)."""
    dependency: str | None = None
    """``Dependency`` as slurmctld prints it, e.g. ``afterok:123_*(unfulfilled)``
    (``revive.scheduler.arrays.parse_dependency``)."""
    """True when the job is held (Priority=0 / Reason=job_requeued_in_held_state / JobHeld*)."""

    @property
    def restarts(self) -> int:
        """How many times the scheduler restarted the job: its current attempt number (0 = the
        first run). Slurm: ``Restarts=`` of ``scontrol show job -o`` / ``restart_cnt`` of
        ``squeue --json`` and slurmrestd (Slurm 22.05, ``src/common/slurm_protocol_defs.h``
        ``restart_cnt``); it counts every requeue, Revive's or the scheduler's own."""
        return self.restart_count

    @property
    def ended_at(self) -> datetime | None:
        """When the job ended (aware UTC), or None while it has not (a state not in ``TERMINAL``)."""
        return self.end_time if self.state in TERMINAL else None

    @property
    def attempt_started_at(self) -> datetime | None:
        """When the current attempt started (aware UTC), or None when it has not (yet) started.
        Slurm: ``StartTime=`` / ``start_time``, trusted only once the job left PENDING (a pending
        job's StartTime is the scheduler's expected start, e.g. after a requeue). Unlike
        ``submit_time`` (which Slurm 22.05 resets on requeue) it marks the attempt's first line."""
        return self.start_time if self.attempt_started else None

    @property
    def attempt_started(self) -> bool:
        """The current attempt has started (the job is not waiting for an allocation:
        ``revive.models.jobstate.NOT_STARTED``)."""
        return self.state not in NOT_STARTED


class NodeRecord(BaseModel):
    """A Slurm node as ``scontrol show node -o`` reports it."""

    model_config = ConfigDict(extra="ignore")

    name: str
    state: str
    """Full state string, e.g. ``IDLE``, ``MIXED+DRAIN``, ``DOWN*``."""
    reason: str | None = None
    partitions: list[str] = Field(default_factory=list)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()


class GpuSample(BaseModel):
    """One GPU metrics sample (NVML agent, DCGM exporter or ``nvidia-smi --query-gpu`` CSV)."""

    node: str | None = None
    timestamp: datetime | None = None
    index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    metrics: dict[str, float | str] = Field(default_factory=dict)


class PriorIncident(BaseModel):
    """One earlier incident on a node, handed to the engine as evidence (issue #8.4).

    Shape: ``EvidenceBundle.node_history = {"gpu-node-007": [PriorIncident, ...]}``. Sources:
    Revive's own closed incidents on the node, or a Slurm drain reason (``revive:<id> gpu_hardware``
    or an operator's). The engine only reads it; whoever gathers the bundle fetches it.
    ``at`` is a timezone-aware UTC instant (``None`` = time unknown: counted as recent).
    """

    category: Category
    domain: Domain = Domain.unknown
    at: datetime | None = None
    incident_id: str | None = None
    """Revive's incident id, or the job id of the earlier failure."""
    reason: str = ""
    """One line: the earlier verdict or the drain reason (``Xid 48 DBE``, ``revive:inc-12 gpu_memory_ecc``)."""


class EvidenceBundle(BaseModel):
    """Everything the attribution engine reads. Pure data; no I/O happens on it.

    ``job_log`` holds ranks interleaved as the job printed them; attempt boundaries are the
    ``=== attempt restart=N`` lines the batch script prints. Each line is capped at 4 KB and the
    whole text is capped by the gatherer (the full window is in ``log_window_path``).
    """

    trigger: Trigger | None = None
    job_log: str = ""
    job_log_source: str = "job.log"
    kernel_logs: dict[str, list[str]] = Field(default_factory=dict)
    """Kernel-log lines (dmesg / kern.log) per node name; key ``""`` when the node is unknown."""
    job: JobRecord | None = None
    node_states: dict[str, str] = Field(default_factory=dict)
    gpu_metrics: list[GpuSample] = Field(default_factory=list)
    kernel_log_utc_offset_s: int | None = None
    """UTC offset (seconds) of the nodes' syslog clocks, for syslog stamps without a zone; None = unknown."""
    partition_size: int | None = None
    """Nodes in the job's partition (the drain breaker's denominator)."""
    ip_to_node: dict[str, str] = Field(default_factory=dict)
    """Optional cluster-config map of IP addresses to node names (IB peer errors)."""
    node_history: dict[str, list[PriorIncident]] = Field(default_factory=dict)
    """Earlier incidents per node name (``PriorIncident``); empty = no history known."""
    log_window_path: str | None = None
    log_window_sha256: str | None = None
    notes: list[str] = Field(default_factory=list)
    """Problems met while gathering (e.g. ``job log unreadable: …``)."""
    settle: str = ""
    """How long the gatherer waited for the dying job before reading, and why the wait ended
    (``"0.62 s: log quiet 0.5 s"``, ``"0.20 s: job FAILED"``, ``"2.00 s: limit"``); empty = no wait."""


class GpuRef(BaseModel):
    node: str | None = None
    pci_bus_id: str | None = None
    index: int | None = None
    uuid: str | None = None


class Attribution(BaseModel):
    """The attribute stage's verdict. ``action`` is a recommendation; the runbook decides."""

    category: Category
    domain: Domain
    culprit_nodes: list[str] = Field(default_factory=list)
    """Nodes to blame (not merely where something happened); ``[]`` = not identifiable."""
    culprit_ranks: list[int] = Field(default_factory=list)
    gpus: list[GpuRef] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0, default=0.5)
    root_event: Event | None = None
    cascade_events: list[Event] = Field(default_factory=list)
    action: Action
    explanation: str = ""
    engine: str = "revive-rules"
    node_notes: list[str] = Field(default_factory=list)
    """Notes on nodes that need attention later but raise no incident (e.g. Xid 63 row remap)."""


class JobIdentity(BaseModel):
    """What makes a live job 'the same job' as the one an incident is about."""

    job_id: str
    user: str | None = None
    name: str | None = None
    restart_count: int = 0
    """The attempt the fault happened in; the live job may have a higher count, never lower."""


class DecisionKind(StrEnum):
    approve = "approve"
    reject = "reject"


class Decision(BaseModel):
    """A person's approve/reject, sent as the ``decide`` Update or Signal."""

    decision: DecisionKind
    approver: str = Field(default="", max_length=200)
    """Who decided (recorded in history and the audit record); the policy may allowlist names."""
    note: str | None = Field(default=None, max_length=2000)
    valid_until: datetime | None = None
    """UTC instant after which the workflow refuses this decision as stale (``revive approve``
    sets it to the moment it stops waiting for an answer): an approval the operator gave up on
    never takes effect later, when a worker returns. None: no deadline (Web UI, old senders)."""


class StepKind(StrEnum):
    """What one plan step does (shown to the approver; the runbook runs the steps)."""

    drain = "drain"
    requeue = "requeue"
    requeue_exclude = "requeue_exclude"
    wait_checkpoint = "wait_checkpoint"
    cancel = "cancel"
    diagnose = "diagnose"
    stop = "stop"
    notify = "notify"


class RunbookName(StrEnum):
    """The plan's runbook. The first five are child workflows (``runbooks.RUNBOOKS``); ``stop``,
    ``escalate`` and ``none`` take no cluster action and are closed by the incident itself."""

    drain_and_requeue = "drain_and_requeue"
    requeue_exclude = "requeue_exclude"
    restart_in_place = "restart_in_place"
    hang = "hang"
    straggler = "straggler"
    stop = "stop"
    escalate = "escalate"
    none = "none"


class PlanStep(BaseModel):
    kind: StepKind
    nodes: list[str] = Field(default_factory=list)
    detail: str = ""


class Plan(BaseModel):
    """The decide stage's output: what the runbook will run, and why."""

    action: Action
    """Executed action (may differ from the attribution's recommendation)."""
    recommended: Action
    runbook: RunbookName
    rule: str
    """The policy or runbook rule that drove the decision, e.g. ``runbook:gpu_hardware``."""
    steps: list[PlanStep] = Field(default_factory=list)
    exclude_nodes: list[str] = Field(default_factory=list)
    drain_nodes: list[str] = Field(default_factory=list)
    needs_approval: bool = True
    approval_reason: str = ""


class ActionKind(StrEnum):
    """What an act-stage activity did."""

    drain = "drain"
    requeue = "requeue"
    resubmit = "resubmit"
    wait_for_checkpoint = "wait_for_checkpoint"
    signal = "signal"
    """A save signal sent to the running job (``scancel --signal``) before its requeue."""
    dependents = "dependents"
    """The job's dependents were made to wait for it again after its requeue."""
    rollback_checkpoint = "rollback_checkpoint"
    """A person approved resuming from the previous checkpoint: the layout's reversible file step
    (``revive.rollback``), recorded with its undo (``revive checkpoint undo <incident>``)."""
    report = "report"
    """Nothing changed on the cluster: a finding recorded for a person (suspect checkpoint,
    dependents that will never start)."""


class ActionResult(BaseModel):
    """What an act-stage activity did on the cluster."""

    action: ActionKind
    ok: bool
    changed: bool = True
    """False when live state already matched (a retried activity never acts twice)."""
    detail: str = ""
    at: datetime | None = None
    commands: list[list[str]] = Field(default_factory=list)
    new_job_id: str | None = None


class VerifyResult(BaseModel):
    """The verify stage: did training resume from the checkpoint and advance past it?"""

    recovered: bool
    job_state: str | None = None
    nodes: list[str] = Field(default_factory=list)
    resumed_from: int | None = None
    first_iteration_after: int | None = None
    resumed_at: datetime | None = None
    """Time of the first progress line past the checkpoint (from the log line's own timestamp; for a
    line without one, e.g. a progress bar, when verify read it: at most one poll interval late)."""
    detail: str = ""
    rule: str | None = None
    """Which rule proved the resume: ``revive_markers`` (the demo job's attempt/resume lines), or a
    framework profile's ``resumed_past_loaded_checkpoint`` / ``past_last_saved_checkpoint`` /
    ``fresh_start_progress`` (``revive.progress.ProfileResumeTracker``)."""
    unverified: bool = False
    """True when the log matched no progress profile at all: Revive cannot tell, it does not claim
    a failure (the incident closes ``unverified``)."""


class IncidentState(StrEnum):
    """Where an incident stands (the ``ReviveState`` search attribute); at the end, its outcome."""

    opened = "opened"
    gathering = "gathering"
    attributing = "attributing"
    planning = "planning"
    awaiting_approval = "awaiting_approval"
    acting = "acting"


class IncidentOutcome(StrEnum):
    recovered = "recovered"
    not_recovered = "not_recovered"
    unverified = "unverified"
    """The plan ran, but the job's log matched no progress profile: resumption could not be checked."""
    rejected = "rejected"
    expired = "expired"
    escalated = "escalated"
    stopped = "stopped"
    no_action = "no_action"


class IncidentResult(BaseModel):
    incident_id: str
    outcome: IncidentOutcome
    reason: str = ""
    category: Category | None = None
    domain: Domain | None = None
    culprit_nodes: list[str] = Field(default_factory=list)
    recommended: Action | None = None
    executed: Action | None = None
    rule: str = ""
    decided_by: str | None = None
    detected_at: datetime | None = None
    fault_time: datetime | None = None
    first_action_at: datetime | None = None
    resumed_at: datetime | None = None
    closed_at: datetime | None = None
    # ---- added for the guards (issue 4); optional, older results stay valid ----
    job_id: str | None = None
    """Slurm job id the incident was about (read by ``incident_history``)."""
    attempt: int | None = None
    """The job's ``restart_count`` in the attempt that failed."""
    root_signature: str | None = None
    """``Attribution.root_event.signature_id`` (same-root-cause budget)."""
    checkpoint_iteration: int | None = None
    """Latest checkpoint iteration known at detection (no-progress budget, preemption rule)."""
    breaker_reason: str | None = None
    """Set when the drain circuit breaker refused this incident's drain (why it waited)."""


__all__ = [
    "Category",
    "Domain",
    "Action",
    "TriggerKind",
    "Trigger",
    "Event",
    "JobRecord",
    "NodeRecord",
    "GpuSample",
    "PriorIncident",
    "EvidenceBundle",
    "GpuRef",
    "Attribution",
    "JobIdentity",
    "DecisionKind",
    "Decision",
    "StepKind",
    "RunbookName",
    "PlanStep",
    "Plan",
    "ActionKind",
    "ActionResult",
    "VerifyResult",
    "IncidentState",
    "IncidentOutcome",
    "IncidentResult",
]
