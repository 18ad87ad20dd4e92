"""Return to service on the time-skipping test server: the production worker's workflows and
activities over a FakeScheduler (which records every mutating call).

The cluster after an Xid 79 on node2: Revive drained node2 (``revive:<incident> gpu_hardware``);
a person drained node3 for a cable swap; node1 and node4 are idle.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio import activity

from revive import ids
from revive import metrics as rm
from revive.decide.rts import GuardDrainsInput, NodeCheckInput, OwnDrain, RtsInput, RtsOutcome, RtsResult
from revive.models import Decision, NodeRecord, NotifyInput, NotifyResult
from revive.policy import RecoveryPolicy, RepeatOffenderPolicy
from revive.scheduler.fake import FakeScheduler
from tests.helpers.builders import fake_cluster
from worker.main import build_worker
from workflows.return_to_service import NodeCheckWorkflow, ReturnToServiceWorkflow

pytestmark = pytest.mark.temporal

INCIDENT = "fake-7-20261129T150400-a0-gpu"
OURS = f"revive:{INCIDENT} gpu_hardware"
PERSON = "cable swap, ask dana"


def _cluster(tmp_path):
    sched, cfg, _log = fake_cluster(tmp_path)
    sched.add_node(NodeRecord(name="node2", state="IDLE+DRAIN", reason=OURS, partitions=["debug"]))
    sched.add_node(NodeRecord(name="node3", state="IDLE+DRAIN", reason=PERSON, partitions=["debug"]))
    return sched, cfg


def _policy(mode: str = "auto", **rts) -> RecoveryPolicy:
    return RecoveryPolicy(mode=mode, notify={"webhooks": ["http://hooks.invalid/x"]},
                          return_to_service={"enabled": True, "command": ["true"], **rts})


class Notes:
    """Stands in for the webhook activity: records every event."""

    def __init__(self) -> None:
        self.events: list[NotifyInput] = []

        @activity.defn(name="notify")
        async def notify(inp: NotifyInput) -> NotifyResult:
            self.events.append(inp)
            return NotifyResult()

        self.activity = notify

    def kinds(self) -> list[str]:
        return [e.event.kind for e in self.events]


async def _pass(env, sched, cfg, pol, replace=(), during=None) -> RtsResult:
    tq = f"rts-{uuid.uuid4().hex[:8]}"
    replace = list(replace)
    if not any(getattr(a, "__temporal_activity_definition").name == "notify" for a in replace):
        replace.append(Notes().activity)  # no real webhook calls
    async with build_worker(env.client, cfg, sched, task_queue=tq, replace=replace):
        h = await env.client.start_workflow(ReturnToServiceWorkflow.run, RtsInput(cluster="fake", policy=pol, task_queue=tq),
                                            id=f"rts-{uuid.uuid4().hex[:8]}", task_queue=tq)
        if during:
            await during(tq)
        return await h.result()


def _mutations(sched: FakeScheduler, node: str) -> list[str]:
    return [m for m, kw in sched.mutating_calls if node in kw.get("nodes", []) or kw.get("name", "").endswith(node)]


async def test_xid_drain_passes_check_auto_resumes_counts_false_isolation_person_drain_untouched(ts_env, tmp_path):
    sched, cfg = _cluster(tmp_path)
    notes = Notes()
    fi = rm.METRICS.false_isolations.labels("gpu_hardware")
    before = fi._value.get()
    res = await _pass(ts_env, sched, cfg, _policy(), replace=[notes.activity])

    assert [(r.node, r.outcome) for r in res.checked] == [("node2", RtsOutcome.resumed)]
    assert fi._value.get() == before + 1  # revive_false_isolations_total{category="gpu_hardware"}
    r = res.checked[0]
    assert r.incident_id == INCIDENT and r.category == "gpu_hardware" and r.false_isolation
    assert sched.nodes["node2"].state == "IDLE" and sched.nodes["node2"].reason is None
    # a person's drain is never touched, idle nodes neither
    assert sched.nodes["node3"].reason == PERSON and _mutations(sched, "node3") == []
    assert [m for m, _ in sched.mutating_calls] == ["resume_nodes"]
    line = json.loads((tmp_path / "node-resumes.jsonl").read_text().splitlines()[-1])
    assert line["node"] == "node2" and line["incident_id"] == INCIDENT
    assert notes.kinds() == ["node_resumed"] and notes.events[0].event.incident_id == INCIDENT
    [audit] = [json.loads(x) for x in (tmp_path / "node-checks.jsonl").read_text().splitlines()]
    assert (audit["kind"], audit["node"], audit["outcome"], audit["incident_id"]) == (
        "node_check", "node2", "resumed", INCIDENT)
    assert audit["check_id"].startswith("revive-rts-fake-node-node2") and audit["false_isolation"]


async def test_failed_check_keeps_node_drained_with_updated_reason_and_notifies(local_env, tmp_path):
    # the dev server (real clock): the time-skipping server's clock can jump far ahead between runs
    sched, cfg = _cluster(tmp_path)
    sched.node_outputs[("node2", "false")] = (1, "GPU 0: 12 uncorrectable ECC errors\n")
    notes = Notes()
    res = await _pass(local_env, sched, cfg, _policy(command=["false"]), replace=[notes.activity])

    assert [(r.node, r.outcome) for r in res.checked] == [("node2", RtsOutcome.check_failed)]
    n2 = sched.nodes["node2"]
    assert n2.drained
    assert re.fullmatch(r"revive: health check failed \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: false exited 1: "
                        rf"GPU 0: 12 uncorrectable ECC errors \(incident {INCIDENT} gpu_hardware\)", n2.reason or "")
    assert notes.kinds() == ["node_check_failed"]
    assert not (tmp_path / "node-resumes.jsonl").exists()
    audit = json.loads((tmp_path / "node-checks.jsonl").read_text().splitlines()[-1])
    assert audit["outcome"] == "check_failed" and "12 uncorrectable ECC errors" in audit["detail"]

    # the next tick, within recheck_after, leaves it alone; the failed reason is still Revive's
    again = await _pass(local_env, sched, cfg, _policy(command=["false"]))
    assert again.checked == [] and [c.drain.node for c in again.skipped] == ["node2"], (again.scanned_at, n2.reason)
    assert "last check failed" in again.skipped[0].why and again.skipped[0].drain.incident_id == INCIDENT


async def test_observe_mode_resume_waits_for_approval(ts_env, tmp_path):
    sched, cfg = _cluster(tmp_path)

    async def approve(tq: str) -> None:
        h = ts_env.client.get_workflow_handle(ids.node_check_id("fake", "node2", tq))
        for _ in range(600):
            try:
                if (await h.query("status"))["state"] == "awaiting_approval":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.05)
        assert [m for m, _ in sched.mutating_calls] == []  # passed, but nothing resumed before the decision
        await h.execute_update("decide", Decision(decision="approve", approver="oncall-alice"))

    res = await _pass(ts_env, sched, cfg, _policy(mode="observe"), during=approve)
    assert res.checked[0].outcome == RtsOutcome.resumed and res.checked[0].decided_by == "oncall-alice"
    assert sched.nodes["node2"].state == "IDLE"


async def test_observe_mode_reject_and_expiry_keep_node_drained(ts_env, tmp_path):
    sched, cfg = _cluster(tmp_path)

    async def reject(tq: str) -> None:
        h = ts_env.client.get_workflow_handle(ids.node_check_id("fake", "node2", tq))
        for _ in range(600):
            try:
                if (await h.query("status"))["state"] == "awaiting_approval":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.05)
        await h.signal("decide", {"decision": "reject", "approver": "oncall-bob", "note": "wait for RMA"})

    res = await _pass(ts_env, sched, cfg, _policy(mode="observe"), during=reject)
    assert res.checked[0].outcome == RtsOutcome.rejected and "wait for RMA" in res.checked[0].detail
    expired = await _pass(ts_env, sched, cfg, RecoveryPolicy(
        approval={"timeout": 60}, return_to_service={"enabled": True, "command": ["true"]}))
    assert expired.checked[0].outcome == RtsOutcome.expired  # the time-skipping server jumps the 60 s
    assert sched.mutating_calls == [] and sched.nodes["node2"].reason == OURS


async def test_reservation_path_resumes_only_inside_window_and_leaves_no_window(ts_env, tmp_path):
    sched, cfg = _cluster(tmp_path)
    sched.submit_outcomes = [("COMPLETED", "0:0")]
    res = await _pass(ts_env, sched, cfg, _policy(method="reservation"))
    assert res.checked[0].outcome == RtsOutcome.resumed
    assert [m for m, _ in sched.mutating_calls] == [
        "create_maintenance_window", "resume_nodes", "submit", "drain_nodes", "delete_maintenance_window",
        "resume_nodes"]
    create, submit, redrain = sched.mutating_calls[0][1], sched.mutating_calls[2][1], sched.mutating_calls[3][1]
    assert create["name"] == "revive-rts-node2" and create["nodes"] == ["node2"] and create["users"] == ["root"]
    assert "--reservation=revive-rts-node2" in submit["options"] and "--nodelist=node2" in submit["options"]
    assert redrain["reason"] == OURS  # back to the reason it had until the gate decides
    assert sched.windows == {} and sched.nodes["node2"].state == "IDLE"


async def test_reservation_failed_job_drains_again_and_deletes_window(ts_env, tmp_path):
    sched, cfg = _cluster(tmp_path)
    sched.submit_outcomes = [("FAILED", "1:0")]
    res = await _pass(ts_env, sched, cfg, _policy(method="reservation"))
    assert res.checked[0].outcome == RtsOutcome.check_failed
    assert sched.windows == {} and sched.nodes["node2"].drained
    assert (sched.nodes["node2"].reason or "").startswith("revive: health check failed ")
    assert "FAILED exit 1:0" in (sched.nodes["node2"].reason or "")


class SlowChecks(FakeScheduler):
    """run_on_node takes a while; records the most checks in flight at once."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.inflight = self.most = 0

    async def run_on_node(self, node, argv, timeout_s=30.0):
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        await asyncio.sleep(0.3)
        self.inflight -= 1
        return 0, ""


