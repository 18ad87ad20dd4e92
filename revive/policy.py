"""Recovery policy: validated data passed into every incident workflow.

The policy file is YAML, loaded and validated here (outside the workflow) and passed into
``IncidentWorkflow`` as part of its input, so the history records the exact snapshot that drove each
decision. The *mode* is additionally re-read at each gate by an activity, so rolling a partition
back to ``observe`` applies to incidents that are already running.

Every duration is a ``timedelta`` in the model; in YAML write seconds (``1800``) or ISO-8601
(``PT30M``). ``revive policy check FILE`` prints the effective settings.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from revive.errors import ConfigError
from revive.signals import SignalScope, normalize_signal


class Mode(StrEnum):
    """``observe`` (default): proposed actions wait for a person. ``auto``: run after validation."""

    observe = "observe"
    auto = "auto"


class ExpiryAction(StrEnum):
    expire = "expire"
    """Do nothing; close the incident as ``expired`` (default)."""
    proceed = "proceed"
    """Run the plan as if approved (still subject to every guard)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    _ZERO_OK: frozenset[str] = frozenset({"backoff"})
    """Durations that may be zero; every other duration must be positive (a negative approval
    timeout or poll interval is a typo, never a setting)."""

    @model_validator(mode="after")
    def _durations_positive(self):
        for name in type(self).model_fields:
            v = getattr(self, name)
            if isinstance(v, timedelta):
                if v < timedelta(0) or (v == timedelta(0) and name not in self._ZERO_OK):
                    raise ValueError(f"{name} must be a positive duration, got {v.total_seconds():g} s")
        return self


class ApprovalPolicy(_Strict):
    timeout: timedelta = timedelta(minutes=30)
    """How long an observe-mode plan waits for approve/reject. Keep below Slurm's ``MinJobAge``."""
    on_expiry: ExpiryAction = ExpiryAction.expire
    approvers: list[str] = Field(default_factory=list)
    """Allowlist checked in the Update validator; empty = anyone. Authentication of the caller is
    the Temporal server's job (mTLS / authorizer); this list guards against mistakes."""


class RetryBudget(_Strict):
    max_requeues_per_job: int = Field(default=5, ge=0)
    max_same_root_cause: int = Field(default=2, ge=1)
    """Incidents with the same root signature on one job before Revive stops retrying."""
    max_requeues_without_progress: int = Field(default=2, ge=0)
    """Requeues in a row whose checkpoint did not advance."""
    backoff: timedelta = timedelta(seconds=0)


class BreakerPolicy(_Strict):
    """Drain circuit breaker: bounds how many nodes Revive may drain in a sliding window."""

    max_fraction: float = Field(default=0.25, gt=0.0, le=1.0)
    """At most this fraction of a partition's nodes drained by Revive within ``window``."""
    max_nodes: int = Field(default=2, ge=0)
    window: timedelta = timedelta(hours=1)


class RepeatOffenderPolicy(_Strict):
    incidents: int = Field(default=3, ge=1)
    window: timedelta = timedelta(hours=24)


class OptInPolicy(_Strict):
    partitions: list[str] = Field(default_factory=list)
    """Jobs in these partitions are watched. Empty = none by partition."""
    accounts: list[str] = Field(default_factory=list)
    comment_key: str = "revive"
    """Jobs whose ``--comment`` is JSON with this key (e.g. ``{"revive": {"policy": "default"}}``)."""
    allowed_overrides: list[str] = Field(default_factory=lambda: ["policy"])


class HangPolicy(_Strict):
    k: float = Field(default=5.0, gt=0)
    """Silence threshold = max(k × median step interval of the attempt, floor)."""
    floor: timedelta = timedelta(seconds=60)


class VerifyPolicy(_Strict):
    timeout: timedelta = timedelta(minutes=10)
    """Time from the action to the first iteration past the checkpoint."""
    poll_interval: timedelta = timedelta(seconds=1)


class SaveBeforeRequeuePolicy(_Strict):
    """Ask a still-running job to save before Revive requeues it (``runbooks.steps.save_before_requeue``)."""

    enabled: bool = True
    timeout: timedelta = timedelta(minutes=2)
    """Longest wait for the saved line (or a new checkpoint file) after the signal; then requeue anyway."""
    signal: str | None = None
    """A signal the job handles (``USR1``, ``SIGTERM`` …); None: the job's profile names it (or none)."""
    scope: SignalScope | None = None
    """Which processes ``scancel`` reaches (``steps``/``batch``/``full``); None: the profile's, else ``steps``."""
    on_hang: bool = False
    """Also for hangs. Off by default: a rank stuck in a collective cannot save, and the other
    ranks block in the save's own collectives."""

    @field_validator("signal")
    @classmethod
    def _signal(cls, v: str | None) -> str | None:
        return None if v is None else normalize_signal(v)


class BadCheckpointPolicy(_Strict):
    """Stop requeueing onto a checkpoint the job keeps failing from (``activities.checkpoint``)."""

    enabled: bool = True
    within_iterations: int = Field(default=20, ge=0)
    """An attempt that loaded checkpoint C and failed at most this many iterations past C, before
    saving a newer one, counts as 'failed right after resuming from C'."""
    propose_previous: bool = True
    """When the profile knows the checkpoint layout, the escalation carries a proposal to resume
    from the previous checkpoint (a person runs it; Revive never rewrites checkpoints itself)."""


class NotifyPolicy(_Strict):
    webhooks: list[str] = Field(default_factory=list)
    timeout: timedelta = timedelta(seconds=5)
    retries: int = Field(default=2, ge=0, le=10)
    """Extra attempts per webhook after a failure (connection error, timeout, 429, 5xx)."""


