"""Decide stage — repeat offenders per node, as the cluster's guard records them. Pure (no I/O, no
wall clock: ``now`` is passed in).

Every incident that blamed nodes (its attribution's culprits) is noted in the per-cluster guard
(``workflows.guard.ClusterGuardWorkflow``, Update ``note_node_incidents``) when it is admitted to
its job's record, *before* its plan is made; the same synchronous Update answers which other
incidents implicated the nodes it asks about. Two incidents on one node seconds apart are thus
counted in order, whatever Temporal visibility (eventually consistent) shows yet.

Shapes: ``NodeIncident`` (one incident's culprit nodes, ``at`` = when it was noted, UTC),
``NoteNodesInput`` (the Update's payload), ``NodeIncidentsAnswer`` (records on the asked nodes
within the window, and ``known_since``: the guard holds every noted incident from that instant
on; older ones are read through visibility by the activity, as before).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from revive.models import Category

MAX_NODE_INCIDENTS = 1000
"""Incidents the guard keeps (newest kept; ≈ 200 bytes each, so ≈ 200 KB of the guard's
continue-as-new payload, far below Temporal's 2 MB payload limit)."""
NODE_INCIDENTS_KEEP = timedelta(days=7)
"""Records older than this are dropped (``known_since`` moves with them, so a longer
``repeat_offender.window`` reads the older part through visibility)."""
MAX_NODES = 256
"""Nodes in one Update (a job's node list; Slurm jobs on more nodes read the rest nowhere)."""


class NodeIncident(BaseModel):
    """One incident that blamed ``nodes``, noted in the guard."""

    incident_id: str = Field(min_length=1, max_length=300)
    job_id: str = Field(default="", max_length=200)
    nodes: list[str] = Field(max_length=64)
    category: Category | None = None
    at: datetime
    """When the incident was noted (its ``workflow.now()``, UTC)."""


class NoteNodesInput(BaseModel):
    """Payload of the guard's ``note_node_incidents`` Update (``admit_incident`` activity).

    ``culprit_nodes`` are recorded for ``incident_id`` (empty: nothing recorded, a read only);
    the answer lists other incidents that blamed any of ``nodes`` within ``window`` before ``now``.
    Idempotent per incident id: a retried activity records nothing twice.
    """

    cluster: str
    incident_id: str = Field(min_length=1, max_length=300)
    job_id: str = Field(default="", max_length=200)
    culprit_nodes: list[str] = Field(default_factory=list, max_length=64)
    nodes: list[str] = Field(default_factory=list, max_length=MAX_NODES)
    category: Category | None = None
    window: timedelta = timedelta(hours=24)
    now: datetime


class NodeIncidentsAnswer(BaseModel):
    """Other incidents that blamed the asked nodes within the window (oldest first)."""

    incidents: list[NodeIncident] = Field(default_factory=list)
    known_since: datetime
    """The guard holds every incident noted since this instant (UTC); the window's part before it
    is not in ``incidents``."""


def prune(records: list[NodeIncident], since: datetime | None, now: datetime) -> tuple[list[NodeIncident], datetime]:
    """Drop records older than ``NODE_INCIDENTS_KEEP`` and beyond ``MAX_NODE_INCIDENTS`` (oldest
    first); returns the kept records and the new ``known_since`` (never earlier than ``since``)."""
    cutoff = now - NODE_INCIDENTS_KEEP
    known = max(since if since is not None else now, cutoff)
    kept = [r for r in records if r.at >= cutoff]
    if len(kept) > MAX_NODE_INCIDENTS:
        dropped = kept[: len(kept) - MAX_NODE_INCIDENTS]
        kept = kept[len(kept) - MAX_NODE_INCIDENTS:]
        known = max(known, max(r.at for r in dropped))
    return kept, known


def note_and_answer(records: list[NodeIncident], known_since: datetime,
                    inp: NoteNodesInput) -> tuple[list[NodeIncident], NodeIncidentsAnswer]:
    """Record ``inp``'s culprits (once per incident id) and answer the other incidents that blamed
    any of ``inp.nodes`` (or its culprits) within ``inp.window`` ending at ``inp.now``. Returns the
    new record list and the answer; ``records`` is not mutated."""
    out = list(records)
    culprits = list(dict.fromkeys(inp.culprit_nodes))
    if culprits and not any(r.incident_id == inp.incident_id for r in out):
        out.append(NodeIncident(incident_id=inp.incident_id, job_id=inp.job_id, nodes=culprits,
                                category=inp.category, at=inp.now))
    asked = set(inp.nodes) | set(culprits)
    since = inp.now - inp.window
    found = [r for r in out if r.incident_id != inp.incident_id and since <= r.at <= inp.now
             and asked.intersection(r.nodes)]
    found.sort(key=lambda r: r.at)
    return out, NodeIncidentsAnswer(incidents=found, known_since=known_since)


__all__ = [
    "MAX_NODE_INCIDENTS",
    "NODE_INCIDENTS_KEEP",
    "NodeIncident",
    "NodeIncidentsAnswer",
    "NoteNodesInput",
    "note_and_answer",
    "prune",
]