async def test_at_most_k_nodes_in_checks_at_once(ts_env, tmp_path):
    _sched, cfg = _cluster(tmp_path)
    sched = SlowChecks(cluster="fake", nodes=[
        NodeRecord(name=f"gpu{i}", state="IDLE+DRAIN", reason=f"revive:fake-{i}-20261129T150400-a0-gpu gpu_hardware")
        for i in range(1, 6)])
    res = await _pass(ts_env, sched, cfg, _policy(max_concurrent=2))
    assert [r.outcome for r in res.checked] == [RtsOutcome.resumed] * 5
    assert sched.most == 2


async def test_guard_keeps_a_repeat_offender_drained(local_env, tmp_path):
    sched, cfg = _cluster(tmp_path)
    now = datetime.now(UTC)

    @activity.defn(name="rts_guard_drains")
    async def three_drains(inp: GuardDrainsInput) -> list[datetime]:
        return [now - timedelta(hours=h) for h in (1, 2, 3)] if inp.node == "node2" else []

    notes = Notes()
    pol = _policy().model_copy(update={"repeat_offender": RepeatOffenderPolicy(incidents=3, window=timedelta(hours=24))})
    # (the dev server, real clock: the guard's records are wall-clock times)
    res = await _pass(local_env, sched, cfg, pol, replace=[three_drains, notes.activity])
    assert res.checked[0].outcome == RtsOutcome.refused and "repeat offender" in res.checked[0].detail
    assert sched.mutating_calls == [] and notes.kinds() == ["escalated"]


