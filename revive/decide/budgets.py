"""Decide stage — retry budgets and node rules: pure, deterministic decisions that make ``auto`` safe.

Everything in this module runs inside workflow code (the incident workflow, the runbooks and the
per-cluster ``ClusterGuardWorkflow``), so it does no I/O, never reads the wall clock (callers pass
``now``, normally ``workflow.now()``) and uses no randomness. It imports only the standard library,
pydantic, ``revive.models`` and ``revive.policy``.

Contents:

- history payloads: ``PriorIncident``, ``JobIncidentHistory`` (built by the ``incident_history``
  activity from closed ``IncidentWorkflow`` results) and ``prior_from_result``;
- retry guards: ``stop_rule``, ``checkpoint_advanced``, ``root_key``;
- node rules: ``repeat_offenders``, ``exclusions_allowed``, ``owns_drain``, ``drain_reason``.

The drain circuit breaker is ``revive.decide.breaker``; plan selection is ``revive.decide.plan``.

Every rule name returned here is stable and recorded in the incident (``stopped: <rule>``).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from revive.models import Action, Attribution, Category, IncidentOutcome, IncidentResult
from revive.policy import RecoveryPolicy

# ---- rule names (stable; recorded in incidents and audit records) ----------------------------
RULE_MAX_REQUEUES = "budget:max_requeues_per_job"
RULE_SAME_ROOT_CAUSE = "budget:max_same_root_cause"
RULE_NO_PROGRESS = "budget:max_requeues_without_progress"
RULE_UNKNOWN_CRASH_REPEATED = "rule:unknown_crash_repeated"

REQUEUE_ACTIONS: frozenset[Action] = frozenset(
    {Action.restart_in_place, Action.requeue_exclude_nodes, Action.drain_and_requeue}
)
"""Executed actions that put the job back in the queue (they spend the retry budget)."""

NOT_A_REPEAT_CATEGORIES: frozenset[Category] = frozenset(
    {Category.preempted, Category.timeout, Category.none}
)
"""Categories that never count as 'the same root cause again': preemption and time limit are
governed by checkpoint progress instead (``checkpoint_advanced``)."""


class PriorIncident(BaseModel):
    """One closed incident of the same job (or, in ``node_incidents``, of any job on the cluster).

    Built from the incident workflow's ``IncidentResult`` by ``prior_from_result``.
    """

    incident_id: str
    job_id: str
    attempt: int | None = None
    """Slurm ``restart_count`` of the attempt the fault happened in."""
    category: Category | None = None
    root_signature: str | None = None
    """Catalog id of the root event's signature (``Attribution.root_event.signature_id``)."""
    executed: Action | None = None
    """What the runbook actually ran (``None`` = nothing was run)."""
    outcome: IncidentOutcome | None = None
    culprit_nodes: list[str] = Field(default_factory=list)
    checkpoint_iteration: int | None = None
    """Last checkpoint iteration known at detection (``None`` = unknown)."""
    closed_at: datetime | None = None
    """UTC, timezone-aware."""
    rule: str = ""


class JobIncidentHistory(BaseModel):
    """What Revive already did for one job; input of every retry guard.

    ``prior`` is ordered oldest first (``incident_history`` sorts by ``closed_at``). ``requeues``
    counts prior incidents whose executed action requeued the job. ``node_incidents`` optionally
    holds recent closed incidents of *any* job on the cluster that implicated the current candidate
    nodes (for ``repeat_offenders``); it may overlap ``prior`` (deduplicated by incident id).
    """

    prior: list[PriorIncident] = Field(default_factory=list)
    requeues: int = 0
    node_incidents: list[PriorIncident] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    """Where the history could not be read as designed (e.g. the guard did not answer and the
    node incidents came from visibility only); recorded in the incident's history."""


