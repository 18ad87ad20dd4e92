"""A monitor that survives restarts (issue #12 item 4, issue #9 item 2), over the fake scheduler and
a fake Temporal client that keeps Temporal's id rules (a running or closed id cannot start again:
``WorkflowIDConflictPolicy.FAIL`` + ``REJECT_DUPLICATE``) and answers visibility queries.

Each test replays an incident the chaos run found: the restarted monitor filed a requeued job's
next crash as attempt 0, missed the hang of a requeued job, opened two incidents for one attempt,
and sent a resubmitted job's fault to the old job's closed incident."""

from __future__ import annotations

import asyncio
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import WorkflowAlreadyStartedError

import revive.search_attributes as sa
from revive.config import ClusterConfig
from revive.models import IncidentOutcome, IncidentResult, JobRecord
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import FakeScheduler
from tests.helpers.builders import progress
from worker.detect import AttemptRule, AttemptTracker, find_attempt_start, restore_clock
from worker.monitor import CATCH_UP_MAX_S, CATCH_UP_S, Monitor, catch_up_since, parse_incident_id

GPU_FAULT = "[rank1]: RuntimeError: CUDA error: unknown error"
SEGV = "[rank 1 host node2] Segmentation fault (core dumped)"
CRASH = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29500"


class _Wf:
    """What ``Client.list_workflows`` yields (the fields the monitor reads)."""

    def __init__(self, id: str, job: str, memo: dict, start: datetime) -> None:
        self.id, self.memo, self.start_time = id, memo, start
        self.close_time: datetime | None = None
        self.typed_search_attributes = {sa.JOB_ID: job}

    async def memo_value(self, key: str, default: Any = None) -> Any:
        return self.memo.get(key, default)


class FakeTemporal:
    """Incident workflows by id, with Temporal's start rules, triggers (add_trigger Updates), and a visibility query
    (``ReviveCluster``, ``ReviveJobId``, ``ExecutionStatus='Running'``)."""

    def __init__(self) -> None:
        self.wfs: dict[str, _Wf] = {}
        self.inputs: dict[str, Any] = {}
        self.signals: list[tuple[str, str]] = []
        self.refused: list[str] = []

    async def start_workflow(self, fn, inp, id: str, search_attributes=None, memo=None, **kw):
        if id in self.wfs:
            self.refused.append(id)
            raise WorkflowAlreadyStartedError(id, "IncidentWorkflow")
        job = next(p.value for p in search_attributes if p.key.name == sa.JOB_ID.name)
        self.wfs[id] = _Wf(id, job, memo or {}, datetime.now(UTC))
        self.inputs[id] = inp

        class H:
            pass

        h = H()
        h.id = id  # type: ignore[attr-defined]
        return h

    def get_workflow_handle(self, wid: str):
        outer = self

        class H:
            async def signal(self, name: str, arg: str) -> None:
                wf = outer.wfs.get(wid)
                if wf is None or wf.close_time is not None:
                    raise RuntimeError("workflow execution already completed")
                outer.signals.append((wid, arg))

            async def execute_update(self, name: str, arg: str, result_type: object = None) -> int:
                await self.signal(name, arg)  # the monitor sends add_trigger as an Update
                return len([s for s in outer.signals if s[0] == wid])

        return H()

    def close(self, wid: str, at: datetime | None = None) -> None:
        self.wfs[wid].close_time = at or datetime.now(UTC)

    async def list_workflows(self, query: str, limit: int | None = None):
        job = re.search(r"ReviveJobId='([^']*)'", query)
        running = "ExecutionStatus='Running'" in query
        for wf in list(self.wfs.values()):
            if job and wf.typed_search_attributes[sa.JOB_ID] != job.group(1):
                continue
            if running and wf.close_time is not None:
                continue
            yield wf


