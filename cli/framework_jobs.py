"""Real-framework jobs on the local Slurm cluster (``examples/hf``, ``examples/lightning``) and fault
injection from outside the unmodified job (``make demo FRAMEWORK=…`` and the e2e tests): SIGKILL
(``crash``), SIGSTOP (``hang``), or an Xid 79 line in the node's kern.log then SIGKILL (``xid79``) of one
rank's process,
found through ``/proc`` (every fake node of the testbed is this machine) by its ``SLURM_JOB_ID`` and
``SLURM_PROCID``. The injector writes a marker like ``examples/train.py``'s (kind, node, rank, ISO
and unix time): the demo and ``tests.helpers.slurm.fault_time``/``fault_node`` read it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FRAMEWORKS = ("hf", "lightning")
_CKPT_RE = {"hf": re.compile(r"^checkpoint-(\d+)$"), "lightning": re.compile(r"^epoch=\d+-step=(\d+)\.ckpt$")}


def submit(env: dict[str, str], framework: str, out_dir: Path, comment: str, python: str | None = None,
           ) -> tuple[str, Path, Path]:
    """sbatch ``examples/<framework>/train.sbatch`` on 2 nodes (one rank each), saving every 10
    steps into ``out_dir/ckpt``; ``env``: the environment for sbatch (``SLURM_CONF`` of the cluster).
    Returns (job id, log path, checkpoint dir). Raises ``subprocess.CalledProcessError`` when sbatch fails."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt = out_dir / "ckpt"
    log = out_dir / f"{framework}-%j.out"
    env = dict(env, REVIVE_HOME=str(ROOT), REVIVE_PYTHON=python or sys.executable)
    args = (["--output-dir", str(ckpt), "--save-steps", "10"] if framework == "hf"
            else ["--ckpt-dir", str(ckpt), "--save-every", "10"])
    argv = ["sbatch", "--parsable", "--requeue", "--nodes=2", "--ntasks-per-node=1", "--open-mode=append",
            f"--job-name=e2e-{framework}-{uuid.uuid4().hex[:6]}", "-o", str(log), f"--comment={comment}",
            str(ROOT / "examples" / framework / "train.sbatch"), *args]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    job = r.stdout.strip().split(";")[0]
    return job, Path(str(log).replace("%j", job)), ckpt


def saved_steps(framework: str, ckpt: Path) -> list[int]:
    """Steps of the framework's own checkpoints in ``ckpt`` (HF ``checkpoint-N``, Lightning
    ``epoch=E-step=S.ckpt``), ascending."""
    try:
        names = os.listdir(ckpt)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _CKPT_RE[framework].match(n)))


def rank_process(job: str, rank: int) -> tuple[int, str] | None:
    """(pid, node) of the training process of ``rank`` of ``job`` (its python, not srun's shell)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/environ").read_bytes()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        if b"train.py" not in cmd or b"srun" in cmd.split(b"\0")[0]:
            continue
        env = dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)
        if env.get(b"SLURM_JOB_ID") == job.encode() and env.get(b"SLURM_PROCID") == str(rank).encode() \
                and env.get(b"SLURM_RESTART_COUNT", b"0") == b"0":
            return int(d), env.get(b"SLURMD_NODENAME", b"?").decode()
    return None


def inject(framework: str, job: str, ckpt: Path, kind: str, marker: Path, after_step: int = 10,
           rank: int = 1, timeout_s: float = 300, kern_log_template: str | None = None) -> dict:
    """Once attempt 0 saved its checkpoint at ``after_step`` (and ran ~2 s past it), SIGKILL
    (``crash``), SIGSTOP (``hang``), or append an Xid 79 line to ``kern_log_template`` (``{node}``
    replaced) and SIGKILL (``xid79``) ``rank``'s process. Writes and returns the marker.
    Raises ``TimeoutError`` (no checkpoint in time) or ``RuntimeError`` (the process is gone)."""
    sig = {"crash": signal.SIGKILL, "hang": signal.SIGSTOP, "xid79": signal.SIGKILL}[kind]
    deadline = time.monotonic() + timeout_s
    while not any(s >= after_step for s in saved_steps(framework, ckpt)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{framework} job {job}: no checkpoint at step {after_step} in {timeout_s:.0f} s")
        time.sleep(0.2)
    time.sleep(2.0)
    found = rank_process(job, rank)
    if found is None:
        raise RuntimeError(f"{framework} job {job}: rank {rank}'s process not found")
    pid, node = found
    now = time.time()
    if kind == "xid79":
        if not kern_log_template:
            raise ValueError("xid79 needs kern_log_template")
        path = Path(kern_log_template.replace("{node}", node))
        path.parent.mkdir(parents=True, exist_ok=True)
        lt = time.localtime(now)  # RFC 3164 stamp, as examples/train.py's syslog_time()
        stamp = f"{time.strftime('%b', lt)} {lt.tm_mday:2d} {time.strftime('%H:%M:%S', lt)}"
        with open(path, "a") as f:  # the line examples/train.py writes for its xid79 fault
            f.write(f"{stamp} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
                    "name=<unknown>, GPU has fallen off the bus.\n")
    os.kill(pid, sig)
    rec = {"kind": kind, "node": node, "rank": rank, "pid": pid, "saved_steps": saved_steps(framework, ckpt),
           "iso": datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds"), "unix_time": now}
    marker.write_text(json.dumps(rec))
    return rec
