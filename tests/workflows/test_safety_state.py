"""Issue #12's safety state on the dev server (``local_env``) with the production worker over a
FakeScheduler: the mode and policy held by the cluster's guard and changed by Updates, the per-job
record that makes budgets atomic, continue-as-new by event count, a storm of triggers coalesced by
a refused Update, and secrets that never reach a workflow's history."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError

from activities.guard import GuardActivities, guard_settings, update_guard_settings
from revive import ids
from revive.decide.breaker import GuardInput
from revive.decide.budgets import RULE_MAX_REQUEUES
from revive.decide.jobrecord import AdmitIncidentInput, AdmitInput, JobRecordInput
from revive.models import Category, IncidentHistoryInput, IncidentOutcome
from revive.policy import RecoveryPolicy
from revive.temporal import connect
from tests.helpers.builders import T0, fake_cluster, incident
from tests.workflows.test_guards_workflow_level import crash_cluster
from worker.main import build_worker
from workflows.guard import ClusterGuardWorkflow
from workflows.incident import MAX_EXTRA_TRIGGERS, IncidentWorkflow
from workflows.job_record import JobRecordWorkflow

pytestmark = pytest.mark.temporal

FAST = {"timeout": 5, "poll_interval": 0.2}


def _tq() -> str:
    return f"safety-{uuid.uuid4().hex[:8]}"


async def _wait_state(h, state: str, tries: int = 400) -> None:
    for _ in range(tries):
        try:
            if (await h.query("status"))["state"] == state:
                return
        except Exception:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {state}")


def _audit(tmp: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp / "audit.jsonl").read_text().splitlines()]


async def test_the_guard_mode_set_by_an_operator_decides_the_gate_and_is_recorded(local_env, tmp_path):
    """The monitor's policy says observe; the on-call sets auto for partition debug in the guard:
    the incident drains and requeues without waiting, and its audit record names where the mode
    came from and the guard's policy version."""
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    tq = _tq()
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        pol = await update_guard_settings(local_env.client, "fake", tq, "apply_policy", {
            "policy": {"name": "canary", "mode": "observe"}, "who": "oncall-alice", "update_id": "p-1"})
        assert pol.applied and pol.policy_version == 1
        ans = await update_guard_settings(local_env.client, "fake", tq, "set_mode", {
            "mode": "auto", "partition": "debug", "who": "oncall-alice", "note": "canary week", "update_id": "m-1"})
        assert ans.applied and ans.summary == "mode auto for partition debug (canary week)"
        inp = incident(log, RecoveryPolicy(verify=FAST), iid=f"fake-7-a0-gpu-{uuid.uuid4().hex[:6]}")
        res = await local_env.client.execute_workflow(IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq)
    assert res.outcome == IncidentOutcome.recovered, res.reason
    assert [c[0] for c in sched.mutating_calls] == ["drain_nodes", "requeue"]
    rec = _audit(tmp_path)[-1]
    assert rec["mode"] == "auto" and rec["mode_source"] == "guard:partition" and rec["policy_version"] == 1


