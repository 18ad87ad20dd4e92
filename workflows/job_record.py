"""``JobRecordWorkflow``: one small durable workflow per (cluster, job id) — the job's memory.

Workflow id ``revive.ids.job_record_id(cluster, job_id)``. Incidents never read a job's budgets
from visibility (eventually consistent) once the record exists: the ``admit_incident`` activity
sends the ``admit`` Update with update-with-start (the record is created on first use), and the
synchronous handler answers the job's history — open incidents counted as reserved requeues — and
enters the new incident in one step (``revive.decide.jobrecord.admit``), so two quick failures of
one job cannot both pass a budget of one. At its close the incident sends ``report`` (the
``report_job_outcome`` activity) with what really ran.

Holds: the first SubmitTime Revive saw, up to ``MAX_ENTRIES`` incidents (id, attempt, family,
category, outcome, executed action), the requeues of dropped entries. Queries: ``state``.

Continues as new once the run's history reaches ``JobRecordInput.continue_as_new_after_events``
(tracked with ``get_current_history_length``) or when the server suggests it, carrying the state
(a few KB). Completes after ``idle_close`` without an Update. Deterministic: the only clock is the
requester's ``now`` or ``workflow.now()``.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.decide.jobrecord import (
        AdmitAnswer,
        AdmitInput,
        JobRecordInput,
        JobRecordState,
        ReportInput,
        admit,
        report,
    )


@workflow.defn(name="JobRecordWorkflow")
class JobRecordWorkflow:
    """Per-job record. Input ``JobRecordInput``; completes after ``idle_close`` without Updates."""

    @workflow.init
    def __init__(self, inp: JobRecordInput) -> None:
        self._inp = inp
        self._state = inp.state or JobRecordState(cluster=inp.cluster, job_id=inp.job_id)
        self._touched = 0

    @workflow.run
    async def run(self, inp: JobRecordInput) -> JobRecordState:
        """Serve Updates; continue as new well before the history limits; end when idle."""
        workflow.set_current_details(f"record of job {inp.job_id} on {inp.cluster}")

        def should_roll() -> bool:
            info = workflow.info()
            return info.is_continue_as_new_suggested() or (
                info.get_current_history_length() >= inp.continue_as_new_after_events)

        while True:
            seen = self._touched

            def woken(seen: int = seen) -> bool:
                return should_roll() or self._touched != seen

            try:
                await workflow.wait_condition(woken,
                                              timeout=inp.idle_close, timeout_summary="idle close")
            except TimeoutError:
                await workflow.wait_condition(workflow.all_handlers_finished)
                return self._state
            if should_roll():
                break
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(inp.model_copy(update={"state": self._state}))

    @workflow.update(name="admit")
    def admit(self, raw: object) -> AdmitAnswer:
        """The job's history for the budget check (other open incidents counted as reserved
        requeues) and the incident entered as open; idempotent per incident id."""
        answer = admit(self._state, AdmitInput.model_validate(raw))
        self._touch()
        return answer

    @admit.validator
    def _validate_admit(self, raw: object) -> None:
        self._check(AdmitInput.model_validate(raw))

    @workflow.update(name="report")
    def report(self, raw: object) -> bool:
        """Record an incident's outcome (replaces its reservation). True when it had been admitted."""
        known = report(self._state, ReportInput.model_validate(raw))
        self._touch()
        return known

    @report.validator
    def _validate_report(self, raw: object) -> None:
        self._check(ReportInput.model_validate(raw))

    @workflow.query
    def state(self) -> JobRecordState:
        return self._state

    def _check(self, inp: AdmitInput | ReportInput) -> None:
        if (inp.cluster, inp.job_id) != (self._state.cluster, self._state.job_id):
            raise ValueError(f"wrong record: job {inp.cluster}/{inp.job_id} sent to the record of "
                             f"{self._state.cluster}/{self._state.job_id}")

    def _touch(self) -> None:
        self._touched += 1
        st = self._state
        open_ = sum(1 for e in st.entries if e.outcome is None)
        workflow.set_current_details(f"record of job {st.job_id} on {st.cluster}: {len(st.entries)} incident(s), "
                                     f"{open_} open; first SubmitTime {st.first_submit}")


__all__ = ["JobRecordWorkflow"]
