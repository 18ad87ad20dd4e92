"""The newest checkpoint a job left on disk, from its profile's ``checkpoint_layout`` (for
frameworks that print no "saved" line by default: HF Trainer's ``checkpoint-N`` folders, Lightning's
``epoch=E-step=S.ckpt`` files).

The directory comes from the job's ``--comment`` JSON, under the opt-in key's object
(``{"revive": {"checkpoint_dir": "/scratch/run1/out"}}``; the key is ``policy.opt_in.comment_key``),
or from its own command line (``scontrol show job``'s ``Command=``: the batch script and its
arguments): the value of a known output/checkpoint option. Reads the local file system only (the
monitor's host); a path that does not exist there gives ``None``.
"""

from __future__ import annotations

import json
import os
import shlex

from revive.profiles.model import ProfileSet

DIR_OPTIONS = ("--output-dir", "--output_dir", "--ckpt-dir", "--ckpt_dir", "--checkpoint-dir", "--checkpoint_dir",
               "--save", "--dirpath", "--default-root-dir", "--default_root_dir")
"""Options whose value names a checkpoint directory: HF ``TrainingArguments.output_dir``
(``--output_dir`` in the examples' HfArgumentParser scripts), Megatron ``--save``, Lightning's
``ModelCheckpoint(dirpath=…)``/``Trainer(default_root_dir=…)``, and the usual ``--ckpt-dir``."""

COMMENT_DIR_KEY = "checkpoint_dir"
"""Key in the opt-in object of a job's ``--comment`` JSON naming its checkpoint directory."""
MAX_COMMENT = 8192
"""A ``--comment`` longer than this is not parsed (untrusted input; Slurm allows much more)."""

MAX_ENTRIES = 10000
"""Directory entries looked at per directory (a huge folder is not walked)."""


def checkpoint_dirs(command: str | None) -> list[str]:
    """The checkpoint directories named on ``command`` (``--opt value`` or ``--opt=value``); [] when
    none or when the command does not parse."""
    if not command:
        return []
    try:
        argv = shlex.split(command)
    except ValueError:
        return []
    out: list[str] = []
    for i, a in enumerate(argv):
        opt, eq, val = a.partition("=")
        if opt in DIR_OPTIONS:
            v = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if v and not v.startswith("-") and v not in out:
                out.append(v)
    return out


def comment_checkpoint_dir(comment: str | None, key: str = "revive") -> str | None:
    """``checkpoint_dir`` from the job's ``--comment`` JSON ``{key: {"checkpoint_dir": "<abs path>"}}``,
    or None: no comment, not JSON, over ``MAX_COMMENT``, the key absent, or the value not an
    absolute path without NUL (untrusted input: never raises)."""
    if not comment or len(comment) > MAX_COMMENT:
        return None
    try:
        data = json.loads(comment)
    except ValueError:
        return None
    obj = data.get(key) if isinstance(data, dict) else None
    v = obj.get(COMMENT_DIR_KEY) if isinstance(obj, dict) else None
    if not isinstance(v, str) or not v.startswith("/") or "\0" in v or len(v) > 4096:
        return None
    return os.path.normpath(v)


def newest_checkpoint(command: str | None, profiles: ProfileSet | None = None, comment: str | None = None,
                      comment_key: str = "revive") -> tuple[int, str] | None:
    """(step, profile id) of the highest-step checkpoint in the directory the job's ``--comment``
    names (``comment_checkpoint_dir``) and the directories ``command`` names, matched by each
    profile's ``checkpoint_layout`` (``dir_pattern``, ``file_patterns``) with an ``iter`` group;
    None when there is none."""
    import re2

    from revive.profiles import load_builtin_profiles

    ps = profiles if profiles is not None else load_builtin_profiles()
    pats = []
    for p in ps.profiles:
        lay = p.checkpoint_layout
        if lay is None:
            continue
        for rx in ([lay.dir_pattern] if lay.dir_pattern else []) + list(lay.file_patterns):
            c = re2.compile(rx)
            if "iter" in c.groupindex and not rx.startswith("/"):
                pats.append((c, p.id))
    best: tuple[int, str] | None = None
    dirs = checkpoint_dirs(command)
    if (cd := comment_checkpoint_dir(comment, comment_key)) is not None and cd not in dirs:
        dirs.insert(0, cd)
    for d in dirs:
        try:
            with os.scandir(d) as it:
                names = [e.name for _, e in zip(range(MAX_ENTRIES), it, strict=False)]
        except OSError:
            continue
        for name in names:
            for c, pid in pats:
                m = c.fullmatch(name)
                if m and m.group("iter"):
                    step = int(m.group("iter"))
                    if best is None or step > best[0]:
                        best = (step, pid)
                    break
    return best