async def test_without_a_guard_mode_the_incident_keeps_its_input_policy_mode(local_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    tq = _tq()
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        inp = incident(log, RecoveryPolicy(), iid=f"fake-7-a0-gpu-{uuid.uuid4().hex[:6]}")
        h = await local_env.client.start_workflow(IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq)
        await _wait_state(h, "awaiting_approval")  # observe, from the input policy
        st = await h.query("status")
        assert st["mode"] == "observe" and st["mode_source"] == "input" and st["policy_version"] == 0
        await h.execute_update("decide", {"decision": "reject", "approver": "oncall-bob"})
        res = await h.result()
    assert res.outcome == IncidentOutcome.rejected and sched.mutating_calls == []


async def test_an_invalid_policy_or_mode_is_refused_and_records_nothing(local_env, tmp_path):
    sched, cfg, _ = fake_cluster(tmp_path, "xid79")
    tq = _tq()
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        await update_guard_settings(local_env.client, "fake", tq, "set_mode",
                                    {"mode": "observe", "who": "alice", "update_id": "m-0"})
        h = local_env.client.get_workflow_handle(ids.guard_workflow_id("fake", tq))
        before = len((await h.fetch_history()).events)
        with pytest.raises(ValueError, match="invalid policy"):
            await update_guard_settings(local_env.client, "fake", tq, "apply_policy",
                                        {"policy": {"mode": "sometimes"}, "who": "alice", "update_id": "p-bad"})
        with pytest.raises(ValueError, match="who"):
            await update_guard_settings(local_env.client, "fake", tq, "set_mode",
                                        {"mode": "auto", "who": "", "update_id": "m-bad"})
        with pytest.raises(ValueError):
            await update_guard_settings(local_env.client, "fake", tq, "set_mode",
                                        {"mode": "auto", "who": "a", "note": "x" * 100_000, "update_id": "m-big"})
        assert len((await h.fetch_history()).events) == before  # a refused Update writes no event
        again = await update_guard_settings(local_env.client, "fake", tq, "set_mode",
                                            {"mode": "auto", "who": "alice", "update_id": "m-0"})
        assert not again.applied  # same update id: applied once
        s = await guard_settings(local_env.client, "fake", tq)
    assert s is not None and s.modes["*"].mode.value == "observe" and s.policy is None and s.modes["*"].who == "alice"


async def test_two_quick_failures_of_one_job_do_not_both_pass_a_budget_of_one(local_env, tmp_path):
    """Two incidents of job 7 (two fault families of one attempt) start together; the budget is one
    requeue per job. Through visibility both could pass; the record admits one and stops the other."""
    sched, cfg, log = crash_cluster(tmp_path)
    tq = _tq()
    pol = RecoveryPolicy(mode="auto", budgets={"max_requeues_per_job": 1}, verify=FAST)
    base = incident(log, pol, iid="x")
    inps = [base.model_copy(update={"incident_id": f"fake-7-a0-{fam}-{uuid.uuid4().hex[:6]}", "fault_family": fam})
            for fam in ("job", "kern")]
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        hs = [await local_env.client.start_workflow(IncidentWorkflow.run, i, id=i.incident_id, task_queue=tq)
              for i in inps]
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in hs)), 90)
        record = await local_env.client.get_workflow_handle(ids.job_record_id("fake", "7", tq)).query("state")
    assert [c[0] for c in sched.mutating_calls] == ["requeue"], sched.calls
    stopped = [r for r in results if r.outcome == IncidentOutcome.stopped]
    assert len(stopped) == 1 and stopped[0].rule == RULE_MAX_REQUEUES, results
    assert {e["incident_id"] for e in record["entries"]} == {i.incident_id for i in inps}
    assert all(e["outcome"] for e in record["entries"])  # both reported their outcome at close


async def _admit(client: Client, tq: str, n: int) -> None:
    ga = GuardActivities(client, tq)
    for i in range(n):
        a = AdmitInput(cluster="fake", job_id="42", incident_id=f"inc-{i}", attempt=i, family="job",
                       category=Category.crash, now=T0 + timedelta(minutes=i), job_submit_time=T0)
        await ga.admit_incident(AdmitIncidentInput(admit=a, history=IncidentHistoryInput(cluster="fake", job_id="42")))


