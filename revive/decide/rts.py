"""Decide stage — return to service: which drained nodes are Revive's, which to check now, and
what the drain reason says after a failed check. Pure (no I/O); the workflows call these.

Drain reasons Revive writes (Slurm ``Reason=``, read back without Slurm's ``[user@time]`` suffix):

- at the incident's drain (``revive.decide.budgets.drain_reason``):
  ``<prefix><incident id> <category>``, e.g. ``revive:local-7-20261201T120000-a0-gpu gpu_hardware``;
- after a failed health check (``failed_reason``):
  ``<prefix> health check failed <when>: <short reason> (incident <id> <category>)``, e.g.
  ``revive: health check failed 2026-12-01T12:30:00Z: exit 1: ECC errors (incident local-7-… gpu_hardware)``;
  the incident and category stay in the reason so a later check is still tied to the incident.

A reason that does not start with ``policy.drain_reason_prefix`` is a person's (or another
tool's) drain: never parsed as Revive's, never touched.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field

from revive.models import Category, NodeRecord
from revive.policy import RecoveryPolicy

HARDWARE_CATEGORIES = frozenset({
    Category.gpu_hardware.value, Category.gpu_memory_ecc.value, Category.nvlink.value,
    Category.cuda_error.value, Category.node_failure.value,
})
"""Categories that blame the node's hardware (``revive.attribution.verdict._HW_CATEGORIES`` plus
``node_failure``): a drain for one of these that passes its health check is a false isolation."""

SHORT_REASON_MAX = 120
"""Characters of the check's own output kept in the drain reason."""
_FAILED = re.compile(
    r"^\s*health check failed (?P<when>\S+): (?P<short>.*) \(incident (?P<iid>\S+) (?P<cat>\S+)\)\s*$"
)
_ID = re.compile(r"^[A-Za-z0-9_.:@+\-]+$")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\[\]()]+")


class DrainKind(StrEnum):
    """What Revive's drain reason records."""

    incident = "incident"
    """Drained by an incident; never checked since."""
    check_failed = "check_failed"
    """Drained again after a failed health check (the reason carries when)."""


class OwnDrain(BaseModel):
    """One node drained by Revive, as its reason tells it."""

    node: str
    reason: str
    kind: DrainKind
    incident_id: str | None = None
    """The incident that drained the node; None when the reason names none (an older format)."""
    category: str | None = None
    """The incident's category (``revive.models.Category`` value) or None."""
    failed_at: datetime | None = None
    """When the last health check failed (``kind == check_failed``)."""
    partition: str | None = None
    """The node's first partition (the mode is read for it)."""

    @property
    def blamed_hardware(self) -> bool:
        return self.category in HARDWARE_CATEGORIES


class Candidate(BaseModel):
    """A node the per-cluster run considered: checked (``check``) or skipped with ``why``."""

    drain: OwnDrain
    check: bool
    why: str = ""


def parse_own_drain(node: NodeRecord, policy: RecoveryPolicy) -> OwnDrain | None:
    """``node``'s drain as Revive's, or None when the node is not drained or the reason is not
    Revive's. Never raises: an unparsable Revive reason is an ``incident`` drain with no id."""
    reason = (node.reason or "").strip()
    if not node.drained or not reason.startswith(policy.drain_reason_prefix):
        return None
    rest = reason[len(policy.drain_reason_prefix):]
    part = node.partitions[0] if node.partitions else None
    m = _FAILED.match(rest)
    if m:
        try:
            when: datetime | None = datetime.fromisoformat(m["when"].replace("Z", "+00:00"))
        except ValueError:
            when = None
        if when is not None and when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return OwnDrain(node=node.name, reason=reason, kind=DrainKind.check_failed, incident_id=m["iid"],
                        category=m["cat"], failed_at=when, partition=part)
    parts = rest.split()
    iid = parts[0] if parts and _ID.match(parts[0]) else None
    cat = parts[1] if len(parts) > 1 and _ID.match(parts[1]) else None
    return OwnDrain(node=node.name, reason=reason, kind=DrainKind.incident, incident_id=iid, category=cat,
                    partition=part)


