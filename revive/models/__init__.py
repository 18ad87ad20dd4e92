"""Pydantic models shared by every layer: domain models, Slurm job states and payloads.

Everything here is pure data (stdlib + pydantic), passed through the Temporal workflow sandbox.
Durations are ``timedelta`` (or seconds where the field name says ``_s``); instants are
timezone-aware ``datetime`` in UTC.

- ``revive.models.domain``: the stage map — detect (``Trigger``) → attribute (``EvidenceBundle`` →
  ``Attribution``) → decide (``Plan``, ``Decision``) → act (``ActionResult``) → verify
  (``VerifyResult``) → close (``IncidentResult``), and the typed finite sets (``Category``,
  ``Action``, ``RunbookName``, ``DecisionKind``, ``IncidentState``, ``IncidentOutcome`` …);
- ``revive.models.jobstate``: ``JobState`` and its sets (Slurm 22.05 squeue(1));
- ``revive.models.payloads``: one input/result model per workflow, update and activity.

Import from ``revive.models`` directly; the sub-modules are the layout, not the API.
"""

from revive.models.domain import *  # noqa: F403
from revive.models.domain import __all__ as _domain_all
from revive.models.jobstate import (
    ABNORMAL_END,
    ACTIVE,
    FAMILY_BY_END,
    NOT_STARTED,
    TERMINAL,
    UNSUCCESSFUL_END,
    WATCH_START,
    JobState,
)
from revive.models.payloads import *  # noqa: F403
from revive.models.payloads import __all__ as _payloads_all

__all__ = [*_domain_all, *_payloads_all, "JobState", "ACTIVE", "TERMINAL", "ABNORMAL_END", "WATCH_START",
           "FAMILY_BY_END", "UNSUCCESSFUL_END", "NOT_STARTED"]