async def test_the_job_record_continues_as_new_by_event_count_and_keeps_its_state(local_env, tmp_path):
    tq = _tq()
    wid = ids.job_record_id("fake", "42", tq)
    sched, cfg, _ = fake_cluster(tmp_path, "app")
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        h = await local_env.client.start_workflow(
            JobRecordWorkflow.run, JobRecordInput(cluster="fake", job_id="42", continue_as_new_after_events=40),
            id=wid, task_queue=tq)
        await _admit(local_env.client, tq, 12)
        first = local_env.client.get_workflow_handle(wid, run_id=h.result_run_id)
        for _ in range(100):
            if (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                break
            await asyncio.sleep(0.05)
        assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        assert len((await first.fetch_history()).events) < 60
        state = await local_env.client.get_workflow_handle(wid).query("state")
        await local_env.client.get_workflow_handle(wid).terminate("test over")
    assert [e["incident_id"] for e in state["entries"]] == [f"inc-{i}" for i in range(12)]
    assert state["first_submit"].startswith("2026-11-29T15:04")


async def test_the_guard_continues_as_new_by_event_count_and_keeps_the_mode(local_env):
    tq = _tq()
    wid = ids.guard_workflow_id("fake", tq)
    from temporalio.worker import Worker

    async with Worker(local_env.client, task_queue=tq, workflows=[ClusterGuardWorkflow]):
        h = await local_env.client.start_workflow(
            ClusterGuardWorkflow.run, GuardInput(cluster="fake", continue_as_new_after_events=30), id=wid,
            task_queue=tq)
        for i in range(10):
            await update_guard_settings(local_env.client, "fake", tq, "set_mode",
                                        {"mode": "auto" if i % 2 else "observe", "who": f"op{i}", "update_id": f"m{i}"})
        first = local_env.client.get_workflow_handle(wid, run_id=h.result_run_id)
        assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
        s = await guard_settings(local_env.client, "fake", tq)
        await local_env.client.get_workflow_handle(wid).terminate("test over")
    assert s is not None and s.modes["*"].who == "op9" and len(s.changes) == 10


async def test_a_storm_of_triggers_is_coalesced_far_below_the_history_limits(local_env, tmp_path):
    """1,000 add_trigger attempts (``REVIVE_STORM_ATTEMPTS``; 10,000 measured in the note) at an
    incident waiting for approval: the first
    MAX_EXTRA_TRIGGERS are kept (one Update each), every later one is refused by the validator and
    writes nothing, so the history stays far below Temporal's 10,240-event warning."""
    sched, cfg, log = fake_cluster(tmp_path, "xid79")
    tq = _tq()
    attempts, limit = int(os.environ.get("REVIVE_STORM_ATTEMPTS", "1000")), 10  # Temporal's default history.maxInFlightUpdates is 10
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        inp = incident(log, RecoveryPolicy(), iid=f"fake-7-a0-gpu-{uuid.uuid4().hex[:6]}")
        h = await local_env.client.start_workflow(IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq)
        await _wait_state(h, "awaiting_approval")
        kept = coalesced = 0
        queue = iter(range(attempts))

        async def sender() -> None:
            nonlocal kept, coalesced
            for i in queue:
                try:
                    await h.execute_update("add_trigger", f"NCCL WARN line {i}", result_type=int)
                    kept += 1
                except WorkflowUpdateFailedError as e:
                    assert "coalesced" in str(e.cause), e.cause
                    coalesced += 1

        t0 = asyncio.get_running_loop().time()
        await asyncio.gather(*(sender() for _ in range(limit)))
        took = asyncio.get_running_loop().time() - t0
        await h.signal("add_trigger", "an old sender's signal")  # kept for old histories: counted, not kept
        events = len((await h.fetch_history()).events)
        status = await h.query("status")
        await h.execute_update("decide", {"decision": "reject", "approver": "oncall-bob"})
        await h.result()
    print(f"BENCH trigger_storm attempts={attempts} kept={kept} coalesced={coalesced} history_events={events} "
          f"seconds={took:.1f}")
    assert kept == MAX_EXTRA_TRIGGERS and coalesced == attempts - MAX_EXTRA_TRIGGERS
    assert status["extra_triggers"] == MAX_EXTRA_TRIGGERS and status["dropped_triggers"] == 1
    assert events < 1_000, events  # 10,240 is Temporal's warning, 51,200 its hard limit
    rec = _audit(tmp_path)[-1]
    assert len(rec["extra_triggers"]) == MAX_EXTRA_TRIGGERS + 1 and "1 more trigger(s) not kept" in rec["extra_triggers"]


def _payload_bytes(node: object) -> list[bytes]:
    """Every payload's decoded ``data`` in an exported history (JSON form), recursively."""
    out: list[bytes] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "data" and isinstance(v, str):
                try:
                    out.append(base64.b64decode(v, validate=True))
                except ValueError:
                    out.append(v.encode())
            else:
                out += _payload_bytes(v)
    elif isinstance(node, list):
        for v in node:
            out += _payload_bytes(v)
    return out


async def test_secrets_named_in_the_config_never_enter_workflow_history(local_env, tmp_path):
    """A Temporal API key (JWT-looking), a slurmrestd token and an SSH key are configured by file;
    the worker connects with the key; an incident runs to its close (drain, requeue, guard, job
    record). No history of any workflow it touched holds the secret bytes, raw or base64-decoded."""
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJyZXZpdmUtc2VjcmV0LXRlc3QifQ.c2VjcmV0LXNpZ25hdHVyZS0xMjM0NTY3ODk"
    ssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA-revive-test-ssh-secret\n-----END OPENSSH PRIVATE KEY-----\n"
    rest = "slurm-jwt-revive-test-rest-secret-0123456789"
    (tmp_path / "api.key").write_text(jwt + "\n")
    (tmp_path / "id_ed25519").write_text(ssh)
    (tmp_path / "rest.token").write_text(rest)
    sched, base, log = fake_cluster(tmp_path, "xid79", resumed=True)
    from revive.config import parse_cluster_config

    cfg = parse_cluster_config({
        **base.model_dump(exclude_none=True),
        "scheduler": {"mode": "local", "ssh": {"host": "login1", "key_file": str(tmp_path / "id_ed25519")},
                      "rest": {"url": "http://127.0.0.1:1", "token_file": str(tmp_path / "rest.token")}},
        "temporal": {"address": local_env.client.service_client.config.target_host,
                     "namespace": local_env.client.namespace, "api_key_file": str(tmp_path / "api.key")},
    })
    client = await connect(cfg.temporal, identity="revive-worker")
    assert client.api_key == jwt  # the key is used for the connection …
    tq = _tq()
    async with build_worker(client, cfg, sched, task_queue=tq):
        inp = incident(log, RecoveryPolicy(mode="auto", verify=FAST), iid=f"fake-7-a0-gpu-{uuid.uuid4().hex[:6]}")
        res = await client.execute_workflow(IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq)
    assert res.outcome == IncidentOutcome.recovered, res.reason
    touched = [inp.incident_id, ids.runbook_id(inp.incident_id), ids.guard_workflow_id("fake", tq),
               ids.job_record_id("fake", "7", tq)]
    secrets = [jwt.encode(), rest.encode(), b"revive-test-ssh-secret", b"BEGIN OPENSSH"]
    for wid in touched:
        hist = await client.get_workflow_handle(wid).fetch_history()
        text = hist.to_json().encode()
        blobs = [text, *_payload_bytes(json.loads(text))]
        assert len(blobs) > 3, wid  # the walk found payloads
        for s in secrets:
            assert not any(s in b for b in blobs), f"secret bytes in the history of {wid}"  # … and never recorded
    await client.get_workflow_handle(ids.guard_workflow_id("fake", tq)).terminate("test over")
    await client.get_workflow_handle(ids.job_record_id("fake", "7", tq)).terminate("test over")


def test_inline_secrets_in_the_config_are_refused():
    from revive.config import TemporalConfig

    for bad in ({"api_key_file": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.sig"},
                {"tls": {"cert_file": "c.pem", "key_file": "-----BEGIN PRIVATE KEY-----\nMII"}},
                {"tls": {"cert_file": "c.pem"}}):
        with pytest.raises(ValueError):
            TemporalConfig.model_validate(bad)
    assert TemporalConfig.model_validate({"tls": {}, "api_key_file": "/etc/revive/temporal.key"}).api_key_file


def test_the_record_is_one_per_cluster_and_job_id():
    assert ids.job_record_id("c", "7") == "revive-job-c-7"
    assert ids.job_record_id("c", "7", "other") == "revive-job-c-7@other"


async def test_the_first_admit_of_a_job_reads_visibility_once_for_its_seed_and_its_nodes(local_env, tmp_path):
    """Job 43's record does not exist yet and one of its incidents closed before the record: that
    incident seeds the record, and the nodes' recent incidents come from the same read (run beside
    the record's describe and Update, not after them)."""
    from revive.decide.budgets import JobIncidentHistory, prior_from_result
    from revive.models import Action, IncidentResult

    earlier = IncidentResult(incident_id="fake-43-a0-old", outcome=IncidentOutcome.recovered, job_id="43",
                             category=Category.crash, executed=Action.restart_in_place, closed_at=T0)
    on_node = IncidentResult(incident_id="fake-9-a0-xid", outcome=IncidentOutcome.recovered, job_id="9",
                             category=Category.gpu_hardware, culprit_nodes=["node2"], closed_at=T0)
    reads: list[IncidentHistoryInput] = []

    class Counting(GuardActivities):
        async def incident_history(self, inp: IncidentHistoryInput) -> JobIncidentHistory:
            reads.append(inp)
            return JobIncidentHistory(prior=[prior_from_result(earlier, "43")], requeues=1,
                                      node_incidents=[prior_from_result(on_node)])

    tq = _tq()
    sched, cfg, _ = fake_cluster(tmp_path, "app")
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        a = AdmitInput(cluster="fake", job_id="43", incident_id="fake-43-a1-new", attempt=1, family="job",
                       category=Category.crash, now=T0 + timedelta(minutes=5), job_submit_time=T0)
        answer = await Counting(local_env.client, tq).admit_incident(AdmitIncidentInput(
            admit=a, history=IncidentHistoryInput(cluster="fake", job_id="43", nodes=["node2"])))
        await local_env.client.get_workflow_handle(ids.job_record_id("fake", "43", tq)).terminate("test over")
    assert len(reads) == 1 and reads[0].nodes == ["node2"]
    assert [p.incident_id for p in answer.history.prior] == ["fake-43-a0-old"]  # the seed
    assert [p.incident_id for p in answer.history.node_incidents] == ["fake-9-a0-xid"]