async def test_a_node_whose_check_still_runs_is_not_checked_twice(local_env, tmp_path):
    # the dev server (real clock): awaiting a result on the time-skipping server would skip the first
    # check's approval timer
    sched, cfg = _cluster(tmp_path)
    pol = _policy(mode="observe")

    async def second_pass(tq: str) -> None:
        h = local_env.client.get_workflow_handle(ids.node_check_id("fake", "node2", tq))
        for _ in range(600):
            try:
                if (await h.query("status"))["state"] == "awaiting_approval":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.05)
        other = await local_env.client.start_workflow(ReturnToServiceWorkflow.run, RtsInput(cluster="fake", policy=pol, task_queue=tq),
                                                   id=f"rts-2-{uuid.uuid4().hex[:6]}", task_queue=tq)
        second = await other.result()
        assert second.busy == ["node2"] and second.checked == []
        await h.execute_update("decide", Decision(decision="approve", approver="oncall-alice"))

    res = await _pass(local_env, sched, cfg, pol, during=second_pass)
    assert res.checked[0].outcome == RtsOutcome.resumed
    assert [m for m, _ in sched.mutating_calls] == ["resume_nodes"]


async def test_node_taken_over_by_a_person_during_the_check_is_left_alone(ts_env, tmp_path):
    sched, cfg = _cluster(tmp_path)

    class Takeover(FakeScheduler):
        async def run_on_node(self, node, argv, timeout_s=30.0):
            self.nodes[node] = self.nodes[node].model_copy(update={"reason": "dana: reseating GPU 3"})
            return 0, ""

    t = Takeover(cluster="fake", nodes=list(sched.nodes.values()))
    res = await _pass(ts_env, t, cfg, _policy())
    assert res.checked[0].outcome == RtsOutcome.changed
    assert t.mutating_calls == [] and t.nodes["node2"].reason == "dana: reseating GPU 3"


