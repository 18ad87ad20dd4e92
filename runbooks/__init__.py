"""Runbooks as workflow code: one short child workflow per fault family.

``RUNBOOKS`` maps the plan's ``runbook`` name to its workflow class. ``stop``, ``escalate`` and
``none`` take no cluster action and are handled by the incident workflow itself. To add a runbook:
write a ``@workflow.defn`` class composed from ``runbooks.steps``, add it here, route to it in
``runbooks.select.plan_for``, and test it on the time-skipping server (``docs/runbooks.md``).
"""

from __future__ import annotations

from runbooks.exclude import RequeueExcludeRunbook
from runbooks.hang import HangRunbook
from runbooks.hardware import DrainAndRequeueRunbook
from runbooks.restart import RestartInPlaceRunbook
from runbooks.straggler import StragglerRunbook

RUNBOOKS = {
    "drain_and_requeue": DrainAndRequeueRunbook,
    "requeue_exclude": RequeueExcludeRunbook,
    "restart_in_place": RestartInPlaceRunbook,
    "hang": HangRunbook,
    "straggler": StragglerRunbook,
}
