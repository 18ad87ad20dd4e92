"""Safety guards: pure, deterministic decisions that make ``auto`` mode safe.

Everything in this module runs inside workflow code (the incident workflow, the runbooks and the
per-cluster ``ClusterGuardWorkflow``), so it does no I/O, never reads the wall clock (callers pass
``now``, normally ``workflow.now()``) and uses no randomness. It imports only the standard library,
pydantic, ``revive.models`` and ``revive.policy``.

Contents:

- history payloads: ``PriorIncident``, ``JobIncidentHistory`` (built by the ``incident_history``
  activity from closed ``IncidentWorkflow`` results) and ``prior_from_result``;
- retry guards: ``stop_rule``, ``checkpoint_advanced``, ``root_key``;
- node guards: ``repeat_offenders``, ``exclusions_allowed``, ``owns_drain``;
- drain circuit breaker payloads and logic: ``DrainGrantInput``, ``DrainGrant``, ``DrainRecord``,
  ``GuardState``, ``GuardInput``, ``evaluate_drain`` (used by ``workflows.guard``).

Every rule name returned here is stable and recorded in the incident (``stopped: <rule>``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from revive.models import Action, Attribution, Category, IncidentOutcome, IncidentResult
from revive.policy import BreakerPolicy, RecoveryPolicy

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


# ---- drain circuit breaker (state of ClusterGuardWorkflow) ------------------------------------


class DrainGrantInput(BaseModel):
    """A request to drain nodes, sent as the ``request_drain`` Update of the cluster's guard."""

    incident_id: str
    cluster: str
    partition: str | None = None
    nodes: list[str]
    partition_size: int = Field(ge=0)
    """Number of nodes in ``partition`` (from ``Scheduler.get_nodes``); 0 = unknown → refused."""
    policy: BreakerPolicy = Field(default_factory=BreakerPolicy)
    now: datetime | None = None
    """The requester's ``workflow.now()`` (UTC); the guard uses its own clock when absent."""
    approved_by: str | None = None
    """Set when a person approved this drain after the breaker refused it: granted over the
    breaker and recorded in the window."""


class DrainGrant(BaseModel):
    """The guard's answer. ``granted=False`` → the plan waits for a person's approval."""

    granted: bool
    nodes: list[str] = Field(default_factory=list)
    """Nodes the incident may drain (all requested nodes, or none)."""
    reason: str
    """Why (``breaker:max_fraction …``, ``breaker:max_nodes …``, ``granted …``)."""
    breaker_open: bool = False
    window_nodes: list[str] = Field(default_factory=list)
    """Nodes Revive drained on this cluster within the window, before this request."""
    decided_at: datetime | None = None


class DrainRecord(BaseModel):
    """One granted drain, kept while it is inside the breaker window."""

    incident_id: str
    partition: str | None = None
    nodes: list[str]
    at: datetime


class GuardState(BaseModel):
    """The whole ``ClusterGuardWorkflow`` state (carried over continue-as-new)."""

    cluster: str
    drains: list[DrainRecord] = Field(default_factory=list)
    answers: dict[str, DrainGrant] = Field(default_factory=dict)
    """incident_id → the answer given (idempotency)."""
    answer_order: list[str] = Field(default_factory=list)
    tripped: list[str] = Field(default_factory=list)
    """Last trip reasons (``<at> <incident> <reason>``), newest last, capped."""
    requests: int = 0


class GuardInput(BaseModel):
    """Input of ``ClusterGuardWorkflow.run``."""

    cluster: str
    state: GuardState | None = None
    max_answers: int = Field(default=1000, ge=1)
    """Answers remembered for idempotency (oldest dropped first)."""
    continue_as_new_after: int | None = None
    """Continue as new after this many requests in one run (tests); the server's suggestion
    (``is_continue_as_new_suggested``) applies in any case."""


def _window_drains(state: GuardState, now: datetime, window: timedelta) -> list[DrainRecord]:
    since = now - window
    return [d for d in state.drains if d.at > since]


def evaluate_drain(state: GuardState, inp: DrainGrantInput, now: datetime) -> DrainGrant:
    """Decide a drain request against the breaker; pure (the workflow applies the result).

    Rules (all-or-nothing for the request):

    - the distinct nodes drained by Revive on this cluster within ``policy.window`` plus the
      requested nodes must be ``<= policy.max_nodes`` → else ``breaker:max_nodes``;
    - the distinct nodes drained within the window in ``inp.partition`` plus the requested nodes
      must be ``<= floor(policy.max_fraction × partition_size)`` → else ``breaker:max_fraction``
      (so a 4-node partition at 25% allows one drained node per window);
    - ``partition_size == 0`` (unknown) → refused (``breaker:partition_size_unknown``);
    - nodes the window already holds do not count twice;
    - ``inp.approved_by`` set → granted over the breaker (``approved_over_breaker``).

    Returns a ``DrainGrant`` with ``decided_at=now``; does not mutate ``state``.
    """
    p = inp.policy
    recent = _window_drains(state, now, p.window)
    window_nodes = list(dict.fromkeys(n for d in recent for n in d.nodes))
    part_nodes = set(n for d in recent if d.partition == inp.partition for n in d.nodes)
    requested = list(dict.fromkeys(inp.nodes))
    new_cluster = [n for n in requested if n not in window_nodes]
    new_part = [n for n in requested if n not in part_nodes]
    cap_fraction = int(p.max_fraction * inp.partition_size + 1e-9)
    used = len(window_nodes) + len(new_cluster)
    used_part = len(part_nodes) + len(new_part)

    refusal: str | None = None
    if inp.partition_size <= 0:
        refusal = "breaker:partition_size_unknown: partition size unknown, cannot bound the drain"
    elif used > p.max_nodes:
        refusal = (
            f"breaker:max_nodes: draining {requested} would make {used} nodes drained by Revive "
            f"on {inp.cluster} within {p.window}, cap {p.max_nodes}"
        )
    elif used_part > cap_fraction:
        refusal = (
            f"breaker:max_fraction: draining {requested} would make {used_part} of "
            f"{inp.partition_size} nodes of partition {inp.partition} drained by Revive within "
            f"{p.window}, cap {p.max_fraction:.0%} = {cap_fraction}"
        )
    if refusal is None:
        return DrainGrant(
            granted=True,
            nodes=requested,
            reason=f"granted: {used_part}/{cap_fraction} of partition {inp.partition}, "
            f"{used}/{p.max_nodes} on {inp.cluster} within {p.window}",
            window_nodes=window_nodes,
            decided_at=now,
        )
    if inp.approved_by:
        return DrainGrant(
            granted=True,
            nodes=requested,
            reason=f"approved_over_breaker by {inp.approved_by}: {refusal}",
            breaker_open=True,
            window_nodes=window_nodes,
            decided_at=now,
        )
    return DrainGrant(
        granted=False, reason=refusal, breaker_open=True, window_nodes=window_nodes, decided_at=now
    )
