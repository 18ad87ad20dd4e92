"""Opt-in tracing: with REVIVE_TRACE_FILE set, an incident's workflow and activities become spans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import asyncio, os, sys, uuid
sys.path.insert(0, os.environ["ROOT"])
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from revive.config import TemporalConfig
from revive.policy import RecoveryPolicy
from revive.temporal import connect, test_server_path
from revive import search_attributes as rsa
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from tests.helpers.builders import fake_cluster, incident
from tests.workflows.test_incident import no_history
from worker.main import build_worker
from workflows.incident import IncidentWorkflow
from pathlib import Path
import tempfile

async def main():
    env = await WorkflowEnvironment.start_time_skipping(data_converter=pydantic_data_converter,
                                                        test_server_existing_path=test_server_path())
    await env.client.operator_service.add_search_attributes(AddSearchAttributesRequest(
        namespace="default", search_attributes={k.name: IndexedValueType.ValueType(int(k.indexed_value_type)) for k in rsa.ALL}))
    client = await connect(TemporalConfig(address=env.client.service_client.config.target_host))
    tmp = Path(tempfile.mkdtemp())
    sched, cfg, log = fake_cluster(tmp, "app")
    tq = f"tq-{uuid.uuid4()}"
    async with build_worker(client, cfg, sched, task_queue=tq, replace=[no_history]):
        r = await client.execute_workflow(IncidentWorkflow.run, incident(log, RecoveryPolicy(mode="auto"), "tr-1"),
                                          id="tr-1", task_queue=tq)
    print(r.outcome.value)
    await env.shutdown()

asyncio.run(main())
'''


def test_trace_file_gets_incident_spans(tmp_path):
    spans = tmp_path / "spans.jsonl"
    env = {"REVIVE_TRACE_FILE": str(spans), "ROOT": str(ROOT), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "stopped" in r.stdout, r.stderr[-3000:]
    names = {json.loads(x)["name"] for x in spans.read_text().splitlines() if x.strip()}
    assert "StartWorkflow:IncidentWorkflow" in names, names
    assert any(n.startswith("RunActivity:gather_evidence") for n in names), names
