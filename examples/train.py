#!/usr/bin/env python3
"""A small but real distributed training job for Revive's demo and tests.

N ranks of ``torch.distributed`` (gloo backend, CPU) train a tiny MLP on
synthetic data. Every step all-reduces the gradients (one real collective per
step), so a rank that dies, hangs or slows down is felt by all the others, as
on a GPU cluster.

Launched by ``srun`` with one task per node (see ``train.sbatch``): the rank and
world size come from ``SLURM_PROCID`` / ``SLURM_NTASKS``, the node name from
``SLURMD_NODENAME`` (``hostname`` is the same on every node of the local test
cluster). All ranks rendezvous on ``MASTER_ADDR=127.0.0.1``; the port is derived
from ``SLURM_JOB_ID`` and ``SLURM_RESTART_COUNT`` so that a requeued attempt
never collides with a port the previous attempt may still hold.

Lines printed (one per event, on stdout, flushed), the format Revive's monitor
parses::

    <ISO time> [rank R host NODE] iteration N/M | loss L | compute_ms C | step_time_ms T
    <ISO time> [rank 0 host NODE] saving checkpoint at iteration N
    <ISO time> [rank 0 host NODE] saved checkpoint at iteration N
    <ISO time> [rank R host NODE] resumed from checkpoint at iteration N

``<ISO time>`` is UTC with milliseconds, e.g. ``2026-11-29T15:04:05.123+00:00``.
``compute_ms`` excludes the collective (so a slow rank stands out);
``step_time_ms`` includes it.

Fault injection (fires once per job: a marker file records that it fired; an
attempt that finds the marker never fires again):

* ``crash``  the rank on ``--fault-node`` SIGKILLs itself at ``--fault-iteration``.
* ``hang``   the rank on the fault node blocks forever before the collective;
             the other ranks really wait in it (the gloo timeout is long).
* ``slow``   the rank on the fault node sleeps ``--slow-factor`` x the step time
             extra in compute, every iteration from the fault iteration on.
* ``xid79``  appends an NVIDIA Xid 79 syslog line to the fault node's kern.log
             (``--kern-log-template``) and the rank fails with
             ``RuntimeError: CUDA error: unknown error`` (exit 1).
* ``nccl``   the rank fails (exit 1) with the error ProcessGroupNCCL raises when a
             collective returns ``ncclSystemError``: ``torch.distributed.DistBackendError:
             NCCL error in: …ProcessGroupNCCL.cpp:1691, unhandled system error (run with
             NCCL_DEBUG=INFO for details), NCCL version 2.19.3`` followed by NCCL's
             explanation (see ``NCCL_ERROR``).

The GPU and NCCL lines are the only simulated text: there is no GPU (nor NCCL) here.

Engines (``--engine``):

* ``torch`` (default): the MLP above on ``torch.distributed`` (gloo). What the demo and the
  end-to-end tests run.
* ``plain``: the same log lines, faults, checkpoint cadence and rendezvous port, without torch: a
  linear model in pure Python whose gradients are averaged by a real all-reduce over TCP (rank 0
  sums what every rank sends each step and sends the mean back; a rank that dies or hangs is felt by
  all the others, as with gloo). It starts in ~0.05 s instead of torch's ~3-10 s import on a small
  machine; the chaos harness (``tests/chaos/harness.py``) runs it, since it measures Revive, not
  torch. Its checkpoint is ``checkpoint.json``.

Without Slurm (tests) set SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID and
SLURMD_NODENAME yourself, or use RANK / WORLD_SIZE.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

# Must be set before torch is imported to take effect on its thread pools.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import warnings  # noqa: E402

# The CPU wheel warns at import time when numpy is absent; that is noise in the job log.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

FAULT_KINDS = ("none", "crash", "hang", "slow", "xid79", "nccl")
ENGINES = ("torch", "plain")
CKPT_NAME = "checkpoint.pt"
PLAIN_CKPT_NAME = "checkpoint.json"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

# Slurm job ids are < 2^26 by default; 12 000 ports x 8 restarts slots stay below
# the Linux ephemeral range (32768+), so the rendezvous port never clashes with a
# client socket the kernel handed out.
PORT_BASE = 20000
PORT_SPAN = 12000
PORT_RESTART_SLOTS = 8


def iso_now() -> str:
    """UTC ISO-8601 time with milliseconds, e.g. 2026-11-29T15:04:05.123+00:00."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def syslog_time(t: float) -> str:
    """Classic syslog (RFC 3164) timestamp in local time, e.g. 'Nov 29 15:04:05', 'Nov  9 15:04:05'."""
    lt = time.localtime(t)
    return f"{_MONTHS[lt.tm_mon - 1]} {lt.tm_mday:2d} {lt.tm_hour:02d}:{lt.tm_min:02d}:{lt.tm_sec:02d}"