async def test_bad_decide_payloads_never_wedge_the_check(ts_env, tmp_path):
    sched, cfg = _cluster(tmp_path)
    tq = f"rts-{uuid.uuid4().hex[:8]}"
    inp = NodeCheckInput(cluster="fake", drain=OwnDrain(node="node2", reason=OURS, kind="incident",
                                                        incident_id=INCIDENT, category="gpu_hardware"),
                         policy=_policy(mode="observe"))
    async with build_worker(ts_env.client, cfg, sched, task_queue=tq, replace=[Notes().activity]):
        h = await ts_env.client.start_workflow(NodeCheckWorkflow.run, inp, id=f"nc-{uuid.uuid4().hex[:6]}",
                                               task_queue=tq)
        for _ in range(600):
            try:
                if (await h.query("status"))["state"] == "awaiting_approval":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.05)
        await h.signal("decide", "nonsense")
        await h.signal("decide", {"decision": "maybe"})
        await h.execute_update("decide", {"decision": "approve", "approver": "oncall-alice"})
        res = await h.result()
        assert res.outcome == RtsOutcome.resumed
        assert len((await h.query("status"))["ignored_decisions"]) == 2


async def test_guard_mode_rollback_to_observe_holds_the_resume_of_an_auto_policy(local_env, tmp_path):
    """The input policy says auto, but an operator set the node's partition to observe in the
    cluster guard (``revive mode set observe --partition debug``): the resume waits for a person."""
    from revive.decide.breaker import GuardInput
    from workflows.guard import ClusterGuardWorkflow

    sched, cfg = _cluster(tmp_path)
    pol = _policy(mode="auto")

    async def rollback_then_reject(tq: str) -> None:
        h = local_env.client.get_workflow_handle(ids.node_check_id("fake", "node2", tq))
        for _ in range(600):
            try:
                if (await h.query("status"))["state"] == "awaiting_approval":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.05)
        assert [m for m, _ in sched.mutating_calls] == []
        await h.signal("decide", {"decision": "reject", "approver": "oncall-bob", "note": "partition in observe"})

    tq = f"rts-{uuid.uuid4().hex[:8]}"
    async with build_worker(local_env.client, cfg, sched, task_queue=tq, replace=[Notes().activity]):
        guard = await local_env.client.start_workflow(ClusterGuardWorkflow.run, GuardInput(cluster="fake"),
                                                      id=ids.guard_workflow_id("fake", tq), task_queue=tq)
        await guard.execute_update("set_mode", {"mode": "observe", "partition": "debug", "who": "oncall-bob",
                                                "update_id": uuid.uuid4().hex})
        h = await local_env.client.start_workflow(ReturnToServiceWorkflow.run,
                                                  RtsInput(cluster="fake", policy=pol, task_queue=tq),
                                                  id=f"rts-{uuid.uuid4().hex[:8]}", task_queue=tq)
        await rollback_then_reject(tq)
        res = await h.result()
        await guard.terminate("test over")
    assert res.checked[0].outcome == RtsOutcome.rejected
    assert sched.mutating_calls == [] and sched.nodes["node2"].reason == OURS
