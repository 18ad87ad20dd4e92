"""End to end: the monitor survives SIGKILL (issue #12 item 4, issue #9 item 2), on the real local
Slurm cluster with a Temporal dev server, the production worker, and the monitor in its own process.

The chaos run's case: Revive requeued a crashed job, the monitor was SIGKILLed and restarted, and
the job's next crash was filed as attempt 0, skipped as "already requeued", and closed
``recovered`` over a FAILED job; a later hang went unseen. Here the job's second crash must open
attempt 1 and be requeued again (Slurm ``Restarts`` goes to 2), and after another SIGKILL of the
monitor a hang of attempt 2 must be detected. The faults after the first are injected from outside
the job, on rank 1's process: an Xid 79 kernel-log line then SIGKILL (a different root cause than
attempt 0's crash: an unknown crash is restarted in place once only), and SIGSTOP (hang)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from revive.models import IncidentOutcome, IncidentResult
from revive.policy import RecoveryPolicy
from revive.scheduler.fake import RecordingScheduler
from revive.scheduler.slurm_cli import SlurmCLI
from revive.site import build_site
from tests.helpers import slurm as hs
from tests.helpers.harness import wait_for
from worker.main import build_worker

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.temporal]

ROOT = Path(__file__).resolve().parents[2]


def xid79(cfg, node: str) -> None:
    """The kernel-log line of a GPU that fell off the bus, as ``examples/train.py`` writes it."""
    lt = time.localtime()
    stamp = f"{time.strftime('%b', lt)} {lt.tm_mday:2d} {time.strftime('%H:%M:%S', lt)}"
    path = Path(cfg.kernel_log.path_template.replace("{node}", node))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(f"{stamp} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.\n")


def rank_node(pid: int) -> str:
    env = (Path("/proc") / str(pid) / "environ").read_bytes().decode(errors="replace").split("\0")
    return next(x.split("=", 1)[1] for x in env if x.startswith("SLURMD_NODENAME="))


def rank_pids(job: str, rank: int, restart: int) -> list[int]:
    """Pids of ``examples/train.py`` processes of ``job``'s attempt ``restart`` running as ``rank``
    (read from /proc: every node of the local cluster runs on this machine)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = dict(x.split("=", 1) for x in (d / "environ").read_bytes().decode(errors="replace").split("\0") if "=" in x)
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if (env.get("SLURM_JOB_ID") == job and env.get("SLURM_PROCID") == str(rank) and "train.py" in cmd
                and env.get("SLURM_RESTART_COUNT", "0") == str(restart)):
            out.append(int(d.name))
    return out


class MonitorProc:
    """The monitor as a child process (``tests.helpers.monitor_proc``), SIGKILLable."""

    def __init__(self, cfg, policy: RecoveryPolicy, tq: str, tmp: Path) -> None:
        self.files = (tmp / "cluster.json", tmp / "policy.json")
        self.files[0].write_text(cfg.model_dump_json())
        self.files[1].write_text(policy.model_dump_json())
        self.tq, self.tmp, self.n, self.proc = tq, tmp, 0, None

    def start(self) -> None:
        self.n += 1
        out = (self.tmp / f"monitor-{self.n}.log").open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.monitor_proc", str(self.files[0]),
                                      str(self.files[1]), self.tq], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def logs(self) -> str:
        return "\n".join((self.tmp / f"monitor-{i}.log").read_text()[-3000:] for i in range(1, self.n + 1))