def short_reason(text: str) -> str:
    """One line for a drain reason: control characters, brackets and parentheses become spaces
    (Slurm appends ``[user@time]``; the parser reads the trailing ``(incident …)``), capped."""
    one = " ".join(_UNSAFE.sub(" ", text or "").split())
    return (one[: SHORT_REASON_MAX - 1] + "…") if len(one) > SHORT_REASON_MAX else (one or "no output")


def failed_reason(policy: RecoveryPolicy, drain: OwnDrain, when: datetime, short: str) -> str:
    """The reason set after a failed check: ``<prefix> health check failed <when>: <short>
    (incident <id> <category>)`` (``unknown`` for a missing id or category)."""
    stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"{policy.drain_reason_prefix} health check failed {stamp}: {short_reason(short)} "
            f"(incident {drain.incident_id or 'unknown'} {drain.category or 'unknown'})")


def select(nodes: list[NodeRecord], policy: RecoveryPolicy, now: datetime,
           open_incidents: set[str] | None = None) -> list[Candidate]:
    """Revive's drains on ``nodes``, each marked ``check`` or skipped with why (sorted by node).

    Skipped: the incident that drained the node is still open (``open_incidents``: ids), or the
    last check failed less than ``return_to_service.recheck_after`` ago. Nodes drained by anyone
    else never appear. The concurrency cap (``max_concurrent``) is the workflow's: it runs the
    ``check`` ones in batches.
    """
    rts = policy.return_to_service
    out: list[Candidate] = []
    for n in sorted(nodes, key=lambda n: n.name):
        d = parse_own_drain(n, policy)
        if d is None:
            continue
        if d.incident_id and open_incidents and d.incident_id in open_incidents:
            out.append(Candidate(drain=d, check=False, why=f"incident {d.incident_id} is still open"))
        elif d.kind == DrainKind.check_failed and d.failed_at and now - d.failed_at < rts.recheck_after:
            left = rts.recheck_after - (now - d.failed_at)
            out.append(Candidate(drain=d, check=False,
                                 why=f"last check failed at {d.failed_at.isoformat()}; next in {_dur(left)}"))
        else:
            out.append(Candidate(drain=d, check=True))
    return out


def repeat_offender(drains_of_node: list[datetime], policy: RecoveryPolicy, now: datetime) -> str | None:
    """Why the guard keeps ``node`` drained, or None. ``drains_of_node``: when Revive drained it
    (the guard's records). ``repeat_offender.incidents`` drains within ``repeat_offender.window``
    make it a repeat offender: a person returns it to service, not a health check."""
    ro = policy.repeat_offender
    recent = [t for t in drains_of_node if now - t <= ro.window]
    if len(recent) >= ro.incidents:
        return (f"repeat offender: drained {len(recent)} times within {_dur(ro.window)} "
                f"(policy repeat_offender.incidents={ro.incidents}); a person decides")
    return None


class CheckVerdict(BaseModel):
    """What one health check found (``activities.health.run_health_check``)."""

    node: str
    passed: bool
    summary: str = ""
    """One line: exit status and the output's last line, or why it could not run."""
    commands: list[str] = Field(default_factory=list)
    """Every scheduler command / check argv that ran, for the audit."""
    started_at: datetime | None = None
    finished_at: datetime | None = None


class RtsOutcome(StrEnum):
    """How one node's return-to-service check ended."""

    resumed = "resumed"
    """The check passed and the node was resumed."""
    check_failed = "check_failed"
    """The check failed: the node stays drained with an updated reason; notified."""
    refused = "refused"
    """The guard keeps the node drained (repeat offender): a person decides."""
    rejected = "rejected"
    """Observe mode: a person rejected the resume."""
    expired = "expired"
    """Observe mode: nobody decided within ``approval.timeout``; the node stays drained."""
    changed = "changed"
    """The node's state or drain reason changed during the check (a person took it over, or it was
    resumed already): left alone."""


# ---- workflow and activity payloads ---------------------------------------------------------

