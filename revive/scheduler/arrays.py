"""Job-array task ids and job dependencies, as Slurm 22.05 prints them. Pure, no I/O.

Array ids (``sbatch(1)`` ``--array``; ``scontrol(1)``): a task is addressed as
``<ArrayJobId>_<ArrayTaskId>`` (``123_4``); the tasks still pending as one record are
``123_[5-9%2]`` (ranges, ``:step``, ``%`` the throttle). A task's own ``JobId`` is a plain number,
and for one task it equals the ``ArrayJobId``: ``scontrol requeue 123`` then acts on *every* task
of array 123, so Revive always uses the ``_`` form for a task.

Dependencies (``sbatch(1)`` ``--dependency``; ``scontrol show job`` ``Dependency=``):
``afterok:123_4(unfulfilled),afterany:77(failed)`` — ``,`` means all of them, ``?`` any of them;
a ``(failed)`` one is never satisfied (the job pends with ``Reason=DependencyNeverSatisfied``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ArrayRef", "Dependency", "parse_job_ref", "expand_task_set", "parse_dependency",
           "depends_on", "MAX_TASKS"]

MAX_TASKS = 100_000
"""Cap on the tasks one id may expand to (Slurm's MaxArraySize is at most 4 000 001)."""

_SIMPLE = re.compile(r"^(?P<job>\d{1,12})(?:_(?P<task>\d{1,9}|\*|\[[0-9,\-:%]{1,200}\]))?$")
_RANGE = re.compile(r"^(\d{1,9})(?:-(\d{1,9})(?::(\d{1,9}))?)?$")
_DEP = re.compile(r"^(?P<type>after|afterany|afterok|afternotok|aftercorr|afterburstbuffer|singleton)"
                  r"(?::(?P<rest>.*))?$")


@dataclass(frozen=True)
class ArrayRef:
    """A parsed job id: ``job`` (the ArrayJobId, or the plain job id) and ``task``: None (not an
    array task), ``"4"`` (one task), ``"*"`` (every task) or ``"[1-9%2]"`` (a set)."""

    job: str
    task: str | None = None

    @property
    def is_task(self) -> bool:
        """One array task (the unit Revive acts on)."""
        return self.task is not None and self.task.isdigit()

    def __str__(self) -> str:
        return self.job if self.task is None else f"{self.job}_{self.task}"


def parse_job_ref(text: str) -> ArrayRef:
    """``"123"`` / ``"123_4"`` / ``"123_*"`` / ``"123_[1-9%2]"`` → ``ArrayRef``. Raises
    ``ValueError`` on anything else (a job id is data from outside: never trusted)."""
    m = _SIMPLE.match(str(text).strip())
    if not m:
        raise ValueError(f"not a Slurm job id: {str(text)[:60]!r}")
    task = m.group("task")
    if task and task.startswith("["):
        expand_task_set(task)  # validates
    return ArrayRef(m.group("job"), task)


def expand_task_set(task: str) -> list[int]:
    """``"4"`` → [4]; ``"[1-9:2%3]"`` / ``"1-3,7"`` → [1, 3, 5, 7, 9] / [1, 2, 3, 7] (the throttle
    after ``%`` is dropped). Raises ``ValueError`` when malformed or over ``MAX_TASKS``."""
    body = task.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    body = body.split("%", 1)[0]
    if not body:
        raise ValueError(f"empty array task set {task!r}")
    out: list[int] = []
    for part in body.split(","):
        m = _RANGE.match(part)
        if not m:
            raise ValueError(f"bad array task range {part!r} in {task!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or step < 1:
            raise ValueError(f"bad array task range {part!r} in {task!r}")
        if len(out) + (hi - lo) // step + 1 > MAX_TASKS:
            raise ValueError(f"array task set {task[:40]!r} has more than {MAX_TASKS} tasks")
        out.extend(range(lo, hi + 1, step))
    return sorted(set(out))


@dataclass(frozen=True)
class Dependency:
    """One term of a ``Dependency=`` value: ``kind`` (afterok …), ``job`` (the id as printed,
    e.g. ``123_4``, ``123_*``), ``state`` (``unfulfilled``, ``failed`` … or '')."""

    kind: str
    job: str | None
    state: str = ""

    @property
    def never(self) -> bool:
        """slurmctld marked it as never satisfiable."""
        return self.state == "failed"


def parse_dependency(text: str | None) -> list[Dependency]:
    """``"afterok:123_4(unfulfilled),afterany:77:78(failed)"`` → one ``Dependency`` per job.
    ``None``/``(null)``/garbage → [] (never raises: the value comes from slurmctld output)."""
    if not text or text.strip() in ("", "(null)"):
        return []
    out: list[Dependency] = []
    for term in re.split(r"[,?]", text.strip()):
        term = term.strip()
        state = ""
        m = re.match(r"^(.*)\(([a-z_]+)\)$", term)
        if m:
            term, state = m.group(1), m.group(2)
        d = _DEP.match(term)
        if not d:
            continue
        if d.group("type") == "singleton":
            out.append(Dependency("singleton", None, state))
            continue
        for ref in (d.group("rest") or "").split(":"):
            ref = ref.split("+", 1)[0].strip()  # after:<id>+<minutes>
            if _SIMPLE.match(ref):
                out.append(Dependency(d.group("type"), ref, state))
    return out


def depends_on(dependency: str | None, job_id: str) -> list[Dependency]:
    """The terms of ``dependency`` that wait on ``job_id`` (a plain id, or an array task
    ``123_4``: then ``123`` / ``123_*`` terms match too, they wait for every task)."""
    try:
        want = parse_job_ref(job_id)
    except ValueError:
        return []
    hits = []
    for d in parse_dependency(dependency):
        if d.job is None:
            continue
        ref = parse_job_ref(d.job)
        if ref.job != want.job:
            continue
        if want.task is None or ref.task in (None, "*", want.task) or (
                ref.task and ref.task.startswith("[") and want.is_task
                and int(want.task) in expand_task_set(ref.task)):
            hits.append(d)
    return hits