def stamp(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y%m%dT%H%M%S")


def lines(*xs: str) -> str:
    return "".join(x + "\n" for x in xs)


def attempt_lines(n: int, t: datetime, first_it: int, last_it: int, host: str = "node1") -> str:
    out = [f"=== attempt restart={n} {t.isoformat()}"]
    if n:
        out.append(f"{t.isoformat()} [rank 0 host {host}] resumed from checkpoint at iteration {first_it - 1}")
    for it in range(first_it, last_it + 1):
        out.append(progress(it, 0, host, t + timedelta(seconds=it - first_it + 1)))
        out.append(progress(it, 1, "node2", t + timedelta(seconds=it - first_it + 1)))
    return lines(*out)


def setup(tmp: Path, hang_floor: int = 15) -> tuple[ClusterConfig, RecoveryPolicy, Path]:
    cfg = ClusterConfig(name="c", partitions=["gpu"], audit_file=str(tmp / "audit.jsonl"), state_dir=str(tmp / "state"))
    pol = RecoveryPolicy(hang={"k": 5, "floor": hang_floor})
    return cfg, pol, tmp / "train-7.out"


def job(log: Path, **kw) -> JobRecord:
    base = dict(job_id="7", name="train", user="alice", state="RUNNING", partition="gpu", nodes=["node1", "node2"],
                std_out=str(log))
    base.update(kw)
    return JobRecord(**base)


def requeue(sched: FakeScheduler, t_requeue: datetime, t_start: datetime) -> None:
    """What Slurm 22.05 shows after a requeue and the new attempt's start: Restarts+1, SubmitTime
    reset to the requeue, StartTime of the new attempt."""
    j = sched.jobs["7"]
    sched.jobs["7"] = j.model_copy(update={"restart_count": j.restart_count + 1, "submit_time": t_requeue,
                                           "start_time": t_start, "state": "RUNNING"})


async def test_restarted_monitor_files_the_requeued_jobs_next_crash_as_attempt_1(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)  # Slurm prints whole seconds
    s0, t1 = now - timedelta(minutes=10), now - timedelta(seconds=22)  # attempt 1 printed until 2 s ago
    log.write_text(attempt_lines(0, s0, 1, 12) + lines(GPU_FAULT))
    sched = FakeScheduler(cluster="c", jobs=[job(log, submit_time=s0, start_time=s0)])
    temporal = FakeTemporal()
    first = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await first.poll_once()
    a0 = f"c-7-{stamp(s0)}-a0"
    assert list(temporal.wfs) == [a0]
    # Revive requeues; the job resumes as attempt 1 (Slurm resets SubmitTime); the incident closes
    requeue(sched, t1 - timedelta(seconds=5), t1)
    with log.open("a") as f:
        f.write(attempt_lines(1, t1, 11, 30))
    await first.poll_once()
    first.follower.save()
    temporal.close(a0)
    # the monitor is SIGKILLed and a new one starts (same state dir: the offsets cache is past the marker)
    second = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await second.poll_once()
    w = second.watches["7"]
    assert (w.attempt, w.start_rule, w.first_submit) == (1, AttemptRule.marker, s0)
    assert list(temporal.wfs) == [a0] and temporal.refused == []  # the old attempt's fault line opened nothing
    with log.open("a") as f:
        f.write(lines(CRASH))
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"state": "FAILED", "exit_code": "1:0"})
    await second.poll_once()
    a1 = f"c-7-{stamp(s0)}-a1"
    assert list(temporal.wfs) == [a0, a1]
    inp = temporal.inputs[a1]
    assert inp.attempt == 1 and inp.job.restart_count == 1
    assert inp.job_submit_time == s0  # budgets count from the first submit, not the requeue
    assert inp.checkpoint_iteration == 10  # resumed checkpoint of attempt 1
    assert "iteration 30/" in inp.last_progress["rank 0"]  # attempt 1's progress, not attempt 0's


