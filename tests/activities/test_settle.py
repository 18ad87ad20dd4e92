"""The gather stage's wait for a dying job: it ends when the job stops writing, never before the
lines it was waiting for have arrived, and at its limit when the job keeps writing."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from activities.evidence import EvidenceActivities
from revive.models import GatherEvidenceInput, JobRecord, JobState, Trigger, TriggerKind
from revive.scheduler.fake import FakeScheduler

NOW = datetime(2026, 12, 1, 16, tzinfo=UTC)
TRIGGER = Trigger(kind=TriggerKind.log_signature, at=NOW, text='[rank1]: RuntimeError: CUDA error: unknown error')
LAST_STEP = "2026-12-01T16:00:00.000+00:00 [rank 0 host node1] iteration 14/100 | loss 1.6 | compute_ms 300 | step_time_ms 306\n"


def setup(tmp_path, state: JobState = JobState.RUNNING):
    log = tmp_path / "train-7.out"
    log.write_text("=== attempt restart=0 2026-12-01T15:59:00+00:00\n" + LAST_STEP
                   + '[rank1]: RuntimeError: CUDA error: unknown error\n')
    sched = FakeScheduler(cluster="c", jobs=[JobRecord(job_id="7", nodes=["node1", "node2"], state=state,
                                                       std_out=str(log))])
    ev = EvidenceActivities(sched, str(tmp_path / "{node}.kern"), tmp_path / "ev")
    return sched, ev, log


def gather_input(log, **kw) -> GatherEvidenceInput:
    return GatherEvidenceInput(incident_id="local-7-a0", cluster="c", job_id="7", trigger=TRIGGER,
                               log_path=str(log), nodes=["node1", "node2"], **kw)


async def test_a_log_that_went_quiet_ends_the_wait_long_before_its_limit(tmp_path):
    _, ev, log = setup(tmp_path)
    t0 = time.monotonic()
    b = await ev.gather_evidence(gather_input(log, settle_s=5.0, settle_quiet_s=0.3))
    took = time.monotonic() - t0
    assert 0.3 <= took < 2.0, took
    assert b.settle.endswith("log quiet 0.3 s")
    assert "CUDA error: unknown error" in b.job_log


async def test_a_job_that_ended_is_read_at_once(tmp_path):
    _, ev, log = setup(tmp_path, state=JobState.FAILED)
    t0 = time.monotonic()
    b = await ev.gather_evidence(gather_input(log, settle_s=5.0, settle_quiet_s=3.0))
    assert time.monotonic() - t0 < 1.0
    assert b.settle.endswith("job FAILED")


async def test_lines_a_peer_prints_during_the_wait_are_in_the_evidence(tmp_path):
    """The surviving rank's collective error arrives 0.25 s into the wait: the quiet clock
    restarts and its traceback is read, then srun ends the job."""
    sched, ev, log = setup(tmp_path)

    async def peer() -> None:
        await asyncio.sleep(0.25)
        with log.open("a") as f:
            f.write("[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer\n")
        await asyncio.sleep(0.25)
        with log.open("a") as f:
            f.write("srun: error: node2: task 1: Exited with exit code 1\n")

    writer = asyncio.create_task(peer())
    b = await ev.gather_evidence(gather_input(log, settle_s=5.0, settle_quiet_s=0.4))
    await writer
    assert "Connection closed by peer" in b.job_log and "task 1: Exited" in b.job_log
    assert b.settle.endswith("log quiet 0.4 s")


async def test_a_job_that_keeps_writing_is_read_at_the_limit(tmp_path):
    _, ev, log = setup(tmp_path)
    stop = asyncio.Event()

    async def chatter() -> None:
        i = 0
        while not stop.is_set():
            with log.open("a") as f:
                f.write(f"[rank0]: still tearing down {i}\n")
            i += 1
            await asyncio.sleep(0.05)

    writer = asyncio.create_task(chatter())
    t0 = time.monotonic()
    try:
        b = await ev.gather_evidence(gather_input(log, settle_s=1.0, settle_quiet_s=0.3))
    finally:
        stop.set()
        await writer
    assert 1.0 <= time.monotonic() - t0 < 3.0
    assert b.settle.endswith("limit")


async def test_quiet_at_or_above_the_limit_is_the_old_fixed_wait(tmp_path):
    _, ev, log = setup(tmp_path)
    t0 = time.monotonic()
    b = await ev.gather_evidence(gather_input(log, settle_s=0.6, settle_quiet_s=0.6))
    assert time.monotonic() - t0 >= 0.6
    assert b.settle.endswith("limit")


async def test_a_job_state_given_as_text_ends_the_wait_too(tmp_path):
    sched, ev, log = setup(tmp_path)
    sched.jobs["7"] = sched.jobs["7"].model_copy(update={"state": "FAILED"})  # as a record built from text carries it
    b = await ev.gather_evidence(gather_input(log, settle_s=5.0, settle_quiet_s=3.0))
    assert b.settle.endswith("job FAILED")


async def test_unreadable_sources_never_end_the_wait_early_nor_raise(tmp_path):
    sched = FakeScheduler(cluster="c", jobs=[])
    ev = EvidenceActivities(sched, str(tmp_path / "{node}.kern"), tmp_path / "ev")
    t0 = time.monotonic()
    b = await ev.gather_evidence(GatherEvidenceInput(incident_id="x", cluster="c", job_id="99", trigger=TRIGGER,
                                                     log_path="/nonexistent/log", settle_s=0.5, settle_quiet_s=0.1))
    assert time.monotonic() - t0 >= 0.5
    assert b.settle.endswith("limit") and any("not found" in n for n in b.notes)


async def test_no_wait_when_settle_is_zero(tmp_path):
    _, ev, log = setup(tmp_path)
    b = await ev.gather_evidence(gather_input(log, settle_s=0))
    assert b.settle == "" and "CUDA error" in b.job_log


async def test_the_nodes_history_is_read_during_the_wait_and_the_last_look_is_the_job_record(tmp_path):
    """The nodes' earlier incidents (a visibility query in the worker) need no log line: they are
    read while the job finishes writing, so the first action does not wait for them after it; the
    settle's last job read is the bundle's job record (no second read)."""
    sched, _, log = setup(tmp_path)
    asked: list[tuple[float, list[str]]] = []
    t0 = time.monotonic()

    async def history(cluster: str, nodes: list[str], since: datetime, iid: str) -> dict:
        asked.append((time.monotonic() - t0, list(nodes)))
        await asyncio.sleep(0.2)  # a visibility query
        return {"node2": [], "node9": []}

    ev = EvidenceActivities(sched, str(tmp_path / "{node}.kern"), tmp_path / "ev", node_history=history)
    b = await ev.gather_evidence(gather_input(log, settle_s=5.0, settle_quiet_s=0.5))
    took = time.monotonic() - t0
    assert len(asked) == 1 and asked[0][1] == ["node1", "node2"], asked
    assert asked[0][0] < 0.2, asked  # started with the wait, not after its 0.5 s
    assert took < 0.5 + 0.2 + 0.5, took  # the 0.2 s read is not added after the wait
    assert b.node_history == {"node2": []}  # kept to the job's nodes
    assert b.job is not None and b.job.job_id == "7" and b.job.state == JobState.RUNNING


async def test_a_job_whose_record_names_other_nodes_gets_their_history_read_after_the_wait(tmp_path):
    sched, _, log = setup(tmp_path)
    asked: list[list[str]] = []

    async def history(cluster: str, nodes: list[str], since: datetime, iid: str) -> dict:
        asked.append(list(nodes))
        return {}

    ev = EvidenceActivities(sched, str(tmp_path / "{node}.kern"), tmp_path / "ev", node_history=history)
    inp = gather_input(log, settle_s=5.0, settle_quiet_s=0.2).model_copy(update={"nodes": ["node1"]})
    await ev.gather_evidence(inp)
    assert asked == [["node1"], ["node1", "node2"]]  # the trigger knew node1 only; the record has both
