"""``make demo`` / ``revive demo``: a real recovery on the local Slurm cluster, end to end.

Starts the local cluster and the Temporal dev server (scripts/), the Revive worker and monitor (as
processes of their own), submits a real two-node training job that opts in through its
``--comment``, injects one fault on node2, then follows the incident: detect → attribute → plan →
approve (as ``demo``, printing the exact ``revive approve`` command) → act → verify. Prints the Web
UI link and one closing line::

    RECOVERED incident=<id> category=<c> culprit=<nodes|unknown> action=<executed> detect_s=<x> action_s=<y> resume_s=<z>

(seconds from the fault, read from the job's fault marker file, to incident start, to the first
cluster action, to the first iteration past the checkpoint) and returns 0, or
``NOT RECOVERED incident=<id> outcome=<o> reason=<r>`` and returns 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAULTS = ("xid79", "crash", "hang")
FRAMEWORKS = ("revive", "hf", "lightning")
"""``revive``: Revive's example job (examples/train.py, its own fault injection); ``hf`` / ``lightning``:
an unmodified Hugging Face Trainer / PyTorch Lightning job (examples/hf, examples/lightning), the
fault injected from outside it (``cli.framework_jobs``)."""


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def env_dirs() -> tuple[Path, Path]:
    return (Path(os.environ.get("REVIVE_CLUSTER_DIR", "/tmp/revive-cluster")),
            Path(os.environ.get("REVIVE_TEMPORAL_DIR", "/tmp/revive-temporal")))


def start_services(access: str = "local") -> None:
    """Cluster and Temporal dev server via the project's scripts (idempotent); with
    ``access="ssh"`` also the SSH login node (scripts/sshd-up.sh)."""
    for script in ("cluster-up.sh", "temporal-up.sh", *(("sshd-up.sh",) if access == "ssh" else ())):
        r = subprocess.run(["bash", str(REPO / "scripts" / script)], text=True)
        if r.returncode != 0:
            raise SystemExit(f"demo: scripts/{script} failed (exit {r.returncode}); see its message above")


def spawn(name: str, argv: list[str], state: Path) -> subprocess.Popen:
    """Start a Revive process detached from this terminal; pid file for ``make down``."""
    logf = open(state / f"{name}.log", "ab")
    p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, cwd=REPO)
    (state / f"{name}.pid").write_text(str(p.pid))
    return p


def stop_revive_processes(state: Path) -> None:
    for name in ("monitor", "worker"):
        pf = state / f"{name}.pid"
        if pf.exists():
            try:
                os.killpg(int(pf.read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
            pf.unlink(missing_ok=True)


def write_policy(path: Path) -> None:
    path.write_text(
        "# demo policy: observe mode; short hang window so the demo's hang shows within a minute\n"
        "name: demo\nmode: observe\napproval: {timeout: 1800}\nhang: {k: 5, floor: 20}\n"
        "verify: {timeout: 300}\n"
    )


def submit_job(run: str, fault: str, state: Path) -> tuple[str, Path, Path]:
    out_dir = state / "demo" / run
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "train-%j.out"
    env = dict(os.environ, REVIVE_HOME=str(REPO), REVIVE_PYTHON=sys.executable)
    argv = ["sbatch", "--parsable", "--requeue", "--nodes=2", "--ntasks-per-node=1", "--open-mode=append",
            f"--job-name=revive-demo-{run}", "-o", str(log), '--comment={"revive":{"policy":"demo"}}',
            str(REPO / "examples" / "train.sbatch"),
            "--ckpt-dir", str(out_dir / "ckpt"), "--iterations", "100000", "--step-seconds", "0.3",
            "--ckpt-every", "10", "--fault", fault, "--fault-rank", "1", "--fault-iteration", "15",
            "--fault-marker", str(out_dir / "fault.json")]
    r = subprocess.run(argv, env=env, text=True, capture_output=True)
    if r.returncode != 0:
        raise SystemExit(f"demo: sbatch failed: {r.stderr.strip()}")
    job = r.stdout.strip().split(";")[0]
    return job, Path(str(log).replace("%j", job)), out_dir / "fault.json"


async def follow(cfg_path: Path, job: str, interactive: bool, ui: str, deadline_s: float) -> dict:
    """Wait for this job's incident, approve it (or wait for a person), wait for its result."""
    from revive.config import load_cluster_config
    from revive.models import IncidentResult
    from revive.scheduler.slurm_cli import SlurmCLI
    from revive.temporal import connect

    cfg = load_cluster_config(cfg_path)
    client = await connect(cfg.temporal, identity="revive-demo")
    sched = SlurmCLI.from_config(cfg)
    submit = (await sched.get_job(job)).submit_time
    prefix = f"{cfg.name}-{job}-{submit.strftime('%Y%m%dT%H%M%S') if submit else 'nosubmit'}-"
    t0 = time.monotonic()
    wid = None
    while wid is None:
        if time.monotonic() - t0 > deadline_s:
            return {"incident": "none", "outcome": "not_detected", "reason": f"no incident within {deadline_s:.0f} s"}
        async for wf in client.list_workflows(f"WorkflowType='IncidentWorkflow' AND ReviveJobId='{job}'"):
            if wf.id.startswith(prefix):  # never attach to an earlier demo's incidents
                wid = wf.id
        await asyncio.sleep(0.5)
    say(f"incident opened: {wid}")
    say(f"Web UI: {ui}/namespaces/{cfg.temporal.namespace}/workflows/{wid}")
    h = client.get_workflow_handle(wid, result_type=IncidentResult)
    shown = set()
    approved = False
    while True:
        desc = await h.describe()
        if desc.status and desc.status.name != "RUNNING":
            break
        try:
            st = await h.query("status")
        except Exception:
            st = {}
        a, plan, state = st.get("attribution"), st.get("plan"), st.get("state")
        if state and state not in shown and state != "awaiting_approval":
            shown.add(state)
            say(f"state: {state}")
        if a and "a" not in shown:
            shown.add("a")
            say(f"attribution: category={a['category']} domain={a['domain']} culprit={a['culprit_nodes'] or 'unknown'} "
                f"recommends={a['action']} confidence={a['confidence']:.2f}")
            if a.get("root_event"):
                say(f"  root event [{a['root_event']['source']}]: {a['root_event']['text'][:160]}")
            say(f"  {a['explanation']}")
        if plan and "p" not in shown:
            shown.add("p")
            say(f"plan: runbook={plan['runbook']} action={plan['action']} rule={plan['rule']} "
                f"drain={plan['drain_nodes']} exclude={plan['exclude_nodes']}")
        if state == "awaiting_approval" and not approved:
            say(f"state: {state} ({plan.get('approval_reason') if plan else 'observe mode'})")
            cmd = [sys.executable, "-m", "cli.main", "approve", wid, "--as", "demo", "--config", str(cfg_path),
                   "--note", "approved by make demo"]
            if interactive:
                say("waiting for a person: approve in the Web UI (signal 'decide' with "
                    '{"decision":"approve","approver":"<you>"}) or run:')
                say(f"  revive approve {wid} --as <you> --config {cfg_path}")
                approved = True
            else:
                say("observe mode: the plan waits for approval; the demo approves as 'demo':")
                say("  $ " + shlex.join(["revive", "approve", wid, "--as", "demo", "--config", str(cfg_path),
                                        "--note", "approved by make demo"]))
                r = subprocess.run(cmd, text=True, capture_output=True, cwd=REPO)
                say(f"  {(r.stdout or r.stderr).strip()}")
                approved = r.returncode == 0
        await asyncio.sleep(0.5)
    res: IncidentResult = await h.result()
    job_now = await sched.get_job(job)
    nodes = await sched.get_nodes(None)
    drained = {n.name: n.reason for n in nodes if n.drained}
    say(f"job {job} now {job_now.state} on {','.join(job_now.nodes) or '-'} (restarts {job_now.restart_count}); "
        f"drained nodes: {drained or 'none'}")
    return {"incident": wid, "result": res}