async def test_restart_without_the_offsets_cache_rereads_only_the_current_attempt(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)  # Slurm prints whole seconds
    s0, t1 = now - timedelta(minutes=10), now - timedelta(seconds=7)
    log.write_text(attempt_lines(0, s0, 1, 12) + lines(GPU_FAULT) + attempt_lines(1, t1, 11, 15))
    temporal = FakeTemporal()
    a0 = f"c-7-{stamp(s0)}-a0"
    temporal.wfs[a0] = _Wf(a0, "7", {"revive_job": {"name": "train", "user": "alice", "attempt": 0,
                                                     "first_submit": s0.isoformat()}}, s0 + timedelta(minutes=1))
    temporal.close(a0, t1 + timedelta(seconds=30))  # verify closed it after the requeue
    sched = FakeScheduler(cluster="c", jobs=[job(log, restart_count=1, submit_time=t1 - timedelta(seconds=5),
                                                 start_time=t1)])
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()
    w = m.watches["7"]
    assert w.first_submit == s0 and w.opened == {0: a0} and w.tracker.checkpoint == 10
    assert temporal.refused == [] and temporal.signals == []  # attempt 0's fault line is not re-sent anywhere


async def test_a_hang_that_began_before_the_restart_is_detected_from_the_last_progress_stamp(tmp_path):
    cfg, pol, log = setup(tmp_path, hang_floor=15)
    now = datetime.now(UTC).replace(microsecond=0)  # Slurm prints whole seconds
    t1 = now - timedelta(seconds=80)
    # attempt 1 ran 20 iterations (1 s apart) and went silent ~60 s ago; the monitor starts now
    log.write_text(attempt_lines(0, now - timedelta(minutes=9), 1, 12) + attempt_lines(1, t1, 11, 30))
    sched = FakeScheduler(cluster="c", jobs=[job(log, restart_count=1, submit_time=t1, start_time=t1)])
    temporal = FakeTemporal()
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()
    (iid,) = temporal.wfs
    assert iid.endswith("-a1")
    trig = temporal.inputs[iid].trigger
    assert trig.kind.value == "no_progress" and trig.since is not None
    assert (now - trig.since).total_seconds() > 50


async def test_a_job_still_progressing_is_not_hung_after_the_restart(tmp_path):
    cfg, pol, log = setup(tmp_path, hang_floor=15)
    now = datetime.now(UTC).replace(microsecond=0)  # Slurm prints whole seconds
    t1 = now - timedelta(seconds=22)
    log.write_text(attempt_lines(1, t1, 11, 30))  # last progress line 2 s ago
    sched = FakeScheduler(cluster="c", jobs=[job(log, restart_count=1, submit_time=t1, start_time=t1)])
    temporal = FakeTemporal()
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()
    assert temporal.wfs == {}
    assert m.watches["7"].tracker.silent_for(__import__("time").monotonic()) < 10


async def test_a_fault_line_then_the_failed_state_make_one_incident_for_the_attempt(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)  # Slurm prints whole seconds
    s0 = now - timedelta(minutes=1)
    log.write_text(attempt_lines(0, s0, 1, 12) + lines(GPU_FAULT))
    sched = FakeScheduler(cluster="c", jobs=[job(log, submit_time=s0, start_time=s0)])
    temporal = FakeTemporal()
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()  # the job still runs: the fault line opens the incident (family gpu)
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"state": "FAILED", "exit_code": "1:0"})
    await m.poll_once()  # RUNNING → FAILED (family crash): a trigger for the same incident
    (iid,) = temporal.wfs
    assert iid == f"c-7-{stamp(s0)}-a0" and temporal.inputs[iid].fault_family == "gpu"
    assert [s[0] for s in temporal.signals] == [iid] and "FAILED" in temporal.signals[0][1]


