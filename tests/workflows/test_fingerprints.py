"""Command fingerprints of the recorded histories, and coverage of every registered workflow type.

A fingerprint is the sequence of commands a workflow issued, as its history's events show them, in
one compact line: ``<WorkflowType>: A:gather_evidence P:save-job-spec U:ReviveState C:HangRunbook …``.

=================================================  ===========================================
event                                              token
=================================================  ===========================================
ActivityTaskScheduled / ActivityTaskCancelRequest  ``A:<activity type>`` / ``A~``
StartChildWorkflowExecutionInitiated               ``C:<workflow type>``
TimerStarted / TimerCanceled                       ``T`` / ``T~``
MarkerRecorded                                     ``P:<patch id>`` (``P!:<id>`` deprecated), else
                                                   ``M:<marker name>``
UpsertWorkflowSearchAttributes                     ``U:<key>+<key>`` (keys, sorted)
WorkflowPropertiesModified                         ``W``
SignalExternalWorkflowExecutionInitiated           ``S:<signal name>``
RequestCancelExternalWorkflowExecutionInitiated    ``X``
WorkflowExecutionUpdateAccepted                    ``u:<update name>``
Completed / Failed / ContinuedAsNew / Canceled     ``done`` / ``failed`` / ``can`` / ``canceled``
=================================================  ===========================================

Task boundaries, ids, inputs and timeouts are left out: re-recording the same code gives the same
fingerprint. ``tests/histories/fingerprints/fingerprints.json`` (history file → fingerprint) is
committed — in a subfolder, because ``test_replay.py`` (and ``revive replay tests/histories/*.json``)
replays every ``*.json`` directly in ``tests/histories/``. A
recorded history whose fingerprint no longer matches means a workflow's command sequence changed
under an existing recording. Regenerate only after recording new histories with a new ``TAG``:

    REVIVE_UPDATE_FINGERPRINTS=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/workflows/test_fingerprints.py
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from cli.replay import load_history
from worker.main import WORKFLOWS

DIR = Path(__file__).resolve().parents[1] / "histories"
FINGERPRINTS = DIR / "fingerprints" / "fingerprints.json"
HISTORIES = sorted(DIR.glob("*.json"))
UPDATE_ENV = "REVIVE_UPDATE_FINGERPRINTS"

_TERMINAL = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "done",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "can",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "canceled",
}


def _patch_token(e: HistoryEvent) -> str:
    attrs = e.marker_recorded_event_attributes
    if attrs.marker_name != "core_patch":
        return f"M:{attrs.marker_name}"
    pid, deprecated = "?", False
    if "patch-data" in attrs.details and attrs.details["patch-data"].payloads:
        try:
            data = json.loads(attrs.details["patch-data"].payloads[0].data)
            pid, deprecated = str(data.get("id", "?")), bool(data.get("deprecated"))
        except ValueError:
            pass
    return f"P!:{pid}" if deprecated else f"P:{pid}"


def _token(e: HistoryEvent) -> str | None:
    t = e.event_type
    if t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        return f"A:{e.activity_task_scheduled_event_attributes.activity_type.name}"
    if t == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED:
        return "A~"
    if t == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
        return f"C:{e.start_child_workflow_execution_initiated_event_attributes.workflow_type.name}"
    if t == EventType.EVENT_TYPE_TIMER_STARTED:
        return "T"
    if t == EventType.EVENT_TYPE_TIMER_CANCELED:
        return "T~"
    if t == EventType.EVENT_TYPE_MARKER_RECORDED:
        return _patch_token(e)
    if t == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
        keys = sorted(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
        return "U:" + "+".join(keys)
    if t == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
        return "W"
    if t == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
        return f"S:{e.signal_external_workflow_execution_initiated_event_attributes.signal_name}"
    if t == EventType.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
        return "X"
    if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        return f"u:{e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name}"
    return _TERMINAL.get(t)


def workflow_type(path: Path) -> str:
    first = load_history(path).events[0]
    return first.workflow_execution_started_event_attributes.workflow_type.name


def fingerprint(path: Path) -> str:
    """``<WorkflowType>: <token> <token> …`` for one history file."""
    events = load_history(path).events
    tokens = [tok for e in events if (tok := _token(e)) is not None]
    return f"{events[0].workflow_execution_started_event_attributes.workflow_type.name}: " + " ".join(tokens)


def compare(committed: dict[str, str], current: dict[str, str]) -> str:
    """Empty when they agree, else a message for the developer."""
    problems: list[str] = []
    for name in sorted(current.keys() & committed.keys()):
        old, new = committed[name], current[name]
        if old == new:
            continue
        diff = list(difflib.unified_diff(old.split(" "), new.split(" "), "committed", "recorded", n=2, lineterm=""))
        shown = "\n      ".join(diff[2:40]) + ("\n      …" if len(diff) > 40 else "")
        problems.append(
            f"  {name}: the command sequence of {old.split(':', 1)[0]} changed:\n      {shown}\n"
            "    A workflow's command sequence changed under an existing recording. Do not overwrite a recorded\n"
            "    history: put the change behind `workflow.patched(<NAMED_CONSTANT>)` (a module constant, like\n"
            "    PATCH_SAVE_JOB_SPEC in workflows/incident.py), keep the old branch, bump TAG in\n"
            "    tests/workflows/record_histories.py and record new histories beside the old ones; then run\n"
            f"    {UPDATE_ENV}=1 on this test to add their fingerprints.")
    for name in sorted(current.keys() - committed.keys()):
        problems.append(f"  {name}: no committed fingerprint (a new recording?): run this test with {UPDATE_ENV}=1 "
                        f"and commit {FINGERPRINTS.relative_to(DIR.parents[1])} with the history.")
    for name in sorted(committed.keys() - current.keys()):
        problems.append(f"  {name}: fingerprinted but the history file is gone: older recordings must be kept "
                        "(they are what in-flight workflows replay against).")
    return (f"{FINGERPRINTS.relative_to(DIR.parents[1])} does not match the recorded histories:\n" + "\n".join(problems)
            if problems else "")


def current_fingerprints() -> dict[str, str]:
    return {p.name: fingerprint(p) for p in HISTORIES}


def test_fingerprints_match_the_committed_file() -> None:
    current = current_fingerprints()
    if os.environ.get(UPDATE_ENV) == "1":
        FINGERPRINTS.parent.mkdir(exist_ok=True)
        FINGERPRINTS.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
        return
    assert FINGERPRINTS.exists(), f"{FINGERPRINTS} is missing: run this test with {UPDATE_ENV}=1"
    problem = compare(json.loads(FINGERPRINTS.read_text()), current)
    assert not problem, problem


def test_every_registered_workflow_type_has_a_history() -> None:
    recorded = {workflow_type(p) for p in HISTORIES}
    # the SDK's own record of the type name (``@workflow.defn(name=...)`` or the class name)
    registered = [workflow._Definition.must_from_class(cls).name for cls in WORKFLOWS]
    missing = [t for t in registered if t not in recorded]
    assert not missing, (
        f"no recorded history for workflow type(s) {missing} (registered in worker.main.WORKFLOWS): add a case to "
        "tests/workflows/record_histories.py, record, and commit the history with its fingerprint")


def test_fingerprint_shows_patches_children_and_the_closing_command() -> None:
    v1 = fingerprint(DIR / "fake-7-20261129T150400-a0-gpu-auto-recovered.json")
    v3 = fingerprint(DIR / "fake-7-20261129T150400-a0-gpu-auto-recovered-v3.json")
    assert v1.startswith("IncidentWorkflow: ") and v1.endswith(" done")
    assert "P:" not in v1
    assert "P:save-job-spec" in v3 and "P:external-attribution-in-background" in v3
    assert "C:DrainAndRequeueRunbook" in v1 and "C:DrainAndRequeueRunbook" in v3
    assert v3.index("A:save_job_spec") < v3.index("A:gather_evidence")


def test_a_changed_sequence_fails_with_a_message_naming_the_patch_rule() -> None:
    committed = {"a.json": "IncidentWorkflow: A:gather_evidence A:attribute done", "gone.json": "X: done"}
    current = {"a.json": "IncidentWorkflow: A:gather_evidence A:new_step A:attribute done", "new.json": "Y: done"}
    msg = compare(committed, current)
    assert "command sequence of IncidentWorkflow changed" in msg and "+A:new_step" in msg
    assert "workflow.patched(<NAMED_CONSTANT>)" in msg
    assert "new.json: no committed fingerprint" in msg and "gone.json: fingerprinted but" in msg
    assert compare(current, current) == ""


def test_v6_recordings_cover_each_workflow_type_changed_for_issue_12() -> None:
    """Incident (job record + guard mode patches), guard (set_mode/apply_policy) and the new job
    record each have a v6 history, so their changed handlers are replayed."""
    v6 = {p.name: fingerprint(p) for p in HISTORIES if "-v6." in p.name}  # not v6ckpt (another branch)
    types = {fp.split(":", 1)[0] for fp in v6.values()}
    assert {"IncidentWorkflow", "ClusterGuardWorkflow", "JobRecordWorkflow"} <= types, types
    incidents = [fp for fp in v6.values() if fp.startswith("IncidentWorkflow:")]
    assert all("P:job-record-budgets" in fp and "A:admit_incident" in fp and "A:report_job_outcome" in fp
               and "A:incident_history" not in fp and "A:read_mode" not in fp for fp in incidents)
    gated = [fp for fp in incidents if "U:ReviveMode" in fp]  # a stop at first sight never reaches the gate
    assert gated and all("P:mode-from-guard U:TemporalChangeVersion A:read_guard_mode" in fp for fp in gated)
    assert any("u:set_mode u:apply_policy" in fp for fp in v6.values())
    assert any(fp.startswith("JobRecordWorkflow:") and fp.endswith(" can") for fp in v6.values())