class CheckMethod(StrEnum):
    """Where a return-to-service health check runs on a drained node (Slurm starts no job there)."""

    direct = "direct"
    """On the node itself: over SSH in site mode, locally on the testbed (``revive.health``)."""
    reservation = "reservation"
    """As a job inside a maintenance window (Slurm reservation ``revive-rts-<node>``, flags
    ``MAINT,IGNORE_JOBS``) on that node: the node is resumed for the job's run only."""


class ReturnToServicePolicy(_Strict):
    """Health checks that return nodes Revive drained to service (``workflows.return_to_service``).

    Off by default: a site names its check first. Examples of ``command`` (argv, ``{node}``
    substituted, exit status 0 = healthy): ``["nvidia-smi", "-q"]``, ``["dcgmi", "diag", "-r", "2"]``,
    an NCCL all-reduce test where one is installed (``["all_reduce_perf", "-b", "8", "-e", "1G"]``),
    or any script. A node passes only when the command exits 0 within ``timeout``.
    """

    enabled: bool = False
    """When true the worker creates (or updates) the per-cluster Temporal Schedule on start."""
    interval: timedelta = timedelta(minutes=10)
    """How often the per-cluster ``ReturnToServiceWorkflow`` runs (the Schedule's interval)."""
    command: list[str] = Field(default_factory=lambda: ["nvidia-smi", "-q"])
    method: CheckMethod = CheckMethod.direct
    timeout: timedelta = timedelta(minutes=10)
    """Longest one check may run (the command, or the job in the maintenance window)."""
    max_concurrent: int = Field(default=2, ge=1, le=64)
    """At most this many nodes in checks at once, per cluster."""
    recheck_after: timedelta = timedelta(hours=1)
    """A node whose check failed is checked again after this long (its drain reason carries the
    time of the failed check). A node whose incident is still open is never checked."""
    reservation_users: list[str] = Field(default_factory=lambda: ["root"])
    """Users the maintenance window admits (the worker's user submits the check job)."""
    reservation_extra: timedelta = timedelta(minutes=5)
    """The window lasts ``timeout`` plus this margin; deleted as soon as the check ends."""

    @field_validator("command")
    @classmethod
    def _command_nonempty(cls, v: list[str]) -> list[str]:
        if not v or not v[0].strip():
            raise ValueError("must name a program (argv list, e.g. ['nvidia-smi', '-q'])")
        return v


class RecoveryPolicy(_Strict):
    """The whole policy. Passed as workflow input; every decision names the rule it used."""

    name: str = "default"
    mode: Mode = Mode.observe
    partition_modes: dict[str, Mode] = Field(default_factory=dict)
    """Per-partition override (a canary partition runs ``auto`` while the rest observes)."""
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    budgets: RetryBudget = Field(default_factory=RetryBudget)
    max_excluded_nodes_per_job: int = Field(default=2, ge=0)
    breaker: BreakerPolicy = Field(default_factory=BreakerPolicy)
    repeat_offender: RepeatOffenderPolicy = Field(default_factory=RepeatOffenderPolicy)
    opt_in: OptInPolicy = Field(default_factory=OptInPolicy)
    hang: HangPolicy = Field(default_factory=HangPolicy)
    verify: VerifyPolicy = Field(default_factory=VerifyPolicy)
    notify: NotifyPolicy = Field(default_factory=NotifyPolicy)
    save_before_requeue: SaveBeforeRequeuePolicy = Field(default_factory=SaveBeforeRequeuePolicy)
    bad_checkpoint: BadCheckpointPolicy = Field(default_factory=BadCheckpointPolicy)
    return_to_service: ReturnToServicePolicy = Field(default_factory=ReturnToServicePolicy)
    drain_reason_prefix: str = "revive:"
    topology: dict[str, str] = Field(default_factory=dict)
    """Optional node → switch (or rack) map. A communication error (NCCL/IB) naming several nodes
    behind one switch is escalated to a person instead of excluding or draining them (the switch,
    not the nodes, is the likely culprit). Empty = unknown topology (rule never fires)."""

    @field_validator("drain_reason_prefix")
    @classmethod
    def _prefix_nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty: Revive only lifts drains carrying its own prefix")
        if len(v) > 64 or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in v):
            # it starts scontrol's Reason= on every drain: a NUL fails the exec, ESC reaches terminals
            raise ValueError("must be at most 64 characters and hold no control characters")
        return v

    def mode_for(self, partition: str | None) -> Mode:
        """The effective mode for a partition (override, else the global mode)."""
        if partition and partition in self.partition_modes:
            return self.partition_modes[partition]
        return self.mode


def parse_policy(data: object, source: str = "<policy>") -> RecoveryPolicy:
    """Validate policy data. Raises ``ConfigError`` naming the field and the allowed values."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: policy must be a mapping, got {type(data).__name__}")
    try:
        return RecoveryPolicy.model_validate(data)
    except ValidationError as e:
        from revive.yamlfile import field_errors

        raise ConfigError(f"{source}: invalid policy\n  " + "\n  ".join(field_errors(e))) from None


def load_policy(path: str | Path | None) -> RecoveryPolicy:
    """Load a policy YAML file; ``None`` gives the built-in defaults (observe mode).

    Raises ``ConfigError`` for a missing/unreadable file, bad YAML or invalid fields.
    """
    if path is None:
        return RecoveryPolicy()
    from revive.yamlfile import read_yaml

    return parse_policy(read_yaml(path, "policy file"), str(path))
