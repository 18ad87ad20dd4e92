"""The on-call CLI against a real dev server (visibility) with the production worker over a
FakeScheduler: incidents (filters, injection refused, Temporal status), explain/export/watch on an
open incident, approve's no-worker check, show's stage durations, progress check, help."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from revive import search_attributes as rsa
from revive.decide.budgets import JobIncidentHistory
from revive.models import IncidentHistoryInput
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster, incident
from worker.main import build_worker
from workflows.incident import IncidentWorkflow

ROOT = Path(__file__).resolve().parents[2]


@activity.defn(name="incident_history")
async def no_history(inp: IncidentHistoryInput) -> JobIncidentHistory:
    return JobIncidentHistory()


async def revive(*args: str, timeout: float = 90) -> tuple[int, str, str]:
    import os

    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "cli.main", *args, cwd=ROOT,
                                             env={**os.environ, "COLUMNS": "250"},
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(), timeout)
    return p.returncode or 0, out.decode(), err.decode()


def _sa(job: str, iid: str) -> TypedSearchAttributes:
    return TypedSearchAttributes([
        SearchAttributePair(rsa.CLUSTER, "fake"), SearchAttributePair(rsa.JOB_ID, job),
        SearchAttributePair(rsa.STATE, "opened"), SearchAttributePair(rsa.INCIDENT_ID, iid),
        SearchAttributePair(rsa.NODES, ["node1", "node2"]), SearchAttributePair(rsa.MODE, "observe")])


async def _until(pred, what: str, tries: int = 100):
    for _ in range(tries):
        got = await pred()
        if got:
            return got
        await asyncio.sleep(0.1)
    raise AssertionError(f"never: {what}")


@pytest.mark.temporal
async def test_oncall_cli_end_to_end(local_env, tmp_path):
    env = local_env
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    tq = f"ops-{uuid.uuid4().hex[:6]}"
    job = f"j{uuid.uuid4().hex[:6]}"
    conf = tmp_path / "cluster.yaml"
    conf.write_text(f"name: fake\naudit_file: {cfg.audit_file}\nstate_dir: {tmp_path}/cli-state\n"
                    f"temporal: {{address: '{env.client.service_client.config.target_host}', task_queue: {tq}}}\n")
    c = ["--config", str(conf)]
    pol = RecoveryPolicy(approval={"timeout": 3600}, verify={"timeout": 5, "poll_interval": 0.2})
    iid = f"fake-{job}-a0-gpu"
    inp = incident(log, pol, iid).model_copy(update={"job": incident(log, pol).job})
    async with build_worker(env.client, cfg, sched, task_queue=tq, replace=[no_history]):
        h = await env.client.start_workflow(IncidentWorkflow.run, inp, id=iid, task_queue=tq,
                                            search_attributes=_sa(job, iid))

        async def waiting():
            return (await h.query("status"))["state"] == "awaiting_approval"
        await _until(waiting, "awaiting approval")

        # a second incident, never picked up (no worker on its queue), then terminated
        dead = f"fake-{job}-a1-gpu"
        hd = await env.client.start_workflow(IncidentWorkflow.run, incident(log, pol, dead), id=dead,
                                             task_queue=f"nobody-{tq}", search_attributes=_sa(job, dead))

        t0 = time.monotonic()
        rc, out, err = await revive("approve", dead, "--as", "alice", *c)
        assert rc == 4 and "no worker is polling task queue" in err, (rc, out, err)
        assert time.monotonic() - t0 < 20
        await hd.terminate("test")

        async def listed():
            rc, out, err = await revive("incidents", "--job", job, "--json", *c)
            assert rc == 0, err
            rows = {r["incident"]: r for r in json.loads(out)}
            ok = (iid in rows and rows[iid]["culprits"] == ["node2"] and dead in rows
                  and rows[dead]["temporal_status"] == "terminated")
            return rows if ok else None
        rows = await _until(listed, "both incidents listed", tries=30)
        assert rows[iid]["state"] == "awaiting_approval" and rows[iid]["temporal_status"] == "running"
        assert rows[dead]["state"] == "terminated", "a terminated incident must not read awaiting_approval"

        rc, out, err = await revive("incidents", "--state", "awaiting_approval", "--node", "node2", "--since", "1h",
                                    "--json", *c)
        got = [r["incident"] for r in json.loads(out)]
        assert iid in got and dead not in got, got
        rc, out, err = await revive("incidents", "--job", "1' OR ReviveJobId='2", *c)
        assert rc == 2 and "not allowed in a query" in err, (rc, out, err)
        rc, out, err = await revive("incidents", "--state", "bogus", *c)
        assert rc == 2 and "one of" in err

        rc, out, err = await revive("explain", iid, *c)
        assert rc == 0, err
        assert "open: awaiting_approval" in out and "gpu_hardware" in out and "root event" in out

        exp = tmp_path / "export"
        rc, out, err = await revive("export", iid, "--out", str(exp), *c)
        assert rc == 0, err
        assert {"history.json", "status.json", "card.md", "describe.json"} <= {p.name for p in exp.iterdir()}
        assert f"revive approve {iid} --as <you>" in (exp / "card.md").read_text()

        rc, out, err = await revive("show", iid, *c)
        assert rc == 0 and "so far" in out and "awaiting_approval" in out, (out, err)

        rc, out, err = await revive("watch", "--once", *c)
        assert rc == 0 and iid in out and "open incidents" in out, out

        rc, out, err = await revive("approve", iid, "--as", "alice", *c)
        assert rc == 0 and "approve accepted from alice" in out, (out, err)
        res = await h.result()
        assert res.outcome.value == "recovered"

    rc, out, err = await revive("show", iid, *c)
    assert rc == 0, err
    assert "awaiting_approval" in out and "acting" in out and "total" in out and "recovered" in out
    rc, out, err = await revive("explain", iid, *c)
    assert rc == 0 and "recovered" in out and "open:" not in out
    rc, out, err = await revive("export", iid, "--out", str(tmp_path / "exp2"), *c)
    assert rc == 0 and "audit.json" in out and "runbook-history.json" in out, (out, err)
    audit = json.loads((tmp_path / "exp2" / "audit.json").read_text())
    assert audit["partition"] == "debug" and audit["job"]["nodes"] == ["node1", "node2"]
    # report: the audit file, plus closed incidents of this cluster only in Temporal (deduplicated)
    rc, out, err = await revive("report", "--json", *c)
    assert rc == 0, err
    rep = json.loads(out)
    mine = [x for x in rep["incidents"] if x["incident_id"] == iid]
    assert len(mine) == 1 and mine[0]["gpus"] == 2 and mine[0]["gpus_source"] == "assumed 1 per node"
    assert mine[0]["fault_source"] == "fault_time" and mine[0]["mttr_s"] is not None


def test_help_lists_every_verb_and_progress_check(tmp_path):
    import subprocess

    r = subprocess.run([sys.executable, "-m", "cli.main", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    for verb in ("incidents", "show", "approve", "reject", "explain", "export", "watch", "report", "agent",
                 "progress", "worker", "monitor"):
        assert f" {verb} " in r.stdout, (verb, r.stdout)
    log = tmp_path / "train.log"
    log.write_text("".join(
        f"2026-12-01T10:00:{i:02d}.000 [rank 0 host n1] iteration {i}/100 | loss 0.5 | step_time_ms 20.0\r\n"
        for i in range(1, 12)) + "2026-12-01T10:00:11 [rank 0 host n1] saved checkpoint at iteration 10\r\n")
    r = subprocess.run([sys.executable, "-m", "cli.main", "progress", "check", str(log), "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)
    r = subprocess.run([sys.executable, "-m", "cli.main", "agent", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "check" in r.stdout


def test_query_building_is_injection_safe():
    from cli.ops import QueryValueError, incidents_query, shown_state

    assert incidents_query(job="7", node="node2") == ("WorkflowType='IncidentWorkflow' AND ReviveJobId='7' "
                                                      "AND (ReviveNodes='node2' OR ReviveCulprits='node2')")
    for bad in ("1' OR ReviveJobId='2", "a\\", "x\ny", "x" * 300):
        with pytest.raises(QueryValueError):
            incidents_query(job=bad)
    assert shown_state("awaiting_approval", "terminated") == "terminated"
    assert shown_state("recovered", "completed") == "recovered"
    assert shown_state("acting", "running") == "acting"
