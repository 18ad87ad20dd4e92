"""The Revive worker: registers every workflow and activity in one place (tests reuse it)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

from temporalio.client import Client
from temporalio.worker import Worker

from activities.attribution import AttributionActivities
from activities.audit import AuditActivities
from activities.checkpoint import CheckpointActivities
from activities.evidence import EvidenceActivities
from activities.guard import GuardActivities, hardware_history
from activities.health import HealthActivities
from activities.jobspec import JobSpecActivities
from activities.notify import notify
from activities.remediation import RemediationActivities
from activities.rollback import RollbackActivities
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
from workflows.return_to_service import NodeCheckWorkflow, ReturnToServiceWorkflow

WORKFLOWS = [IncidentWorkflow, ClusterGuardWorkflow, JobRecordWorkflow, *RUNBOOKS.values(), ReturnToServiceWorkflow,
             NodeCheckWorkflow]


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
    async def node_history(cluster: str, nodes: list[str], since: datetime, incident_id: str) -> dict:
        return await hardware_history(client, cluster, nodes, since, exclude_incident_id=incident_id)

    ev = EvidenceActivities(scheduler, site.kernel, state / "evidence", cfg.ip_to_node, kernel_log_utc_offset_s=tz,
                            logs=site.logs, gpu=cfg.gpu, node_history=node_history)
    at = AttributionActivities(external)
    py_spy = "py-spy"
    if cfg.local_testbed:  # the nodes are this machine: use the py-spy installed beside Revive
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    rm = RemediationActivities(scheduler, arm_hold_release=arm, jobspec_dir=state / "jobspec", py_spy=py_spy)
    js = JobSpecActivities(scheduler, state / "jobspec")
    vf = VerificationActivities(scheduler, logs=site.logs)
    ck = CheckpointActivities(scheduler, logs=site.logs)
    rb = RollbackActivities(scheduler, site.runner, rollback_dir(cfg))
    au = AuditActivities(Path(cfg.audit_file))
    gd = GuardActivities(client, task_queue)
    ha = HealthActivities(scheduler, client, task_queue, cfg.audit_file,
                          job_output_dir=state / "rts" if cfg.local_testbed else None)
    return [
        js.save_job_spec, ev.gather_evidence, at.attribute, at.attribute_external,
        rm.check_identity, rm.drain_nodes, rm.requeue_job, rm.diagnose_hang, rm.read_mode,
        rm.signal_job, rm.rewait_dependents, ck.plan_save, ck.wait_for_save, ck.checkpoint_loop, ck.job_dependents,
        rb.rollback_checkpoint,
        vf.verify_progress, vf.wait_for_checkpoint, au.append_audit, gd.request_drain_grant, gd.incident_history,
        gd.admit_incident, gd.report_job_outcome, gd.read_guard_mode, gd.read_guard_policy, notify,
        ha.rts_candidates, ha.rts_guard_drains, ha.run_health_check, ha.resume_checked_node, ha.redrain_checked_node,
        ha.record_node_check,
    ]


def rollback_dir(cfg: ClusterConfig) -> Path:
    """Where ``rollback_checkpoint`` records what it changed (``revive checkpoint undo`` reads it)."""
    return Path(cfg.state_dir) / "rollback"


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


async def run_worker(cfg: ClusterConfig, scheduler: Scheduler | None = None, policy_path: str | None = None) -> None:
    """Run until SIGINT/SIGTERM. With ``policy_path`` whose ``return_to_service.enabled`` is true,
    first create or update the cluster's return-to-service Schedule (``worker.rts_schedule``)."""
    from revive.temporal import connect

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = await connect(cfg.temporal, identity="revive-worker")
    if policy_path:
        from revive.policy import load_policy
        from worker.rts_schedule import ensure_rts_schedule

        pol = load_policy(policy_path)
        if pol.return_to_service.enabled:
            sid, created = await ensure_rts_schedule(client, cfg.name, pol, policy_path, cfg.temporal.task_queue)
            logging.info("return-to-service schedule %s %s (every %s)", sid, "created" if created else "updated",
                         pol.return_to_service.interval)
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