def submit_framework_job(framework: str, run: str, fault: str, state: Path, cluster_dir: Path,
                         ) -> tuple[str, Path, Path, threading.Thread]:
    """Submit the ``framework`` job and start the injector (a thread): ``fault`` on rank 1 once the
    job saved its checkpoint at step 10. Returns (job, log, marker, injector thread)."""
    from cli import framework_jobs

    out_dir = state / "demo" / run
    job, log, ckpt = framework_jobs.submit(dict(os.environ), framework, out_dir, '{"revive":{"policy":"demo"}}')
    marker = out_dir / "fault.json"
    kern = str(cluster_dir / "nodes" / "{node}" / "kern.log")

    def go() -> None:
        try:
            framework_jobs.inject(framework, job, ckpt, fault, marker, kern_log_template=kern)
        except (OSError, TimeoutError, RuntimeError, ValueError) as e:
            say(f"fault injection failed: {e}")

    t = threading.Thread(target=go, name="inject", daemon=True)
    t.start()
    return job, log, marker, t


def run_demo(fault: str = "xid79", interactive: bool = False, keep: bool = False, access: str = "local",
             framework: str = "revive") -> int:
    """Returns the process exit code (0 recovered, 1 not recovered, 2 setup error).

    ``framework``: ``revive`` (the example job), ``hf`` or ``lightning`` (see ``FRAMEWORKS``).

    ``access="ssh"``: the worker and the monitor reach the cluster only through the SSH login node
    (``cluster-ssh.yaml``: Slurm commands, job logs, kernel logs and node commands over SSH)."""
    if access not in ("local", "ssh"):
        print(f"demo: unknown ACCESS={access!r}; choose local or ssh", file=sys.stderr)
        return 2
    if fault not in FAULTS:
        print(f"demo: unknown FAULT={fault!r}; choose one of {', '.join(FAULTS)}", file=sys.stderr)
        return 2
    if framework not in FRAMEWORKS:
        print(f"demo: unknown FRAMEWORK={framework!r}; choose one of {', '.join(FRAMEWORKS)}", file=sys.stderr)
        return 2
    if framework != "revive":
        import importlib.util

        need = ["transformers", "accelerate"] if framework == "hf" else ["pytorch_lightning"]
        missing = [m for m in need if importlib.util.find_spec(m) is None]
        if missing:
            print(f"demo: FRAMEWORK={framework} needs {', '.join(missing)}: pip install -e '.[demo,frameworks]' "
                  "(make venv installs it)", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("demo: must run as root (slurmd runs jobs as their users; apt installs Slurm)", file=sys.stderr)
        return 2
    t_start = time.monotonic()
    cluster_dir, tdir = env_dirs()
    start_services(access)
    cfg_path = cluster_dir / ("cluster-ssh.yaml" if access == "ssh" else "cluster.yaml")
    from revive.config import load_cluster_config

    cfg = load_cluster_config(cfg_path)
    if cfg.slurm_conf:
        os.environ["SLURM_CONF"] = cfg.slurm_conf  # sbatch/scontrol of this cluster, not /etc/slurm
    os.environ["REVIVE_CLUSTER_DIR"] = str(cluster_dir)  # train.py writes the Xid line to <dir>/nodes/<node>/kern.log
    state = cluster_dir / "revive-state"
    state.mkdir(parents=True, exist_ok=True)
    ui = f"http://127.0.0.1:{os.environ.get('REVIVE_TEMPORAL_UI_PORT', '8233')}"
    policy = state / "demo-policy.yaml"
    write_policy(policy)
    stop_revive_processes(state)
    py = sys.executable
    spawn("worker", [py, "-m", "cli.main", "worker", "--config", str(cfg_path)], state)
    spawn("monitor", [py, "-m", "cli.main", "monitor", "--config", str(cfg_path), "--policy", str(policy),
                      "--ui", ui], state)
    say(f"worker and monitor started ({'through the SSH login node' if access == 'ssh' else 'local access'}; "
        f"logs: {state}/worker.log, {state}/monitor.log)")
    run = uuid.uuid4().hex[:8]
    if framework == "revive":
        job, log, marker = submit_job(run, fault, state)
        say(f"submitted job {job}: 2 nodes, gloo all-reduce every step, checkpoint every 10 steps; "
            f"fault {fault} on rank 1's node (node2 on a fresh cluster) at iteration 15; log {log}")
    else:
        job, log, marker, _ = submit_framework_job(framework, run, fault, state, cluster_dir)
        name = {"hf": "Hugging Face Trainer", "lightning": "PyTorch Lightning"}[framework]
        say(f"submitted job {job}: an unmodified {name} job, DDP (gloo) on 2 nodes, its own checkpoint every "
            f"10 steps; fault {fault} injected from outside on rank 1's process after checkpoint 10; log {log}")
    rc = 1
    try:
        out = asyncio.run(follow(cfg_path, job, interactive, ui, deadline_s=240 if framework == "revive" else 420))
        res = out.get("result")
        fault_t = None
        if marker.exists():
            try:
                fault_t = float(json.loads(marker.read_text()).get("unix_time"))
            except (ValueError, TypeError):
                fault_t = None

        def since(t: datetime | None) -> str:
            return f"{t.timestamp() - fault_t:.1f}" if (t and fault_t) else "na"

        if res is not None and res.outcome.value == "recovered":
            print(f"RECOVERED incident={res.incident_id} category={res.category.value if res.category else 'unknown'} "
                  f"culprit={','.join(res.culprit_nodes) or 'unknown'} action={res.executed.value if res.executed else 'none'} "
                  f"detect_s={since(res.detected_at)} action_s={since(res.first_action_at)} resume_s={since(res.resumed_at)}",
                  flush=True)
            rc = 0
        else:
            iid = res.incident_id if res else out.get("incident", "none")
            outcome = res.outcome.value if res else out.get("outcome", "unknown")
            reason = (res.reason if res else out.get("reason", "")).replace(" ", "_")[:200] or "none"
            print(f"NOT RECOVERED incident={iid} outcome={outcome} reason={reason}", flush=True)
    finally:
        say(f"demo wall time {time.monotonic() - t_start:.1f} s")
        if keep:
            say(f"KEEP=1: everything left running. Web UI {ui}; stop with: make down")
        else:
            stop_revive_processes(state)
            subprocess.run(["bash", str(REPO / "scripts" / "temporal-down.sh")], capture_output=True)
            if access == "ssh":
                subprocess.run(["bash", str(REPO / "scripts" / "sshd-down.sh")], capture_output=True)
            subprocess.run(["bash", str(REPO / "scripts" / "cluster-down.sh")], capture_output=True)
            say("stopped the cluster, Temporal and Revive (KEEP=1 leaves them running)")
    return rc
