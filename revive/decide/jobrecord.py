"""Decide stage — the per-job record (``workflows.job_record.JobRecordWorkflow``): payloads and the
pure admit/report rules that make a job's retry budgets durable and atomic.

One record per (cluster, job id), workflow id ``revive.ids.job_record_id``. It holds the first
SubmitTime Revive saw (Slurm 22.05 resets SubmitTime on requeue), the incidents per attempt and
what each did. An incident is *admitted* by the record's synchronous ``admit`` Update (through the
``admit_incident`` activity, update-with-start): the answer is the job's history **including the
incidents still open**, each counted as a reserved requeue, and the new incident is entered as open
in the same handler. Two quick failures of one job are therefore serialised: the second sees the
first's reservation and a budget of one stops it. The ``report`` Update (at the incident's close)
replaces the reservation with what really ran; a reservation older than ``PENDING_EXPIRY`` (its
incident was terminated and never reported) stops counting.

State is small: at most ``MAX_ENTRIES`` incidents (oldest dropped, their requeues kept in
``requeues_dropped``), a bounded answer cache. Pure: no I/O, no clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, Field

from revive.decide.budgets import REQUEUE_ACTIONS, JobIncidentHistory, PriorIncident, history_from_priors
from revive.models import Action, Category, IncidentHistoryInput, IncidentOutcome

MAX_ENTRIES = 50
"""Incidents kept per job (a job with more is far over any budget)."""
PENDING_EXPIRY = timedelta(hours=24)
"""An admitted incident that never reported its outcome stops reserving a requeue after this."""
MAX_FAMILY = 64


class JobEntry(BaseModel):
    """One incident of the job, as the record keeps it (a few hundred bytes)."""

    incident_id: str = Field(max_length=300)
    attempt: int = 0
    family: str = Field(default="", max_length=MAX_FAMILY)
    category: Category | None = None
    root_signature: str | None = Field(default=None, max_length=200)
    checkpoint_iteration: int | None = None
    admitted_at: datetime
    outcome: IncidentOutcome | None = None
    """None while the incident is open (it then reserves one requeue)."""
    executed: Action | None = None
    closed_at: datetime | None = None
    culprit_nodes: list[str] = Field(default_factory=list, max_length=64)
    rule: str = Field(default="", max_length=300)

    def prior(self) -> PriorIncident:
        return PriorIncident(
            incident_id=self.incident_id, job_id="", attempt=self.attempt, category=self.category,
            root_signature=self.root_signature, executed=self.executed, outcome=self.outcome,
            culprit_nodes=list(self.culprit_nodes), checkpoint_iteration=self.checkpoint_iteration,
            closed_at=self.closed_at, rule=self.rule,
        )


class JobRecordState(BaseModel):
    """The whole record (carried over continue-as-new)."""

    cluster: str
    job_id: str
    first_submit: datetime | None = None
    """The first SubmitTime Revive saw for the job (UTC); never overwritten by a later one."""
    entries: list[JobEntry] = Field(default_factory=list)
    requeues_dropped: int = 0
    """Requeues of entries dropped by the ``MAX_ENTRIES`` cap (still counted in the budget)."""
    seeded: bool = False
    """The visibility fallback was merged once (incidents closed before the record existed)."""
    earlier_jobs: int = 0
    """Jobs that had this id before (a re-created cluster, Slurm's id wrap-around): each time an
    admit named another first SubmitTime, the record started afresh for the new job."""


class AdmitInput(BaseModel):
    """Input of the record's ``admit`` Update (``admit_incident`` activity)."""

    cluster: str
    job_id: str
    incident_id: str = Field(min_length=1, max_length=300)
    attempt: int = Field(ge=0)
    family: str = Field(default="", max_length=MAX_FAMILY)
    category: Category | None = None
    root_signature: str | None = Field(default=None, max_length=200)
    checkpoint_iteration: int | None = None
    job_submit_time: datetime | None = None
    now: datetime
    """The incident's ``workflow.now()`` (UTC)."""
    seed: list[PriorIncident] = Field(default_factory=list, max_length=MAX_ENTRIES)
    """Closed incidents read through visibility before the record existed; used once, when the
    record has no entries (the activity fills it only when the record does not exist yet)."""


class AdmitAnswer(BaseModel):
    """The job's history for the budget check, other incidents' reservations included."""

    history: JobIncidentHistory
    first_submit: datetime | None = None
    reserved: int = 0
    """Open incidents of this job other than the asker (each counted in ``history.requeues``)."""


class ReportInput(BaseModel):
    """Input of the record's ``report`` Update: what the incident did, at its close."""

    cluster: str
    job_id: str
    incident_id: str = Field(min_length=1, max_length=300)
    outcome: IncidentOutcome
    executed: Action | None = None
    closed_at: datetime
    culprit_nodes: list[str] = Field(default_factory=list, max_length=64)
    rule: str = Field(default="", max_length=300)


class JobRecordInput(BaseModel):
    """Input of ``JobRecordWorkflow.run``."""

    cluster: str
    job_id: str
    state: JobRecordState | None = None
    continue_as_new_after_events: int = Field(default=2000, ge=10)
    """Continue as new once the run's history reaches this many events (well below 51,200)."""
    idle_close: timedelta = timedelta(days=30)
    """The record completes after this long without an Update (the job is long gone)."""


def _pending(e: JobEntry, now: datetime) -> bool:
    return e.outcome is None and now - e.admitted_at < PENDING_EXPIRY


def _utc_second(t: datetime) -> datetime:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC).replace(microsecond=0)