async def test_two_monitors_over_one_fault_start_one_incident(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)  # Slurm prints whole seconds
    s0 = now - timedelta(seconds=13)  # progress until a second ago
    log.write_text(attempt_lines(0, s0, 1, 12))
    sched = FakeScheduler(cluster="c", jobs=[job(log, submit_time=s0, start_time=s0)])
    temporal = FakeTemporal()
    a = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    b = Monitor(cfg.model_copy(update={"state_dir": str(tmp_path / "b")}), pol, temporal, sched)  # type: ignore[arg-type]
    await a.poll_once()
    await b.poll_once()
    with log.open("a") as f:
        f.write(lines(GPU_FAULT))
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"state": "FAILED"})
    await b.poll_once()  # b sees the line first (family gpu) …
    await a.poll_once()  # … a too: the id is taken, its start becomes a trigger
    assert len(temporal.wfs) == 1 and temporal.refused == list(temporal.wfs)
    assert a.started == [] and b.started == list(temporal.wfs)


async def test_a_resubmitted_job_writing_to_the_old_log_gets_its_own_incident(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)  # Slurm prints whole seconds
    s7, s8 = now - timedelta(minutes=5), now - timedelta(seconds=5)
    log.write_text(attempt_lines(0, s7, 1, 12) + lines(GPU_FAULT))
    sched = FakeScheduler(cluster="c", jobs=[job(log, submit_time=s7, start_time=s7)])
    temporal = FakeTemporal()
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()
    a7 = f"c-7-{stamp(s7)}-a0"
    assert list(temporal.wfs) == [a7]
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"state": "FAILED"})
    await m.poll_once()
    temporal.close(a7)
    before = list(temporal.signals)  # job 7's own FAILED trigger, sent while its incident was open
    # Revive resubmits: job 8 (restart 0 again) appends to job 7's log
    sched.jobs["8"] = job(log, job_id="8", submit_time=s8, start_time=s8)
    with log.open("a") as f:
        f.write(attempt_lines(0, s8, 11, 14))
    await m.poll_once()
    assert m.watches["8"].start_rule == AttemptRule.marker
    assert list(temporal.wfs) == [a7]  # job 7's old fault line did not open an incident for job 8
    with log.open("a") as f:
        f.write(lines(SEGV))
    await m.poll_once()
    a8 = f"c-8-{stamp(s8)}-a0"
    assert list(temporal.wfs) == [a7, a8]
    assert "Segmentation fault" in (temporal.inputs[a8].trigger.text or "")
    assert temporal.signals == before and temporal.refused == []  # nothing went to job 7's closed incident


async def test_a_reused_job_id_on_a_fresh_cluster_does_not_inherit_the_old_jobs_incidents(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)  # Slurm prints whole seconds
    old = now - timedelta(days=1)
    temporal = FakeTemporal()
    old_id = f"c-7-{stamp(old)}-a0"
    temporal.wfs[old_id] = _Wf(old_id, "7", {"revive_job": {"name": "train", "user": "alice", "attempt": 0}},
                               old + timedelta(minutes=1))
    temporal.close(old_id, old + timedelta(minutes=5))  # closed long before this job 7 was requeued
    t1 = now - timedelta(seconds=5)
    log.write_text(attempt_lines(1, t1, 11, 14))
    sched = FakeScheduler(cluster="c", jobs=[job(log, restart_count=1, submit_time=t1 - timedelta(seconds=5),
                                                 start_time=t1)])
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()
    w = m.watches["7"]
    assert w.first_submit == t1 - timedelta(seconds=5) and w.opened == {}


def test_parse_incident_id_reads_both_id_forms():
    assert parse_incident_id("c-7-20261201T100000-a2", "c", "7") == ("20261201T100000", 2)
    assert parse_incident_id("c-7-20261201T100000-a0-gpu", "c", "7") == ("20261201T100000", 0)
    assert parse_incident_id("c-77-20261201T100000-a0", "c", "7") is None
    assert parse_incident_id("c-7-20261201T100000-a0-gpu-1f2e", "c", "7") is None


