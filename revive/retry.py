"""Named retry policies and timeouts for activities, defined once.

Trap: ``RetryPolicy(maximum_attempts=0)`` means *unlimited* attempts in Temporal.

- ``READ_ONLY``: squeue/scontrol reads, log reads. Retry freely (slurmctld restarts are common).
- ``MUTATING``: drain, requeue, release. Bounded in time (``MUTATING_DEADLINE``), not in count;
  each activity checks live state first, so a retry never acts twice.
- ``PROBE``: best-effort checks (health check, external attribution, webhooks): one attempt.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from revive.errors import NON_RETRYABLE

READ_ONLY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=20,
    non_retryable_error_types=NON_RETRYABLE,
)
MUTATING = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=15),
    maximum_attempts=0,  # unlimited: MUTATING_DEADLINE bounds the retries in time, not in count
    non_retryable_error_types=NON_RETRYABLE,
)
MUTATING_DEADLINE = timedelta(minutes=5)
"""``schedule_to_close`` of a mutating step: its retries outlast a slurmctld restart or a 60 s
outage (a count of 5 gave up after ~50 s), and still end so that the incident can say so."""
ACT_HEARTBEAT = timedelta(seconds=15)
"""Heartbeat timeout of act steps: a killed worker's drain/requeue is retried within seconds,
not after its start-to-close timeout."""
PROBE = RetryPolicy(maximum_attempts=1)

SHORT = timedelta(seconds=60)
"""start_to_close for reads and single scontrol calls."""
