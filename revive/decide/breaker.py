"""Decide stage — the drain circuit breaker: payloads and the pure grant decision.

State of the per-cluster guard workflow (``workflows.guard.ClusterGuardWorkflow``), which calls
``evaluate_drain`` inside its synchronous ``request_drain`` Update so requests are serialised.
Pure: no I/O, no wall clock (``now`` is passed in), no randomness.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from revive.decide.offenders import NodeIncident
from revive.decide.settings import GuardSettings
from revive.policy import BreakerPolicy


class DrainGrantInput(BaseModel):
    """A request to drain nodes, sent as the ``request_drain`` Update of the cluster's guard."""

    incident_id: str
    cluster: str
    partition: str | None = None
    nodes: list[str]
    partition_size: int = Field(ge=0)
    """Number of nodes in ``partition`` (from ``Scheduler.get_nodes``); 0 = unknown → refused."""
    policy: BreakerPolicy = Field(default_factory=BreakerPolicy)
    now: datetime | None = None
    """The requester's ``workflow.now()`` (UTC); the guard uses its own clock when absent."""
    approved_by: str | None = None
    """Set when a person approved this drain after the breaker refused it: granted over the
    breaker and recorded in the window."""


class DrainGrant(BaseModel):
    """The guard's answer. ``granted=False`` → the plan waits for a person's approval."""

    granted: bool
    nodes: list[str] = Field(default_factory=list)
    """Nodes the incident may drain (all requested nodes, or none)."""
    reason: str
    """Why (``breaker:max_fraction …``, ``breaker:max_nodes …``, ``granted …``)."""
    breaker_open: bool = False
    window_nodes: list[str] = Field(default_factory=list)
    """Nodes Revive drained on this cluster within the window, before this request."""
    decided_at: datetime | None = None


class DrainRecord(BaseModel):
    """One granted drain, kept while it is inside the breaker window."""

    incident_id: str
    partition: str | None = None
    nodes: list[str]
    at: datetime


class GuardState(BaseModel):
    """The whole ``ClusterGuardWorkflow`` state (carried over continue-as-new)."""

    cluster: str
    drains: list[DrainRecord] = Field(default_factory=list)
    answers: dict[str, DrainGrant] = Field(default_factory=dict)
    """incident_id → the answer given (idempotency)."""
    answer_order: list[str] = Field(default_factory=list)
    tripped: list[str] = Field(default_factory=list)
    """Last trip reasons (``<at> <incident> <reason>``), newest last, capped."""
    requests: int = 0
    settings: GuardSettings | None = None
    """Mode and policy set by operators (``revive.decide.settings``); None before the first change."""
    node_incidents: list[NodeIncident] = Field(default_factory=list)
    """Incidents that blamed nodes, oldest first (``revive.decide.offenders``: repeat offenders)."""
    node_incidents_since: datetime | None = None
    """The guard holds every incident noted since then (UTC); None before the first note."""


class GuardInput(BaseModel):
    """Input of ``ClusterGuardWorkflow.run``."""

    cluster: str
    state: GuardState | None = None
    max_answers: int = Field(default=1000, ge=1)
    """Answers remembered for idempotency (oldest dropped first)."""
    continue_as_new_after: int | None = None
    """Continue as new after this many requests in one run (tests); the server's suggestion
    (``is_continue_as_new_suggested``) applies in any case."""
    continue_as_new_after_events: int = Field(default=2000, ge=10)
    """Continue as new once this run's history has this many events (the guard tracks
    ``workflow.info().get_current_history_length()``), far below Temporal's 51,200 / 10,240 warning."""


def _window_drains(state: GuardState, now: datetime, window: timedelta) -> list[DrainRecord]:
    since = now - window
    return [d for d in state.drains if d.at > since]


def evaluate_drain(state: GuardState, inp: DrainGrantInput, now: datetime) -> DrainGrant:
    """Decide a drain request against the breaker; pure (the workflow applies the result).

    Rules (all-or-nothing for the request):

    - the distinct nodes drained by Revive on this cluster within ``policy.window`` plus the
      requested nodes must be ``<= policy.max_nodes`` → else ``breaker:max_nodes``;
    - the distinct nodes drained within the window in ``inp.partition`` plus the requested nodes
      must be ``<= floor(policy.max_fraction × partition_size)`` → else ``breaker:max_fraction``
      (so a 4-node partition at 25% allows one drained node per window);
    - ``partition_size == 0`` (unknown) → refused (``breaker:partition_size_unknown``);
    - nodes the window already holds do not count twice;
    - ``inp.approved_by`` set → granted over the breaker (``approved_over_breaker``).

    Returns a ``DrainGrant`` with ``decided_at=now``; does not mutate ``state``.
    """
    p = inp.policy
    recent = _window_drains(state, now, p.window)
    window_nodes = list(dict.fromkeys(n for d in recent for n in d.nodes))
    part_nodes = set(n for d in recent if d.partition == inp.partition for n in d.nodes)
    requested = list(dict.fromkeys(inp.nodes))
    new_cluster = [n for n in requested if n not in window_nodes]
    new_part = [n for n in requested if n not in part_nodes]
    cap_fraction = int(p.max_fraction * inp.partition_size + 1e-9)
    used = len(window_nodes) + len(new_cluster)
    used_part = len(part_nodes) + len(new_part)

    refusal: str | None = None
    if inp.partition_size <= 0:
        refusal = "breaker:partition_size_unknown: partition size unknown, cannot bound the drain"
    elif used > p.max_nodes:
        refusal = (
            f"breaker:max_nodes: draining {requested} would make {used} nodes drained by Revive "
            f"on {inp.cluster} within {p.window}, cap {p.max_nodes}"
        )
    elif used_part > cap_fraction:
        refusal = (
            f"breaker:max_fraction: draining {requested} would make {used_part} of "
            f"{inp.partition_size} nodes of partition {inp.partition} drained by Revive within "
            f"{p.window}, cap {p.max_fraction:.0%} = {cap_fraction}"
        )
    if refusal is None:
        return DrainGrant(
            granted=True,
            nodes=requested,
            reason=f"granted: {used_part}/{cap_fraction} of partition {inp.partition}, "
            f"{used}/{p.max_nodes} on {inp.cluster} within {p.window}",
            window_nodes=window_nodes,
            decided_at=now,
        )
    if inp.approved_by:
        return DrainGrant(
            granted=True,
            nodes=requested,
            reason=f"approved_over_breaker by {inp.approved_by}: {refusal}",
            breaker_open=True,
            window_nodes=window_nodes,
            decided_at=now,
        )
    return DrainGrant(
        granted=False, reason=refusal, breaker_open=True, window_nodes=window_nodes, decided_at=now
    )
