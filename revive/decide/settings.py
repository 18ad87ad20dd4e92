"""Decide stage — the cluster's mode and policy as the per-cluster guard keeps them: payloads, caps
and the pure rules (``workflows.guard.ClusterGuardWorkflow`` applies them in its Updates).

- ``ModeChange`` (Update ``set_mode``): observe/auto for the whole cluster or one partition, with
  who and why; ``PolicyApply`` (Update ``apply_policy``): a whole policy document, validated by
  ``revive.policy.parse_policy`` in the Update's validator, so an invalid one is refused with the
  field errors and writes nothing to history.
- ``GuardSettings``: what the guard carries over continue-as-new (small: capped logs, the policy
  document, a bounded list of Update ids seen for idempotency).
- ``effective_mode``: the mode an incident's gate uses (partition override → global → ``None``,
  meaning the guard has none and the incident keeps its input policy's mode).

Pure: no I/O, no clock (``now`` is passed in, normally ``workflow.now()``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator

from revive.policy import Mode, RecoveryPolicy, parse_policy

MAX_WHO = 128
"""Characters in ``who`` (an operator name, e.g. ``oncall-alice``)."""
MAX_NOTE = 1000
"""Characters in a mode/policy note."""
MAX_POLICY_BYTES = 64 * 1024
"""A policy document's JSON size cap, in bytes (the guard carries it over continue-as-new)."""
MAX_UPDATE_ID = 200
MAX_CHANGES_KEPT = 50
"""Mode/policy changes kept in ``GuardSettings.changes`` (newest last)."""
MAX_IDS_KEPT = 500
"""Update ids remembered for idempotency (oldest dropped first)."""
GLOBAL = "*"
"""Key of the cluster-wide mode in ``GuardSettings.modes``."""


class _Capped(BaseModel):
    who: str = Field(min_length=1, max_length=MAX_WHO)
    """Who asked (``--as``); recorded with the guard's workflow time."""
    note: str = Field(default="", max_length=MAX_NOTE)
    update_id: str = Field(min_length=1, max_length=MAX_UPDATE_ID)
    """One id per operator decision: the same id sent twice (a retried CLI call) applies once."""

    @field_validator("who", "note")
    @classmethod
    def _printable(cls, v: str) -> str:
        if any(ord(c) < 32 and c not in "\t" for c in v):
            raise ValueError("control characters are not allowed")
        return v


class ModeChange(_Capped):
    """Input of the guard's ``set_mode`` Update."""

    mode: Mode
    partition: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    """None: the cluster-wide mode; else this partition's override."""


class PolicyApply(_Capped):
    """Input of the guard's ``apply_policy`` Update: ``policy`` is the raw document (the YAML file's
    mapping), validated by ``parse_policy`` (``ConfigError`` text on refusal)."""

    policy: dict[str, Any]

    def parsed(self) -> RecoveryPolicy:
        """The validated policy. Raises ``ValueError`` (size cap) or ``revive.errors.ConfigError``."""
        size = len(json.dumps(self.policy, default=str).encode())
        if size > MAX_POLICY_BYTES:
            raise ValueError(f"policy document is {size} bytes, cap {MAX_POLICY_BYTES}")
        return parse_policy(self.policy, "policy")


class ModeSetting(BaseModel):
    """One mode in force (global or per partition) and who set it when."""

    mode: Mode
    who: str
    note: str = ""
    at: datetime
    """The guard's workflow time when the Update was applied (UTC)."""


class SettingsAnswer(BaseModel):
    """What ``set_mode`` / ``apply_policy`` return: the change applied (or the earlier answer for a
    repeated ``update_id``)."""

    applied: bool
    """False when ``update_id`` was seen before (nothing changed this time)."""
    summary: str
    policy_version: int = 0


