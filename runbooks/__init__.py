"""Runbooks as workflow code: one short child workflow per fault family.

``RUNBOOKS`` maps the plan's ``runbook`` name to its workflow class. ``stop``, ``escalate`` and
``none`` take no cluster action and are handled by the incident workflow itself. To add a runbook:
write a ``@workflow.defn`` class composed from ``runbooks.steps``, add it here, route to it in
``revive.decide.plan.plan_for``, and test it on the time-skipping server (``docs/runbooks.md``).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.models import RunbookName

from runbooks.exclude import RequeueExcludeRunbook
from runbooks.hang import HangRunbook
from runbooks.hardware import DrainAndRequeueRunbook
from runbooks.restart import RestartInPlaceRunbook
from runbooks.straggler import StragglerRunbook

RUNBOOKS: dict[RunbookName, Any] = {
    RunbookName.drain_and_requeue: DrainAndRequeueRunbook,
    RunbookName.requeue_exclude: RequeueExcludeRunbook,
    RunbookName.restart_in_place: RestartInPlaceRunbook,
    RunbookName.hang: HangRunbook,
    RunbookName.straggler: StragglerRunbook,
}
