"""End-to-end harness: the production worker and the monitor against the real local cluster and a
Temporal dev server, isolated from other tests that share the cluster.

Isolation: its own cluster name (own breaker and job history), no partition allowlist, its own
``--comment`` opt-in key (``tag``), its own state dir, audit file and task queue. Mutating
scheduler calls are recorded (``sched.mutating_calls`` and ``<tmp>/calls.jsonl``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from revive.models import IncidentResult
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import RecordingScheduler
from revive.site import build_site
from worker.main import build_worker
from worker.monitor import Monitor


async def wait_for(pred, timeout: float, what: str, step: float = 0.3):
    """Poll ``pred()`` until it returns something truthy; AssertionError after ``timeout`` s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        await asyncio.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Harness:
    def __init__(self, cfg, client, policy: RecoveryPolicy, tmp: Path, tag: str | None = None) -> None:
        self.tag = tag or f"t{uuid.uuid4().hex[:6]}"
        self.cfg = cfg.model_copy(update={"name": self.tag, "partitions": [], "state_dir": str(tmp / "state"),
                                          "audit_file": str(tmp / "audit.jsonl")})
        self.policy = policy.model_copy(update={"opt_in": policy.opt_in.model_copy(update={"comment_key": self.tag})})
        self.client = client
        self.tmp = tmp
        site = build_site(self.cfg)  # local files, or the login node over SSH; reads from CLI or slurmrestd
        self.sched = RecordingScheduler(site.scheduler, record_file=tmp / "calls.jsonl")
        self.tq = f"e2e-{self.tag}"
        self.monitor = Monitor(self.cfg, self.policy, client, site.scheduler, task_queue=self.tq,
                               logs=site.logs)
        self.stop = asyncio.Event()

    @property
    def comment(self) -> str:
        """The ``--comment`` that opts a job in for this harness's monitor."""
        return json.dumps({self.tag: {}}, separators=(",", ":"))

    async def __aenter__(self):
        self.worker = build_worker(self.client, self.cfg, self.sched, task_queue=self.tq)
        self.wtask = asyncio.create_task(self.worker.run())
        self.mtask = asyncio.create_task(self.monitor.run(self.stop))
        return self

    async def __aexit__(self, *exc) -> None:
        self.stop.set()
        await self.mtask
        await self.worker.shutdown()

    async def incident(self, job: str, timeout: float = 180) -> str:
        return await wait_for(lambda: next((i for i in self.monitor.started if f"-{job}-" in i), None),
                              timeout, f"an incident for job {job}")

    async def status(self, iid: str) -> dict:
        return await self.client.get_workflow_handle(iid).query("status")

    async def wait_state(self, iid: str, state: str, timeout: float = 60) -> None:
        async def st() -> str | None:
            try:
                return (await self.status(iid))["state"]
            except Exception:
                return None

        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if await st() == state:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"{iid} never reached {state}")

    async def result(self, iid: str, timeout: float = 400) -> IncidentResult:
        h = self.client.get_workflow_handle(iid, result_type=IncidentResult)
        return await asyncio.wait_for(h.result(), timeout)