async def test_monitor_sigkilled_after_a_requeue_files_the_next_crash_and_hang_as_new_attempts(
        slurm_cluster, local_env, tmp_path):
    tag = f"t{uuid.uuid4().hex[:6]}"
    client = local_env.client
    cfg = slurm_cluster.model_copy(update={
        "name": tag, "partitions": [], "state_dir": str(tmp_path / "state"), "audit_file": str(tmp_path / "audit.jsonl"),
        "temporal": slurm_cluster.temporal.model_copy(update={"address": client.service_client.config.target_host,
                                                              "namespace": client.namespace})})
    pol = RecoveryPolicy.model_validate({"mode": "auto", "hang": {"k": 5, "floor": 15}, "verify": {"timeout": 240},
                                         "opt_in": {"comment_key": tag}})
    tq = f"e2e-{tag}"
    sched = RecordingScheduler(build_site(cfg).scheduler, record_file=tmp_path / "calls.jsonl")
    slurm = SlurmCLI.from_config(cfg)
    mon = MonitorProc(cfg, pol, tq, tmp_path)
    job = None
    stopped: list[int] = []

    async def incident(attempt: int, timeout: float) -> str:
        async def find() -> str | None:
            async for wf in client.list_workflows(f"ReviveCluster='{tag}' AND ReviveJobId='{job}'"):
                if wf.id.endswith(f"-a{attempt}"):
                    return wf.id
            return None

        for _ in range(int(timeout / 0.5)):
            got = await find()
            if got:
                return got
            await asyncio.sleep(0.5)
        raise AssertionError(f"no incident for attempt {attempt} of job {job}:\n{mon.logs()}")

    async def result(iid: str) -> IncidentResult:
        return await asyncio.wait_for(client.get_workflow_handle(iid, result_type=IncidentResult).result(), 400)

    async def running_attempt(n: int, past: int) -> None:
        """Wait for attempt ``n`` to run and print iteration ``past`` or later."""
        marker = f"=== attempt restart={n} "

        def ok() -> bool:
            text = log.read_text() if log.exists() else ""
            tail = text.rsplit(marker, 1)[1] if marker in text else ""
            its = [int(x.split("/")[0]) for x in tail.split("iteration ")[1:] if x.split("/")[0].isdigit()]
            return bool(its) and max(its) >= past and bool(rank_pids(job, 1, n))

        await wait_for(ok, 180, f"attempt {n} past iteration {past}", step=0.5)

    try:
        async with build_worker(client, cfg, sched, task_queue=tq):
            mon.start()
            job, log, marker = hs.submit_train(cfg, "crash", tmp_path / "run",
                                               comment=f'{{"{tag}":{{}}}}')
            # attempt 0: the job's own crash at iteration 12; Revive requeues it
            a0 = await incident(0, 180)
            r0 = await result(a0)
            assert r0.outcome == IncidentOutcome.recovered and r0.executed.value == "restart_in_place", (r0.reason, r0.rule)
            assert (await slurm.get_job(job)).restart_count == 1
            # the monitor is SIGKILLed after the requeue and started again
            mon.kill()
            mon.start()
            await running_attempt(1, 16)
            # attempt 1: rank 1's GPU falls off the bus (Xid 79 in its node's kernel log), the rank dies
            pids = rank_pids(job, 1, 1)
            bad = rank_node(pids[0])
            xid79(cfg, bad)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            a1 = await incident(1, 120)
            assert a1 == a0[:-len("-a0")] + "-a1"  # same job identity (first SubmitTime), next attempt
            r1 = await result(a1)
            assert r1.outcome == IncidentOutcome.recovered and r1.executed.value == "drain_and_requeue", (
                r1.reason, r1.rule, mon.logs())
            assert r1.culprit_nodes == [bad]
            live = await slurm.get_job(job)
            assert live.restart_count == 2 and live.state == "RUNNING" and bad not in live.nodes
            assert [c[0] for c in sched.mutating_calls] == ["requeue", "drain_nodes", "requeue"]
            # SIGKILL again; attempt 2 hangs (rank 1 stopped): the new monitor must see it
            mon.kill()
            mon.start()
            await running_attempt(2, 16)
            stopped = rank_pids(job, 1, 2)
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            a2 = await incident(2, 120)
            assert a2 == a0[:-len("-a0")] + "-a2"
            status = await client.get_workflow_handle(a2).query("status")
            assert status, status
            r2 = await result(a2)
            assert r2.category.value == "hang", (r2.reason, r2.rule, mon.logs())
            ids = [wf.id async for wf in client.list_workflows(f"ReviveCluster='{tag}' AND ReviveJobId='{job}'")]
            assert sorted(ids) == sorted([a0, a1, a2])  # one incident per attempt, no duplicate after a restart
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        mon.kill()
        hs.cleanup(cfg, job)
