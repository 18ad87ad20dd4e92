"""The optional external attribution service: its verdict is recorded beside Revive's in the audit
record and never changes the plan — with a real HTTP service on 127.0.0.1, slow and dead ones too."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from revive.decide.budgets import JobIncidentHistory
from revive.models import IncidentOutcome
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster, incident
from tests.workflows.test_incident import no_history
from worker.main import build_worker
from workflows.incident import IncidentWorkflow

pytestmark = pytest.mark.temporal


def serve(delay_s: float, verdict: dict) -> ThreadingHTTPServer:
    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(delay_s)
            body = json.dumps(verdict).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.mark.parametrize("delay_s", [0.0, 2.5])
async def test_external_verdict_is_recorded_and_never_decides(ts_env, tmp_path, delay_s):
    verdict = {"category": "nvlink", "domain": "hardware", "culprit_nodes": ["node1"], "action": "escalate",
               "confidence": 0.9, "explanation": "external says nvlink on node1"}
    srv = serve(delay_s, verdict)
    try:
        sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
        cfg = cfg.model_validate({**cfg.model_dump(), "attribution": {"url": f"http://127.0.0.1:{srv.server_port}/attribute",
                                                     "fast_timeout_s": 1.0, "slow_timeout_s": 5.0}})
        pol = RecoveryPolicy(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})
        tq = f"tq-{uuid.uuid4()}"
        async with build_worker(ts_env.client, cfg, sched, task_queue=tq, replace=[no_history]):
            res = await ts_env.client.execute_workflow(IncidentWorkflow.run, incident(log, pol, f"ext-{uuid.uuid4().hex[:6]}"),
                                                       id=f"ext-{uuid.uuid4()}", task_queue=tq)
    finally:
        srv.shutdown()
    assert res.outcome == IncidentOutcome.recovered and res.culprit_nodes == ["node2"]
    assert [c[0] for c in sched.mutating_calls] == ["drain_nodes", "requeue"]  # Revive's plan, not the service's
    rec = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[0])
    assert rec["external_attribution"]["category"] == "nvlink"
    assert rec["attribution"]["category"] == "gpu_hardware"


async def test_dead_external_service_changes_nothing(ts_env, tmp_path):
    sched, cfg, log = fake_cluster(tmp_path, "xid79", resumed=True)
    cfg = cfg.model_validate({**cfg.model_dump(), "attribution": {"url": "http://127.0.0.1:1/attribute", "fast_timeout_s": 0.5,
                                                 "slow_timeout_s": 0.5}})
    pol = RecoveryPolicy(mode="auto", verify={"timeout": 5, "poll_interval": 0.2})
    tq = f"tq-{uuid.uuid4()}"
    async with build_worker(ts_env.client, cfg, sched, task_queue=tq, replace=[no_history]):
        res = await ts_env.client.execute_workflow(IncidentWorkflow.run, incident(log, pol, "ext-dead"),
                                                   id=f"ext-{uuid.uuid4()}", task_queue=tq)
    assert res.outcome == IncidentOutcome.recovered
    rec = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[0])
    assert rec["external_attribution"] is None
    assert JobIncidentHistory  # imported for the fake activity's signature