def prior_from_result(result: IncidentResult, job_id: str | None = None) -> PriorIncident:
    """Convert a closed incident's ``IncidentResult`` into a ``PriorIncident``.

    ``job_id`` overrides ``result.job_id`` (older results may lack it). Never raises.
    """
    return PriorIncident(
        incident_id=result.incident_id,
        job_id=job_id or result.job_id or "",
        attempt=result.attempt,
        category=result.category,
        root_signature=result.root_signature,
        executed=result.executed,
        outcome=result.outcome,
        culprit_nodes=list(result.culprit_nodes),
        checkpoint_iteration=result.checkpoint_iteration,
        closed_at=result.closed_at,
        rule=result.rule,
    )


def history_from_priors(prior: list[PriorIncident]) -> JobIncidentHistory:
    """Sort priors oldest first (by ``closed_at``, then ``attempt``) and count their requeues."""
    ordered = sorted(
        prior,
        key=lambda p: (
            p.closed_at.timestamp() if p.closed_at else float("-inf"),
            p.attempt if p.attempt is not None else -1,
        ),
    )
    return JobIncidentHistory(
        prior=ordered, requeues=sum(1 for p in ordered if p.executed in REQUEUE_ACTIONS)
    )


def root_key(category: Category | None, root_signature: str | None) -> str:
    """The identity of a root cause: the signature id when known, else ``category:<category>``."""
    if root_signature:
        return f"sig:{root_signature}"
    return f"category:{category.value if category else 'unknown'}"


def _attribution_key(attribution: Attribution) -> str:
    sig = attribution.root_event.signature_id if attribution.root_event else None
    return root_key(attribution.category, sig)


def _no_progress_streak(history: JobIncidentHistory, checkpoint_iteration: int | None) -> int:
    """Requeues in a row (ending with the current incident) after which the checkpoint did not
    advance. A pair with an unknown checkpoint on either side ends the streak."""
    points = [p.checkpoint_iteration for p in history.prior if p.executed in REQUEUE_ACTIONS]
    points.append(checkpoint_iteration)
    streak = 0
    for i in range(len(points) - 1, 0, -1):
        cur, prev = points[i], points[i - 1]
        if cur is None or prev is None or cur > prev:
            break
        streak += 1
    return streak


def stop_rule(
    history: JobIncidentHistory,
    attribution: Attribution,
    policy: RecoveryPolicy,
    checkpoint_iteration: int | None,
) -> str | None:
    """Say whether Revive must stop retrying this job, and by which rule.

    Args:
        history: the job's prior closed incidents (``incident_history`` activity), oldest first.
        attribution: the current incident's attribution.
        policy: the policy snapshot (``policy.budgets`` is read).
        checkpoint_iteration: the job's latest checkpoint iteration now (``None`` = unknown).

    Returns the first rule that says stop, checked in this order, or ``None`` (retry allowed):

    1. ``budget:max_requeues_per_job``: ``history.requeues >= budgets.max_requeues_per_job``.
    2. ``rule:unknown_crash_repeated``: the category is ``crash`` (no root cause found) and a prior
       incident had the same root key (signature, else category): restart in place once only.
    3. ``budget:max_same_root_cause``: prior incidents with the same root key (excluding
       ``no_action`` outcomes and the preempted/timeout/none categories) ``>=
       budgets.max_same_root_cause`` — i.e. the N-th occurrence is the last one retried.
    4. ``budget:max_requeues_without_progress``: the trailing run of requeues after which the
       checkpoint did not advance is ``>= max(1, budgets.max_requeues_without_progress)``; pairs
       where either checkpoint is unknown end the run (jobs without checkpoints are bounded by
       rule 1 instead).

    Pure and deterministic; raises nothing.
    """
    b = policy.budgets
    if history.requeues >= b.max_requeues_per_job:
        return RULE_MAX_REQUEUES

    key = _attribution_key(attribution)
    same = [
        p
        for p in history.prior
        if p.outcome != IncidentOutcome.no_action
        and p.category not in NOT_A_REPEAT_CATEGORIES
        and root_key(p.category, p.root_signature) == key
    ]
    if attribution.category == Category.crash and same:
        return RULE_UNKNOWN_CRASH_REPEATED
    if attribution.category not in NOT_A_REPEAT_CATEGORIES and len(same) >= b.max_same_root_cause:
        return RULE_SAME_ROOT_CAUSE

    if _no_progress_streak(history, checkpoint_iteration) >= max(1, b.max_requeues_without_progress):
        return RULE_NO_PROGRESS
    return None


