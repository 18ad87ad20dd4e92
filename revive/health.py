"""Return to service: the backend of ``revive node resume NODE``.

Revive resumes only drains it set itself (reason starts with ``policy.drain_reason_prefix``) and
only after a health check passes. It never touches a drain somebody else set: that is refused
with a message saying how to do it by hand.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Protocol

from revive import metrics as rm
from revive.decide.budgets import owns_drain
from revive.models import NodeRecord
from revive.policy import RecoveryPolicy
from revive.scheduler.runners import CommandRunner


class _Sched(Protocol):
    async def get_nodes(self, names: list[str] | None = None) -> list[NodeRecord]: ...
    async def resume_nodes(self, nodes: list[str]) -> list[str]: ...


HEALTH_TIMEOUT_S = 120.0


def health_argv(health_cmd: list[str], node: str) -> list[str]:
    """Substitute ``{node}`` in every argument, e.g. ``["ssh", "{node}", "nvidia-smi", "-q"]``
    or ``["srun", "-w", "{node}", "-N1", "--overlap", "/opt/health.sh"]``."""
    return [a.replace("{node}", node) for a in health_cmd]


async def _node(scheduler: _Sched, node: str) -> NodeRecord | None:
    found = [n for n in await scheduler.get_nodes([node]) if n.name == node]
    return found[0] if found else None


async def resume_node(
    scheduler: _Sched,
    runner: CommandRunner | None,
    node: str,
    health_cmd: list[str] | None,
    policy: RecoveryPolicy,
    on_resumed: Callable[[NodeRecord], None] | None = None,
) -> tuple[bool, str]:
    """Run the health check and resume ``node`` if Revive drained it.

    Args:
        scheduler: a ``Scheduler`` (``get_nodes``, ``resume_nodes``).
        runner: where the health check runs (``LocalRunner`` or ``SSHRunner``); may be None when
            ``health_cmd`` is None.
        node: node name.
        health_cmd: argv, ``{node}`` substituted; exit status 0 = healthy. ``None`` = no check
            configured (the message says so).
        policy: ``drain_reason_prefix`` decides ownership.
        on_resumed: called with the node's record (as drained) once it is resumed (``revive
            report`` counts resumes of Revive's drains).

    Returns ``(resumed, message)``. Refusals (``resumed=False``): unknown node, node not drained,
    drain reason not Revive's (checked before *and* after the health check, so a reason changed
    meanwhile is respected), health check failed / timed out / could not run.
    ``SchedulerError`` from the scheduler propagates.
    """
    rec = await _node(scheduler, node)
    if rec is None:
        return False, f"{node}: unknown node"
    if not rec.drained:
        return False, f"{node}: not drained (state {rec.state}); nothing to resume"
    if not owns_drain(rec.reason, policy):
        return False, (
            f"{node}: refused: drain reason {rec.reason!r} was not set by Revive (prefix "
            f"{policy.drain_reason_prefix!r}); whoever drained it resumes it "
            f"(scontrol update NodeName={node} State=RESUME)"
        )
    note = "no health check configured"
    if health_cmd:
        if runner is None:
            return False, f"{node}: refused: a health check is configured but no runner was given"
        argv = health_argv(health_cmd, node)
        try:
            rc, out, err = await runner.run(argv, timeout_s=HEALTH_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 — transport failure = not healthy
            return False, f"{node}: not resumed: health check {shlex.join(argv)} could not run: {e}"
        if rc != 0:
            tail = (err or out).strip().splitlines()[-3:]
            return False, (
                f"{node}: not resumed: health check {shlex.join(argv)} exited {rc}"
                + (f": {' | '.join(tail)}" if tail else "")
            )
        note = f"health check {shlex.join(argv)} passed"
    again = await _node(scheduler, node)
    if again is None or not again.drained or not owns_drain(again.reason, policy):
        return False, f"{node}: not resumed: its state or drain reason changed during the health check"
    ran = await scheduler.resume_nodes([node])
    rm.action_issued("resume")
    if on_resumed is not None:
        on_resumed(rec)
    return True, f"{node}: resumed ({note}; drain reason was {rec.reason!r}; ran {shlex.join(ran)})"