@pytest.mark.parametrize("append", [True, False])
def test_attempt_start_rules(append: bool):
    t0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    t1 = t0 + timedelta(minutes=5)
    a0 = attempt_lines(0, t0, 1, 5) + lines("Traceback (most recent call last):", GPU_FAULT)
    a1 = attempt_lines(1, t1, 6, 8)
    data = ((a0 if append else "") + a1).encode()
    at = find_attempt_start(data, 1, t1, whole=True)
    assert (at.rule, data[at.offset:].decode()) == (AttemptRule.marker, a1)
    # without Revive's marker: the attempt's StartTime against the lines' stamps
    bare = b"".join(x + b"\n" for x in data.splitlines() if not x.startswith(b"==="))
    at = find_attempt_start(bare, 1, t1, whole=True)
    assert at.rule == AttemptRule.start_time and bare[at.offset:].startswith(f"{t1.isoformat()} [rank 0".encode())
    assert GPU_FAULT.encode() not in bare[at.offset:]  # the old attempt's undated traceback stays behind
    # stamped lines, none as late as the start: the attempt printed nothing yet
    assert find_attempt_start(bare, 2, t1 + timedelta(hours=1), whole=True).offset == len(bare)
    # no marker, no stamps
    plain = b"step 1\nstep 2\n"
    assert find_attempt_start(plain, 0, t0, whole=True) == (0, AttemptRule.whole_log) or \
        find_attempt_start(plain, 0, t0, whole=True).rule == AttemptRule.whole_log
    assert find_attempt_start(plain, 1, t0, whole=True).rule == AttemptRule.new_lines
    assert find_attempt_start(plain, 0, t0, whole=False).offset == len(plain)
    # a resubmitted job's restart=0 marker, later than the old job's
    twice = (attempt_lines(0, t0, 1, 3) + attempt_lines(0, t1, 4, 5)).encode()
    at = find_attempt_start(twice, 0, t1, whole=True)
    assert twice[at.offset:].decode() == attempt_lines(0, t1, 4, 5)


def test_restore_clock_counts_silence_from_the_last_stamp_only_for_zoned_stamps():
    wall = datetime(2026, 12, 1, 10, 1, tzinfo=UTC)
    t = AttemptTracker(k=5, floor_s=15)
    t.feed(progress(3, 0, "n1", wall - timedelta(seconds=40)), 1000.0)
    restore_clock(t, 1000.0, wall)
    assert t.silent_for(1000.0) == pytest.approx(40, abs=0.01) and t.hung(1000.0)
    naive = AttemptTracker(k=5, floor_s=15)
    naive.feed(f"{(wall - timedelta(seconds=40)).replace(tzinfo=None).isoformat()} [rank 0 host n1] iteration 3/9", 1000.0)
    restore_clock(naive, 1000.0, wall)
    assert naive.silent_for(1000.0) == 0.0


class _ResumingScheduler(FakeScheduler):
    """A requeue starts the next attempt at once: Slurm's record (RUNNING, Restarts+1, SubmitTime
    reset, a new StartTime) and the attempt's first lines (resumed from checkpoint 10, progress)."""

    log: Path

    async def requeue(self, job_id: str, hold: bool = False) -> list[str]:
        argv = await super().requeue(job_id, hold)
        t = datetime.now(UTC).replace(microsecond=0)
        j = self.jobs[str(job_id)]
        self.jobs[str(job_id)] = j.model_copy(update={"state": "RUNNING", "start_time": t, "nodes": ["node3", "node4"]})
        with self.log.open("a") as f:
            f.write(attempt_lines(j.restart_count, t, 11, 14, host="node3"))
        return argv


