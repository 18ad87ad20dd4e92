"""ApprovalGate: the observe-mode wait for a person's approve/reject, owned by the workflow.

The gate accepts a decision once. The ``decide`` Update's validator rejects bad or late decisions
synchronously (nothing is written to history for a rejected Update); the ``decide`` Signal (for the
Web UI and ``temporal workflow signal``) cannot be refused, so invalid, late or duplicate signals
are recorded in ``ignored`` (and the audit record) and otherwise ignored. The first valid decision
wins.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.models import Decision


class ApprovalGate:
    """Wait with expiry, require an approver (and the allowlist, if any), record the decision."""

    def __init__(self, approvers: list[str]) -> None:
        self.approvers = approvers
        self.open = False
        self.decision: Decision | None = None
        self.ignored: list[str] = []

    def problem(self, d: Decision) -> str | None:
        """Why ``d`` cannot be accepted now, or None. Pure: used by the Update validator."""
        if not isinstance(d, Decision):
            return f"expected a decision object {{decision, approver, note}}, got {type(d).__name__}"
        if d.decision not in ("approve", "reject"):
            return f"decision must be 'approve' or 'reject', got {d.decision!r}"
        if not d.approver.strip():
            return "approver is required"
        if self.approvers and d.approver not in self.approvers:
            return f"approver {d.approver!r} is not in the policy's approvers allowlist"
        if self.decision is not None:
            return f"already decided: {self.decision.decision} by {self.decision.approver}"
        if not self.open:
            return "this incident is not awaiting approval"
        return None

    def offer(self, d: Decision) -> bool:
        """Accept ``d`` if valid; otherwise record why it was ignored. Returns accepted."""
        why = self.problem(d)
        if why is not None:
            self.ignored.append(f"{d.decision} by {d.approver or '<none>'}: {why}")
            return False
        self.decision = d
        return True

    async def wait(self, timeout: timedelta) -> Decision | None:
        """Open the gate and wait up to ``timeout``; None on expiry."""
        self.open = True
        try:
            await workflow.wait_condition(
                lambda: self.decision is not None, timeout=timeout, timeout_summary="approval expiry"
            )
        except asyncio.TimeoutError:
            return None
        finally:
            self.open = False
        return self.decision
