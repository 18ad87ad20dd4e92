"""Job logs for the checkpoint tests: Revive's demo format (``revive_demo`` profile) and a
Lightning run (``lightning`` profile, lines as in ``tests/data/progress/lightning/formats.log``)."""

from __future__ import annotations

from datetime import timedelta

from tests.helpers.builders import T0, progress


def attempt(restart: int, first: int, last: int, saves=(), resumed: int | None = None, t0=T0) -> list[str]:
    """One demo-job attempt: its marker, optional resume line, iterations ``first..last`` on two ranks."""
    t = t0 + timedelta(minutes=restart)
    out = [f"=== attempt restart={restart} {t.isoformat()}"]
    if resumed is not None:
        out.append(f"{t.isoformat()} [rank 0 host node1] resumed from checkpoint at iteration {resumed}")
    for it in range(first, last + 1):
        ti = t + timedelta(seconds=it)
        out += [progress(it, 0, "node1", ti), progress(it, 1, "node2", ti)]
        if it in saves:
            out.append(f"{ti.isoformat()} [rank 0 host node1] saved checkpoint at iteration {it}")
    return out


def crash() -> list[str]:
    return ["[rank 1 host node2] Segmentation fault (core dumped)",
            "srun: error: node2: task 1: Exited with exit code 139"]


def bad_checkpoint_log() -> str:
    """Attempt 0 saves 10 and 20 and crashes at 25; attempt 1 resumes from 20 and crashes at 22."""
    lines = attempt(0, 1, 25, saves=(10, 20)) + crash() + attempt(1, 21, 22, resumed=20) + crash()
    return "\n".join(lines) + "\n"


def lightning_log(step: int = 300) -> str:
    """A Lightning run with SLURM auto-requeue enabled, at ``step`` of epoch 0."""
    return ("GPU available: False, used: False\n"
            "SLURM auto-requeueing enabled. Setting signal handlers.\n"
            f"Epoch 0:  30%|███       | {step}/1000 [02:30<05:50,  2.00it/s, v_num=3, train_loss=1.700]\n")


LIGHTNING_SAVED = ("Handling auto-requeue signal: 10\n"
                   "requeing job 7...\n"
                   "Requeued SLURM job: 7\n")
"""What Lightning's ``_slurm_sigusr_handler_fn`` prints after saving ``hpc_ckpt_<N>.ckpt``."""
