"""Cluster configuration: one YAML file per cluster → :class:`ClusterConfig`.

Example (``scripts/cluster-up.sh`` writes one like it for the local testbed)::

    name: local
    slurm_conf: /tmp/revive-cluster/etc/slurm.conf
    scheduler:
      mode: local                      # local | ssh
      # ssh: {host: login1, user: revive, port: 22, known_hosts: ~/.ssh/known_hosts,
      #       key_file: /etc/revive/id_ed25519}          # or key_env: REVIVE_SSH_KEY
      rest: {url: "http://127.0.0.1:6820", user: root, token_file: /tmp/revive-cluster/run/jwt.token}
    logs: {poll_interval_s: 0.5}
    kernel_log:
      path_template: /tmp/revive-cluster/nodes/{node}/kern.log
      # or: command: [journalctl, -k, -o, short-iso, --no-pager], over_ssh: true
    temporal: {address: "127.0.0.1:7233", namespace: default}
    audit_file: /tmp/revive-cluster/audit.jsonl
    state_dir: /tmp/revive-cluster/revive-state
    partitions: [debug]

Secrets (SSH key, REST token, TLS key) are referenced by file path or environment variable
name, never inlined: the models reject fields that look like inline secrets, and the secret
values are only read by :meth:`SecretRef`-style helpers at use time (never put into a workflow).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from revive.errors import ConfigError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _read_secret(file: str | None, env: str | None, what: str) -> str:
    if file:
        try:
            return Path(file).expanduser().read_text().strip()
        except OSError as e:
            raise ConfigError(f"{what}: cannot read secret file {file}: {e.strerror}") from e
    if env:
        value = os.environ.get(env)
        if not value:
            raise ConfigError(f"{what}: environment variable {env} is not set")
        return value.strip()
    raise ConfigError(f"{what}: no secret configured")


class SSHAccess(_Model):
    """SSH to a login node (scheduler commands) and, for ``run_on_node``, to compute nodes."""

    host: str
    user: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    known_hosts: str | None = None
    """Path to a known_hosts file. ``None`` uses asyncssh's default (~/.ssh/known_hosts)."""
    key_file: str | None = None
    """Path to the private key."""
    key_env: str | None = None
    """Name of an environment variable holding the private key (PEM/OpenSSH text)."""
    connect_timeout_s: float = 10.0
    pin_unknown_host: bool = False
    """Trust on first use: a host with no entry in ``known_hosts`` is accepted once and its key
    appended to the file. Off by default: an unknown host key is refused."""
    node_hosts: dict[str, str] = Field(default_factory=dict)
    """How to reach each compute node from the login node (jump host): ``{node: "host[:port]"}``.
    Empty: a node is reached by its own name on ``port``."""

    def node_addresses(self) -> dict[str, tuple[str, int]] | None:
        """``node_hosts`` as ``{node: (host, port)}``; None when empty (reach nodes by name)."""
        if not self.node_hosts:
            return None
        out: dict[str, tuple[str, int]] = {}
        for node, addr in self.node_hosts.items():
            host, _, port = addr.rpartition(":") if ":" in addr else (addr, "", "")
            out[node] = (host, int(port)) if port else (addr, self.port)
        return out

    def private_key(self) -> str | None:
        """The key text from ``key_env`` (``None`` when ``key_file`` or the agent is used)."""
        if self.key_env:
            return _read_secret(None, self.key_env, "scheduler.ssh.key_env")
        return None


class RestAccess(_Model):
    """slurmrestd (reads only; 22.05 REST cannot drain/resume/requeue)."""

    url: str
    user: str = "root"
    token_file: str | None = None
    token_env: str | None = None
    api_version: str = "v0.0.38"

    @model_validator(mode="after")
    def _one_token_source(self) -> RestAccess:
        if bool(self.token_file) == bool(self.token_env):
            raise ValueError("exactly one of token_file or token_env is required")
        return self

    def token(self) -> str:
        return _read_secret(self.token_file, self.token_env, "scheduler.rest")


