"""Monitor shards (issue #13): a stable job → shard split, and incidents opened once."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from revive.config import ClusterConfig
from revive.models import JobRecord
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import FakeScheduler
from tests.helpers.builders import job_log
from worker.monitor import Monitor, parse_shard, shard_of

T0 = datetime(2026, 11, 29, 15, 0, tzinfo=UTC)


def test_parse_shard_accepts_i_of_n_and_explains_bad_input():
    assert parse_shard("0/2") == (0, 2)
    assert parse_shard(" 3/4 ") == (3, 4)
    assert parse_shard("0/1") == (0, 1)
    for bad, why in [("2", "expected i/n"), ("a/2", "integers"), ("0/0", "at least 1"), ("2/2", "between 0 and n-1"),
                     ("-1/2", "between 0 and n-1"), ("1/x", "integers")]:
        with pytest.raises(ValueError, match=why):
            parse_shard(bad)


def test_shard_of_is_stable_and_not_pythons_hash():
    # sha256("c\0" + "42"): the same on every host and every run (PYTHONHASHSEED does not matter)
    assert [shard_of("c", "42", n) for n in (1, 2, 3, 7)] == [shard_of("c", "42", n) for n in (1, 2, 3, 7)]
    assert shard_of("c", "42", 1) == 0
    import hashlib

    assert shard_of("c", "42", 1000) == int.from_bytes(hashlib.sha256(b"c\x0042").digest()[:8], "big") % 1000


class _Client:
    """Records start_workflow calls (no server)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def start_workflow(self, fn, inp, id: str, **kw):
        self.started.append(id)

        class H:
            pass

        h = H()
        h.id = id  # type: ignore[attr-defined]
        return h

    def get_workflow_handle(self, wid: str):
        class H:
            async def signal(self, *a):
                return None

            async def execute_update(self, *a, **k):
                return 0

        return H()


def _cluster(tmp: Path, n: int, fault: bool = False) -> tuple[FakeScheduler, ClusterConfig]:
    jobs = []
    for i in range(1, n + 1):
        log = tmp / f"job-{i}.out"
        log.write_text(job_log("xid79") if fault else "=== attempt restart=0 x\n")
        jobs.append(JobRecord(job_id=str(i), name=f"train-{i}", user="u", state="RUNNING", partition="gpu",
                              nodes=["node1", "node2"], submit_time=T0 + timedelta(seconds=i), std_out=str(log)))
    cfg = ClusterConfig(name="shardtest", partitions=["gpu"], audit_file=str(tmp / "audit.jsonl"),
                        state_dir=str(tmp / "state"))
    return FakeScheduler(cluster="shardtest", jobs=jobs), cfg


async def test_two_shards_watch_every_job_exactly_once(tmp_path):
    sched, cfg = _cluster(tmp_path, 200)
    mons = [Monitor(cfg, RecoveryPolicy(), _Client(), sched, shard=(i, 2)) for i in range(2)]
    for m in mons:
        await m.poll_once()
    a, b = set(mons[0].watches), set(mons[1].watches)
    assert a.isdisjoint(b) and a | b == set(sched.jobs)
    assert 60 < len(a) < 140  # a split, not everything on one shard
    # a shard keeps its own offsets cache
    assert mons[0].follower.offsets_file != mons[1].follower.offsets_file
    with pytest.raises(ValueError):
        Monitor(cfg, RecoveryPolicy(), _Client(), sched, shard=(2, 2))


async def test_jobs_poll_s_lists_jobs_less_often_than_logs_are_followed(tmp_path):
    sched, cfg = _cluster(tmp_path, 3)
    calls = 0
    real = sched.list_jobs

    async def counting():
        nonlocal calls
        calls += 1
        return await real()

    sched.list_jobs = counting
    client = _Client()
    m = Monitor(cfg, RecoveryPolicy(), client, sched, jobs_poll_s=3600)
    await m.poll_once()
    first = calls  # the job list (and the fail-open watchdog's own read)
    with open(sched.jobs["2"].std_out or "", "a") as f:
        f.write("[rank1]: RuntimeError: CUDA error: unknown error\n")
    await m.poll_once()
    assert calls == first
    assert client.started == [f"shardtest-2-{(T0 + timedelta(seconds=2)).strftime('%Y%m%dT%H%M%S')}-a0"]  # one incident per attempt: no family in the id


@pytest.mark.temporal
async def test_two_workers_two_shards_each_incident_handled_once(local_env, tmp_path):
    from worker.main import build_worker

    sched, cfg = _cluster(tmp_path, 12, fault=True)
    pol = RecoveryPolicy(opt_in={"partitions": ["gpu"]}, approval={"timeout": 3600})
    tq = f"shards-{uuid.uuid4().hex[:6]}"
    cfg = cfg.model_copy(update={"name": f"sh{uuid.uuid4().hex[:6]}"})
    client = local_env.client
    mons = [Monitor(cfg, pol, client, sched, task_queue=tq, shard=(i, 2)) for i in range(2)]
    dup = Monitor(cfg.model_copy(update={"state_dir": str(tmp_path / "dup")}), pol, client, sched, task_queue=tq)
    from temporalio.client import Client

    # a second connection: one client cannot hold two workers for the same task queue (like two hosts)
    client2 = await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                                   data_converter=client.data_converter)
    async with build_worker(client, cfg, sched, task_queue=tq), build_worker(client2, cfg, sched, task_queue=tq):
        for m in mons:
            await m.poll_once()
        await dup.poll_once()  # an unsharded monitor over the same jobs: the workflow ids dedupe
        ids = mons[0].started + mons[1].started
        assert len(ids) == 12 and len(set(ids)) == 12 and set(mons[0].started).isdisjoint(mons[1].started)
        # the duplicate started nothing: each of its starts found the id taken and became a trigger
        assert dup.started == []
        assert sorted(i for w in dup.watches.values() for i in w.opened.values()) == sorted(ids)
        try:
            for wid in ids:
                h = client.get_workflow_handle(wid)
                for _ in range(300):
                    try:
                        if (await h.query("status"))["state"] == "awaiting_approval":
                            break
                    except Exception:
                        pass
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError(f"{wid} never reached awaiting_approval")
            runs: dict[str, int] = {}
            async for wf in client.list_workflows(f"ReviveCluster = '{cfg.name}'"):
                runs[wf.id] = runs.get(wf.id, 0) + 1
            assert runs == dict.fromkeys(ids, 1)
        finally:
            for wid in ids:
                try:
                    await client.get_workflow_handle(wid).terminate("test over")
                except Exception:
                    pass
