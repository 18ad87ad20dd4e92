"""The Revive worker: registers every workflow and activity in one place (tests reuse it)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import cast

from temporalio.client import Client
from temporalio.worker import Worker

from activities.attribution import AttributionActivities
from activities.audit import AuditActivities
from activities.checkpoint import CheckpointActivities
from activities.evidence import EvidenceActivities
from activities.guard import GuardActivities
from activities.jobspec import JobSpecActivities
from activities.notify import notify
from activities.remediation import RemediationActivities
from activities.verification import VerificationActivities
from revive import metrics as rm
from revive.config import ClusterConfig
from revive.failopen import arm_hold_release
from revive.scheduler.base import Scheduler
from revive.site import Site, build_site
from runbooks import RUNBOOKS
from workflows.guard import ClusterGuardWorkflow
from workflows.incident import IncidentWorkflow
from workflows.job_record import JobRecordWorkflow

WORKFLOWS = [IncidentWorkflow, ClusterGuardWorkflow, JobRecordWorkflow, *RUNBOOKS.values()]


def build_activities(client: Client, cfg: ClusterConfig, site: Site, task_queue: str) -> list:
    """Every activity callable, with its dependencies injected (``site``: how the cluster is reached)."""
    scheduler = site.scheduler
    state = Path(cfg.state_dir)
    external = None
    if cfg.attribution is not None:
        from revive.attribution.external import ExternalAttributionClient

        external = ExternalAttributionClient(cfg.attribution.url, fast_timeout_s=cfg.attribution.fast_timeout_s,
                                             slow_timeout_s=cfg.attribution.slow_timeout_s,
                                             token=cfg.attribution.token())
    async def arm(job_id: str, after_s: float) -> int:
        # on the controller side: this machine, or the login node in SSH mode (fail-open holds)
        return await arm_hold_release(site.runner, job_id, after_s, cfg.slurm_conf)

    # syslog stamps carry no zone: the testbed's kern.log is written on this host, in its local time
    tz = time.localtime().tm_gmtoff if cfg.local_testbed else None
    ev = EvidenceActivities(scheduler, site.kernel, state / "evidence", cfg.ip_to_node, kernel_log_utc_offset_s=tz,
                            logs=site.logs, gpu=cfg.gpu)
    at = AttributionActivities(external)
    py_spy = "py-spy"
    if cfg.local_testbed:  # the nodes are this machine: use the py-spy installed beside Revive
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    rm = RemediationActivities(scheduler, arm_hold_release=arm, jobspec_dir=state / "jobspec", py_spy=py_spy)
    js = JobSpecActivities(scheduler, state / "jobspec")
    vf = VerificationActivities(scheduler, logs=site.logs)
    ck = CheckpointActivities(scheduler, logs=site.logs)
    au = AuditActivities(Path(cfg.audit_file))
    gd = GuardActivities(client, task_queue)
    return [
        js.save_job_spec, ev.gather_evidence, at.attribute, at.attribute_external,
        rm.check_identity, rm.drain_nodes, rm.requeue_job, rm.diagnose_hang, rm.read_mode,
        rm.signal_job, rm.rewait_dependents, ck.plan_save, ck.wait_for_save, ck.checkpoint_loop, ck.job_dependents,
        vf.verify_progress, vf.wait_for_checkpoint, au.append_audit, gd.request_drain_grant, gd.incident_history,
        gd.admit_incident, gd.report_job_outcome, gd.read_guard_mode, gd.read_guard_policy, notify,
    ]


def activity_name(fn: object) -> str:
    return fn.__temporal_activity_definition.name  # type: ignore[attr-defined]


def build_worker(client: Client, cfg: ClusterConfig, scheduler: Scheduler, task_queue: str | None = None,
                 replace: list | None = None) -> Worker:
    """The worker with Revive's workflows and activities (the same configuration in production and
    tests). ``replace``: activities that stand in for the ones with the same name (tests only)."""
    tq = task_queue or cfg.temporal.task_queue
    subs = {activity_name(f): f for f in replace or []}
    acts = [subs.pop(activity_name(f), f) for f in build_activities(client, cfg, build_site(cfg, scheduler), tq)]
    return Worker(client, task_queue=tq, workflows=WORKFLOWS, activities=acts + list(subs.values()),
                  interceptors=[rm.metrics_interceptor()], graceful_shutdown_timeout=timedelta(seconds=5))


async def run_worker(cfg: ClusterConfig, scheduler: Scheduler | None = None) -> None:
    """Run until SIGINT/SIGTERM."""
    from revive.temporal import connect

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = await connect(cfg.temporal, identity="revive-worker")
    # every scheduler call timed as revive_scheduler_call_seconds{call}
    sched = scheduler or cast(Scheduler, rm.TimedScheduler(build_site(cfg).scheduler))
    worker = build_worker(client, cfg, sched)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    async with worker:
        logging.info("revive worker on task queue %s at %s", cfg.temporal.task_queue, cfg.temporal.address)
        await stop.wait()
