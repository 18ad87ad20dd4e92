"""Record incident histories for the replay tests (run by hand, not collected by pytest).

    .venv/bin/python -m tests.workflows.record_histories

Runs three incidents on an in-memory dev server with the production worker over a FakeScheduler
and writes each workflow's history (incident + runbook child) to ``tests/histories/*.json``.
Recordings are kept per ``TAG``: v1 predates ``workflow.patched("save-job-spec")``, v2 has it, v3 also has
``workflow.patched("external-attribution-in-background")``, v4 also ``workflow.patched("culprit-search-attribute")``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from revive import search_attributes as rsa  # noqa: E402
from revive.models import Decision  # noqa: E402
from revive.policy import RecoveryPolicy  # noqa: E402
from revive.temporal import temporal_cli_path  # noqa: E402
from tests.helpers.builders import fake_cluster, incident  # noqa: E402
from worker.main import build_worker  # noqa: E402
from workflows.incident import IncidentWorkflow  # noqa: E402

OUT = ROOT / "tests" / "histories"
TAG = "v4"
"""Bump when recording after a workflow change; keep older files: they must still replay."""


async def record(env, name: str, fault: str, policy: RecoveryPolicy, decide: Decision | None, resumed: bool) -> None:
    tmp = Path(tempfile.mkdtemp())
    sched, cfg, log = fake_cluster(tmp, fault, resumed=resumed)
    tq = f"rec-{uuid.uuid4().hex[:6]}"
    iid = f"fake-7-20261129T150400-a0-{name}-{TAG}"
    async with build_worker(env.client, cfg, sched, task_queue=tq):
        h = await env.client.start_workflow(IncidentWorkflow.run, incident(log, policy, iid), id=iid, task_queue=tq)
        if decide:
            for _ in range(200):
                try:
                    if (await h.query("status"))["state"] == "awaiting_approval":
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.05)
            await h.execute_update("decide", decide)
        res = await h.result()
        print(name, res.outcome.value, res.reason)
        (OUT / f"{iid}.json").write_text((await h.fetch_history()).to_json())
        if res.outcome.value in ("recovered", "not_recovered"):
            child = env.client.get_workflow_handle(f"{iid}.runbook")
            (OUT / f"{iid}.runbook.json").write_text((await child.fetch_history()).to_json())


async def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_local(data_converter=pydantic_data_converter,
                                                dev_server_existing_path=temporal_cli_path(),
                                                search_attributes=rsa.ALL)
    try:
        fast = {"timeout": 5, "poll_interval": 0.2}
        await record(env, "gpu-auto-recovered", "xid79", RecoveryPolicy(mode="auto", verify=fast), None, True)
        await record(env, "gpu-observe-approved", "xid79", RecoveryPolicy(verify=fast),
                     Decision(decision="approve", approver="oncall-alice", note="go"), True)
        await record(env, "gpu-observe-rejected", "xid79", RecoveryPolicy(),
                     Decision(decision="reject", approver="oncall-bob"), False)
        await record(env, "app-stopped", "app", RecoveryPolicy(mode="auto"), None, False)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
