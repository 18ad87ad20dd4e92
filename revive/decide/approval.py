"""Decide stage — approval rules: does a plan need a person, and can a decision be accepted now?

Pure; the workflow-side wait lives in ``workflows.approval.ApprovalGate``, which calls these.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import ValidationError

from revive.models import Decision, DecisionKind
from revive.policy import Mode


def needs_person(mode: Mode, breaker_reason: str) -> tuple[bool, str]:
    """(needs approval, why). Observe mode always asks; auto mode asks only when the drain
    circuit breaker refused the plan's drain (``breaker_reason`` non-empty)."""
    if breaker_reason:
        return True, breaker_reason
    if mode != Mode.auto:
        return True, "observe mode"
    return False, ""


def decision_problem(d: object, approvers: list[str], decided: Decision | None, is_open: bool,
                     now: datetime | None = None) -> str | None:
    """Why ``d`` cannot be accepted now, or None.

    ``approvers``: the policy's allowlist (empty = anyone); ``decided``: the decision already
    taken (the first valid one wins); ``is_open``: the incident is waiting for a decision;
    ``now``: the workflow's time (UTC), against the decision's ``valid_until`` (a stale one is refused).
    """
    if not isinstance(d, Decision):
        return f"expected a decision object {{decision, approver, note}}, got {type(d).__name__}"
    if d.decision not in (DecisionKind.approve, DecisionKind.reject):
        return f"decision must be 'approve' or 'reject', got {d.decision!r}"
    if not d.approver.strip():
        return "approver is required"
    if approvers and d.approver not in approvers:
        return f"approver {d.approver!r} is not in the policy's approvers allowlist"
    if d.valid_until is not None and now is not None:
        until = d.valid_until if d.valid_until.tzinfo else d.valid_until.replace(tzinfo=UTC)
        if now > until:
            return (f"stale: valid until {until.isoformat(timespec='seconds')}, received "
                    f"{now.isoformat(timespec='seconds')} (the sender stopped waiting; decide again)")
    if decided is not None:
        return f"already decided: {decided.decision.value} by {decided.approver}"
    if not is_open:
        return "this incident is not awaiting approval"
    return None


def parse_decision(data: object) -> Decision | str:
    """A ``decide`` payload (decoded JSON) → ``Decision``, or a one-line reason why it is not one.

    Never raises: the Signal records the reason and ignores the payload; the Update's validator
    refuses it with the reason.
    """
    if isinstance(data, Decision):
        return data
    if not isinstance(data, dict):
        return f"expected an object {{decision, approver, note}}, got {type(data).__name__}"
    who = str(data.get("approver") or "<none>")[:80]
    kind = data.get("decision")
    if kind not in (DecisionKind.approve.value, DecisionKind.reject.value):
        return f"{str(kind)[:40]!r} by {who}: decision must be 'approve' or 'reject'"
    try:
        return Decision.model_validate(data)
    except ValidationError as e:
        why = "; ".join(f"{'.'.join(map(str, x['loc'])) or '<root>'}: {x['msg']}" for x in e.errors()[:3])
        return f"{kind} by {who}: invalid decision: {why}"
