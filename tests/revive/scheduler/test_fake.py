import pytest

from revive.errors import JobNotFound, SchedulerCommandError, SchedulerUnavailable
from revive.models import JobRecord, NodeRecord
from revive.scheduler.base import Scheduler
from revive.scheduler.fake import FakeScheduler, RecordingScheduler


def fake() -> FakeScheduler:
    return FakeScheduler(
        "c1",
        jobs=[JobRecord(job_id="7", name="train", user="u", state="FAILED", requeue=True,
                        nodes=["node1", "node2"])],
        nodes=[NodeRecord(name=f"node{i}", state="IDLE") for i in range(1, 5)],
    )


async def test_protocol_reads_do_not_record():
    s = fake()
    assert isinstance(s, Scheduler) and isinstance(RecordingScheduler(s), Scheduler)
    await s.get_job("7")
    await s.list_jobs()
    await s.get_nodes()
    await s.ping()
    await s.batch_script("7")
    await s.run_on_node("node1", ["nvidia-smi"])
    assert s.calls == [] and s.mutating_calls == []


async def test_mutations_are_recorded_and_applied():
    s = fake()
    await s.drain_nodes(["node2"], "revive:i1 gpu_hardware")
    assert (await s.get_nodes(["node2"]))[0].drained
    await s.requeue("7", hold=True)
    j = await s.get_job("7")
    assert (j.state, j.hold, j.restart_count, j.nodes) == ("PENDING", True, 1, [])
    await s.update_job("7", ExcNodeList="node[2-3]")
    assert (await s.get_job("7")).exc_nodes == ["node2", "node3"]
    await s.release("7")
    assert not (await s.get_job("7")).hold
    await s.resume_nodes(["node2"])
    assert not (await s.get_nodes(["node2"]))[0].drained
    new = await s.submit("#!/bin/bash\n", ["--job-name=x"])
    await s.cancel(new)
    assert [c[0] for c in s.mutating_calls] == [
        "drain_nodes", "requeue", "update_job", "release", "resume_nodes", "submit", "cancel"]
    assert s.calls[0] == ("drain_nodes", {"nodes": ["node2"], "reason": "revive:i1 gpu_hardware"})


async def test_errors():
    s = fake()
    with pytest.raises(JobNotFound):
        await s.get_job("99")
    await s.requeue("7")
    with pytest.raises(SchedulerCommandError):
        await s.requeue("7")  # pending now
    s.available = False
    with pytest.raises(SchedulerUnavailable):
        await s.list_jobs()
    assert await s.ping() is False


async def test_recording_wrapper(tmp_path):
    inner = fake()
    rec = RecordingScheduler(inner, tmp_path / "calls.jsonl")
    await rec.get_job("7")
    await rec.drain_nodes(["node1"], "r")
    assert rec.mutating_calls == [("drain_nodes", {"nodes": ["node1"], "reason": "r"})]
    assert inner.mutating_calls == rec.mutating_calls
    assert "drain_nodes" in (tmp_path / "calls.jsonl").read_text()
