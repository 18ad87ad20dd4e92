"""``revive explain`` and ``revive backtest``: read recorded incidents, not the cluster.

- ``explain(result, attribution, plan)`` prints evidence → attribution → rule → action → outcome.
- ``backtest(records, new_policy)`` re-decides every recorded incident (audit JSONL records) with a
  candidate policy through the same pure decide function the workflow uses
  (``revive.decide.plan.plan_for``) and returns where the decision differs.

Audit record (one JSON object per closed incident): ``incident_id, cluster, job_id, attempt,
mode, attribution (Attribution), plan (Plan), decision, actions, verify, result (IncidentResult),
policy (RecoveryPolicy)``. Extra keys are ignored; ``attribution``/``plan`` may be null.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from revive.decide.budgets import history_from_priors, prior_from_result
from revive.decide.plan import plan_for
from revive.models import Attribution, IncidentResult, Plan
from revive.policy import RecoveryPolicy


def _fmt_dt(d: datetime | None) -> str:
    return d.isoformat(timespec="seconds") if d else "-"


def explain(result: IncidentResult, attribution: Attribution | None, plan: Plan | None) -> str:
    """Readable multi-line text: evidence → attribution → rule → action → outcome.

    Any argument part may be missing (``None``); the text says so. Pure; raises nothing.
    """
    out: list[str] = [f"Incident {result.incident_id}"
                      + (f" (job {result.job_id}" + (f", attempt {result.attempt}" if result.attempt is not None else "") + ")"
                         if result.job_id else "")]
    out.append("")
    out.append("Evidence")
    if attribution and attribution.root_event:
        ev = attribution.root_event
        loc = ev.source + (f":{ev.line_no}" if ev.line_no else "")
        sig = f" [signature {ev.signature_id}]" if ev.signature_id else ""
        out.append(f"  root event   {loc}{sig}: {ev.text[:300]}")
        for c in (attribution.cascade_events or [])[:5]:
            out.append(f"  cascade      {c.source}{':' + str(c.line_no) if c.line_no else ''}: {c.text[:200]}")
        if len(attribution.cascade_events) > 5:
            out.append(f"  … {len(attribution.cascade_events) - 5} more cascade events")
    else:
        out.append("  no root event recorded")
    out.append("")
    out.append("Attribution")
    if attribution:
        out.append(f"  category     {attribution.category.value} ({attribution.domain.value}), "
                   f"confidence {attribution.confidence:.2f}, engine {attribution.engine}")
        out.append(f"  culprits     {', '.join(attribution.culprit_nodes) or 'none identified'}")
        out.append(f"  recommends   {attribution.action.value}")
        if attribution.explanation:
            out.append(f"  why          {attribution.explanation}")
    else:
        out.append("  none recorded" + (f" (category {result.category.value})" if result.category else ""))
    out.append("")
    out.append("Decision")
    if plan:
        out.append(f"  rule         {plan.rule}")
        out.append(f"  runbook      {plan.runbook}")
        out.append(f"  action       {plan.action.value} (recommended {plan.recommended.value})")
        if plan.drain_nodes:
            out.append(f"  drain        {', '.join(plan.drain_nodes)}")
        if plan.exclude_nodes:
            out.append(f"  exclude      {', '.join(plan.exclude_nodes)}")
        for s in plan.steps:
            out.append(f"  step         {s.kind}{' ' + ','.join(s.nodes) if s.nodes else ''}{': ' + s.detail if s.detail else ''}")
        if plan.needs_approval:
            out.append(f"  approval     needed{': ' + plan.approval_reason if plan.approval_reason else ''}")
    else:
        out.append(f"  rule         {result.rule or '-'}")
    if result.breaker_reason:
        out.append(f"  breaker      {result.breaker_reason}")
    out.append("")
    out.append("Action")
    out.append(f"  executed     {result.executed.value if result.executed else 'nothing'}"
               + (f" (recommended {result.recommended.value})" if result.recommended else ""))
    if result.decided_by:
        out.append(f"  decided by   {result.decided_by}")
    out.append("")
    out.append("Outcome")
    out.append(f"  {result.outcome.value}" + (f": {result.reason}" if result.reason else ""))
    if result.rule and (not plan or result.rule != plan.rule):
        out.append(f"  rule         {result.rule}")
    out.append(f"  detected {_fmt_dt(result.detected_at)}  first action {_fmt_dt(result.first_action_at)}  "
               f"resumed {_fmt_dt(result.resumed_at)}  closed {_fmt_dt(result.closed_at)}")
    return "\n".join(out)


class Diff(BaseModel):
    """One incident where the candidate policy decides differently."""

    incident_id: str
    cluster: str = ""
    job_id: str = ""
    old_action: str | None = None
    new_action: str | None = None
    old_rule: str | None = None
    new_rule: str | None = None
    changes: dict[str, tuple[Any, Any]] = Field(default_factory=dict)
    """field → (recorded, candidate) for every differing plan field."""

    def line(self) -> str:
        """One printable line: ``<id> job <job>: <old action> (<old rule>) → <new> (<new rule>)``."""
        extra = "; ".join(f"{k}: {a!r} → {b!r}" for k, b_a in self.changes.items()
                          for a, b in [b_a] if k not in ("action", "rule"))
        return (f"{self.incident_id} job {self.job_id}: {self.old_action} ({self.old_rule}) → "
                f"{self.new_action} ({self.new_rule})" + (f"  [{extra}]" if extra else ""))


_COMPARED = ("action", "rule", "runbook", "drain_nodes", "exclude_nodes", "needs_approval")


def _closed(rec: dict) -> str:
    r = rec.get("result") or {}
    return str(r.get("closed_at") or r.get("detected_at") or "")


def backtest(records: list[dict], new_policy: RecoveryPolicy) -> list[Diff]:
    """Re-decide each recorded incident with ``new_policy``; return the ones that differ.

    Each record's job history is rebuilt from the records of the same cluster and job that closed
    before it (so budgets replay as they would have). Records without an attribution are skipped.
    The recorded mode is what the candidate's ``mode_for(partition)`` is compared with through
    ``needs_approval`` as decided by ``plan_for``.

    Raises pydantic ``ValidationError`` for a malformed record.
    """
    ordered = sorted(records, key=_closed)
    diffs: list[Diff] = []
    for i, rec in enumerate(ordered):
        if not rec.get("attribution"):
            continue
        attribution = Attribution.model_validate(rec["attribution"])
        result = IncidentResult.model_validate(rec["result"])
        old = Plan.model_validate(rec["plan"]) if rec.get("plan") else None
        cluster, job_id = str(rec.get("cluster", "")), str(rec.get("job_id", ""))
        priors = [
            prior_from_result(IncidentResult.model_validate(r["result"]), job_id)
            for r in ordered[:i]
            if str(r.get("cluster", "")) == cluster and str(r.get("job_id", "")) == job_id and r.get("result")
        ]
        history = history_from_priors(priors)
        new = plan_for(attribution, new_policy, history, None, result.checkpoint_iteration,
                       now=result.detected_at or result.closed_at)
        old_d = old.model_dump(mode="json") if old else {}
        new_d = new.model_dump(mode="json")
        changes = {k: (old_d.get(k), new_d.get(k)) for k in _COMPARED if old_d.get(k) != new_d.get(k)}
        if changes:
            diffs.append(Diff(
                incident_id=str(rec.get("incident_id", result.incident_id)), cluster=cluster, job_id=job_id,
                old_action=old_d.get("action"), new_action=new_d.get("action"),
                old_rule=old_d.get("rule"), new_rule=new_d.get("rule"), changes=changes,
            ))
    return diffs
