"""Log sources behind one interface: local files, Grafana Loki, VictoriaLogs.

::

    from revive.logsources import StreamSelector, from_config

    src = from_config({"backend": "loki", "url": "http://loki:3100",
                       "labels": {"job": "slurm", "slurm_job_id": "{job_id}"}, "tenant": "hpc"})
    sel = StreamSelector(job_id="4242", hosts=("gpu01", "gpu02"))
    lines = await src.read_new(sel)        # list[LogLine]; LogSourceUnavailable → back off
    saved = src.state()                    # JSON-able; src.restore(saved) after a restart
    await src.close()

See ``docs/logsources.md`` for the configuration shape and what was tested how.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from revive.errors import ConfigError
from revive.logsources.base import (
    LINE_CAP,
    LogLine,
    LogSource,
    LogSourceError,
    LogSourceUnavailable,
    StreamSelector,
    clean_text,
    quote_string,
)

__all__ = [
    "LINE_CAP", "LogLine", "LogSource", "LogSourceConfig", "LogSourceError", "LogSourceUnavailable",
    "StreamSelector", "clean_text", "from_config", "quote_string",
]


class LogSourceConfig(BaseModel):
    """The proposed ``logs:`` block of the cluster config (see ``docs/logsources.md``): a superset
    of today's ``revive.config.LogSource`` (``poll_interval_s``, ``over_ssh``, ``offsets_file``), so
    an existing cluster file validates unchanged and means ``backend: file``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    poll_interval_s: float = Field(default=0.5, gt=0, le=0.5)
    """Unchanged from ``revive.config.LogSource`` (the monitor's poll period)."""
    over_ssh: bool = False
    """Unchanged from ``revive.config.LogSource`` (declared there, not used by the monitor yet)."""
    backend: Literal["file", "loki", "victorialogs"] = "file"
    url: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    """Label/stream-field template: value templates may use {job_id}, {path}, {hosts}, {<label>}."""
    tenant: str | None = None
    """Loki: X-Scope-OrgID. VictoriaLogs: "AccountID:ProjectID" (or just AccountID)."""
    token_file: str | None = None
    follow: bool = False
    limit: int = Field(default=1000, ge=1, le=100_000)
    lookback_s: float = Field(default=3600.0, ge=0)
    settle_s: float = Field(default=30.0, ge=0)
    reorder_window_s: float = Field(default=0.0, ge=0)
    max_window_s: float = Field(default=3600.0, gt=0)
    """Longest time range one query covers (stays under Loki's max_query_length)."""
    tail_reorder_s: float = Field(default=10.0, ge=0)
    """Follow mode: how late an entry of one stream may arrive after a newer one of another."""
    timeout_s: float = Field(default=10.0, gt=0)
    offsets_file: str | None = None
    """file backend: where the Follower caches offsets."""

    @model_validator(mode="after")
    def _check(self) -> LogSourceConfig:
        if self.backend != "file":
            if not self.url:
                raise ValueError(f"logs.url is required for backend {self.backend}")
            if not self.labels:
                raise ValueError(f"logs.labels is required for backend {self.backend} "
                                 '(e.g. {job: slurm, slurm_job_id: "{job_id}"})')
        return self


def from_config(cfg: Mapping[str, Any] | LogSourceConfig, **kw: Any) -> LogSource:
    """Build the configured source. ``kw`` goes to the backend (``transport=``, ``client=``, ``cluster=``)."""
    try:
        c = cfg if isinstance(cfg, LogSourceConfig) else LogSourceConfig.model_validate(dict(cfg))
    except ValidationError as e:
        raise ConfigError(f"logs: {e}") from e
    common: dict[str, Any] = dict(limit=c.limit, lookback_s=c.lookback_s, settle_s=c.settle_s,
                                  reorder_window_s=c.reorder_window_s, follow=c.follow, timeout_s=c.timeout_s,
                                  max_window_s=c.max_window_s, tail_reorder_s=c.tail_reorder_s)
    try:
        if c.backend == "file":
            from revive.logsources.files import FileLogSource

            return FileLogSource(offsets_file=c.offsets_file, **kw)
        if c.backend == "loki":
            from revive.logsources.loki import LokiLogSource

            return LokiLogSource(c.url or "", c.labels, tenant=c.tenant, token_file=c.token_file, **common, **kw)
        from revive.logsources.victorialogs import VictoriaLogsSource

        account, _, project = (c.tenant or "").partition(":")
        return VictoriaLogsSource(c.url or "", c.labels, account_id=account or None, project_id=project or None,
                                  token_file=c.token_file, **common, **kw)
    except ValueError as e:
        raise ConfigError(f"logs: {e}") from e
