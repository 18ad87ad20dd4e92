"""Signals Revive may send to a running job, and which of the job's processes ``scancel`` reaches.

Source: Slurm 22.05 ``scancel(1)``: ``--signal=<name>`` without ``--batch``/``--full`` signals
every job step *except* the batch step (the ``srun``-launched ranks); ``--batch`` signals only the
batch step (the batch shell and the processes it started directly, not other steps); ``--full``
signals the batch step and every other step. Pure (stdlib only): used by the policy, the profiles,
the scheduler interface and workflow code.
"""

from __future__ import annotations

from enum import StrEnum


class SignalScope(StrEnum):
    """Which of a job's processes receive the signal (``scancel(1)``, Slurm 22.05)."""

    steps = "steps"
    """``scancel --signal=S <job>``: every step except the batch step (srun-launched ranks)."""
    batch = "batch"
    """``scancel --batch --signal=S <job>``: only the batch step (the batch shell, its children)."""
    full = "full"
    """``scancel --full --signal=S <job>``: the batch step and every other step."""


SAVE_SIGNALS: frozenset[str] = frozenset({"USR1", "USR2", "TERM", "INT", "HUP", "CONT", "URG"})
"""Names Revive accepts for a save signal (``signal(7)``, without the ``SIG`` prefix). KILL and STOP
are never a save request; anything else is refused."""


def normalize_signal(name: str) -> str:
    """``"SIGUSR1"`` / ``"usr1"`` / ``" USR1 "`` → ``"USR1"``. Raises ``ValueError`` for a name
    outside ``SAVE_SIGNALS`` (a number, KILL, STOP, garbage)."""
    s = str(name).strip().upper()
    if s.startswith("SIG"):
        s = s[3:]
    if s not in SAVE_SIGNALS:
        raise ValueError(f"{name!r} is not a save signal (one of {', '.join(sorted(SAVE_SIGNALS))})")
    return s


def scancel_argv(job_id: str, signal: str, scope: SignalScope) -> list[str]:
    """The ``scancel`` command line that sends ``signal`` to ``scope`` of ``job_id``."""
    sig = normalize_signal(signal)
    flag = {SignalScope.steps: [], SignalScope.batch: ["--batch"], SignalScope.full: ["--full"]}[SignalScope(scope)]
    return ["scancel", *flag, f"--signal={sig}", str(job_id)]
