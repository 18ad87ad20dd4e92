"""SlurmCLI / SlurmREST / RecordingScheduler against the real local cluster (scripts/cluster-up.sh).

Every job is cancelled and every drained node resumed in ``finally``; the cluster stays up.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from revive.errors import JobNotFound, SchedulerCommandError, SchedulerUnavailable
from revive.scheduler.base import Scheduler
from revive.scheduler.fake import RecordingScheduler
from revive.scheduler.runners import LocalRunner
from revive.scheduler.slurm_cli import SlurmCLI
from revive.scheduler.slurm_rest import SlurmREST

pytestmark = pytest.mark.slurm

SCRIPT = """#!/bin/bash
echo "=== attempt restart=${SLURM_RESTART_COUNT:-0} $(date -Is)"
exec srun sleep 600
"""


@pytest.fixture
def cli(slurm_cluster) -> SlurmCLI:
    return SlurmCLI.from_config(slurm_cluster)


def _jobs_dir(cfg) -> Path:
    return Path(cfg.slurm_conf).parents[1] / "jobs"


async def _submit(cli: SlurmCLI, cfg, tag: str, extra: list[str] | None = None) -> str:
    return await cli.submit(
        SCRIPT,
        ["--requeue", "--nodes=2", "--open-mode=append", f"--job-name=revive-test-{tag}",
         "--gres=gpu:1", '--comment={"revive": {"policy": "default"}}',
         f"--output={_jobs_dir(cfg)}/test-%j.out", f"--chdir={_jobs_dir(cfg)}", *(extra or [])],
    )


async def _wait(cli: SlurmCLI, job_id: str, pred, what: str, timeout: float = 40.0):
    end = time.monotonic() + timeout
    job = None
    while time.monotonic() < end:
        job = await cli.get_job(job_id)
        if pred(job):
            return job
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job_id}: timed out waiting for {what}; last: {job}")


async def _cancel_quietly(cli: SlurmCLI, job_id: str | None) -> None:
    if job_id:
        try:
            await cli.cancel(job_id)
        except Exception:
            pass


async def test_protocol_and_ping(cli, slurm_cluster):
    assert isinstance(cli, Scheduler)
    assert cli.cluster == slurm_cluster.name
    assert await cli.ping() is True
    nodes = await cli.get_nodes()
    assert {"node1", "node2", "node3", "node4"} <= {n.name for n in nodes}
    assert [n.name for n in await cli.get_nodes(["node3"])] == ["node3"]


async def test_submit_get_list_script_cancel(cli, slurm_cluster):
    job_id = await _submit(cli, slurm_cluster, "basic")
    try:
        job = await _wait(cli, job_id, lambda j: j.state == "RUNNING", "RUNNING")
        assert job.job_id == job_id and job.name == "revive-test-basic" and job.user == "root"
        assert len(job.nodes) == 2 and job.requeue is True and job.restart_count == 0
        assert job.std_out == f"{_jobs_dir(slurm_cluster)}/test-{job_id}.out"  # expanded
        assert job.comment == '{"revive": {"policy": "default"}}'
        assert job.tres_per_node == "gres:gpu:1" and job.batch_host == job.nodes[0]
        assert job_id in {j.job_id for j in await cli.list_jobs()}
        assert "exec srun sleep 600" in await cli.batch_script(job_id)
        assert await cli.cancel(job_id) == ["scancel", job_id]
        job = await _wait(cli, job_id, lambda j: j.state == "CANCELLED", "CANCELLED")
    finally:
        await _cancel_quietly(cli, job_id)


async def test_drain_and_resume(cli):
    node = "node4"
    try:
        argv = await cli.drain_nodes([node], "revive:test-incident gpu_hardware")
        assert argv[:3] == ["scontrol", "update", "NodeName=node4"]
        (n,) = await cli.get_nodes([node])
        assert n.drained and n.reason == "revive:test-incident gpu_hardware"
        await cli.drain_nodes([node], "revive:test-incident gpu_hardware")  # idempotent
    finally:
        await cli.resume_nodes([node])
    (n,) = await cli.get_nodes([node])
    assert not n.drained
    await cli.resume_nodes([node])  # resuming a resumed node is a no-op, not an error


async def test_requeue_then_requeuehold_exclude_release(cli, slurm_cluster):
    job_id = await _submit(cli, slurm_cluster, "requeue")
    try:
        await _wait(cli, job_id, lambda j: j.state == "RUNNING", "RUNNING")
        assert await cli.requeue(job_id) == ["scontrol", "requeue", job_id]
        job = await _wait(cli, job_id, lambda j: j.state == "RUNNING" and j.restart_count == 1,
                          "RUNNING after requeue")
        victim = job.nodes[0]

        assert await cli.requeue(job_id, hold=True) == ["scontrol", "requeuehold", job_id]
        job = await _wait(cli, job_id, lambda j: j.state == "PENDING" and j.hold, "held")
        assert job.restart_count == 2 and job.reason == "job_requeued_in_held_state"
        await cli.update_job(job_id, ExcNodeList=victim)
        assert (await cli.get_job(job_id)).exc_nodes == [victim]
        await cli.release(job_id)
        job = await _wait(cli, job_id, lambda j: j.state == "RUNNING", "RUNNING after release")
        assert victim not in job.nodes and job.exc_nodes == [victim] and not job.hold
    finally:
        await _cancel_quietly(cli, job_id)


async def test_refusals(cli, slurm_cluster):
    with pytest.raises(JobNotFound):
        await cli.get_job("987654")
    with pytest.raises(JobNotFound):
        await cli.requeue("987654")
    job_id = await cli.submit("#!/bin/bash\nexit 3\n", [
        "--no-requeue", "--nodes=1", "--job-name=revive-test-norequeue", "--output=/dev/null",
        f"--chdir={_jobs_dir(slurm_cluster)}"])
    try:
        await _wait(cli, job_id, lambda j: j.state == "FAILED", "FAILED")
        with pytest.raises(SchedulerCommandError, match="presently disabled"):
            await cli.requeue(job_id)
    finally:
        await _cancel_quietly(cli, job_id)


async def test_dead_slurmctld_is_unavailable(slurm_cluster, tmp_path):
    # a copy of slurm.conf that points at a closed port: the shared cluster is not touched
    conf = Path(slurm_cluster.slurm_conf).read_text()
    lines = [("SlurmctldPort=1" if l.startswith("SlurmctldPort=") else l) for l in conf.splitlines()]
    dead = tmp_path / "slurm.conf"
    dead.write_text("\n".join(lines) + "\n")
    cli = SlurmCLI(LocalRunner(str(dead)), slurm_cluster.name, str(dead), timeout_s=30)
    assert await cli.ping() is False
    with pytest.raises(SchedulerUnavailable, match="not reachable"):
        await cli.get_job("1")
    with pytest.raises(SchedulerUnavailable):
        await cli.get_nodes()


async def test_run_on_node_local_testbed(cli):
    rc, out = await cli.run_on_node("node3", ["sh", "-c", 'echo "on $SLURMD_NODENAME"'])
    assert (rc, out.strip()) == (0, "on node3")


async def test_rest_reads(cli, slurm_cluster):
    rest_cfg = slurm_cluster.scheduler.rest
    job_id = await _submit(cli, slurm_cluster, "rest")
    try:
        await _wait(cli, job_id, lambda j: j.state == "RUNNING", "RUNNING")
        async with httpx.AsyncClient(timeout=10) as client:
            rest = SlurmREST(client, rest_cfg.url, rest_cfg.user, rest_cfg.token(), cli)
            assert isinstance(rest, Scheduler)
            assert await rest.ping() is True
            job = await rest.get_job(job_id)
            via_cli = await cli.get_job(job_id)
            assert (job.state, job.nodes, job.std_out, job.comment, job.requeue) == (
                via_cli.state, via_cli.nodes, via_cli.std_out, via_cli.comment, via_cli.requeue)
            assert job_id in {j.job_id for j in await rest.list_jobs()}
            assert {"node1", "node2", "node3", "node4"} <= {n.name for n in await rest.get_nodes()}
            with pytest.raises(JobNotFound):
                await rest.get_job("987654")
            bad = SlurmREST(client, rest_cfg.url, rest_cfg.user, "not-a-token", cli)
            assert await bad.ping() is False
            # actions are delegated to the CLI
            assert await rest.cancel(job_id) == ["scancel", job_id]
    finally:
        await _cancel_quietly(cli, job_id)


async def test_recording_scheduler_records_before_delegating(cli, tmp_path):
    rec = RecordingScheduler(cli, record_file=tmp_path / "calls.jsonl")
    assert isinstance(rec, Scheduler)
    await rec.get_nodes()
    await rec.ping()
    assert rec.mutating_calls == []
    with pytest.raises(JobNotFound):
        await rec.requeue("987654")
    assert rec.mutating_calls == [("requeue", {"job_id": "987654", "hold": False})]
    lines = [json.loads(l) for l in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [l["method"] for l in lines] == ["requeue"]
