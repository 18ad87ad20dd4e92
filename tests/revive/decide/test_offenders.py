"""The guard's per-node incident records (``revive.decide.offenders``): noted once per incident,
answered within the window, pruned by age and count with ``known_since`` moving along."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from revive.decide.offenders import (
    MAX_NODE_INCIDENTS,
    NODE_INCIDENTS_KEEP,
    NodeIncident,
    NoteNodesInput,
    note_and_answer,
    prune,
)
from revive.models import Category

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _note(iid: str, culprits: list[str], at: datetime, nodes: list[str] | None = None,
          window: timedelta = timedelta(hours=24)) -> NoteNodesInput:
    return NoteNodesInput(cluster="c", incident_id=iid, job_id="7", culprit_nodes=culprits,
                          nodes=nodes or [], category=Category.node_failure, window=window, now=at)


def test_a_second_incident_on_the_node_sees_the_first_and_a_retry_records_nothing_twice():
    recs, a1 = note_and_answer([], NOW, _note("i1", ["node2"], NOW))
    assert a1.incidents == [] and [r.incident_id for r in recs] == ["i1"]
    recs, a2 = note_and_answer(recs, NOW, _note("i2", ["node2"], NOW + timedelta(seconds=3), ["node2", "node3"]))
    recs, again = note_and_answer(recs, NOW, _note("i2", ["node2"], NOW + timedelta(seconds=3), ["node2", "node3"]))
    assert [r.incident_id for r in a2.incidents] == [r.incident_id for r in again.incidents] == ["i1"]
    assert [r.incident_id for r in recs] == ["i1", "i2"]


def test_other_nodes_and_incidents_outside_the_window_do_not_count():
    recs = [NodeIncident(incident_id="old", nodes=["node2"], at=NOW - timedelta(hours=25)),
            NodeIncident(incident_id="elsewhere", nodes=["node4"], at=NOW - timedelta(minutes=1))]
    _, ans = note_and_answer(recs, NOW - timedelta(days=2), _note("i3", [], NOW, ["node2"]))
    assert ans.incidents == []
    recs2, _ = note_and_answer(recs, NOW, _note("i4", [], NOW, ["node2"]))
    assert len(recs2) == 2  # no culprits: a read only, nothing recorded


def test_pruning_moves_known_since_so_older_incidents_are_read_elsewhere():
    first, since = prune([], None, NOW)
    assert first == [] and since == NOW  # the guard knows from its first note on
    old = [NodeIncident(incident_id="o", nodes=["n"], at=NOW - NODE_INCIDENTS_KEEP - timedelta(hours=1))]
    kept, since = prune(old, NOW - timedelta(days=30), NOW)
    assert kept == [] and since == NOW - NODE_INCIDENTS_KEEP
    many = [NodeIncident(incident_id=f"i{k}", nodes=["n"], at=NOW - timedelta(seconds=MAX_NODE_INCIDENTS + 10 - k))
            for k in range(MAX_NODE_INCIDENTS + 10)]
    kept, since = prune(many, NOW - timedelta(days=1), NOW)
    assert len(kept) == MAX_NODE_INCIDENTS and kept[0].incident_id == "i10"
    assert since == many[9].at  # the newest dropped one: the window before it comes from visibility


def test_oversized_notes_are_refused():
    with pytest.raises(ValidationError):
        _note("i", [f"n{k}" for k in range(65)], NOW)
    with pytest.raises(ValidationError):
        _note("", ["n"], NOW)
