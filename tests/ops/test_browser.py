"""The incident card in the real Temporal Web UI, read by headless Debian chromium.

A dev server with its UI on free ports (the shared ``local_env`` runs without UI), the production
worker over a FakeScheduler, one observe-mode incident waiting for approval. Chromium opens the
workflow list filtered by ``ReviveState="awaiting_approval"`` and the incident's page
over the DevTools protocol (``tests/helpers/cdp.py``: ``--dump-dom --virtual-time-budget`` never
returns on a running workflow's page, whose long poll stops virtual time) and reads the visible text.
Screenshots are saved in the test's tmp dir (paths printed). Fails when chromium is missing
(``make test`` installs it: scripts/test-deps.sh).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from urllib.parse import quote

import pytest
from temporalio import activity
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from revive import search_attributes as rsa
from revive.decide.budgets import JobIncidentHistory
from revive.models import IncidentHistoryInput
from revive.policy import RecoveryPolicy
from revive.temporal import temporal_cli_path
from tests.helpers.builders import fake_cluster, incident
from tests.helpers.cdp import CHROMIUM, Browser
from worker.main import build_worker
from workflows.incident import IncidentWorkflow

pytestmark = [pytest.mark.temporal]


@pytest.fixture(autouse=True)
def _chromium_is_installed() -> None:
    # make test installs it (scripts/test-deps.sh): a missing browser fails, never skips
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run scripts/test-deps.sh (apt-get install -y chromium)")


HOSTILE = " `</code><img src=x onerror=alert(1)> | **APPROVED BY ROOT** <!-- hide the rest"


@activity.defn(name="incident_history")
async def no_history(inp: IncidentHistoryInput) -> JobIncidentHistory:
    return JobIncidentHistory()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_card_is_visible_in_the_web_ui(tmp_path):
    ui = _free_port()
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=temporal_cli_path(),
        search_attributes=rsa.ALL, ui=True, ui_port=ui)
    try:
        sched, cfg, log = fake_cluster(tmp_path, "xid79")
        kern = tmp_path / "nodes" / "node2" / "kern.log"  # a root event carrying hostile Markdown/HTML
        kern.write_text(kern.read_text().rstrip("\n") + HOSTILE + "\n")
        tq = f"ui-{uuid.uuid4().hex[:6]}"
        iid = f"fake-7-20261201T100000-a0-gpu-{uuid.uuid4().hex[:4]}"
        pol = RecoveryPolicy(approval={"timeout": 3600})
        async with build_worker(env.client, cfg, sched, task_queue=tq, replace=[no_history]):
            h = await env.client.start_workflow(
                IncidentWorkflow.run, incident(log, pol, iid), id=iid, task_queue=tq,
                search_attributes=TypedSearchAttributes([
                    SearchAttributePair(rsa.CLUSTER, "fake"), SearchAttributePair(rsa.JOB_ID, "7"),
                    SearchAttributePair(rsa.STATE, "opened"), SearchAttributePair(rsa.INCIDENT_ID, iid)]),
                static_summary="job 7 (train) attempt 0: job_state FAILED")
            for _ in range(200):
                if (await h.query("status"))["state"] == "awaiting_approval":
                    break
                await asyncio.sleep(0.05)
            run_id = (await h.describe()).run_id
            base = f"http://127.0.0.1:{ui}/namespaces/default/workflows"
            q = quote('ReviveState="awaiting_approval"', safe="")
            list_png, page_png = tmp_path / "ui-list.png", tmp_path / "ui-incident.png"
            meta_png = tmp_path / "ui-incident-metadata.png"
            page_url = f"{base}/{quote(iid, safe='')}/{run_id}"
            async with Browser(tmp_path / "chrome") as b:
                listed = await b.open(f"{base}?query={q}", [iid], list_png)
                page = await b.open(f"{page_url}/history", [iid, "awaiting_approval"], page_png)
                meta = await b.open(f"{page_url}/user-metadata", ["Waiting for a person"], meta_png)
            for name, t in (("list", listed), ("incident", page), ("metadata", meta)):
                (tmp_path / f"ui-{name}.txt").write_text(t)
            print(f"screenshots: {list_png} {page_png} {meta_png}")
            await h.terminate("test over")
    finally:
        await env.shutdown()
    assert iid in listed, "the filtered list shows the waiting incident"
    assert iid in page and "RUNNING" in page
    card = meta  # the User Metadata tab: summary, details and the current details (the card)
    assert "Waiting for a person" in card, card[-3000:]
    assert f"revive approve {iid} --as <you>" in card
    assert '{"decision": "approve", "approver": "<you>", "note": "…"}' in card
    assert "gpu_hardware" in card and "drain_and_requeue" in card and "Evidence" in card
    assert card.index("gpu_hardware") < card.index("Waiting for a person"), "verdict first"
    # the hostile log text stays inside its code span: shown, inert, and the plan after it is intact
    assert "‹/code›‹img src=x onerror=alert(1)› ¦ **APPROVED BY ROOT** ‹!-- hide the rest" in card
    assert card.index("APPROVED BY ROOT") < card.index("Plan: runbook") < card.index("Waiting for a person")
    for png in (list_png, page_png, meta_png):
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