class SchedulerAccess(_Model):
    mode: Literal["local", "ssh"] = "local"
    """Where the Slurm CLI runs: this machine, or the login node over SSH (``ssh``)."""
    read: Literal["cli", "rest"] = "cli"
    """Where job and node reads come from: the CLI, or slurmrestd (``rest`` needs the ``rest``
    section). Actions always use the CLI: slurmrestd 22.05 cannot drain, resume or requeue."""
    ssh: SSHAccess | None = None
    rest: RestAccess | None = None
    command_timeout_s: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _ssh_needs_host(self) -> SchedulerAccess:
        if self.mode == "ssh" and self.ssh is None:
            raise ValueError("mode 'ssh' needs an 'ssh' section (host, user, key_file|key_env)")
        if self.read == "rest" and self.rest is None:
            raise ValueError("read 'rest' needs a 'rest' section (url, user, token_file|token_env)")
        return self


class LogSource(_Model):
    """How the monitor reads job logs (the StdOut path from ``scontrol show job``)."""

    poll_interval_s: float = Field(default=0.5, gt=0, le=0.5)
    over_ssh: bool = False
    """Read job logs on the login node over SFTP (``scheduler.mode: ssh``; the login node sees the
    shared file system the jobs write to) instead of locally."""
    backend: Literal["file", "loki", "victorialogs"] = "file"
    """Where job logs are read: files (local or over SSH), or a log store (``revive.logsources``)."""
    url: str | None = None
    """Loki / VictoriaLogs base URL."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Stream selector template, values may use ``{job_id}``, ``{path}``, ``{hosts}``: e.g.
    promtail's ``{filename: "{path}"}`` or ``{job: slurm, slurm_job_id: "{job_id}"}``."""
    tenant: str | None = None
    """Loki ``X-Scope-OrgID``; VictoriaLogs ``AccountID[:ProjectID]``."""
    token_file: str | None = None
    """Bearer token file for the log store (read at use, never logged)."""
    lookback_s: float = Field(default=3600.0, ge=0)
    """How far back a first read (and the evidence window) looks, in seconds."""

    @model_validator(mode="after")
    def _store_needs_url(self) -> LogSource:
        if self.backend != "file" and (not self.url or not self.labels):
            raise ValueError(f"logs.backend {self.backend} needs logs.url and logs.labels")
        if self.backend != "file" and self.over_ssh:
            raise ValueError("logs.over_ssh applies to files only")
        return self


class KernelLogSource(_Model):
    """Per-node kernel log: a path template (``{node}`` is replaced) or a command."""

    path_template: str | None = None
    command: list[str] | None = None
    """argv run on the node (``over_ssh``): ``{node}`` and ``{since}`` are replaced, e.g.
    ``[journalctl, -k, -o, short-iso, --no-pager, --since, "{since}"]`` or ``[dmesg, -T]``."""
    over_ssh: bool = False
    """Read each node's kernel log on the node itself, through the login node as a jump host
    (``scheduler.mode: ssh``). Off: ``path_template`` is a local path with ``{node}``."""

    @model_validator(mode="after")
    def _one_source(self) -> KernelLogSource:
        if bool(self.path_template) == bool(self.command):
            raise ValueError("exactly one of path_template or command is required")
        if self.path_template and "{node}" not in self.path_template and not self.over_ssh:
            raise ValueError("path_template must contain '{node}' (or set over_ssh: the same path on every node)")
        if self.command and not self.over_ssh:
            raise ValueError("command needs over_ssh: true (it runs on each node through the login node)")
        return self

    def path_for(self, node: str) -> str | None:
        return self.path_template.replace("{node}", node) if self.path_template else None

    def command_for(self, node: str) -> list[str] | None:
        return [a.replace("{node}", node) for a in self.command] if self.command else None


_INLINE_SECRET = re.compile(r"-----BEGIN|^eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+|[\r\n]")
"""What an inlined secret looks like in a ``*_file`` field: PEM armour, a JWT, several lines."""


def _path_only(value: str | None, field: str) -> str | None:
    if value is not None and (_INLINE_SECRET.search(value) or len(value) > 4096):
        raise ValueError(f"{field} must be a file path; the secret itself is never written in the config")
    return value


class TemporalTLS(_Model):
    """TLS to the Temporal frontend: files only (read at connect time, never logged).

    ``cert_file`` + ``key_file``: mutual TLS (both or neither); ``ca_file``: the server's CA
    (None: the system roots); ``server_name``: the name the server's certificate is checked for.
    ``tls: {}`` is server-authenticated TLS with the system roots.
    """

    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    server_name: str | None = None

    @model_validator(mode="after")
    def _files(self) -> TemporalTLS:
        for name in ("cert_file", "key_file", "ca_file"):
            _path_only(getattr(self, name), f"temporal.tls.{name}")
        if bool(self.cert_file) != bool(self.key_file):
            missing = "key_file" if self.cert_file else "cert_file"
            raise ValueError(f"temporal.tls.{missing} is required with the other (mutual TLS: cert_file and key_file)")
        return self


