"""The incident card (Current details) and the ReviveCulprits search attribute."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity

from revive import card
from revive import search_attributes as rsa
from revive.decide.budgets import JobIncidentHistory
from revive.models import Action, Attribution, Category, Decision, Domain, Event, IncidentHistoryInput, Plan
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster, incident
from worker.main import build_worker
from workflows.incident import IncidentWorkflow

ROOT = Path(__file__).resolve().parents[2]
T = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
EVIL = "Xid 79 ` <!-- | **approved by root** <script>alert(1)</script> [x](javascript:alert(1)) ` done"


def _attr(text: str = EVIL) -> Attribution:
    return Attribution(category=Category.gpu_hardware, domain=Domain.hardware, culprit_nodes=["node2"],
                       confidence=0.95, action=Action.drain_and_requeue, explanation="Xid 79 <b>on</b> node2_gpu*",
                       root_event=Event(source="kern.log:node2", line_no=3, timestamp=T, text=text,
                                        signature_id="xid.79"))


def _plan() -> Plan:
    return Plan(action=Action.drain_and_requeue, recommended=Action.drain_and_requeue, runbook="drain_and_requeue",
                rule="runbook:gpu_hardware", drain_nodes=["node2"], approval_reason="observe mode")


def _render(**kw) -> str:
    args: dict[str, Any] = dict(incident_id="c-7-a0-gpu", state="awaiting_approval", mode="observe", attribution=_attr(),
                plan=_plan(), decision=None, approvers=[], detected_at=T + timedelta(seconds=2),
                stages={"gathering": T + timedelta(seconds=2), "awaiting_approval": T + timedelta(seconds=4)},
                now=T + timedelta(seconds=64))
    args.update(kw)
    return card.render(**args)


def test_card_verdict_first_evidence_plan_and_how_to_decide():
    md = _render()
    first = md.split("\n\n")[0]
    assert "gpu\\_hardware" in first and "`node2`" in first and "awaiting\\_approval" in first
    assert "Evidence:" in md and "root event" in md
    assert "Plan: runbook drain\\_and\\_requeue" in md and "`runbook:gpu_hardware`" in md and "drain `node2`" in md
    assert "`revive approve c-7-a0-gpu --as <you>`" in md
    assert "`revive reject c-7-a0-gpu --as <you> --note <why>`" in md
    assert '`{"decision": "approve", "approver": "<you>", "note": "…"}`' in md
    assert "Timings (UTC): fault 10:00:00 · detected 10:00:02 (+2.0 s)" in md
    assert "awaiting\\_approval 10:00:04 (1.0 min)" in md


def test_log_text_cannot_break_out_of_its_code_span():
    md = _render()
    ev = next(line for line in md.splitlines() if line.startswith("- root event"))
    span = ev.split(": ", 1)[1]
    assert span.startswith("`") and span.endswith("`") and span.count("`") == 2, span
    for bad in ("<", ">", "|"):
        assert bad not in span
    assert "‹!-- ¦ **approved by root** ‹script›" in span
    # the plan and the approve command follow, intact, after the hostile line
    assert md.index("Plan: runbook") > md.index(span)
    # every other untrusted field: no raw HTML anywhere outside Revive's own code spans
    outside = re.sub(r"`[^`]*`", "", md)
    assert "<" not in outside and ">" not in outside
    assert "Why: Xid 79 ‹b›on‹/b› node2\\_gpu\\*" in md


def test_decided_card_shows_who_and_note_escaped():
    md = _render(state="acting", decision=Decision(decision="approve", approver="alice", note="ok `x` <b>"))
    assert "Decided: **approve** by `alice` — note `ok ˋxˋ ‹b›`" in md
    assert "revive approve" not in md


def test_no_verdict_yet_shows_the_trigger():
    md = _render(state="gathering", attribution=None, plan=None, trigger="job_state FAILED")
    assert md.startswith("**no verdict yet** (trigger: `job_state FAILED`)")


def test_search_attributes_registered_everywhere():
    assert rsa.TYPES["ReviveCulprits"] == "KeywordList" and rsa.TYPES["ReviveNodes"] == "KeywordList"
    script = (ROOT / "scripts" / "temporal-up.sh").read_text()
    block = script.split("SEARCH_ATTRIBUTES=(", 1)[1].split(")", 1)[0].split()
    assert dict(x.split("=") for x in block) == rsa.TYPES


@activity.defn(name="incident_history")
async def no_history(inp: IncidentHistoryInput) -> JobIncidentHistory:
    return JobIncidentHistory()


@pytest.mark.temporal
async def test_workflow_sets_card_and_culprits(ts_env, tmp_path):
    import asyncio

    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    pol = RecoveryPolicy(approval={"timeout": 3600})
    tq = f"tq-{uuid.uuid4()}"
    iid = f"card-{uuid.uuid4().hex[:6]}"
    async with build_worker(ts_env.client, cfg, sched, task_queue=tq, replace=[no_history]):
        h = await ts_env.client.start_workflow(IncidentWorkflow.run, incident(log, pol, iid), id=iid, task_queue=tq)
        for _ in range(200):
            st = await h.query("status")
            if st["state"] == "awaiting_approval":
                break
            await asyncio.sleep(0.05)
        assert set(st["stages"]) >= {"gathering", "attributing", "planning", "awaiting_approval"}
        meta = await h.query("__temporal_workflow_metadata")
        details = meta.current_details
        assert details.startswith("**gpu\\_hardware** (hardware) on `node2`"), details
        assert f"`revive approve {iid} --as <you>`" in details
        desc = await h.describe()
        assert desc.typed_search_attributes.get(rsa.CULPRITS) == ["node2"]
        await h.execute_update("decide", Decision(decision="reject", approver="bob"))
        await h.result()