def _another_job(st: JobRecordState, inp: AdmitInput) -> bool:
    """The admit names a first SubmitTime other than the record's (to the second, as incident ids
    stamp it), and the incident is not one the record already holds (a retried admit)."""
    if st.first_submit is None or inp.job_submit_time is None:
        return False
    if any(e.incident_id == inp.incident_id for e in st.entries):
        return False
    return _utc_second(inp.job_submit_time) != _utc_second(st.first_submit)


def admit(st: JobRecordState, inp: AdmitInput) -> AdmitAnswer:
    """Answer an admit and enter the incident as open (mutates ``st``). Idempotent per incident id:
    a repeated admit (retried activity, replayed incident) answers the same history without a
    second entry."""
    if _another_job(st, inp):
        # the monitor names each job by its first SubmitTime (kept across requeues, recovered from
        # the incidents after a restart), as the incident ids do: this is a different job behind
        # a reused id, and the earlier job's incidents are not its budget
        st.earlier_jobs += 1
        st.first_submit, st.entries, st.requeues_dropped = None, [], 0
    if st.first_submit is None and inp.job_submit_time is not None:
        st.first_submit = inp.job_submit_time
    if inp.seed and not st.entries and not st.seeded:
        for p in inp.seed[-MAX_ENTRIES:]:
            st.entries.append(JobEntry(
                incident_id=p.incident_id, attempt=p.attempt or 0, category=p.category,
                root_signature=p.root_signature, checkpoint_iteration=p.checkpoint_iteration,
                admitted_at=p.closed_at or inp.now, outcome=p.outcome or IncidentOutcome.no_action,
                executed=p.executed, closed_at=p.closed_at or inp.now, culprit_nodes=list(p.culprit_nodes)[:64],
                rule=p.rule[:300]))
    st.seeded = True
    others = [e for e in st.entries if e.incident_id != inp.incident_id]
    reserved = [e for e in others if _pending(e, inp.now)]
    closed = [e for e in others if e.outcome is not None]
    history = history_from_priors([e.prior() for e in closed] + [e.prior() for e in reserved])
    history.requeues += len(reserved) + st.requeues_dropped
    for p in history.prior:
        p.job_id = inp.job_id
    if not any(e.incident_id == inp.incident_id for e in st.entries):
        st.entries.append(JobEntry(
            incident_id=inp.incident_id, attempt=inp.attempt, family=inp.family, category=inp.category,
            root_signature=inp.root_signature, checkpoint_iteration=inp.checkpoint_iteration, admitted_at=inp.now))
        _cap(st)
    return AdmitAnswer(history=history, first_submit=st.first_submit, reserved=len(reserved))


def report(st: JobRecordState, inp: ReportInput) -> bool:
    """Replace the incident's reservation with its outcome (mutates ``st``). Returns False when the
    incident is unknown to the record (an admit from before the cap) — it is then entered closed."""
    for e in st.entries:
        if e.incident_id == inp.incident_id:
            e.outcome, e.executed, e.closed_at = inp.outcome, inp.executed, inp.closed_at
            e.culprit_nodes, e.rule = list(inp.culprit_nodes), inp.rule
            return True
    st.entries.append(JobEntry(incident_id=inp.incident_id, admitted_at=inp.closed_at, outcome=inp.outcome,
                               executed=inp.executed, closed_at=inp.closed_at,
                               culprit_nodes=list(inp.culprit_nodes), rule=inp.rule))
    _cap(st)
    return False


def _cap(st: JobRecordState) -> None:
    while len(st.entries) > MAX_ENTRIES:
        gone = st.entries.pop(0)
        if gone.executed in REQUEUE_ACTIONS:
            st.requeues_dropped += 1


__all__ = [
    "MAX_ENTRIES", "PENDING_EXPIRY", "AdmitAnswer", "AdmitIncidentInput", "AdmitInput", "JobEntry", "JobRecordInput", "JobRecordState",
    "ReportInput", "admit", "report",
]


class AdmitIncidentInput(BaseModel):
    """Input of the ``admit_incident`` activity: the admit, and the visibility read it falls back
    to (the job's incidents closed before the record existed; incidents on the nodes older than
    the guard's records, or all of them when the guard cannot answer).

    ``culprit_nodes`` (the attribution's) are noted in the cluster's guard for this incident, and
    the guard answers the other incidents on ``history.nodes`` and the culprits within
    ``repeat_window`` (``policy.repeat_offender.window``; None: from ``history.nodes_since_iso``).
    """

    admit: AdmitInput
    history: IncidentHistoryInput
    culprit_nodes: list[str] = Field(default_factory=list, max_length=64)
    repeat_window: timedelta | None = None