def derive_master_port(job_id: str, restart_count: int) -> int:
    """Rendezvous port from the job id and the restart count (a requeue gets a new port)."""
    try:
        jid = int(job_id)
    except ValueError:
        jid = sum(job_id.encode()) if job_id else 0
    slot = restart_count % PORT_RESTART_SLOTS
    return PORT_BASE + (jid * PORT_RESTART_SLOTS + slot) % PORT_SPAN


def _env_int(*names: str, default: int | None = None) -> int | None:
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return int(v)
    return default


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Tiny torch.distributed (gloo/CPU) training job with fault injection, for Revive.",
    )
    p.add_argument("--iterations", type=int, default=1000, help="total iterations M (default: %(default)s)")
    p.add_argument("--step-seconds", type=float, default=0.5,
                   help="target compute time per step, padded with sleep (default: %(default)s)")
    p.add_argument("--ckpt-every", type=int, default=10, help="rank 0 checkpoints every K iterations (default: %(default)s)")
    p.add_argument("--ckpt-dir", default=os.environ.get("REVIVE_CKPT_DIR"),
                   help="checkpoint directory, shared by all ranks and attempts (env REVIVE_CKPT_DIR). "
                        "Use a fresh one per submission: job ids restart at 1 on a fresh cluster.")
    p.add_argument("--fault", choices=FAULT_KINDS, default="none", help="fault to inject once per job (default: %(default)s)")
    p.add_argument("--fault-node", default="node2", help="node (SLURMD_NODENAME) whose rank faults (default: %(default)s)")
    p.add_argument("--fault-rank", type=int, default=None,
                   help="rank whose node faults, whatever node it landed on (overrides --fault-node)")
    p.add_argument("--fault-iteration", type=int, default=25, help="iteration at which the fault fires (default: %(default)s)")
    p.add_argument("--fault-marker", default=None,
                   help="marker file; the fault fires only if it does not exist "
                        "(default: <ckpt-dir>/fault-<job id>.json)")
    p.add_argument("--slow-factor", type=float, default=3.0,
                   help="slow fault: extra compute sleep = factor x step-seconds (default: %(default)s)")
    p.add_argument("--kern-log-template", default=None,
                   help="xid79 fault: kern.log path, {node} is replaced by the node name "
                        "(default: $REVIVE_CLUSTER_DIR/nodes/{node}/kern.log)")
    p.add_argument("--master-port", type=int, default=_env_int("REVIVE_MASTER_PORT"),
                   help="rendezvous port (env REVIVE_MASTER_PORT; default: derived from "
                        "SLURM_JOB_ID and SLURM_RESTART_COUNT)")
    p.add_argument("--collective-timeout-s", type=float, default=3600.0,
                   help="gloo timeout; long so that a hang stays a hang (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1234, help="model init and data seed (default: %(default)s)")
    p.add_argument("--engine", choices=ENGINES, default="torch",
                   help="torch: torch.distributed/gloo; plain: pure Python with a TCP all-reduce, "
                        "same lines and faults, no torch start-up (default: %(default)s)")
    args = p.parse_args(argv)

    if not args.ckpt_dir:
        p.error("--ckpt-dir (or env REVIVE_CKPT_DIR) is required")
    if args.iterations < 1 or args.ckpt_every < 1 or args.step_seconds < 0:
        p.error("--iterations and --ckpt-every must be >= 1, --step-seconds >= 0")
    if args.fault == "xid79" and args.kern_log_template is None:
        cluster_dir = os.environ.get("REVIVE_CLUSTER_DIR")
        if not cluster_dir:
            p.error("--fault xid79 needs --kern-log-template or env REVIVE_CLUSTER_DIR")
        args.kern_log_template = os.path.join(cluster_dir, "nodes", "{node}", "kern.log")
    return args


class Rank:
    """Where this process sits in the job, from Slurm's environment."""

    def __init__(self) -> None:
        rank = _env_int("SLURM_PROCID", "RANK")
        world = _env_int("SLURM_NTASKS", "WORLD_SIZE")
        if rank is None or world is None:
            sys.exit("train.py: SLURM_PROCID/SLURM_NTASKS (or RANK/WORLD_SIZE) must be set; launch with srun")
        self.rank: int = rank
        self.world: int = world
        self.node: str = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        self.job_id: str = os.environ.get("SLURM_JOB_ID", "local")
        self.restart: int = _env_int("SLURM_RESTART_COUNT", default=0) or 0

    def say(self, msg: str) -> None:
        print(f"{iso_now()} [rank {self.rank} host {self.node}] {msg}", flush=True)


# ----------------------------------------------------------------- faults --

def claim_fault(marker: Path, info: dict) -> bool:
    """Atomically create the marker with `info`; False if it already exists (fired before)."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    if marker.exists():
        return False
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, marker)  # atomic, and fails if another process won the race
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def xid79_line(node: str, t: float) -> str:
    return (f"{syslog_time(t)} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
            f"name=<unknown>, GPU has fallen off the bus.")


def append_kern_log(template: str, node: str, t: float) -> Path:
    path = Path(template.replace("{node}", node))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(xid79_line(node, t) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return path


NCCL_ERROR = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
    "Last error:\n"
)
"""The message of the ``DistBackendError`` a rank sees when an NCCL collective fails with
``ncclSystemError`` (torch 2.1-2.2 with NCCL 2.19.3, as reported by users: the first line is
``C10D_NCCL_CHECK`` in torch/csrc/distributed/c10d/NCCLUtils.hpp with ``ncclGetErrorString``'s text
for ncclSystemError; the second is ``getNcclErrorDetailStr`` in NCCLUtils.cpp; "Last error:" is
followed by ``ncclGetLastError``, empty here as in many reports)."""


class DistBackendError(RuntimeError):
    """Stands in for ``torch.distributed.DistBackendError`` in the plain engine (no torch there): the
    traceback's last line reads the same."""


DistBackendError.__module__ = "torch.distributed"


def simulated_nccl_failure(engine: str = "torch") -> None:
    # What a rank sees when its NCCL communicator fails mid-collective (no NCCL here: gloo runs the job).
    if engine == "plain":
        raise DistBackendError(NCCL_ERROR)
    import torch.distributed as dist

    raise dist.DistBackendError(NCCL_ERROR)


def simulated_cuda_failure() -> None:
    # What a rank sees after its GPU fell off the bus: the next CUDA call fails.
    raise RuntimeError("CUDA error: unknown error")


def fire_fault(args: argparse.Namespace, me: Rank, it: int, marker: Path) -> bool:
    """Fire ``args.fault`` once per job (the marker records it). Crash, hang, xid79 and nccl do not
    return; True when the slow fault starts."""
    now = time.time()
    info = {
        "kind": args.fault,
        "time": datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds"),
        "unix_time": now,
        "node": me.node,
        "rank": me.rank,
        "iteration": it,
        "job_id": me.job_id,
        "restart_count": me.restart,
        "pid": os.getpid(),
    }
    if not claim_fault(marker, info):
        return False
    if args.fault == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    elif args.fault == "hang":
        while True:  # blocked before the collective; the peers wait in it
            time.sleep(3600)
    elif args.fault == "xid79":
        append_kern_log(args.kern_log_template, me.node, now)
        sys.stdout.flush()
        simulated_cuda_failure()
    elif args.fault == "nccl":
        sys.stdout.flush()
        simulated_nccl_failure(args.engine)
    return args.fault == "slow"


def pad_step(args: argparse.Namespace, t0: float, slow_active: bool) -> float:
    """Sleep out the rest of ``--step-seconds`` (plus the slow fault's extra) since ``t0``
    (``time.perf_counter``); returns the time after it."""
    pad = args.step_seconds - (time.perf_counter() - t0)
    if slow_active:
        pad += args.slow_factor * args.step_seconds
    if pad > 0:
        time.sleep(pad)
    return time.perf_counter()


def save_checkpoint(me: Rank, it: int, path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Rank 0's atomic save, between its two lines: ``write(f)`` into a temp file beside ``path``,
    fsync, rename over ``path``."""
    me.say(f"saving checkpoint at iteration {it}")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    me.say(f"saved checkpoint at iteration {it}")


# ------------------------------------------------------- plain engine: TCP all-reduce --

class PeerLost(RuntimeError):
    """A peer's connection closed or failed mid-collective (gloo says "Connection closed by peer")."""


class TcpAllReduce:
    """Mean all-reduce of a list of floats over TCP, rank 0 in the middle (a star).

    Wire format: each message is a 4-byte big-endian length and a JSON array of floats. Rank 0
    listens on ``port`` and accepts ``world - 1`` peers (each sends its rank first); every
    ``all_reduce`` sends the vector to rank 0, which sums, divides by ``world`` and sends the mean
    back. ``timeout_s`` bounds every wait (long by default, so a hang stays a hang).

    Errors: ``PeerLost`` when a peer closes or the socket fails; ``TimeoutError`` when the
    rendezvous does not complete in ``timeout_s``."""

    def __init__(self, rank: int, world: int, addr: str, port: int, timeout_s: float) -> None:
        self.rank, self.world = rank, world
        self.peers: dict[int, socket.socket] = {}
        deadline = time.monotonic() + timeout_s
        if world == 1:
            return
        if rank == 0:
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind((addr, port))
            srv.listen(world)
            srv.settimeout(timeout_s)
            while len(self.peers) < world - 1:
                conn, _ = srv.accept()
                conn.settimeout(timeout_s)
                peer = int(self._recv(conn)[0])
                self.peers[peer] = conn
            srv.close()
        else:
            while True:
                try:
                    conn = socket.create_connection((addr, port), timeout=5)
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"rank {rank}: no rendezvous at {addr}:{port} in {timeout_s:.0f}s") from e
                    time.sleep(0.05)
            conn.settimeout(timeout_s)
            self.peers[0] = conn
            self._send(conn, [float(rank)])
        for c in self.peers.values():
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @staticmethod
    def _send(conn: socket.socket, vec: list[float]) -> None:
        data = json.dumps(vec).encode()
        conn.sendall(len(data).to_bytes(4, "big") + data)

    def _recv(self, conn: socket.socket) -> list[float]:
        def exact(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = conn.recv(n - len(buf))
                if not chunk:
                    raise PeerLost(f"[rank {self.rank}] plain all-reduce: Connection closed by peer")
                buf += chunk
            return buf

        return json.loads(exact(int.from_bytes(exact(4), "big")))

    def all_reduce(self, vec: list[float]) -> list[float]:
        if self.world == 1:
            return list(vec)
        try:
            if self.rank == 0:
                total = list(vec)
                for peer in sorted(self.peers):
                    for i, v in enumerate(self._recv(self.peers[peer])):
                        total[i] += v
                mean = [v / self.world for v in total]
                for conn in self.peers.values():
                    self._send(conn, mean)
                return mean
            self._send(self.peers[0], vec)
            return self._recv(self.peers[0])
        except OSError as e:
            raise PeerLost(f"[rank {self.rank}] plain all-reduce: Connection closed by peer ({e})") from e

    def close(self) -> None:
        for c in self.peers.values():
            c.close()


def train_plain(args: argparse.Namespace, me: Rank, master_addr: str, port: int, ckpt_dir: Path,
                marker: Path) -> int:
    """The plain engine: linear regression (16 weights, SGD with momentum) on seeded synthetic data,
    the mean gradient from ``TcpAllReduce`` every step; the same lines as the torch engine."""
    import random

    ckpt_path = ckpt_dir / PLAIN_CKPT_NAME
    comm = TcpAllReduce(me.rank, me.world, master_addr, port, args.collective_timeout_s)
    dim, lr, beta = 16, 0.05, 0.9
    true_w = [-1.0 + 2.0 * i / (dim - 1) for i in range(dim)]
    w, mom = [0.0] * dim, [0.0] * dim
    start_it = 1
    if ckpt_path.exists():
        state = json.loads(ckpt_path.read_text())
        w, mom, done = state["model"], state["optim"], int(state["iteration"])
        me.say(f"resumed from checkpoint at iteration {done}")
        start_it = done + 1
    comm.all_reduce([0.0])  # the barrier: nobody trains before every rank has loaded the checkpoint

    fault_here = args.fault != "none" and (
        me.rank == args.fault_rank if args.fault_rank is not None else me.node == args.fault_node)
    slow_active = False
    for it in range(start_it, args.iterations + 1):
        t0 = time.perf_counter()
        rnd = random.Random(args.seed * 1_000_003 + it * 1009 + me.rank)
        grad, loss = [0.0] * dim, 0.0
        for _ in range(64):
            x = [rnd.gauss(0.0, 1.0) for _ in range(dim)]
            y = sum(a * b for a, b in zip(true_w, x, strict=True)) + 0.01 * rnd.gauss(0.0, 1.0)
            err = sum(a * b for a, b in zip(w, x, strict=True)) - y
            loss += err * err / 64
            for i in range(dim):
                grad[i] += 2.0 * err * x[i] / 64

        if fault_here and it == args.fault_iteration and fire_fault(args, me, it, marker):
            slow_active = True

        t1 = pad_step(args, t0, slow_active)

        flat = comm.all_reduce(grad + [loss])
        for i in range(dim):
            mom[i] = beta * mom[i] + flat[i]
            w[i] -= lr * mom[i]
        t2 = time.perf_counter()

        me.say(f"iteration {it}/{args.iterations} | loss {flat[-1]:.6f} | "
               f"compute_ms {(t1 - t0) * 1000:.1f} | step_time_ms {(t2 - t0) * 1000:.1f}")

        if me.rank == 0 and (it % args.ckpt_every == 0 or it == args.iterations):
            state = {"model": w, "optim": mom, "iteration": it, "world_size": me.world, "job_id": me.job_id}
            save_checkpoint(me, it, ckpt_path, lambda f, state=state: f.write(json.dumps(state).encode()))

    comm.all_reduce([0.0])
    me.say(f"training complete at iteration {args.iterations}")
    comm.close()
    return 0


# --------------------------------------------------------------- training --

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    me = Rank()
    master_addr = os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    port = args.master_port or derive_master_port(me.job_id, me.restart)
    os.environ["MASTER_PORT"] = str(port)
    if master_addr.startswith("127.") or master_addr == "localhost":
        # all "nodes" are one machine: keep gloo's pairs on loopback whatever `hostname` resolves to
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

    ckpt_dir = Path(args.ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = ckpt_dir / CKPT_NAME
    marker = Path(args.fault_marker) if args.fault_marker else ckpt_dir / f"fault-{me.job_id}.json"

    me.say(f"starting job {me.job_id} restart {me.restart} world_size {me.world} "
           f"master {master_addr}:{port} iterations {args.iterations} fault {args.fault}"
           + (f"@{args.fault_node}:{args.fault_iteration}" if args.fault != "none" else "")
           + (" engine plain" if args.engine == "plain" else ""))
    if args.engine == "plain":
        return train_plain(args, me, master_addr, port, ckpt_dir, marker)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)

    # the store the tcp:// init method would make, held here so that rank 0 (its host) can leave last
    store = dist.TCPStore(master_addr, port, me.world, is_master=me.rank == 0,
                          timeout=timedelta(seconds=args.collective_timeout_s))
    dist.init_process_group(
        backend="gloo",
        store=store,
        rank=me.rank,
        world_size=me.world,
        timeout=timedelta(seconds=args.collective_timeout_s),
    )

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    true_w = torch.linspace(-1.0, 1.0, 16).unsqueeze(1)
    params = list(model.parameters())

    start_it = 1
    if ckpt_path.exists():
        state = torch.load(ckpt_path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        done = int(state["iteration"])
        me.say(f"resumed from checkpoint at iteration {done}")
        start_it = done + 1
    # nobody trains (and rank 0 never overwrites the checkpoint) before every rank has loaded it
    dist.barrier()

    if args.fault_rank is not None:
        fault_here = args.fault != "none" and me.rank == args.fault_rank
    else:
        fault_here = args.fault != "none" and me.node == args.fault_node
    slow_active = False

    for it in range(start_it, args.iterations + 1):
        t0 = time.perf_counter()

        # ---- compute (local): forward, backward, padded to --step-seconds
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + it * 1009 + me.rank)
        x = torch.randn(64, 16, generator=g)
        y = x @ true_w + 0.01 * torch.randn(64, 1, generator=g)
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()

        if fault_here and it == args.fault_iteration and fire_fault(args, me, it, marker):
            slow_active = True

        t1 = pad_step(args, t0, slow_active)

        # ---- the collective: average gradients and loss across ranks (one all_reduce)
        flat = torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1)])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= me.world
        off = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[off:off + n].view_as(p))
            off += n
        opt.step()
        t2 = time.perf_counter()

        me.say(f"iteration {it}/{args.iterations} | loss {flat[-1].item():.6f} | "
               f"compute_ms {(t1 - t0) * 1000:.1f} | step_time_ms {(t2 - t0) * 1000:.1f}")

        if me.rank == 0 and (it % args.ckpt_every == 0 or it == args.iterations):
            state = {"model": model.state_dict(), "optim": opt.state_dict(), "iteration": it,
                     "world_size": me.world, "job_id": me.job_id}
            save_checkpoint(me, it, ckpt_path, lambda f, state=state: torch.save(state, f))

    dist.barrier()
    me.say(f"training complete at iteration {args.iterations}")
    dist.destroy_process_group()
    leave_together(store, me)
    return 0


def leave_together(store: Any, me: Rank, timeout_s: float = 30.0) -> None:
    """Rank 0 hosts the TCPStore the process group ran on: it exits only after every other rank has
    destroyed its process group (a rank still tearing gloo down when the store's host went away died
    in ``std::terminate`` - "terminate called without an active exception", rc -6 - in a CI run on
    2026-12-04). A peer that is gone already costs rank 0 at most ``timeout_s`` seconds, never its
    exit code: training is complete by then."""
    import torch.distributed as dist

    try:
        if me.rank == 0:
            store.wait([f"revive/left/{r}" for r in range(1, me.world)], timedelta(seconds=timeout_s))
        else:
            store.set(f"revive/left/{me.rank}", "1")
    except (RuntimeError, dist.DistError) as exc:
        me.say(f"leaving without every peer's goodbye: {type(exc).__name__}: {str(exc)[:200]}")


if __name__ == "__main__":
    sys.exit(main())
