"""Record incident histories for the replay tests (run by hand, not collected by pytest).

    .venv/bin/python -m tests.workflows.record_histories

Runs incidents on an in-memory dev server with the production worker over a FakeScheduler and
writes each workflow's history (incident + runbook child) to ``tests/histories/*.json``, then drives
the per-cluster ``ClusterGuardWorkflow`` directly and writes its histories too.
Recordings are kept per ``TAG``: v1 predates ``workflow.patched("save-job-spec")``, v2 has it, v3 also has
``workflow.patched("external-attribution-in-background")``; v4 adds one incident per runbook
(restart_in_place, hang, straggler, requeue_exclude) and the guard workflow (one run fetched while
running, one closed by continue-as-new), so every type in ``worker.main.WORKFLOWS`` has a history;
v5 adds ``workflow.patched("culprit-search-attribute")``; v6 adds ``"job-record-budgets"`` (the
incident admits itself to its ``JobRecordWorkflow`` and reports its outcome there) and
``"mode-from-guard"`` (the gate reads the mode from the guard), the guard's ``set_mode`` /
``apply_policy`` Updates, and the job record (one run fetched while running, one continued as new).
v6ckpt (recorded on a parallel branch): the runbooks' ``save-before-requeue``, ``bad-checkpoint-loop``
and ``dependents`` patches (``runbooks.steps``), plus a straggler that saves on SIGUSR1 and a crash
whose ``afterok`` dependent is re-pointed. v8ckpt: code with both, plus ``"suspect-checkpoint-needs-person"`` (incident) and ``"rollback-on-approval"`` (runbooks).
v9fast: ``"fast-first-action"`` (incident: independent reads side by side) and ``"loop-checked-by-incident"``
(runbooks), incidents only (the guard and job-record workflows did not change)::

    .venv/bin/python -m tests.workflows.record_histories incidents

``rts1`` (``RTS_TAG``) records the return-to-service workflows only (``ReturnToServiceWorkflow`` and
its ``NodeCheckWorkflow`` children: a passing check resumed in auto mode, a failing one, and a
passing one approved in observe mode); run them alone with::

    .venv/bin/python -m tests.workflows.record_histories rts

After recording, refresh the command fingerprints (``tests/workflows/test_fingerprints.py``):

    REVIVE_UPDATE_FINGERPRINTS=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/workflows/test_fingerprints.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from temporalio.client import WorkflowExecutionStatus  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from revive import search_attributes as rsa  # noqa: E402
from revive.decide.breaker import DrainGrantInput, GuardInput  # noqa: E402
from revive.decide.jobrecord import AdmitInput, JobRecordInput, ReportInput  # noqa: E402
from revive.models import Decision  # noqa: E402
from revive.policy import BreakerPolicy, RecoveryPolicy  # noqa: E402
from revive.temporal import temporal_cli_path  # noqa: E402
from tests.helpers.builders import T0, fake_cluster, incident, resume_lines, trigger_for  # noqa: E402
from worker.main import build_worker  # noqa: E402
from workflows.guard import ClusterGuardWorkflow  # noqa: E402
from workflows.incident import IncidentWorkflow  # noqa: E402
from workflows.job_record import JobRecordWorkflow  # noqa: E402

OUT = ROOT / "tests" / "histories"
TAG = "v9fast"
"""Bump when recording after a workflow change; keep older files: they must still replay."""


async def record(env, name: str, fault: str, policy: RecoveryPolicy, decide: Decision | None, resumed: bool,
                 expect_runbook: str | None = None, resume_after_requeue: int | None = None, seed=None) -> None:
    """One incident. ``resume_after_requeue``: append the requeued attempt's lines (resumed from that
    checkpoint) only once the runbook has requeued the job (the straggler log must not show a
    restart before then)."""
    tmp = Path(tempfile.mkdtemp())
    sched, cfg, log = fake_cluster(tmp, fault, resumed=resumed)
    if seed is not None:  # seed(sched, log): the job's signal handler, dependents …
        seed(sched, log)
    tq = f"rec-{uuid.uuid4().hex[:6]}"
    iid = f"fake-7-20261129T150400-a0-{name}-{TAG}"
    async with build_worker(env.client, cfg, sched, task_queue=tq):
        h = await env.client.start_workflow(IncidentWorkflow.run, incident(log, policy, iid, trigger=trigger_for(fault)),
                                            id=iid, task_queue=tq)
        if decide:
            for _ in range(200):
                try:
                    if (await h.query("status"))["state"] == "awaiting_approval":
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.05)
            await h.execute_update("decide", decide)
        if resume_after_requeue is not None:
            for _ in range(400):
                if (await sched.get_job("7")).restart_count > 0:
                    break
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"{name}: the job was never requeued")
            with log.open("a") as f:
                f.write(resume_lines(resume_after_requeue))
        res = await h.result()
        print(name, res.outcome.value, res.rule, res.reason)
        (OUT / f"{iid}.json").write_text((await h.fetch_history()).to_json())
        if res.outcome.value in ("recovered", "not_recovered"):
            child = env.client.get_workflow_handle(f"{iid}.runbook")
            desc = await child.describe()
            if expect_runbook and desc.workflow_type != expect_runbook:
                raise RuntimeError(f"{name}: ran {desc.workflow_type}, expected {expect_runbook}")
            (OUT / f"{iid}.runbook.json").write_text((await child.fetch_history()).to_json())
        elif expect_runbook:
            raise RuntimeError(f"{name}: closed {res.outcome.value} ({res.rule}) without running {expect_runbook}")


def _saves_on_usr1(sched, log) -> None:
    """The straggler job traps USR1 and saves at iteration 41."""
    def handler(sig: str, scope: str) -> None:
        with log.open("a") as f:
            f.write(f"{T0.isoformat()} [rank 0 host node1] saved checkpoint at iteration 41\n")
    sched.on_signal["7"] = handler


def _failed_dependent(sched, log) -> None:
    """Job 8 waits afterok on job 7, which failed: Slurm marked the dependency failed."""
    from revive.models import JobRecord

    sched.add_job(JobRecord(job_id="8", name="eval", user="root", state="PENDING", reason="DependencyNeverSatisfied",
                            dependency="afterok:7(failed)"))


def _drain(cluster: str, incident_id: str, node: str, approved_by: str | None = None) -> DrainGrantInput:
    return DrainGrantInput(incident_id=incident_id, cluster=cluster, partition="debug", nodes=[node], partition_size=4,
                           policy=BreakerPolicy(max_fraction=0.25, max_nodes=10), now=T0, approved_by=approved_by)


async def record_guard(env) -> None:
    """The guard twice: a run fetched while still running (granted, refused by the breaker, then
    approved over it), and a run closed by continue-as-new after two requests."""
    cluster = "fake"
    tq = f"rec-{uuid.uuid4().hex[:6]}"
    async with Worker(env.client, task_queue=tq, workflows=[ClusterGuardWorkflow]):
        wid = f"revive-guard-{cluster}-running-{TAG}"
        h = await env.client.start_workflow(ClusterGuardWorkflow.run, GuardInput(cluster=cluster), id=wid, task_queue=tq)
        for req in (_drain(cluster, "inc-1", "node2"), _drain(cluster, "inc-2", "node3"),
                    _drain(cluster, "inc-2", "node3", approved_by="oncall-alice")):
            g = await h.execute_update(ClusterGuardWorkflow.request_drain, req)
            print("guard", req.incident_id, g.granted, g.reason)
        m = await h.execute_update("set_mode", {"mode": "auto", "partition": "debug", "who": "oncall-alice",
                                                "note": "canary", "update_id": "m-1"})
        p = await h.execute_update("apply_policy", {"policy": {"name": "canary", "mode": "observe"},
                                                    "who": "oncall-alice", "update_id": "p-1"})
        print("guard", m, p)
        (OUT / f"{wid}.json").write_text((await h.fetch_history()).to_json())
        await h.terminate("recorded")

        wid = f"revive-guard-{cluster}-continued-{TAG}"
        h = await env.client.start_workflow(ClusterGuardWorkflow.run, GuardInput(cluster=cluster, continue_as_new_after=2),
                                            id=wid, task_queue=tq)
        first = env.client.get_workflow_handle(wid, run_id=h.result_run_id)
        for req in (_drain(cluster, "inc-1", "node2"), _drain(cluster, "inc-2", "node3")):
            await h.execute_update(ClusterGuardWorkflow.request_drain, req)
        for _ in range(200):
            if (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("guard did not continue as new")
        print("guard continued as new")
        (OUT / f"{wid}.json").write_text((await first.fetch_history()).to_json())
        await env.client.get_workflow_handle(wid).terminate("recorded")


def _admit(iid: str, attempt: int) -> AdmitInput:
    return AdmitInput(cluster="fake", job_id="7", incident_id=iid, attempt=attempt, family="gpu",
                      category="gpu_hardware", root_signature="xid79", checkpoint_iteration=10 * (attempt + 1),
                      job_submit_time=T0, now=T0)


def _report(iid: str) -> ReportInput:
    return ReportInput(cluster="fake", job_id="7", incident_id=iid, outcome="recovered", executed="drain_and_requeue",
                       closed_at=T0, culprit_nodes=["node2"], rule="runbook:gpu_hardware")


async def record_job_record(env) -> None:
    """The per-job record twice: a run fetched while running (two incidents admitted, one reported),
    and a run closed by continue-as-new (a low event threshold)."""
    tq = f"rec-{uuid.uuid4().hex[:6]}"
    async with Worker(env.client, task_queue=tq, workflows=[JobRecordWorkflow]):
        wid = f"revive-job-fake-7-running-{TAG}"
        h = await env.client.start_workflow(JobRecordWorkflow.run, JobRecordInput(cluster="fake", job_id="7"),
                                            id=wid, task_queue=tq)
        for req in (_admit("inc-a0", 0), _report("inc-a0"), _admit("inc-a1", 1)):
            name = "report" if isinstance(req, ReportInput) else "admit"
            print("record", name, await h.execute_update(name, req))
        (OUT / f"{wid}.json").write_text((await h.fetch_history()).to_json())
        await h.terminate("recorded")

        wid = f"revive-job-fake-7-continued-{TAG}"
        h = await env.client.start_workflow(
            JobRecordWorkflow.run, JobRecordInput(cluster="fake", job_id="7", continue_as_new_after_events=20),
            id=wid, task_queue=tq)
        first = env.client.get_workflow_handle(wid, run_id=h.result_run_id)
        for i in range(6):
            await h.execute_update("admit", _admit(f"inc-a{i}", i))
            if (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                break
        for _ in range(200):
            if (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("job record did not continue as new")
        print("record continued as new")
        (OUT / f"{wid}.json").write_text((await first.fetch_history()).to_json())
        await env.client.get_workflow_handle(wid).terminate("recorded")


RTS_TAG = "rts1"
"""Tag of the return-to-service recordings (bump after a change to those workflows)."""


async def record_rts(env) -> None:
    """ReturnToServiceWorkflow + NodeCheckWorkflow over a FakeScheduler whose node2 Revive drained
    for an Xid (``revive:<incident> gpu_hardware``) and node3 a person drained."""
    from revive.decide.rts import RtsInput
    from revive.models import NodeRecord
    from workflows.return_to_service import ReturnToServiceWorkflow

    for name, mode, command, decide in (("auto-resumed", "auto", "true", None),
                                        ("auto-check-failed", "auto", "false", None),
                                        ("observe-approved", "observe", "true",
                                         Decision(decision="approve", approver="oncall-alice"))):
        tmp = Path(tempfile.mkdtemp())
        sched, cfg, _log = fake_cluster(tmp)
        sched.add_node(NodeRecord(name="node2", state="IDLE+DRAIN", reason="revive:fake-7-20261129T150400-a0-gpu gpu_hardware",
                                  partitions=["debug"]))
        sched.add_node(NodeRecord(name="node3", state="IDLE+DRAIN", reason="cable swap", partitions=["debug"]))
        sched.node_outputs[("node2", "false")] = (1, "GPU 0: 12 uncorrectable ECC errors")
        pol = RecoveryPolicy(mode=mode, return_to_service={"enabled": True, "command": [command]})
        tq = f"rec-{uuid.uuid4().hex[:6]}"
        wid = f"revive-rts-fake-{name}-{RTS_TAG}"
        async with build_worker(env.client, cfg, sched, task_queue=tq):
            h = await env.client.start_workflow(ReturnToServiceWorkflow.run, RtsInput(cluster="fake", policy=pol, task_queue=tq),
                                                id=wid, task_queue=tq)
            child = env.client.get_workflow_handle(f"revive-rts-fake-node-node2@{tq}")
            if decide:
                for _ in range(200):
                    try:
                        if (await child.query("status"))["state"] == "awaiting_approval":
                            break
                    except Exception:
                        pass
                    await asyncio.sleep(0.05)
                await child.execute_update("decide", decide)
            res = await h.result()
            print("rts", name, [(r.node, r.outcome.value) for r in res.checked])
            (OUT / f"{wid}.json").write_text((await h.fetch_history()).to_json())
            (OUT / f"{wid}.node2.json").write_text((await child.fetch_history()).to_json())


async def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_local(data_converter=pydantic_data_converter,
                                                dev_server_existing_path=temporal_cli_path(),
                                                search_attributes=rsa.ALL)
    try:
        if sys.argv[1:] == ["rts"]:
            await record_rts(env)
            return
        fast = {"timeout": 5, "poll_interval": 0.2}
        await record(env, "gpu-auto-recovered", "xid79", RecoveryPolicy(mode="auto", verify=fast), None, True)
        await record(env, "gpu-observe-approved", "xid79", RecoveryPolicy(verify=fast),
                     Decision(decision="approve", approver="oncall-alice", note="go"), True)
        await record(env, "gpu-observe-rejected", "xid79", RecoveryPolicy(),
                     Decision(decision="reject", approver="oncall-bob"), False)
        await record(env, "app-stopped", "app", RecoveryPolicy(mode="auto"), None, False)
        auto = RecoveryPolicy(mode="auto", verify=fast)
        await record(env, "crash-restarted", "segfault", auto, None, True, expect_runbook="RestartInPlaceRunbook")
        await record(env, "hang-restarted", "hang", auto, None, True, expect_runbook="HangRunbook")
        await record(env, "straggler-excluded", "straggler", auto, None, False, expect_runbook="StragglerRunbook",
                     resume_after_requeue=40)
        await record(env, "node-fail-excluded", "node_fail", auto, None, True, expect_runbook="RequeueExcludeRunbook")
        await record(env, "straggler-saved-on-usr1", "straggler",
                     RecoveryPolicy(mode="auto", verify=fast, save_before_requeue={"signal": "USR1", "timeout": 10}),
                     None, False, expect_runbook="StragglerRunbook", resume_after_requeue=41, seed=_saves_on_usr1)
        await record(env, "crash-dependent-rewait", "segfault", auto, None, True,
                     expect_runbook="RestartInPlaceRunbook", seed=_failed_dependent)
        if sys.argv[1:] == ["incidents"]:  # only the incident workflows and their runbooks changed
            return
        await record_guard(env)
        await record_job_record(env)


        await record_rts(env)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