class GuardSettings(BaseModel):
    """Mode and policy as the guard holds them (carried over continue-as-new; a few KB)."""

    modes: dict[str, ModeSetting] = Field(default_factory=dict)
    """``"*"`` → the cluster-wide mode; ``<partition>`` → its override."""
    policy: RecoveryPolicy | None = None
    """The last policy applied; None: none yet (the monitor's policy file is the bootstrap)."""
    policy_version: int = 0
    """1 for the first ``apply_policy``, +1 for each later one."""
    policy_by: str | None = None
    policy_at: datetime | None = None
    changes: list[str] = Field(default_factory=list)
    """``<at> <who> <what>`` per change, newest last, capped at ``MAX_CHANGES_KEPT``."""
    seen_ids: dict[str, str] = Field(default_factory=dict)
    """update id → summary answered (idempotency), capped at ``MAX_IDS_KEPT``."""


class ModeQuery(BaseModel):
    """Input of the ``read_guard_mode`` activity."""

    cluster: str
    partition: str | None = None
    fallback: Mode
    """The incident input policy's mode for the partition, used when the guard has none."""


class ModeAnswer(BaseModel):
    """Output of ``read_guard_mode``: the mode the gate uses, and where it came from."""

    mode: Mode
    source: str
    """``guard:partition``, ``guard:global``, ``input`` (guard has no mode set), ``input:guard-unreachable``."""
    policy_version: int = 0
    """The guard's policy version at the time (0: no policy applied there)."""
    set_by: str | None = None


def effective_mode(s: GuardSettings, partition: str | None) -> tuple[Mode, str, str] | None:
    """(mode, source, who) from the guard's settings for ``partition``, or None when it has none."""
    if partition and partition in s.modes:
        m = s.modes[partition]
        return m.mode, "guard:partition", m.who
    if GLOBAL in s.modes:
        m = s.modes[GLOBAL]
        return m.mode, "guard:global", m.who
    return None


def remember(s: GuardSettings, update_id: str, summary: str, at: datetime, who: str) -> None:
    """Record a change in the capped log and its update id (mutates ``s``)."""
    s.changes.append(f"{at.isoformat()} {who} {summary}")
    del s.changes[:-MAX_CHANGES_KEPT]
    s.seen_ids[update_id] = summary
    while len(s.seen_ids) > MAX_IDS_KEPT:
        s.seen_ids.pop(next(iter(s.seen_ids)))


def apply_mode(s: GuardSettings, c: ModeChange, now: datetime) -> SettingsAnswer:
    """Apply a validated ``ModeChange`` (idempotent per ``update_id``)."""
    if c.update_id in s.seen_ids:
        return SettingsAnswer(applied=False, summary=s.seen_ids[c.update_id], policy_version=s.policy_version)
    key = c.partition or GLOBAL
    s.modes[key] = ModeSetting(mode=c.mode, who=c.who, note=c.note, at=now)
    where = f"partition {c.partition}" if c.partition else "cluster"
    summary = f"mode {c.mode.value} for {where}" + (f" ({c.note})" if c.note else "")
    remember(s, c.update_id, summary, now, c.who)
    return SettingsAnswer(applied=True, summary=summary, policy_version=s.policy_version)


def apply_policy(s: GuardSettings, p: PolicyApply, policy: RecoveryPolicy, now: datetime) -> SettingsAnswer:
    """Store an already-validated policy as the next version (idempotent per ``update_id``)."""
    if p.update_id in s.seen_ids:
        return SettingsAnswer(applied=False, summary=s.seen_ids[p.update_id], policy_version=s.policy_version)
    s.policy = policy
    s.policy_version += 1
    s.policy_by, s.policy_at = p.who, now
    summary = f"policy {policy.name!r} applied as version {s.policy_version}" + (f" ({p.note})" if p.note else "")
    remember(s, p.update_id, summary, now, p.who)
    return SettingsAnswer(applied=True, summary=summary, policy_version=s.policy_version)


__all__ = [
    "GLOBAL", "MAX_NOTE", "MAX_POLICY_BYTES", "MAX_WHO", "GuardSettings", "ModeAnswer", "ModeChange",
    "ModeQuery", "ModeSetting", "PolicyApply", "SettingsAnswer", "apply_mode", "apply_policy", "effective_mode",
]