@pytest.mark.temporal
async def test_two_monitors_on_one_cluster_make_one_incident_and_one_action(local_env, tmp_path):
    """Two unsharded monitors (two hosts, say) over the same fault, the production worker and the
    dev server: the incident id dedupes, so one incident runs and the job is requeued once."""
    import uuid

    from worker.main import build_worker

    name = f"two{uuid.uuid4().hex[:6]}"
    (tmp_path / "nodes" / "node2").mkdir(parents=True)
    for n in ("node1", "node2"):
        (tmp_path / "nodes" / n).mkdir(parents=True, exist_ok=True)
        (tmp_path / "nodes" / n / "kern.log").write_text("")
    cfg = ClusterConfig(name=name, partitions=["gpu"], audit_file=str(tmp_path / "audit.jsonl"),
                        state_dir=str(tmp_path / "a"),
                        kernel_log={"path_template": str(tmp_path / "nodes" / "{node}" / "kern.log")})
    pol = RecoveryPolicy(mode="auto", hang={"k": 5, "floor": 60}, verify={"timeout": 30, "poll_interval": 0.2})
    log = tmp_path / "train-7.out"
    s0 = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=13)
    log.write_text(attempt_lines(0, s0, 1, 12))
    sched = _ResumingScheduler(cluster=name, jobs=[job(log, submit_time=s0, start_time=s0, requeue=True)])
    sched.log = log
    tq = f"two-{uuid.uuid4().hex[:6]}"
    client = local_env.client
    a = Monitor(cfg, pol, client, sched, task_queue=tq)
    b = Monitor(cfg.model_copy(update={"state_dir": str(tmp_path / "b")}), pol, client, sched, task_queue=tq)
    async with build_worker(client, cfg, sched, task_queue=tq):
        await a.poll_once()
        await b.poll_once()
        with log.open("a") as f:
            f.write(lines(SEGV, "srun: error: node2: task 1: Exited with exit code 139"))
        sched.jobs["7"] = sched.jobs["7"].model_copy(update={"state": "FAILED", "exit_code": "139:0"})
        await b.poll_once()
        await a.poll_once()
        (iid,) = b.started
        assert a.started == [] and a.watches["7"].opened == {0: iid}
        res = await asyncio.wait_for(client.get_workflow_handle(iid, result_type=IncidentResult).result(), 90)
        for m in (a, b):  # both keep watching the requeued job: nothing new is opened
            await m.poll_once()
    assert res.outcome == IncidentOutcome.recovered and res.executed.value == "restart_in_place", res
    assert [c[0] for c in sched.mutating_calls] == ["requeue"]
    ids = [wf.id async for wf in client.list_workflows(f"ReviveCluster='{name}'")]
    assert ids == [iid] and a.started == [] and b.started == [iid]


async def test_the_dying_attempts_last_lines_after_a_requeue_never_open_the_next_attempts_incident(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)
    s0 = now - timedelta(seconds=13)
    log.write_text(attempt_lines(0, s0, 1, 12) + lines(GPU_FAULT))
    sched = FakeScheduler(cluster="c", jobs=[job(log, submit_time=s0, start_time=s0)])
    temporal = FakeTemporal()
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()
    a0 = f"c-7-{stamp(s0)}-a0"
    t1 = now + timedelta(seconds=1)
    requeue(sched, now, t1)  # Slurm already shows attempt 1 RUNNING …
    await m.poll_once()
    assert m.watches["7"].wait_from is not None  # … but its log has no line of attempt 1 yet
    with log.open("a") as f:  # srun of attempt 0 is still dying
        f.write(lines("srun: error: node2: task 1: Killed", "srun: error: node1: task 0: Terminated"))
    await m.poll_once()
    with log.open("a") as f:
        f.write(attempt_lines(1, t1, 11, 13))
    await m.poll_once()
    w = m.watches["7"]
    assert (w.attempt, w.start_rule, w.wait_from) == (1, AttemptRule.marker, None)
    assert list(temporal.wfs) == [a0] and temporal.refused == []  # no incident for attempt 1
    assert w.tracker.checkpoint == 10 and w.tracker.last_iteration == 13


