"""Resume from the previous checkpoint: the documented, reversible file step per framework layout.

Pure (no I/O): ``plan_rollback`` turns what the checkpoint directory holds (its entry names, the
tracker file's text) into file operations and their exact reverse. The activity
(``activities.rollback``) reads the directory and runs the operations on the login node through
the site's runner (local or SSH) as argument lists; ``revive checkpoint undo <incident>`` runs the
recorded reverse.

Steps (each framework's own resume rule, ``revive/profiles/profiles.yaml`` ``checkpoint_layout``):

- **tracker file** (Megatron-LM ``latest_checkpointed_iteration.txt``, megatron/training/checkpointing.py
  ``read_metadata``; DeepSpeed ``latest``, deepspeed/runtime/engine.py ``load_checkpoint`` with
  ``tag=None``): copy it to ``<tracker>.revive-<incident>`` and write the previous iteration in the
  same form (``1000`` / ``global_step1000``). Undo: move the copy back.
- **HF Trainer** ``checkpoint-<N>`` folders (transformers trainer_utils.py ``get_last_checkpoint``
  takes the highest N): move ``checkpoint-<suspect>`` to ``checkpoint-<suspect>.revive-suspect``
  (no longer matches ``^checkpoint-(\\d+)$``). Undo: move it back.
- **Lightning** (pytorch_lightning trainer/connectors/checkpoint_connector.py: on a SLURM requeue
  ``hpc_ckpt_<max N>.ckpt`` is restored first; ``ckpt_path="last"`` takes ``last.ckpt``): move the
  highest ``hpc_ckpt_<N>.ckpt`` and ``last.ckpt`` aside (``.revive-suspect``). Undo: move them back.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, Field

SUSPECT_SUFFIX = ".revive-suspect"
"""Appended to a checkpoint moved aside (HF, Lightning)."""

_NAME = re.compile(r"^[A-Za-z0-9_.=\-]{1,255}$")
_HF = re.compile(r"^checkpoint-(\d{1,12})$")
_HPC = re.compile(r"^hpc_ckpt_(\d{1,12})\.ckpt$")


class FileOp(BaseModel):
    """One file operation: ``move`` ``path`` → ``dest`` (never over an existing file), ``restore``
    (move a backup back over ``dest``), ``copy`` ``path`` → ``dest``, or ``write`` ``content`` into ``path``."""

    op: Literal["move", "restore", "copy", "write"]
    path: str
    dest: str | None = None
    content: str | None = None


class RollbackPlan(BaseModel):
    """What the rollback does (``ops``, in order) and its exact reverse (``undo``, in order)."""

    checkpoint_dir: str
    suspect: int
    previous: int
    ops: list[FileOp] = Field(default_factory=list)
    undo: list[FileOp] = Field(default_factory=list)
    detail: str = ""


class RollbackRefused(ValueError):
    """The directory does not hold what the layout says (nothing is changed)."""


def safe_dir(path: str | None) -> str:
    """``path`` normalised, if absolute, without NUL and ``..``. Raises ``RollbackRefused``."""
    if not path or not path.startswith("/") or "\0" in path or len(path) > 4096:
        raise RollbackRefused(f"not an absolute checkpoint directory: {str(path)[:80]!r}")
    if ".." in path.split("/"):
        raise RollbackRefused(f"checkpoint directory with '..': {path[:80]!r}")
    return os.path.normpath(path)


def under(ckdir: str, name: str) -> str:
    """``<ckdir>/<name>`` for one plain entry name (no ``/``, not ``.``/``..``). Raises ``RollbackRefused``."""
    if not _NAME.match(name) or name in (".", ".."):
        raise RollbackRefused(f"unsafe entry name {name[:80]!r}")
    return f"{ckdir}/{name}"


def plan_rollback(profile: str | None, tracker_file: str | None, ckdir: str, entries: list[str],
                  tracker_text: str | None, suspect: int, previous: int, incident_id: str) -> RollbackPlan:
    """The operations that make the framework resume from ``previous`` instead of ``suspect``.

    ``entries``: the names in ``ckdir``; ``tracker_text``: the tracker file's content (None when
    the layout has none or it is unreadable). Raises ``RollbackRefused`` when the directory does not
    match (the tracker does not name ``suspect``, the previous checkpoint is missing …)."""
    ckdir = safe_dir(ckdir)
    if previous >= suspect:
        raise RollbackRefused(f"previous checkpoint {previous} is not before {suspect}")
    tag = re.sub(r"[^A-Za-z0-9_.\-]", "_", incident_id)[:120]
    names = set(entries)
    plan = RollbackPlan(checkpoint_dir=ckdir, suspect=suspect, previous=previous)
    if tracker_file:
        if tracker_file not in names or tracker_text is None:
            raise RollbackRefused(f"{ckdir}/{tracker_file} not found")
        text = tracker_text.strip()
        if not re.fullmatch(rf"[A-Za-z_]*0*{suspect}", text):
            raise RollbackRefused(f"{tracker_file} holds {text[:40]!r}, not checkpoint {suspect}")
        new = re.sub(rf"0*{suspect}$", str(previous), text)
        if not any(re.search(rf"(?<!\d)0*{previous}$", e) for e in names):
            raise RollbackRefused(f"no checkpoint {previous} in {ckdir}")
        tracker, backup = under(ckdir, tracker_file), under(ckdir, f"{tracker_file}.revive-{tag}")
        plan.ops = [FileOp(op="copy", path=tracker, dest=backup), FileOp(op="write", path=tracker, content=new + "\n")]
        plan.undo = [FileOp(op="restore", path=backup, dest=tracker)]
        plan.detail = f"{tracker_file}: {text!r} → {new!r} (backup {backup})"
        return plan
    if profile == "hf_trainer" or any(_HF.match(e) for e in names):
        name = f"checkpoint-{suspect}"
        if name not in names:
            raise RollbackRefused(f"{ckdir}/{name} not found")
        if f"checkpoint-{previous}" not in names:
            raise RollbackRefused(f"{ckdir}/checkpoint-{previous} not found")
        src, dst = under(ckdir, name), under(ckdir, name + SUSPECT_SUFFIX)
        plan.ops = [FileOp(op="move", path=src, dest=dst)]
        plan.undo = [FileOp(op="move", path=dst, dest=src)]
        plan.detail = f"moved {name} aside to {name + SUSPECT_SUFFIX}: the Trainer resumes from checkpoint-{previous}"
        return plan
    if profile == "lightning":
        hpc = sorted((int(m.group(1)), e) for e in names if (m := _HPC.match(e)))
        aside = ([hpc[-1][1]] if hpc else []) + (["last.ckpt"] if "last.ckpt" in names else [])
        if not aside:
            raise RollbackRefused(f"neither hpc_ckpt_<N>.ckpt nor last.ckpt in {ckdir}")
        for name in aside:
            src, dst = under(ckdir, name), under(ckdir, name + SUSPECT_SUFFIX)
            plan.ops.append(FileOp(op="move", path=src, dest=dst))
            plan.undo.insert(0, FileOp(op="move", path=dst, dest=src))
        plan.detail = f"moved {', '.join(aside)} aside ({SUSPECT_SUFFIX}): Lightning restores the next newest"
        return plan
    raise RollbackRefused(f"no reversible step known for profile {profile!r}")


def argv_for(op: FileOp) -> tuple[list[str], str | None]:
    """(argv, stdin) that performs ``op`` with coreutils, never through a shell: ``mv -n -T``
    (never over an existing file), ``mv -f -T`` (restore), ``cp -p -T``, ``tee <path>`` with the content on stdin."""
    if op.op == "move" and op.dest:
        return ["mv", "-n", "-T", "--", op.path, op.dest], None
    if op.op == "restore" and op.dest:
        return ["mv", "-f", "-T", "--", op.path, op.dest], None
    if op.op == "copy" and op.dest:
        return ["cp", "-p", "-T", "--", op.path, op.dest], None
    if op.op == "write" and op.content is not None:
        return ["tee", "--", op.path], op.content
    raise ValueError(f"incomplete file operation {op!r}")


def describe(op: FileOp) -> str:
    """A person-readable line (for the record and the CLI)."""
    if op.op == "write":
        return f"write {op.content!r} into {op.path}"
    return f"{op.op} {op.path} → {op.dest}"


__all__ = ["FileOp", "RollbackPlan", "RollbackRefused", "SUSPECT_SUFFIX", "argv_for", "describe",
           "plan_rollback", "safe_dir", "under"]