def checkpoint_advanced(history: JobIncidentHistory, checkpoint_iteration: int | None) -> bool:
    """Preemption / time limit: did the checkpoint advance since the last attempt?

    Compares ``checkpoint_iteration`` with the newest prior incident that recorded one.
    Returns True when there is no prior data point (first requeue of this job), False when the
    current checkpoint is unknown but an earlier one was known, else ``current > previous``.
    """
    previous = [p.checkpoint_iteration for p in history.prior if p.checkpoint_iteration is not None]
    if not previous:
        return True
    if checkpoint_iteration is None:
        return False
    return checkpoint_iteration > previous[-1]


def repeat_offenders(
    history: JobIncidentHistory | list[PriorIncident],
    candidate_nodes: list[str],
    policy: RecoveryPolicy,
    now: datetime,
) -> list[str]:
    """Nodes implicated in at least ``policy.repeat_offender.incidents`` incidents within
    ``policy.repeat_offender.window`` (ending at ``now``, UTC), counting the current incident.

    ``history`` may be a ``JobIncidentHistory`` (``prior`` and ``node_incidents`` are both used,
    deduplicated by incident id) or a plain list of ``PriorIncident``. Priors without ``closed_at``
    are ignored (their age is unknown). Returns the offending candidates in ``candidate_nodes``
    order; these are drained even if this incident alone would only exclude them.
    """
    ro = policy.repeat_offender
    if isinstance(history, JobIncidentHistory):
        pool = [*history.prior, *history.node_incidents]
    else:
        pool = list(history)
    seen: set[str] = set()
    recent: list[PriorIncident] = []
    since = now - ro.window
    for p in pool:
        if p.incident_id in seen or p.closed_at is None:
            continue
        seen.add(p.incident_id)
        if since <= p.closed_at <= now:
            recent.append(p)
    out: list[str] = []
    for node in dict.fromkeys(candidate_nodes):
        count = 1 + sum(1 for p in recent if node in p.culprit_nodes)
        if count >= ro.incidents:
            out.append(node)
    return out


def exclusions_allowed(
    policy: RecoveryPolicy, already_excluded: list[str], new: list[str]
) -> tuple[list[str], list[str]]:
    """Apply ``policy.max_excluded_nodes_per_job``.

    ``already_excluded`` is the job's current ``ExcNodeList``; ``new`` the nodes a plan wants to
    add. Returns ``(allowed, refused)``: nodes already excluded are allowed (they cost nothing),
    new ones are allowed in order until the per-job cap is reached, the rest are refused.
    Duplicates are dropped. Raises nothing.
    """
    have = list(dict.fromkeys(already_excluded))
    room = max(0, policy.max_excluded_nodes_per_job - len(have))
    allowed: list[str] = []
    refused: list[str] = []
    for n in dict.fromkeys(new):
        if n in have:
            allowed.append(n)
        elif room > 0:
            allowed.append(n)
            room -= 1
        else:
            refused.append(n)
    return allowed, refused


def owns_drain(reason: str | None, policy: RecoveryPolicy) -> bool:
    """True when a node's drain reason was set by Revive (starts with
    ``policy.drain_reason_prefix``, leading whitespace ignored). ``None``/empty → False."""
    if not reason:
        return False
    return reason.lstrip().startswith(policy.drain_reason_prefix)


def drain_reason(policy: RecoveryPolicy, incident_id: str, category: Category | str) -> str:
    """The reason Revive sets when it drains: ``<prefix><incident_id> <category>``."""
    cat = category.value if isinstance(category, Category) else category
    return f"{policy.drain_reason_prefix}{incident_id} {cat}"
