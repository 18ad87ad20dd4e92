"""The incident card: the Markdown the Temporal Web UI shows as a workflow's *Current details*.

Pure (stdlib + the models), so the workflow renders it deterministically and tests render it
without a server. The verdict comes first (the UI's summary line shows the monitor's trigger).

Untrusted text (log lines, the engine's explanation, an approver's note, node names) can carry
Markdown or HTML. Two escapes, so that no log line can hide or fake the plan:

- ``code(text)``: text for an inline code span. A backtick would close the span and ``<``/``>``
  would open HTML once outside it, ``|`` starts a table cell; inside a code span an HTML entity
  shows literally, so these four become look-alikes (ˋ ‹ › ¦), newlines and control characters a
  space, and the span is never empty;
- ``text(s)``: plain text: the Markdown-active characters (``\\ ` * _ [ ] # | ~``) backslash-escaped,
  ``<``/``>`` the same look-alikes, newlines a space. (The Temporal UI's renderer shows entities and
  backslashes before other punctuation literally, so neither is used more than needed.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from revive.models import Attribution, Decision, Plan

_CTRL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_LOOKALIKE = str.maketrans({"`": "ˋ", "<": "‹", ">": "›", "|": "¦"})
_PUNCT = re.compile(r"([\\`*_\[\]#|~])")

APPROVE_PAYLOAD = '{"decision": "approve", "approver": "<you>", "note": "…"}'
REJECT_PAYLOAD = '{"decision": "reject", "approver": "<you>", "note": "…"}'


def code(s: object, limit: int = 300) -> str:
    """``s`` as an inline code span that cannot break out (see the module docstring)."""
    t = _CTRL.sub(" ", str(s)).translate(_LOOKALIKE).strip()
    if len(t) > limit:
        t = t[: limit - 1] + "…"
    return f"`{t or ' '}`"


def _own(s: str) -> str:
    """Revive's own template text (commands, payloads) as a code span: kept exactly as typed, so
    it can be copied (``<you>`` stays, ``--`` is not made an en dash); only a backtick or a control
    character, which can come in through an id, is neutralised."""
    return f"`{_CTRL.sub(' ', s).replace('`', 'ˋ')}`"


def text(s: object, limit: int = 600) -> str:
    """``s`` as inert Markdown plain text."""
    t = _CTRL.sub(" ", str(s)).strip()
    if len(t) > limit:
        t = t[: limit - 1] + "…"
    return _PUNCT.sub(r"\\\1", t).replace("<", "‹").replace(">", "›")


def _nodes(nodes: list[str]) -> str:
    return ", ".join(code(n, 80) for n in nodes) if nodes else "none"


def _hms(d: datetime | None) -> str:
    return d.strftime("%H:%M:%S") if d else "?"


def _dur(s: float) -> str:
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def render(*, incident_id: str, state: str, mode: str, attribution: Attribution | None, plan: Plan | None,
           decision: Decision | None, approvers: list[str], stages: Mapping[str, datetime],
           detected_at: datetime | None, now: datetime, trigger: str = "", breaker_reason: str = "",
           ignored: int = 0) -> str:
    """The card. ``stages``: state → when it was entered (workflow time), in order."""
    a, p = attribution, plan
    waiting = state == "awaiting_approval"
    out: list[str] = []
    if a:
        head = f"**{text(a.category.value)}** ({text(a.domain.value)}) on {_nodes(a.culprit_nodes)}"
    else:
        head = f"**no verdict yet** (trigger: {code(trigger, 120)})" if trigger else "**no verdict yet**"
    out.append(f"{head} — state **{text(state)}**, mode {text(mode)}")
    if a:
        out.append(f"Verdict: {text(a.category.value)} / {text(a.domain.value)}, recommends "
                   f"{text(a.action.value)}, confidence {a.confidence:.2f} (engine {text(a.engine, 60)})")
        ev = []
        if a.root_event:
            r = a.root_event
            loc = text(r.source, 120) + (f" line {r.line_no}" if r.line_no else "")
            when = f" at {r.timestamp.isoformat()}" if r.timestamp else ""
            ev.append(f"- root event ({loc}{when}): {code(r.text)}")
        for c in a.cascade_events[:3]:
            ev.append(f"- cascade ({text(c.source, 120)}{f' line {c.line_no}' if c.line_no else ''}): {code(c.text, 200)}")
        if len(a.cascade_events) > 3:
            ev.append(f"- … {len(a.cascade_events) - 3} more cascade events")
        if ev:
            out.append("Evidence:\n" + "\n".join(ev))
        if a.explanation:
            out.append(f"Why: {text(a.explanation)}")
    if p:
        line = (f"Plan: runbook {text(p.runbook)} → **{text(p.action.value)}** (rule {code(p.rule, 120)}); "
                f"drain {_nodes(p.drain_nodes)}; exclude {_nodes(p.exclude_nodes)}")
        if p.approval_reason:
            line += f"; approval: {text(p.approval_reason, 200)}"
        out.append(line)
    if breaker_reason:
        out.append(f"Breaker: {text(breaker_reason, 300)}")
    if decision:
        note = f" — note {code(decision.note, 200)}" if decision.note else ""
        out.append(f"Decided: **{text(decision.decision.value)}** by {code(decision.approver, 80)}{note}")
    elif waiting:
        who = f" (allowed: {_nodes(approvers)})" if approvers else ""
        out.append(
            f"**Waiting for a person's decision**{who}. "
            f"Approve: {_own(f'revive approve {incident_id} --as <you>')} · "
            f"reject: {_own(f'revive reject {incident_id} --as <you> --note <why>')}. "
            f"Web UI: *Send a Signal*, signal name {_own('decide')}, input {_own(APPROVE_PAYLOAD)} "
            f"(or {_own(REJECT_PAYLOAD)})."
        )
    if ignored:
        out.append(f"Ignored decisions: {ignored} (see the audit record)")
    out.append(_timings(stages, detected_at, now, a))
    return "\n\n".join(out)


def _timings(stages: Mapping[str, datetime], detected_at: datetime | None, now: datetime,
             a: Attribution | None) -> str:
    parts = []
    fault = a.root_event.timestamp if a and a.root_event else None
    if fault:
        parts.append(f"fault {_hms(fault)}")
    if detected_at:
        lag = ""
        if fault:
            try:
                lag = f" (+{_dur(max(0.0, (detected_at - fault).total_seconds()))})"
            except TypeError:
                lag = ""
        parts.append(f"detected {_hms(detected_at)}{lag}")
    items = list(stages.items())
    for i, (st, at) in enumerate(items):
        end = items[i + 1][1] if i + 1 < len(items) else now
        parts.append(f"{text(st)} {_hms(at)} ({_dur(max(0.0, (end - at).total_seconds()))})")
    return "Timings (UTC): " + " · ".join(parts) if parts else "Timings: none yet"