async def test_a_requeued_job_still_completing_is_not_its_next_attempt_yet(tmp_path):
    """Right after a requeue Slurm shows Restarts+1 while the old attempt is torn down (COMPLETING);
    a rank released from a hang then prints one more stamped iteration: it is attempt 0's line."""
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)
    s0 = now - timedelta(seconds=13)
    log.write_text(attempt_lines(0, s0, 1, 12))
    sched = FakeScheduler(cluster="c", jobs=[job(log, submit_time=s0, start_time=s0)])
    temporal = FakeTemporal()
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"restart_count": 1, "state": "COMPLETING",
                                                         "submit_time": now, "start_time": now})
    with log.open("a") as f:
        f.write(lines(progress(13, 0, "node1", now + timedelta(milliseconds=200))))
    await m.poll_once()
    assert m.watches["7"].attempt == 0
    t1 = now + timedelta(seconds=8)
    requeue(sched, now, t1)
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"restart_count": 1})
    with log.open("a") as f:
        f.write(attempt_lines(1, t1, 11, 12))
    await m.poll_once()
    w = m.watches["7"]
    assert (w.attempt, w.start_rule) == (1, AttemptRule.marker) and w.tracker.last_iteration == 12
    # nobody but Slurm requeued it here: attempt 0 gets its "Slurm requeued the job itself" incident, attempt 1 none
    assert list(temporal.wfs) == [f"c-7-{stamp(s0)}-a0"] and temporal.inputs[f"c-7-{stamp(s0)}-a0"].trigger.state_to == "REQUEUED"


def test_the_scheduler_gives_the_attempt_and_when_it_started():
    """``restarts`` / ``attempt_started_at`` from ``scontrol show job -o`` and from slurmrestd, as a
    requeued job looks in Slurm 22.05 (PENDING: StartTime is a forecast; RUNNING: the attempt's)."""
    from revive.scheduler.slurm_cli import parse_job_line
    from revive.scheduler.slurm_rest import job_from_rest

    line = ("JobId=5 JobName=train UserId=alice(1000) JobState={st} Restarts=1 SubmitTime=2026-12-01T12:46:10 "
            "StartTime=2026-12-01T12:46:16 Partition=gpu NodeList=node[1-2] StdOut=/tmp/t-5.out")
    pending, running = parse_job_line(line.format(st="PENDING")), parse_job_line(line.format(st="RUNNING"))
    assert pending.restarts == running.restarts == 1
    assert pending.attempt_started_at is None and not pending.attempt_started
    assert running.attempt_started_at == running.start_time and running.start_time is not None
    rest = job_from_rest({"job_id": 5, "name": "train", "job_state": "RUNNING", "restart_cnt": 2,
                          "submit_time": 1796129170, "start_time": 1796129176})
    assert rest.restarts == 2 and rest.attempt_started_at == datetime.fromtimestamp(1796129176, UTC)


async def test_a_job_that_failed_before_the_monitors_first_look_gets_its_incident(tmp_path):
    # chaos run 9/20 of worker-kill-awaiting-approval (2026-12-02): on a loaded machine the monitor's
    # first pass came 2 s after the job faulted and failed; it never saw the job run and filed nothing
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)
    s0 = now - timedelta(seconds=20)
    log.write_text(attempt_lines(0, s0, 1, 7) + lines(GPU_FAULT))
    sched = FakeScheduler(cluster="c", jobs=[job(log, submit_time=s0, start_time=s0, state="FAILED",
                                                 exit_code="1:0", end_time=now - timedelta(seconds=2))])
    temporal = FakeTemporal()
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await m.poll_once()
    (iid,) = temporal.wfs
    inp = temporal.inputs[iid]
    assert iid == f"c-7-{stamp(s0)}-a0" and inp.attempt == 0
    assert inp.trigger.signature_id is not None and inp.fault_family == "gpu"  # the fault line, read once
    assert inp.checkpoint_iteration is None and "iteration 7/" in inp.last_progress["rank 1"]
    assert [s[0] for s in temporal.signals] == [iid] and "FAILED" in temporal.signals[0][1]  # the end: a trigger
    await m.poll_once()
    assert list(temporal.wfs) == [iid] and len(temporal.signals) == 1  # nothing more on the next passes


