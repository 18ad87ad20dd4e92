"""ApprovalGate: the observe-mode wait for a person's approve/reject, owned by the workflow.

The gate accepts a decision once. The ``decide`` Update's validator rejects bad or late decisions
synchronously (nothing is written to history for a rejected Update); the ``decide`` Signal (for the
Web UI and ``temporal workflow signal``) cannot be refused, so invalid, late or duplicate signals
are recorded in ``ignored`` (and the audit record) and otherwise ignored. The first valid decision
wins. The rules themselves are pure (``revive.decide.approval``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.decide.approval import decision_problem, parse_decision
    from revive.models import Decision


class ApprovalGate:
    """Wait with expiry, require an approver (and the allowlist, if any), record the decision."""

    def __init__(self, approvers: list[str]) -> None:
        self.approvers = approvers
        self.open = False
        self.decision: Decision | None = None
        self.ignored: list[str] = []

    def problem(self, d: object) -> str | None:
        """Why ``d`` cannot be accepted now, or None. Pure: used by the Update validator."""
        return decision_problem(d, self.approvers, self.decision, self.open, now=workflow.now())

    # The ``decide`` handlers of every workflow with a gate (raw ``*args``: any payload count or
    # shape is decoded as plain JSON, so none can fail a workflow task).
    @staticmethod
    def parse(args: tuple[Any, ...]) -> Decision | str:
        """One raw ``decide`` payload → ``Decision``, or why it is not one."""
        if len(args) != 1:
            return f"expected one payload {{decision, approver, note}}, got {len(args)}"
        return parse_decision(args[0])

    def check_update(self, args: tuple[Any, ...]) -> None:
        """The ``decide`` Update's validator: raises ``ValueError`` with the reason (no event written)."""
        d = self.parse(args)
        why = d if isinstance(d, str) else self.problem(d)
        if why:
            raise ValueError(why)

    def take_update(self, args: tuple[Any, ...]) -> str:
        """The ``decide`` Update's body (after the validator): accept, and say so."""
        d = self.parse(args)
        if isinstance(d, str):  # the validator refused it already; never reached
            raise ValueError(d)
        self.offer(d)
        return f"{d.decision} accepted from {d.approver}"

    def take_signal(self, args: tuple[Any, ...]) -> None:
        """The ``decide`` Signal: it cannot be refused, so an invalid payload is recorded and ignored."""
        d = self.parse(args)
        if isinstance(d, str):
            self.ignored.append(f"invalid decide signal: {d}")
            return
        self.offer(d)

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
        except TimeoutError:
            return None
        finally:
            self.open = False
        return self.decision