class RtsInput(BaseModel):
    """Input of the per-cluster ``ReturnToServiceWorkflow`` (the Schedule's action argument)."""

    cluster: str
    policy: RecoveryPolicy = Field(default_factory=RecoveryPolicy)
    policy_path: str | None = None
    """The policy file the run was configured from (recorded; the gate's mode comes from the
    cluster guard, ``read_guard_mode``, else this input's policy)."""
    task_queue: str = "revive"
    """The task queue the run was started on (the starter sets it): node check ids carry it
    (``revive.ids.node_check_id``), from the input so that a replay builds the same ids."""


class ScanInput(BaseModel):
    cluster: str
    policy: RecoveryPolicy
    now: datetime


class NodeCheckInput(BaseModel):
    """Input of ``NodeCheckWorkflow`` (id ``revive-rts-<cluster>-<node>``)."""

    cluster: str
    drain: OwnDrain
    policy: RecoveryPolicy
    policy_path: str | None = None


class HealthCheckInput(BaseModel):
    """Input of ``run_health_check``. Seconds throughout."""

    cluster: str
    node: str
    command: list[str]
    method: str = "direct"
    """``revive.policy.CheckMethod`` value."""
    timeout_s: float = 600.0
    window_name: str = ""
    """Maintenance window (reservation) name for ``method=reservation``."""
    window_s: float = 900.0
    users: list[str] = Field(default_factory=lambda: ["root"])
    reason: str = ""
    """The drain reason seen (``reservation``: the node is drained again with it after the job)."""
    output_dir: str | None = None
    """Where the check job writes its output (``reservation``; read back when reachable)."""


class NodeActionInput(BaseModel):
    """Input of ``resume_checked_node`` / ``redrain_checked_node``: act only while the node is still
    drained with ``expected_reason`` (exactly), so a person's change is never overridden."""

    cluster: str
    node: str
    expected_reason: str
    new_reason: str = ""
    incident_id: str | None = None
    category: str | None = None
    blamed_hardware: bool = False
    prefix: str = "revive:"
    """The policy's ``drain_reason_prefix`` (the resume record reads the incident id after it)."""


class NodeActionResult(BaseModel):
    done: bool
    detail: str
    commands: list[str] = Field(default_factory=list)


class GuardDrainsInput(BaseModel):
    cluster: str
    node: str


class NodeCheckResult(BaseModel):
    """Result of ``NodeCheckWorkflow``: the node, the incident it is tied to, what happened."""

    cluster: str
    node: str
    incident_id: str | None = None
    category: str | None = None
    outcome: RtsOutcome
    detail: str = ""
    verdict: CheckVerdict | None = None
    decided_by: str | None = None
    false_isolation: bool = False
    """The incident blamed hardware and the check found nothing (the node was resumed)."""
    commands: list[str] = Field(default_factory=list)
    check_id: str | None = None
    """The ``NodeCheckWorkflow``'s id (``revive-rts-<cluster>-node-<node>``)."""
    closed_at: datetime | None = None


class RtsResult(BaseModel):
    """Result of one per-cluster run."""

    cluster: str
    scanned_at: datetime | None = None
    """Workflow time of the scan (``recheck_after`` is measured from the failed check to this)."""
    checked: list[NodeCheckResult] = Field(default_factory=list)
    skipped: list[Candidate] = Field(default_factory=list)
    busy: list[str] = Field(default_factory=list)
    """Nodes whose check from an earlier run was still running (never two at once)."""


def _dur(d: timedelta) -> str:
    s = int(max(0, d.total_seconds()))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


__all__ = ["HARDWARE_CATEGORIES", "Candidate", "CheckVerdict", "DrainKind", "GuardDrainsInput", "HealthCheckInput",
           "NodeActionInput", "NodeActionResult", "NodeCheckInput", "NodeCheckResult", "OwnDrain", "RtsInput",
           "RtsOutcome", "RtsResult", "ScanInput", "failed_reason", "parse_own_drain", "repeat_offender", "select",
           "short_reason"]