class TemporalConfig(_Model):
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "revive"
    tls: TemporalTLS | None = None
    api_key_file: str | None = None
    """A file holding the Temporal API key (e.g. Temporal Cloud), sent as ``Authorization: Bearer``.
    Read at connect time; never logged, printed or put into a workflow. Without ``tls`` the
    connection is plain (a local dev server); set ``tls: {}`` for a remote server."""

    @model_validator(mode="after")
    def _key_is_a_path(self) -> TemporalConfig:
        _path_only(self.api_key_file, "temporal.api_key_file")
        return self

    def api_key(self) -> str | None:
        """The API key text, or None. Raises ``ConfigError`` naming the file (not its content)."""
        if not self.api_key_file:
            return None
        key = _read_secret(self.api_key_file, None, "temporal.api_key_file")
        if not key:
            raise ConfigError(f"temporal.api_key_file: {self.api_key_file} is empty")
        return key


class AttributionService(_Model):
    """Optional external attribution service (``revive.attribution.external``): a fast pass, then
    a slow one, each with its own timeout (seconds). Its verdict is recorded beside Revive's and
    never decides or overrides a guard."""

    url: str
    fast_timeout_s: float = Field(default=5.0, gt=0)
    slow_timeout_s: float = Field(default=120.0, gt=0)
    token_file: str | None = None
    token_env: str | None = None

    def token(self) -> str | None:
        if not (self.token_file or self.token_env):
            return None
        return _read_secret(self.token_file, self.token_env, "attribution.token")


class GpuSignals(_Model):
    """GPU metrics read into each incident's evidence (``EvidenceBundle.gpu_metrics``)."""

    dcgm_url_template: str | None = None
    """A DCGM exporter per node, e.g. ``http://{node}:9400/metrics`` (``{node}`` is replaced), or a
    ``revive agent`` on each node (``http://{node}:9835/metrics``). None: no GPU metrics."""
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    """Per-node scrape timeout in seconds; a node that does not answer is a note, never a failure."""

    @model_validator(mode="after")
    def _node_placeholder(self) -> GpuSignals:
        if self.dcgm_url_template and "{node}" not in self.dcgm_url_template:
            raise ValueError("dcgm_url_template must contain '{node}'")
        return self


class ClusterConfig(_Model):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    slurm_conf: str | None = None
    """``SLURM_CONF`` for the CLI (local mode); ``None`` = Slurm's default."""
    scheduler: SchedulerAccess = Field(default_factory=SchedulerAccess)
    logs: LogSource = Field(default_factory=LogSource)
    kernel_log: KernelLogSource | None = None
    temporal: TemporalConfig = Field(default_factory=TemporalConfig)
    audit_file: str
    state_dir: str
    ip_to_node: dict[str, str] = Field(default_factory=dict)
    gpu: GpuSignals = Field(default_factory=GpuSignals)
    attribution: AttributionService | None = None
    """External attribution service; None = Revive's rules only."""
    partitions: list[str] | None = None
    """Opt-in allowlist: every job in these partitions is watched. ``None``: only jobs that
    opt in through their ``--comment`` JSON."""
    local_testbed: bool = False
    """All nodes are ``slurmd -N`` processes on this machine (scripts/cluster-up.sh):
    ``run_on_node`` runs the command locally with ``SLURMD_NODENAME=<node>``."""


def parse_cluster_config(data: object, source: str = "<config>") -> ClusterConfig:
    """Validate an already-loaded mapping. Raises :class:`ConfigError` naming the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return ClusterConfig.model_validate(data)
    except ValidationError as e:
        from revive.yamlfile import field_errors

        raise ConfigError(f"{source}: invalid cluster config: " + "; ".join(field_errors(e))) from None


def load_cluster_config(path: str | Path) -> ClusterConfig:
    """Read and validate a cluster config YAML file. Raises :class:`ConfigError`."""
    from revive.yamlfile import read_yaml

    return parse_cluster_config(read_yaml(path, "cluster config"), source=str(path))
