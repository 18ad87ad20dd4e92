"""Revive's error tree. Match errors by type, never by message.

::

    ReviveError
    ├── ConfigError            bad cluster config / policy file (field and allowed values named)
    ├── SchedulerError
    │   ├── SchedulerUnavailable   slurmctld or the transport is down         (retryable)
    │   ├── JobNotFound            job purged after MinJobAge or never existed (non-retryable)
    │   └── SchedulerCommandError  the command ran and refused                  (non-retryable)
    ├── JobIdentityMismatch    the live job is not the incident's job          (non-retryable)
    ├── IncidentNotFound       approve/reject/show on an unknown incident id
    └── EvidenceError          evidence could not be read (recorded, never fatal)

Activities convert the non-retryable ones into ``temporalio.exceptions.ApplicationError`` with
``type=<class name>`` and ``non_retryable=True``; ``NON_RETRYABLE`` lists those names.
"""

from __future__ import annotations


class ReviveError(Exception):
    """Base of every error Revive raises on purpose."""


class ConfigError(ReviveError):
    pass


class SchedulerError(ReviveError):
    pass


class SchedulerUnavailable(SchedulerError):
    pass


class JobNotFound(SchedulerError):
    pass


class SchedulerCommandError(SchedulerError):
    def __init__(self, argv: list[str], rc: int, output: str) -> None:
        super().__init__(f"{' '.join(argv)} exited {rc}: {output.strip()[:500]}")
        self.argv = argv
        self.rc = rc
        self.output = output


class JobIdentityMismatch(ReviveError):
    pass


class IncidentNotFound(ReviveError):
    pass


class EvidenceError(ReviveError):
    pass


NON_RETRYABLE = ["JobNotFound", "SchedulerCommandError", "JobIdentityMismatch", "ConfigError", "HoldReleaseNotArmed"]
