"""examples/train.py without Slurm: real gloo ranks as local subprocesses.

Each test starts 2 ranks with the environment srun would give them
(SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID, SLURMD_NODENAME). torch is required:
these tests fail, never skip, when it is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"
PROGRESS = re.compile(
    rf"^(?P<ts>{ISO}) \[rank (?P<rank>\d+) host (?P<host>\S+)\] iteration (?P<it>\d+)/(?P<total>\d+)"
    r" \| loss (?P<loss>-?\d+\.\d+) \| compute_ms (?P<c>\d+\.\d) \| step_time_ms (?P<t>\d+\.\d)$"
)
XID79 = re.compile(
    r"^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 123]\d \d\d:\d\d:\d\d node2 kernel: "
    r"NVRM: Xid \(PCI:0000:3b:00\): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus\.$"
)


def _load_train_module():
    spec = importlib.util.spec_from_file_location("revive_example_train", TRAIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(rank: int, world: int, job_id: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(
        SLURM_PROCID=str(rank),
        SLURM_NTASKS=str(world),
        SLURM_JOB_ID=job_id,
        SLURMD_NODENAME=f"node{rank + 1}",
        REVIVE_MASTER_PORT=str(port),
        MASTER_ADDR="127.0.0.1",
        PYTHONUNBUFFERED="1",
    )
    return env


class Ranks:
    """Two (or N) ranks of train.py as subprocesses; stdout/stderr go to files."""

    def __init__(self, tmp: Path, name: str, args: list[str], world: int = 2, job_id: str = "4242"):
        port = _free_port()
        self.dir = tmp / name
        self.dir.mkdir(parents=True)
        self.procs: list[subprocess.Popen] = []
        for r in range(world):
            out = open(self.dir / f"rank{r}.out", "w")
            err = open(self.dir / f"rank{r}.err", "w")
            self.procs.append(subprocess.Popen(
                [sys.executable, "-u", str(TRAIN), *args],
                env=_env(r, world, job_id, port), stdout=out, stderr=err, cwd=tmp,
            ))
            out.close()
            err.close()

    def wait(self, timeout: float = 60) -> list[int]:
        deadline = time.monotonic() + timeout
        try:
            return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in self.procs]
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"ranks did not finish within {timeout}s:\n{self.dump()}")

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def out(self, r: int) -> list[str]:
        return (self.dir / f"rank{r}.out").read_text().splitlines()

    def err(self, r: int) -> str:
        return (self.dir / f"rank{r}.err").read_text()

    def dump(self) -> str:
        return "\n".join(
            f"--- rank {r} rc={p.poll()}\n" + "\n".join(self.out(r)) + "\n--- stderr\n" + self.err(r)
            for r, p in enumerate(self.procs)
        )


ENGINES = pytest.mark.parametrize("engine", ["torch", "plain"])
"""Both engines of train.py print the same lines and fire the same faults (the chaos harness runs plain)."""
CKPT_FILE = {"torch": "checkpoint.pt", "plain": "checkpoint.json"}


def _iterations(lines: list[str]) -> list[int]:
    return [int(m["it"]) for m in map(PROGRESS.match, lines) if m]


def test_torch_is_installed():
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
            import torch  # noqa: F401
            import torch.distributed as dist
    except ImportError as e:  # the demo extra pins it: pip install -e '.[demo]'
        pytest.fail(f"torch is required for the example training job: {e}")
    assert dist.is_available() and dist.is_gloo_available()


def test_helpers():
    m = _load_train_module()
    # a requeued attempt gets another port; the port stays below the ephemeral range
    ports = {m.derive_master_port("17", r) for r in range(4)}
    assert len(ports) == 4 and all(20000 <= p < 32768 for p in ports)
    assert m.derive_master_port("17", 0) != m.derive_master_port("18", 0)
    assert re.fullmatch(r"[A-Z][a-z]{2} [ 123]\d \d\d:\d\d:\d\d", m.syslog_time(time.time()))
    t = time.mktime((2026, 11, 9, 15, 4, 5, 0, 0, -1))
    assert m.syslog_time(t) == "Nov  9 15:04:05"
    assert re.fullmatch(ISO, m.iso_now())


@ENGINES
def test_progress_checkpoint_and_resume(tmp_path, engine):
    ckpt = tmp_path / "ckpt"
    common = ["--step-seconds", "0.02", "--ckpt-every", "3", "--ckpt-dir", str(ckpt), "--engine", engine]
    first = Ranks(tmp_path, "first", ["--iterations", "6", *common])
    assert first.wait() == [0, 0], first.dump()

    for r in (0, 1):
        lines = first.out(r)
        progress = [PROGRESS.match(line) for line in lines if "] iteration " in line]
        assert progress and all(progress), f"bad progress line in:\n{first.dump()}"
        assert {(m["rank"], m["host"], m["total"]) for m in progress} == {(str(r), f"node{r + 1}", "6")}
        assert [int(m["it"]) for m in progress] == [1, 2, 3, 4, 5, 6]
        for m in progress:
            assert float(m["t"]) >= float(m["c"]) >= 15.0  # step time includes compute (>= the 20 ms pad)
        assert not any("resumed from checkpoint" in line for line in lines)

    saves = [line for line in first.out(0) if "checkpoint" in line]
    assert [re.sub(rf"^{ISO} ", "", s) for s in saves] == [
        "[rank 0 host node1] saving checkpoint at iteration 3",
        "[rank 0 host node1] saved checkpoint at iteration 3",
        "[rank 0 host node1] saving checkpoint at iteration 6",
        "[rank 0 host node1] saved checkpoint at iteration 6",
    ]
    assert not any("checkpoint" in line for line in first.out(1))  # only rank 0 saves
    assert sorted(p.name for p in ckpt.iterdir()) == [CKPT_FILE[engine]]  # no temp file left behind

    second = Ranks(tmp_path, "second", ["--iterations", "9", *common])
    assert second.wait() == [0, 0], second.dump()
    for r in (0, 1):
        lines = second.out(r)
        resumed = [i for i, line in enumerate(lines) if "resumed from checkpoint" in line]
        assert len(resumed) == 1, second.dump()
        assert re.fullmatch(
            rf"{ISO} \[rank {r} host node{r + 1}\] resumed from checkpoint at iteration 6", lines[resumed[0]]
        )
        after = _iterations(lines[resumed[0] + 1:])
        assert after == [7, 8, 9], second.dump()


@ENGINES
def test_crash_fault_sigkills_the_rank_and_the_survivor_gets_a_connection_error(tmp_path, engine):
    ckpt = tmp_path / "ckpt"
    ranks = Ranks(tmp_path, "crash", ["--iterations", "200", "--step-seconds", "0.05", "--ckpt-dir", str(ckpt),
                                      "--fault", "crash", "--fault-node", "node2", "--fault-iteration", "3",
                                      "--engine", engine],
                  job_id="77")
    rcs = ranks.wait()
    assert rcs[1] == -signal.SIGKILL, ranks.dump()
    assert rcs[0] == 1, ranks.dump()
    err0 = ranks.err(0)
    survivor_error = {"torch": "RuntimeError", "plain": "PeerLost: [rank 0] plain all-reduce"}[engine]
    # gloo's TCP pair reports a peer that died as "closed" (EOF) or, when the kernel saw the peer's
    # socket reset first (timing, a loaded host), as "reset" (gloo/transport/tcp/pair.cc)
    assert survivor_error in err0, err0
    assert "Connection closed by peer" in err0 or "Connection reset by peer" in err0, err0
    assert _iterations(ranks.out(1)) == [1, 2]
    marker = json.loads((ckpt / "fault-77.json").read_text())
    assert (marker["kind"], marker["node"], marker["iteration"], marker["rank"]) == ("crash", "node2", 3, 1)


@ENGINES
def test_xid79_writes_kern_log_and_marker_and_fires_once(tmp_path, engine):
    ckpt = tmp_path / "ckpt"
    template = str(tmp_path / "cluster" / "nodes" / "{node}" / "kern.log")
    args = ["--iterations", "6", "--step-seconds", "0.05", "--ckpt-every", "2", "--ckpt-dir", str(ckpt),
            "--fault", "xid79", "--fault-node", "node2", "--fault-iteration", "4",
            "--kern-log-template", template, "--engine", engine]
    t_before = time.time()
    ranks = Ranks(tmp_path, "xid", args, job_id="99")
    rcs = ranks.wait()
    t_after = time.time()
    assert rcs[1] == 1, ranks.dump()
    assert rcs[0] != 0, ranks.dump()  # the survivor fails in the collective
    err1 = [line for line in ranks.err(1).splitlines() if line.strip()]
    assert "Traceback (most recent call last):" in err1[0]
    assert err1[-1].endswith("RuntimeError: CUDA error: unknown error"), err1
    assert _iterations(ranks.out(1)) == [1, 2, 3]

    kern = tmp_path / "cluster" / "nodes" / "node2" / "kern.log"
    lines = kern.read_text().splitlines()
    assert len(lines) == 1 and XID79.match(lines[0]), lines
    assert not (tmp_path / "cluster" / "nodes" / "node1").exists()

    marker = json.loads((ckpt / "fault-99.json").read_text())
    assert (marker["kind"], marker["node"], marker["iteration"], marker["job_id"]) == ("xid79", "node2", 4, "99")
    assert t_before <= marker["unix_time"] <= t_after
    assert re.fullmatch(ISO, marker["time"])
    _load = _load_train_module()
    assert lines[0].startswith(_load.syslog_time(marker["unix_time"]) + " node2 kernel: ")

    # the same job, next attempt: resumes from iteration 2 and runs past 4; the marker stops a second fault
    again = Ranks(tmp_path, "xid-again", args, job_id="99")
    assert again.wait() == [0, 0], again.dump()
    assert _iterations(again.out(1)) == [3, 4, 5, 6]
    assert len(kern.read_text().splitlines()) == 1


@ENGINES
def test_nccl_fault_fails_the_rank_with_the_ncclsystemerror_revive_reads_as_an_nccl_error(tmp_path, engine):
    from revive.signatures.matcher import scan_text

    ckpt = tmp_path / "ckpt"
    ranks = Ranks(tmp_path, "nccl", ["--iterations", "200", "--step-seconds", "0.05", "--ckpt-dir", str(ckpt),
                                     "--fault", "nccl", "--fault-node", "node2", "--fault-iteration", "3",
                                     "--engine", engine],
                  job_id="66")
    rcs = ranks.wait()
    assert rcs[1] == 1 and rcs[0] != 0, ranks.dump()  # the survivor fails in the collective
    err1 = ranks.err(1)
    assert ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3") in err1, err1
    assert "ncclSystemError: System call (e.g. socket, malloc) or external library call failed" in err1
    assert _iterations(ranks.out(1)) == [1, 2]
    hits = {m.id for _, m in scan_text(err1)}
    assert "nccl.system_error" in hits, hits
    marker = json.loads((ckpt / "fault-66.json").read_text())
    assert (marker["kind"], marker["node"], marker["iteration"]) == ("nccl", "node2", 3)


@ENGINES
def test_hang_fault_blocks_one_rank_and_the_other_waits_in_the_collective(tmp_path, engine):
    ckpt = tmp_path / "ckpt"
    ranks = Ranks(tmp_path, "hang", ["--iterations", "200", "--step-seconds", "0.05", "--ckpt-dir", str(ckpt),
                                     "--fault", "hang", "--fault-iteration", "3", "--engine", engine], job_id="55")
    try:
        marker = ckpt / "fault-55.json"
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            assert all(p.poll() is None for p in ranks.procs), ranks.dump()
            time.sleep(0.1)
        assert marker.exists(), ranks.dump()
        time.sleep(1.0)  # 20 step times: a live job would have moved on
        before = [len(ranks.out(r)) for r in (0, 1)]
        time.sleep(1.0)
        assert all(p.poll() is None for p in ranks.procs), ranks.dump()
        assert [len(ranks.out(r)) for r in (0, 1)] == before
        assert _iterations(ranks.out(0)) == [1, 2] and _iterations(ranks.out(1)) == [1, 2]
        assert "Error" not in ranks.err(0)
    finally:
        ranks.kill()


def test_plain_engine_runs_where_torch_cannot_be_imported(tmp_path, monkeypatch):
    blocker = tmp_path / "no-torch" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('torch is blocked in this test')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(blocker.parent), os.environ.get("PYTHONPATH")])))
    ranks = Ranks(tmp_path, "plain", ["--iterations", "4", "--step-seconds", "0.01", "--ckpt-every", "2",
                                      "--ckpt-dir", str(tmp_path / "ckpt"), "--engine", "plain"])
    assert ranks.wait() == [0, 0], ranks.dump()
    assert _iterations(ranks.out(0)) == [1, 2, 3, 4]
    assert json.loads((tmp_path / "ckpt" / "checkpoint.json").read_text())["iteration"] == 4

    torch_run = Ranks(tmp_path, "torch", ["--iterations", "4", "--ckpt-dir", str(tmp_path / "ckpt2")])
    assert torch_run.wait() != [0, 0] and "torch is blocked" in torch_run.err(0)  # the blocker works
