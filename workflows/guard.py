"""``ClusterGuardWorkflow``: one long-lived workflow per cluster that serialises drain grants.

Workflow id: ``revive-guard-<cluster>`` (``revive.ids.guard_workflow_id``). Incidents never drain on their
own authority: they ask the guard through the ``request_drain`` Update (via the
``request_drain_grant`` activity, which uses update-with-start so the guard is created on first
use). The handler is synchronous, so two incidents asking at once are answered one after the
other against the same sliding window: the circuit breaker cannot be raced.

- Granted → the incident drains the granted nodes.
- Refused (``granted=False``, ``breaker_open=True``) → the incident's plan waits for a person's
  approval whatever the mode; the reason is in the answer and in the guard's ``state`` query.
  When a person approves, the incident asks again with ``approved_by`` set: the drain is granted
  over the breaker and recorded in the window.
- Same incident asking twice → the same answer (idempotent per ``incident_id``), so a retried
  activity or a replayed incident never consumes the window twice.

Mode and policy (``revive.decide.settings``) live here too, changed by two Updates, each validated
(a refused Update writes no history), idempotent per ``update_id`` and size-capped:

- ``set_mode`` (``ModeChange``): observe/auto for the cluster or one partition, with who and a
  note, recorded with the guard's workflow time (``revive mode set``);
- ``apply_policy`` (``PolicyApply``): a policy document validated by ``parse_policy``; stored as
  the next ``policy_version`` (``revive policy apply``).

Repeat offenders per node (``revive.decide.offenders``): the ``note_node_incidents`` Update
(``NoteNodesInput``, one raw payload, validated) records an incident's culprit nodes once per
incident id and answers, in the same synchronous step, the other incidents that blamed the asked
nodes within the policy's window — the incident's budget check reads them from here (through the
``admit_incident`` activity), not from visibility.

The ``settings`` query answers both (incidents read the mode through the ``read_guard_mode``
activity; the monitor reads the policy through ``GuardActivities.read_policy``).

The workflow continues as new when the server suggests it, after ``GuardInput.continue_as_new_after``
requests, or once the run's history reaches ``continue_as_new_after_events`` events (tracked with
``get_current_history_length``), carrying ``GuardState``. Deterministic: the only clock is
``workflow.now()`` (or the requester's ``now``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import revive.errors  # noqa: F401  (parse_policy's ConfigError, imported lazily: pass it through)
    import revive.yamlfile  # noqa: F401  (field_errors, imported lazily by parse_policy)
    from revive.decide.breaker import (
        DrainGrant,
        DrainGrantInput,
        DrainRecord,
        GuardInput,
        GuardState,
        evaluate_drain,
    )
    from revive.decide.offenders import NodeIncidentsAnswer, NoteNodesInput, note_and_answer, prune
    from revive.decide.settings import (
        GuardSettings,
        ModeChange,
        PolicyApply,
        SettingsAnswer,
        apply_mode,
        apply_policy,
    )

MAX_TRIPS_KEPT = 50
RECORD_KEEP = timedelta(days=7)
"""Drain records older than this are dropped even if a policy's window is longer."""