async def test_a_failure_from_before_the_catch_up_window_is_left_alone(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)
    s0 = now - timedelta(hours=3)
    log.write_text(attempt_lines(0, s0, 1, 7) + lines(GPU_FAULT))
    ended = dict(state="FAILED", exit_code="1:0", submit_time=s0, start_time=s0)
    sched = FakeScheduler(cluster="c", jobs=[
        job(log, **ended, end_time=now - timedelta(seconds=CATCH_UP_S + 30)),  # before this monitor started
        job(log, **ended, job_id="8", partition="debug", end_time=now - timedelta(seconds=5)),  # not opted in
        job(log, job_id="9", state="COMPLETED", end_time=now - timedelta(seconds=5)),  # ended well
    ])
    temporal = FakeTemporal()
    await Monitor(cfg, pol, temporal, sched).poll_once()  # type: ignore[arg-type]
    assert temporal.wfs == {}


async def test_a_restarted_monitor_catches_up_on_jobs_that_failed_while_none_ran(tmp_path):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)
    s0 = now - timedelta(minutes=30)
    log.write_text(attempt_lines(0, s0, 1, 7))
    sched = FakeScheduler(cluster="c", jobs=[job(log, submit_time=s0, start_time=s0)])
    temporal = FakeTemporal()
    first = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    await first.poll_once()
    first.follower.save()
    offsets = Path(cfg.state_dir) / "offsets.json"
    down = now.timestamp() - 600  # the monitor died 10 min ago; the job failed 5 min ago
    os.utime(offsets, (down, down))
    with log.open("a") as f:
        f.write(lines(CRASH))
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"state": "FAILED", "exit_code": "1:0",
                                                         "end_time": now - timedelta(minutes=5)})
    second = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    assert abs(second.catch_up_since - down) < 1
    await second.poll_once()
    (iid,) = temporal.wfs
    assert iid == f"c-7-{stamp(s0)}-a0"


def test_the_catch_up_window_reaches_back_to_an_earlier_monitors_last_pass_but_not_forever(tmp_path):
    f = tmp_path / "offsets.json"
    assert catch_up_since(f, 10_000.0) == 10_000.0 - CATCH_UP_S  # no earlier monitor
    f.write_text("{}")
    os.utime(f, (9_000.0, 9_000.0))
    assert catch_up_since(f, 10_000.0) == 9_000.0
    os.utime(f, (1.0, 1.0))
    assert catch_up_since(f, 10_000.0) == 10_000.0 - CATCH_UP_MAX_S
    os.utime(f, (9_990.0, 9_990.0))  # saved just now (a quick restart): the start window still applies
    assert catch_up_since(f, 10_000.0) == 10_000.0 - CATCH_UP_S


def test_the_end_time_counts_only_once_the_job_ended():
    t = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
    assert JobRecord(job_id="1", state="RUNNING", end_time=t).ended_at is None  # Slurm's expected end
    assert JobRecord(job_id="1", state="FAILED", end_time=t).ended_at == t


async def test_one_jobs_failing_pass_does_not_blind_the_monitor_to_the_others(tmp_path, monkeypatch):
    cfg, pol, log = setup(tmp_path)
    now = datetime.now(UTC).replace(microsecond=0)
    s0 = now - timedelta(minutes=1)
    other = tmp_path / "train-8.out"
    other.write_text(attempt_lines(0, s0, 1, 5))
    log.write_text(attempt_lines(0, s0, 1, 12) + lines(GPU_FAULT))
    sched = FakeScheduler(cluster="c", jobs=[job(other, job_id="8", submit_time=s0, start_time=s0),
                                             job(log, submit_time=s0, start_time=s0)])
    temporal = FakeTemporal()
    m = Monitor(cfg, pol, temporal, sched)  # type: ignore[arg-type]
    real = m._locate

    async def odd(w, j, now):  # job 8's record or log breaks this pass (a bug, a garbled record)
        if j.job_id == "8":
            raise ValueError("garbled")
        await real(w, j, now)

    monkeypatch.setattr(m, "_locate", odd)
    await m.poll_once()
    assert list(temporal.wfs) == [f"c-7-{stamp(s0)}-a0"]  # job 7's fault, listed after job 8, is seen
