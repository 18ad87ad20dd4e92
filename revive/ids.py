"""Workflow ids and names, defined once (the monitor, the workflows, the activities and the CLI use them).

- incident: ``<cluster>-<job>-<first SubmitTime>-a<attempt>`` — one incident per job attempt,
  whatever the family of the fault that opened it (job ids restart at 1 on a fresh cluster, and
  Slurm 22.05 resets SubmitTime on requeue, so the job's first SubmitTime is part of the identity).
  Ids written before one incident per attempt end with ``-<family>``;
- runbook child: ``<incident id>.runbook``;
- per-cluster guard: ``revive-guard-<cluster>`` (``@<task queue>`` for a non-default queue).

Workflow type names are the registered names (``@workflow.defn(name=…)``): activities start or
update workflows by these names, so the activity layer never imports workflow code.
"""

from __future__ import annotations

from datetime import datetime

INCIDENT_WORKFLOW = "IncidentWorkflow"
GUARD_WORKFLOW = "ClusterGuardWorkflow"
GUARD_REQUEST_DRAIN = "request_drain"
"""The guard's Update that grants or refuses a drain."""
DEFAULT_TASK_QUEUE = "revive"


def incident_id(cluster: str, job_id: str, submit: datetime | None, attempt: int, family: str | None = None) -> str:
    """The incident's workflow id; ``family`` (the id form before one incident per attempt) is
    appended only when given (benchmarks and tests that want one incident per family)."""
    st = submit.strftime("%Y%m%dT%H%M%S") if submit else "nosubmit"
    return f"{cluster}-{job_id}-{st}-a{attempt}" + (f"-{family}" if family else "")


def runbook_id(incident: str) -> str:
    return f"{incident}.runbook"


def guard_workflow_id(cluster: str, task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """The guard's workflow id: ``revive-guard-<cluster>`` for the default task queue ``revive``,
    ``revive-guard-<cluster>@<task_queue>`` otherwise. A workflow runs on the task queue it was
    started on, so workers of another task queue (tests) get their own guard rather than one no
    worker of theirs polls."""
    return f"revive-guard-{cluster}" if task_queue == DEFAULT_TASK_QUEUE else f"revive-guard-{cluster}@{task_queue}"


JOB_RECORD_WORKFLOW = "JobRecordWorkflow"
JOB_RECORD_ADMIT = "admit"
"""The job record's Update that answers the job's history and reserves a requeue atomically."""
JOB_RECORD_REPORT = "report"
"""The job record's Update that records an incident's outcome at its close."""
GUARD_SET_MODE = "set_mode"
GUARD_APPLY_POLICY = "apply_policy"
GUARD_SETTINGS_QUERY = "settings"
GUARD_NOTE_NODES = "note_node_incidents"
"""The guard's Update that records an incident's culprit nodes and answers the other incidents on
them (``revive.decide.offenders``)."""
INCIDENT_ADD_TRIGGER = "add_trigger"
"""The incident's Update (and, for old senders, Signal) that records a later trigger."""


def job_record_id(cluster: str, job_id: str, task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """The per-job record's workflow id: ``revive-job-<cluster>-<job id>`` (``@<task queue>`` for a
    non-default queue, as for the guard). One per (cluster, job id): a monitor that restarted finds
    the job's first SubmitTime and budgets there without knowing them."""
    base = f"revive-job-{cluster}-{job_id}"
    return base if task_queue == DEFAULT_TASK_QUEUE else f"{base}@{task_queue}"


RTS_WORKFLOW = "ReturnToServiceWorkflow"
"""The per-cluster return-to-service run (started by the Schedule ``rts_schedule_id``)."""
NODE_CHECK_WORKFLOW = "NodeCheckWorkflow"
"""One node's health check and resume (child of the per-cluster run)."""


def _tq_suffix(task_queue: str) -> str:
    return "" if task_queue == DEFAULT_TASK_QUEUE else f"@{task_queue}"


def rts_schedule_id(cluster: str, task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """The Temporal Schedule that runs ``ReturnToServiceWorkflow``: ``revive-rts-<cluster>``."""
    return f"revive-rts-{cluster}{_tq_suffix(task_queue)}"


def rts_run_id(cluster: str, task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """Workflow id of a per-cluster run started by hand (``revive health run``); the Schedule
    appends its own timestamp to ``rts_schedule_id``."""
    return f"revive-rts-{cluster}-run{_tq_suffix(task_queue)}"


def node_check_id(cluster: str, node: str, task_queue: str = DEFAULT_TASK_QUEUE) -> str:
    """``revive-rts-<cluster>-node-<node>``: one check per node at a time (a second start while one
    runs is refused by the server)."""
    return f"revive-rts-{cluster}-node-{node}{_tq_suffix(task_queue)}"


def maintenance_window_name(node: str) -> str:
    """The maintenance window (Slurm reservation) of a node's check: ``revive-rts-<node>``."""
    return f"revive-rts-{node}"