@workflow.defn(name="ClusterGuardWorkflow")
class ClusterGuardWorkflow:
    """Per-cluster drain circuit breaker. Input ``GuardInput``; runs until cancelled/terminated."""

    @workflow.init
    def __init__(self, inp: GuardInput) -> None:
        self._inp = inp
        self._state = inp.state or GuardState(cluster=inp.cluster)
        self._requests_this_run = 0

    @workflow.run
    async def run(self, inp: GuardInput) -> None:
        """Wait for requests; continue as new when suggested. Never returns on its own."""
        workflow.set_current_details(f"drain guard for cluster {inp.cluster}")
        limit = inp.continue_as_new_after

        def should_roll() -> bool:
            info = workflow.info()
            return info.is_continue_as_new_suggested() or (
                limit is not None and self._requests_this_run >= limit
            ) or info.get_current_history_length() >= inp.continue_as_new_after_events

        await workflow.wait_condition(should_roll)
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(
            GuardInput(
                cluster=inp.cluster,
                state=self._state,
                max_answers=inp.max_answers,
                continue_as_new_after=inp.continue_as_new_after,
                continue_as_new_after_events=inp.continue_as_new_after_events,
            )
        )

    @workflow.update
    def request_drain(self, inp: DrainGrantInput) -> DrainGrant:
        """Grant or refuse a drain (see ``revive.decide.breaker.evaluate_drain``). Synchronous, so
        requests are serialised. Idempotent per ``incident_id``: a repeated request returns the
        first answer, except that a refused incident asking again with ``approved_by`` set is
        re-evaluated (and granted over the breaker)."""
        st = self._state
        prior = st.answers.get(inp.incident_id)
        if prior is not None and (prior.granted or not inp.approved_by):
            return prior
        now = inp.now or workflow.now()
        self._prune(now)
        grant = evaluate_drain(st, inp, now)
        st.requests += 1
        self._requests_this_run += 1
        if grant.granted:
            st.drains.append(
                DrainRecord(
                    incident_id=inp.incident_id, partition=inp.partition, nodes=grant.nodes, at=now
                )
            )
        if grant.breaker_open:
            st.tripped.append(f"{now.isoformat()} {inp.incident_id} {grant.reason}")
            del st.tripped[:-MAX_TRIPS_KEPT]
        if inp.incident_id not in st.answers:
            st.answer_order.append(inp.incident_id)
        st.answers[inp.incident_id] = grant
        while len(st.answer_order) > self._inp.max_answers:
            st.answers.pop(st.answer_order.pop(0), None)
        workflow.set_current_details(
            f"drain guard for {st.cluster}: {len(st.drains)} drain(s) recorded; last: "
            f"{inp.incident_id} → {'granted' if grant.granted else 'refused'} ({grant.reason})"
        )
        return grant

    @request_drain.validator
    def _validate_request(self, inp: DrainGrantInput) -> None:
        if not inp.incident_id:
            raise ValueError("incident_id required")
        if inp.cluster != self._state.cluster:
            raise ValueError(f"wrong guard: request for cluster {inp.cluster!r}, guard of {self._state.cluster!r}")
        if not inp.nodes:
            raise ValueError("nodes must not be empty")

    # ---- mode and policy -----------------------------------------------------------------------
    # Handlers take one raw payload and validate it themselves (a wrong shape is refused by the
    # validator, never a failed workflow task).
    @workflow.update(name="set_mode")
    def set_mode(self, raw: object) -> SettingsAnswer:
        """Set observe/auto for the cluster or one partition (``ModeChange``). Idempotent per
        ``update_id``. Returns what was applied."""
        st = self._settings()
        answer = apply_mode(st, ModeChange.model_validate(raw), workflow.now())
        self._requests_this_run += 1
        return answer

    @set_mode.validator
    def _validate_set_mode(self, raw: object) -> None:
        ModeChange.model_validate(raw)  # pydantic's ValidationError names the field

    @workflow.update(name="apply_policy")
    def apply_policy(self, raw: object) -> SettingsAnswer:
        """Store a validated policy document as the next version (``PolicyApply``). Idempotent per
        ``update_id``."""
        p = PolicyApply.model_validate(raw)
        answer = apply_policy(self._settings(), p, p.parsed(), workflow.now())
        self._requests_this_run += 1
        return answer

    @apply_policy.validator
    def _validate_apply_policy(self, raw: object) -> None:
        PolicyApply.model_validate(raw).parsed()  # ConfigError lists the invalid fields

    # ---- repeat offenders per node ----------------------------------------------------------------
    @workflow.update(name="note_node_incidents")
    def note_node_incidents(self, raw: object) -> NodeIncidentsAnswer:
        """Record the incident's culprit nodes (idempotent per incident id) and answer the other
        incidents on the asked nodes within the window (``revive.decide.offenders.note_and_answer``)."""
        inp = NoteNodesInput.model_validate(raw)
        st = self._state
        kept, since = prune(st.node_incidents, st.node_incidents_since, inp.now)
        st.node_incidents, answer = note_and_answer(kept, since, inp)
        st.node_incidents_since = since
        self._requests_this_run += 1
        return answer

    @note_node_incidents.validator
    def _validate_note_nodes(self, raw: object) -> None:
        inp = NoteNodesInput.model_validate(raw)  # pydantic's ValidationError names the field
        if inp.cluster != self._state.cluster:
            raise ValueError(f"wrong guard: note for cluster {inp.cluster!r}, guard of {self._state.cluster!r}")

    @workflow.query
    def settings(self) -> GuardSettings:
        """Mode (global, per partition) and policy in force, with who set them when."""
        return self._state.settings or GuardSettings()

    def _settings(self) -> GuardSettings:
        if self._state.settings is None:
            self._state.settings = GuardSettings()
        return self._state.settings

    @workflow.query
    def state(self) -> GuardState:
        """The guard's state: drain records in the window, answers, recent trips."""
        return self._state

    def _prune(self, now: datetime) -> None:
        cutoff = now - RECORD_KEEP
        self._state.drains = [d for d in self._state.drains if d.at > cutoff]


__all__ = ["ClusterGuardWorkflow"]
