"""Chaos harness: one fault, injected at an exact point, per run of a real incident.

Per run: a fresh two-node training job (``examples/train.sbatch``, ``--engine plain`` unless
``REVIVE_CHAOS_ENGINE`` says otherwise, xid79 on rank 1's node) on the
local Slurm testbed (``scripts/cluster-up.sh``), the Temporal dev server (``scripts/temporal-up.sh``,
SQLite kept across its restarts), and the Revive worker and monitor as real processes
(``python -m cli.main worker|monitor``) with their own cluster name, task queue, opt-in key, state
dir and audit file (``<cluster dir>/chaos/<tag>/``). The fault is placed by the test-only hook
(``revive/chaos.py``: ``REVIVE_CHAOS_HOOK=<point>``; ``kill`` SIGKILLs the process there, ``pause``
holds the activity until the harness has injected its fault) — never by sleeps.

What each run asserts (the judge is a recording shim on the worker's PATH in front of ``scontrol``:
``<run>/scontrol.log`` gets one JSON line ``{"t", "rc", "argv"}`` per call, rc from the real command):

- exactly the expected successful drains (``update NodeName=… State=DRAIN``) and requeues
  (``requeue``/``requeuehold``) for the run, never more (a second one is a duplicate action);
- the job really runs again past its checkpoint: Slurm says RUNNING with a higher restart count,
  and the job's log has a progress line of the new attempt beyond the checkpoint it resumed from
  (never a ``recovered`` over a dead job);
- every incident of the run closed (workflow COMPLETED, outcome ``recovered``) with an audit
  record in the run's audit file; an expected incident that never closed counts as lost.

Environment: the testbed's (``REVIVE_CLUSTER_DIR``, ``REVIVE_TEMPORAL_DIR``, ports …); every
daemon stopped or killed here is found through those dirs' pid files, so only this testbed's
slurmctld, slurmd and Temporal server are touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from revive.chaos import ENV_ACTION, ENV_DIR, ENV_HOOK, Point

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
PROGRESS_AFTER_CKPT = 3
"""A recovered job must log this many iterations past the checkpoint it resumed from."""
CKPT_EVERY = 5
FAULT_ITERATION = 7
"""The fault fires 2 iterations past the first checkpoint (the job resumes from iteration 5)."""
STEP_S = 0.2
"""Seconds per training step (the fault fires ~1.4 s after the first step; 3 steps past the
checkpoint take ~0.6 s)."""


ENGINE = os.environ.get("REVIVE_CHAOS_ENGINE", "plain")
"""``examples/train.py --engine``: ``plain`` (default; the same lines, faults and checkpoints with a
TCP all-reduce and no torch, which saves two torch start-ups of ~10 s per run on a 2-core machine)
or ``torch`` (``REVIVE_CHAOS_ENGINE=torch``, the demo's job)."""


def cluster_dir() -> Path:
    return Path(os.environ.get("REVIVE_CLUSTER_DIR", "/tmp/revive-cluster"))


def temporal_dir() -> Path:
    return Path(os.environ.get("REVIVE_TEMPORAL_DIR", "/tmp/revive-temporal"))


def services_up() -> None:
    """The testbed and the Temporal dev server (idempotent scripts); raises RuntimeError."""
    for s in ("cluster-up.sh", "temporal-up.sh"):
        r = subprocess.run(["bash", str(ROOT / "scripts" / s)], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"scripts/{s} exited {r.returncode}: {r.stdout[-1500:]}{r.stderr[-1500:]}")


def slurm_env() -> dict[str, str]:
    return dict(os.environ, SLURM_CONF=str(cluster_dir() / "etc" / "slurm.conf"))


def sh(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), env=slurm_env(), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def pid_of(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return st not in ("Z", "X")


# ---- daemons of THIS testbed only (pid files under its dirs) --------------------------------------

def stop_slurmctld() -> int:
    """SIGTERM this testbed's slurmctld (pid file ``<cluster dir>/run/slurmctld.pid``); waits."""
    pid = pid_of(cluster_dir() / "run" / "slurmctld.pid")
    if not alive(pid):
        raise RuntimeError("this testbed's slurmctld is not running")
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        if not alive(pid):
            return pid
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return pid


def start_slurmctld() -> None:
    """Start slurmctld again as scripts/cluster-up.sh does (state recovered from its save dir)."""
    env = dict(slurm_env(), REVIVE_CLUSTER_DAEMON=str(cluster_dir()))
    subprocess.run(["setsid", "slurmctld"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    for _ in range(150):
        if sh("scontrol", "ping").stdout.count("UP") >= 1:
            return
        time.sleep(0.2)
    raise RuntimeError("slurmctld did not come back")


def kill_slurmd(node: str) -> None:
    pid = pid_of(cluster_dir() / "run" / f"slurmd-{node}.pid")
    if alive(pid):
        assert pid is not None
        os.kill(pid, signal.SIGKILL)


def restart_slurmd(node: str) -> None:
    if alive(pid_of(cluster_dir() / "run" / f"slurmd-{node}.pid")):
        return
    env = dict(slurm_env(), REVIVE_CLUSTER_DAEMON=str(cluster_dir()))
    subprocess.run(["setsid", "slurmd", "-N", node], env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    for _ in range(100):
        line = sh("scontrol", "show", "node", "-o", node).stdout
        if "NOT_RESPONDING" not in line and "State=" in line:
            break
        time.sleep(0.2)


def restart_temporal() -> None:
    """temporal-down.sh then temporal-up.sh with this testbed's env (the SQLite file is kept)."""
    for s in ("temporal-down.sh", "temporal-up.sh"):
        r = subprocess.run(["bash", str(ROOT / "scripts" / s)], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"scripts/{s}: {r.stdout[-800:]}{r.stderr[-800:]}")


# ---- a webhook sink (the await-approval kill point sits in the notify activity) -------------------

class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a: object) -> None:
        pass


_SINK: ThreadingHTTPServer | None = None


def webhook_url() -> str:
    global _SINK
    if _SINK is None:
        _SINK = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
        threading.Thread(target=_SINK.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{_SINK.server_address[1]}/revive"


# ---- one run ------------------------------------------------------------------------------------

SHIM = """#!/bin/sh
# chaos recording shim: one JSON line per scontrol call, then the real command's exit status
"{real}" "$@"
rc=$?
"{py}" -c 'import json,sys,time; open(sys.argv[1],"a").write(json.dumps({{"t":time.time(),"rc":int(sys.argv[2]),"argv":sys.argv[3:]}})+"\\n")' "{log}" "$rc" "$@"
exit $rc
"""


@dataclass
class Outcome:
    point: str
    ok: bool
    drains: int = 0
    requeues: int = 0
    duplicate: bool = False
    lost: int = 0
    seconds: float = 0.0
    why: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds from the run's start to: ``fault`` (the job's fault fired), ``drain`` and ``requeue``
    (first successful call in the shim's log), ``resumed`` (last "resumed from checkpoint" line),
    ``closed`` (the audit file's last write), ``end`` (cleanup done) — where the time went."""


class Run:
    """Processes, job and judges of one chaos run. ``observe``: observe mode (approval cases)."""

    def __init__(self, point: str, observe: bool = False) -> None:
        from revive.config import load_cluster_config

        self.point = point
        self.tag = f"x{uuid.uuid4().hex[:7]}"
        self.dir = cluster_dir() / "chaos" / self.tag
        self.hook_dir = self.dir / "hook"
        self.hook_dir.mkdir(parents=True)
        base = load_cluster_config(cluster_dir() / "cluster.yaml")
        self.cfg = base.model_copy(update={
            "name": self.tag, "partitions": [], "state_dir": str(self.dir / "state"),
            "audit_file": str(self.dir / "audit.jsonl"),
            "temporal": base.temporal.model_copy(update={"task_queue": f"chaos-{self.tag}"})})
        self.cfg_path = self.dir / "cluster.yaml"
        self.cfg_path.write_text(yaml.safe_dump(self.cfg.model_dump(mode="json", exclude_none=True)))
        self.policy_path = self.dir / "policy.yaml"
        self.policy_path.write_text(yaml.safe_dump({
            "name": "chaos", "mode": "observe" if observe else "auto",
            "approval": {"timeout": 900},
            "hang": {"k": 5, "floor": 12}, "verify": {"timeout": 180},
            "breaker": {"max_fraction": 1.0, "max_nodes": 4},
            "opt_in": {"comment_key": self.tag}, "notify": {"webhooks": [webhook_url()], "retries": 0},
        }))
        shim = self.dir / "shim"
        shim.mkdir()
        real = shutil.which("scontrol")
        if real is None:
            raise RuntimeError("scontrol not on PATH: install Slurm (scripts/cluster-up.sh)")
        self.calls = self.dir / "scontrol.log"
        (shim / "scontrol").write_text(SHIM.format(real=real, py=PY, log=self.calls))
        (shim / "scontrol").chmod(0o755)
        self.shim = shim
        self.procs: dict[str, subprocess.Popen] = {}
        self.job: str | None = None
        self.log: Path | None = None
        self.marker = self.dir / "run" / "fault.json"
        self.client = None
        self.t0 = time.monotonic()
        self.wall0 = time.time()

    # -- processes
    def start(self, name: str, hook: str | None = None, action: str = "kill") -> None:
        env = dict(os.environ, PATH=f"{self.shim}{os.pathsep}{os.environ.get('PATH', '')}",
                   SLURM_CONF=str(cluster_dir() / "etc" / "slurm.conf"), PYTHONUNBUFFERED="1")
        env.pop(ENV_HOOK, None)
        if hook:
            env.update({ENV_HOOK: hook, ENV_DIR: str(self.hook_dir), ENV_ACTION: action})
        argv = [PY, "-m", "cli.main", name, "--config", str(self.cfg_path)]
        if name == "monitor":
            argv += ["--policy", str(self.policy_path)]
        out = open(self.dir / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT)
        out.close()

    def running(self, name: str) -> bool:
        p = self.procs.get(name)
        return p is not None and p.poll() is None

    def stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait(5)

    async def killed(self, name: str, point: Point | str, timeout: float = 150) -> None:
        """Wait until the hook fired at ``point`` and ``name``'s process is gone (SIGKILL)."""
        m = self.hook_dir / f"{point}.fired"
        await wait_for(lambda: m.exists() and not self.running(name), timeout, f"{name} killed at {point}")
        rc = self.procs[name].returncode
        if rc != -signal.SIGKILL:
            raise AssertionError(f"{name} ended with {rc}, not SIGKILL at {point}")

    async def paused(self, point: Point | str, timeout: float = 150) -> None:
        m = self.hook_dir / f"{point}.fired"
        await wait_for(m.exists, timeout, f"the hook to pause at {point}")

    def go(self, point: Point | str) -> None:
        (self.hook_dir / f"{point}.go").write_text("go\n")

    # -- the job
    def submit(self, fault: str = "xid79") -> str:
        """The example job on 2 nodes, ``fault`` on rank 1's node at iteration ``FAULT_ITERATION``
        (2 past the checkpoint every ``CKPT_EVERY``), ``STEP_S`` steps; ``REVIVE_SRUN_WAIT=0``: a
        failed rank ends the step at once."""
        out = self.dir / "run"
        out.mkdir(parents=True, exist_ok=True)
        env = dict(slurm_env(), REVIVE_HOME=str(ROOT), REVIVE_PYTHON=PY, REVIVE_CLUSTER_DIR=str(cluster_dir()),
                   REVIVE_SRUN_WAIT="0")
        for k in (ENV_HOOK, ENV_DIR, ENV_ACTION):
            env.pop(k, None)
        comment = json.dumps({self.tag: {}}, separators=(",", ":"))
        argv = ["sbatch", "--parsable", "--requeue", "--nodes=2", "--ntasks-per-node=1", "--open-mode=append",
                f"--job-name=chaos-{self.tag}", "-o", str(out / "train-%j.out"), f"--comment={comment}",
                str(ROOT / "examples" / "train.sbatch"), "--ckpt-dir", str(out / "ckpt"),
                "--iterations", "100000", "--step-seconds", str(STEP_S), "--ckpt-every", str(CKPT_EVERY),
                "--fault", fault, "--fault-rank", "1", "--fault-iteration", str(FAULT_ITERATION),
                "--fault-marker", str(self.marker), "--engine", ENGINE]
        r = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
        self.job = r.stdout.strip().split(";")[0]
        self.log = out / f"train-{self.job}.out"
        return self.job

    def rank_pids(self, rank: int) -> list[int]:
        """This job's training processes of ``rank`` (their environment names this testbed)."""
        out = []
        for env_file in Path("/proc").glob("[0-9]*/environ"):
            try:
                env = dict(kv.split("=", 1) for kv in env_file.read_bytes().decode(errors="replace").split("\0") if "=" in kv)
                cmd = Path(env_file.parent / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if (env.get("SLURM_JOB_ID") == self.job and env.get("SLURM_PROCID") == str(rank)
                    and env.get("REVIVE_CLUSTER_DIR") == str(cluster_dir()) and "train.py" in cmd):
                out.append(int(env_file.parent.name))
        return out

    def signal_rank(self, rank: int, sig: int) -> int:
        pids = self.rank_pids(rank)
        for p in pids:
            os.kill(p, sig)
        return len(pids)

    def job_record(self) -> dict[str, str]:
        line = sh("scontrol", "show", "job", "-o", str(self.job)).stdout
        return dict(tok.split("=", 1) for tok in line.split() if "=" in tok)

    def attempt_lines(self, attempt: int) -> list[str]:
        text = self.log.read_text(errors="replace") if self.log and self.log.exists() else ""
        parts = text.split("=== attempt restart=")
        return next((p.splitlines() for p in parts[1:] if p.startswith(f"{attempt} ")), [])

    # -- Temporal
    async def connect(self):  # noqa: ANN201
        from revive.temporal import connect

        for _ in range(100):
            try:
                self.client = await connect(self.cfg.temporal, identity=f"chaos-{self.tag}")
                return self.client
            except Exception:
                await asyncio.sleep(0.3)
        raise AssertionError("Temporal unreachable")

    async def incidents(self) -> list[str]:
        q = f"WorkflowType='IncidentWorkflow' AND ReviveCluster='{self.tag}'"
        try:
            return sorted([wf.id async for wf in self.client.list_workflows(q)])
        except Exception:
            return []

    async def incident(self, n: int = 1, timeout: float = 150) -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            got = await self.incidents()
            if len(got) >= n:
                return sorted(got, key=lambda i: ("-a" not in i, i))[n - 1] if n > 1 else got[0]
            await asyncio.sleep(0.5)
        raise AssertionError(f"no incident #{n} for job {self.job} within {timeout:.0f} s")

    async def state(self, iid: str) -> str | None:
        try:
            return (await self.client.get_workflow_handle(iid).query("status"))["state"]
        except Exception:
            return None

    async def wait_state(self, iid: str, state: str, timeout: float = 120) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if await self.state(iid) == state:
                return
            await asyncio.sleep(0.3)
        raise AssertionError(f"{iid} never reached {state} (now {await self.state(iid)})")

    async def approve_cli(self, iid: str, timeout: float = 60) -> tuple[int, str, float]:
        t0 = time.monotonic()
        r = await asyncio.to_thread(subprocess.run, [PY, "-m", "cli.main", "approve", iid, "--as", "chaos-oncall",
                                                     "--config", str(self.cfg_path), "--note", "chaos run"],
                                    capture_output=True, text=True, cwd=ROOT, timeout=timeout)
        return r.returncode, (r.stdout + r.stderr).strip(), time.monotonic() - t0

    # -- judges
    def actions(self) -> tuple[int, int, list[dict]]:
        calls = [json.loads(x) for x in self.calls.read_text().splitlines()] if self.calls.exists() else []
        ok = [c for c in calls if c["rc"] == 0]
        drains = sum(1 for c in ok if c["argv"][:1] == ["update"] and "State=DRAIN" in c["argv"])
        requeues = sum(1 for c in ok if c["argv"][:1] in (["requeue"], ["requeuehold"]))
        return drains, requeues, calls

    async def judge(self, out: Outcome, incidents: int, drains: int, requeues: int, attempt: int) -> None:
        """The run's three assertions (module docstring); failures go to ``out.why``."""
        from temporalio.client import WorkflowExecutionStatus

        from revive.models import IncidentResult

        ids = await self.incidents()
        closed = 0
        audit = self.dir / "audit.jsonl"
        for iid in ids:
            h = self.client.get_workflow_handle(iid, result_type=IncidentResult)
            try:
                res = await asyncio.wait_for(h.result(), 420)
            except Exception as e:
                desc = await h.describe()
                out.why.append(f"{iid}: not closed ({desc.status.name if desc.status else '?'}: {type(e).__name__})")
                continue
            if res.outcome.value != "recovered":
                out.why.append(f"{iid}: outcome {res.outcome.value}: {res.reason[:160]}")
            if (await h.describe()).status != WorkflowExecutionStatus.COMPLETED:
                out.why.append(f"{iid}: workflow not COMPLETED")
            recs = [json.loads(x) for x in audit.read_text().splitlines()] if audit.exists() else []
            if not any(r.get("incident_id") == iid for r in recs):
                out.why.append(f"{iid}: no audit record")
            else:
                closed += 1
        out.lost = max(incidents - closed, 0)
        # one job, one identity: cluster + job id + FIRST SubmitTime (Slurm 22.05 resets SubmitTime
        # on requeue; a monitor that forgot the first one files a later attempt as another job)
        keys = sorted({iid.rsplit("-a", 1)[0] for iid in ids})
        if len(keys) > 1:
            out.why.append(f"the job's incidents carry {len(keys)} job identities (first SubmitTime lost): {ids}")
        if len(ids) != incidents:
            out.why.append(f"{len(ids)} incident(s) for one job, expected {incidents}: {ids}")
        out.drains, out.requeues, calls = self.actions()
        out.duplicate = out.drains > drains or out.requeues > requeues
        if (out.drains, out.requeues) != (drains, requeues):
            made = [" ".join(c["argv"]) + " rc=" + str(c["rc"]) for c in calls if c["argv"][:1] != ["show"]]
            out.why.append(f"scontrol: {out.drains} drain(s), {out.requeues} requeue(s); expected {drains} and "
                           f"{requeues}: {made}")
        # the job runs again past its checkpoint, in the attempt the incidents led to
        ok_run = False
        for _ in range(180):
            rec = self.job_record()
            lines = self.attempt_lines(attempt)
            resumed = [int(x.rsplit(" ", 1)[1]) for x in lines if "resumed from checkpoint at iteration" in x]
            iters = [int(x.split(" iteration ", 1)[1].split("/", 1)[0]) for x in lines
                     if " iteration " in x and "/" in x.split(" iteration ", 1)[1][:12]]
            if (rec.get("JobState") == "RUNNING" and int(rec.get("Restarts", "0")) >= attempt and resumed
                    and iters and max(iters) >= resumed[0] + PROGRESS_AFTER_CKPT):
                ok_run = True
                break
            await asyncio.sleep(0.5)
        if not ok_run:
            rec = self.job_record()
            out.why.append(f"job {self.job} not running past its checkpoint in attempt {attempt} "
                           f"(state {rec.get('JobState')}, restarts {rec.get('Restarts')})")

    async def count_lost(self, out: Outcome) -> None:
        """After a failed run: incidents of the run that failed, were terminated, are still open,
        or closed without an audit record count as lost (no waiting)."""
        from temporalio.client import WorkflowExecutionStatus

        audit = self.dir / "audit.jsonl"
        recs = [json.loads(x) for x in audit.read_text().splitlines()] if audit.exists() else []
        for iid in await self.incidents():
            try:
                desc = await self.client.get_workflow_handle(iid).describe()
            except Exception:
                continue
            done = desc.status == WorkflowExecutionStatus.COMPLETED
            if not done or not any(r.get("incident_id") == iid for r in recs):
                out.lost += 1
                out.why.append(f"{iid}: lost ({desc.status.name if desc.status else '?'}"
                               f"{', no audit record' if done else ''})")

    def phases(self) -> dict[str, float]:
        """``Outcome.phases`` from the run's own files (never raises: a missing file is no entry)."""
        from datetime import datetime

        out: dict[str, float] = {}
        try:
            out["fault"] = float(json.loads(self.marker.read_text())["unix_time"])
        except (OSError, ValueError, KeyError):
            pass
        try:
            _, _, calls = self.actions()
            ok = [c for c in calls if c["rc"] == 0]
            drains = [c["t"] for c in ok if c["argv"][:1] == ["update"] and "State=DRAIN" in c["argv"]]
            requeues = [c["t"] for c in ok if c["argv"][:1] in (["requeue"], ["requeuehold"])]
            out.update({k: v[0] for k, v in (("drain", drains), ("requeue", requeues)) if v})
        except (OSError, ValueError, KeyError):
            pass
        text = self.log.read_text(errors="replace") if self.log and self.log.exists() else ""
        resumed = [x.split(" ", 1)[0] for x in text.splitlines() if "resumed from checkpoint at iteration" in x]
        if resumed:
            try:
                out["resumed"] = datetime.fromisoformat(resumed[-1]).timestamp()
            except ValueError:
                pass
        audit = self.dir / "audit.jsonl"
        if audit.exists():
            out["closed"] = audit.stat().st_mtime
        return {k: round(v - self.wall0, 1) for k, v in out.items()}

    def cleanup(self) -> None:
        for name in list(self.procs):
            self.stop(name)
        if self.job:
            sh("scancel", self.job)
        for n in ("node1", "node2", "node3", "node4"):
            restart_slurmd(n)
            sh("scontrol", "update", f"NodeName={n}", "State=RESUME")


async def wait_for(pred: Callable[[], object], timeout: float, what: str, step: float = 0.2) -> object:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        await asyncio.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


# ---- the fault points ---------------------------------------------------------------------------
# Each case: (observe mode?, body). The body starts the processes with the hook, injects its fault
# and returns (incidents, drains, requeues, attempt the job must run in) for the judge.

Case = Callable[[Run], Awaitable[tuple[int, int, int, int]]]


def _worker_kill(point: Point) -> Case:
    async def body(r: Run) -> tuple[int, int, int, int]:
        r.start("worker", hook=point)
        r.start("monitor")
        r.submit()
        await r.killed("worker", point)
        r.start("worker")
        return 1, 1, 1, 1
    return body


async def _worker_kill_approval(r: Run) -> tuple[int, int, int, int]:
    r.start("worker", hook=Point.await_approval)
    r.start("monitor")
    r.submit()
    await r.killed("worker", Point.await_approval)
    r.start("worker")
    iid = await r.incident()
    await r.wait_state(iid, "awaiting_approval")
    await approve_until_open(r, iid)
    return 1, 1, 1, 1


async def approve_until_open(r: Run, iid: str, timeout: float = 120) -> float:
    """``revive approve`` as an operator would: again while it answers "not awaiting approval"
    (the incident is not at its gate yet: a restarted worker replays it first). Returns the
    seconds it took."""
    t0 = time.monotonic()
    while True:
        rc, text, _ = await r.approve_cli(iid)
        if rc == 0:
            return time.monotonic() - t0
        if "not awaiting approval" not in text or time.monotonic() - t0 > timeout:
            raise AssertionError(f"revive approve exited {rc} after {time.monotonic() - t0:.0f} s: {text}")
        await asyncio.sleep(3)


def _monitor_kill(point: Point, then: str | None) -> Case:
    async def body(r: Run) -> tuple[int, int, int, int]:
        r.start("worker")
        r.start("monitor", hook=point)
        r.submit()
        await r.killed("monitor", point)
        r.start("monitor")
        if then is None:
            return 1, 1, 1, 1
        from revive.models import IncidentResult

        first = await r.incident()
        res = await r.client.get_workflow_handle(first, result_type=IncidentResult).result()
        if res.outcome.value != "recovered":
            raise AssertionError(f"first incident {first}: {res.outcome.value} {res.reason}")
        # the requeued attempt runs past its checkpoint, then its rank 1 crashes or hangs
        await wait_for(lambda: any("resumed from checkpoint" in x for x in r.attempt_lines(1)), 120, "attempt 1 resumed")
        await asyncio.sleep(1.0)
        if not r.signal_rank(1, signal.SIGKILL if then == "crash" else signal.SIGSTOP):
            raise AssertionError("rank 1 of attempt 1 not found")
        await r.incident(2, timeout=120 if then == "crash" else 150)
        return 2, 1, 2, 2
    return body


def _paused(point: Point, fault: Callable[[Run], Awaitable[None]], drains: int = 1) -> Case:
    async def body(r: Run) -> tuple[int, int, int, int]:
        r.start("worker", hook=point, action="pause")
        r.start("monitor")
        r.submit()
        await r.paused(point)
        await fault(r)
        return 1, drains, 1, 1
    return body


async def _temporal_restart(r: Run) -> None:
    r.go(Point.after_drain)  # the activity finishes while the server is down or coming back
    await asyncio.to_thread(restart_temporal)


def _slurmctld_down(point: Point, seconds: float = 60) -> Callable[[Run], Awaitable[None]]:
    async def fault(r: Run) -> None:
        await asyncio.to_thread(stop_slurmctld)
        r.go(point)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(start_slurmctld)
    return fault


async def _slurmd_killed(r: Run) -> None:
    node = json.loads(r.marker.read_text())["node"]
    kill_slurmd(node)  # the culprit node's slurmd dies while Revive drains it
    r.go(Point.before_drain)


async def _malformed(r: Run) -> None:
    from temporalio.client import WorkflowHandle

    iid = await r.incident()
    h: WorkflowHandle = r.client.get_workflow_handle(iid)
    await h.signal("decide")  # no input
    await h.signal("decide", args=[{"decision": "approve"}, {"x": 1}])  # two inputs
    await h.signal("decide", "not a decision")
    await h.signal("add_trigger")  # no input
    await h.signal("add_trigger", args=[1, 2, 3])
    r.go(Point.before_requeue)


async def _oversized(r: Run) -> None:
    iid = await r.incident()
    h = r.client.get_workflow_handle(iid)
    big = "x" * 1_900_000
    for _ in range(3):
        try:
            await h.signal("add_trigger", big)
        except Exception:
            pass  # refused by the server (payload limit): that is fine, the incident must go on
    try:
        await h.signal("decide", {"decision": "approve", "approver": "a" * 1_000_000})
    except Exception:
        pass
    r.go(Point.before_requeue)


async def _ghost_approval(r: Run) -> tuple[int, int, int, int]:
    r.start("worker", hook=Point.await_approval)
    r.start("monitor")
    r.submit()
    await r.killed("worker", Point.await_approval)
    iid = await r.incident()
    problems = []
    rc, text, took = await r.approve_cli(iid)  # no worker polls the task queue now
    if rc == 0 or took > 15 or "no worker" not in text:
        problems.append(f"revive approve with no worker: exit {rc} after {took:.1f} s (want a 'no worker' "
                        f"refusal within 15 s): {text[-240:]}")
    r.start("worker")
    await asyncio.sleep(12)  # a stale approval would act now
    drains, requeues, _ = r.actions()
    st = await r.state(iid)
    if drains or requeues or st != "awaiting_approval":
        problems.append(f"the approval given with no worker acted later: state {st}, {drains} drain(s), "
                        f"{requeues} requeue(s)")
    if problems:
        raise AssertionError("; ".join(problems))
    await approve_until_open(r, iid)
    return 1, 1, 1, 1


CASES: dict[str, tuple[bool, Case]] = {
    "worker-kill-gathering": (False, _worker_kill(Point.gather)),
    "worker-kill-awaiting-approval": (True, _worker_kill_approval),
    "worker-kill-after-drain": (False, _worker_kill(Point.after_drain)),
    "worker-kill-before-requeue": (False, _worker_kill(Point.before_requeue)),
    "worker-kill-verifying": (False, _worker_kill(Point.verify)),
    "monitor-kill-before-requeue": (False, _monitor_kill(Point.monitor_opened, None)),
    "monitor-kill-after-requeue-then-crash": (False, _monitor_kill(Point.monitor_new_attempt, "crash")),
    "monitor-kill-after-requeue-then-hang": (False, _monitor_kill(Point.monitor_new_attempt, "hang")),
    "temporal-restart-acting": (False, _paused(Point.after_drain, _temporal_restart)),
    "slurmctld-down-60s-between-drain-and-requeue": (False, _paused(Point.before_requeue,
                                                                     _slurmctld_down(Point.before_requeue))),
    "slurmctld-down-60s-verifying": (False, _paused(Point.verify, _slurmctld_down(Point.verify))),
    "slurmd-killed-culprit-node": (False, _paused(Point.before_drain, _slurmd_killed)),
    "malformed-signals": (False, _paused(Point.before_requeue, _malformed)),
    "oversized-signals": (False, _paused(Point.before_requeue, _oversized)),
    "approval-with-no-worker": (True, _ghost_approval),
}
CHEAP = ("worker-kill-before-requeue", "malformed-signals")
"""The short count inside ``make test`` (tests/chaos/test_chaos_short.py)."""


async def run_case(name: str) -> Outcome:
    observe, body = CASES[name]
    r = Run(name, observe=observe)
    out = Outcome(point=name, ok=False)
    try:
        await r.connect()
        expect = await body(r)
        await r.judge(out, *expect)
    except Exception as e:
        out.why.append(f"{type(e).__name__}: {e}")
        try:
            if r.client is not None:
                out.drains, out.requeues, _ = r.actions()
                out.duplicate = out.drains > 1 or out.requeues > (2 if "after-requeue-then" in name else 1)
                await r.count_lost(out)
        except Exception:
            pass
    finally:
        for name_ in list(r.procs):
            r.stop(name_)
        await asyncio.to_thread(r.cleanup)
    out.ok = not out.why
    out.seconds = time.monotonic() - r.t0
    out.phases = {**r.phases(), "end": round(out.seconds, 1)}
    (r.dir / "outcome.json").write_text(json.dumps(out.__dict__, default=str, indent=1))
    out.why = [f"[{r.dir}] {w}" for w in out.why]
    return out
