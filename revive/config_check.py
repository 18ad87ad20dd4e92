"""``revive config check``: validate a cluster config and try every endpoint it names.

Each check returns one ``CheckRow`` (what, target, ok, detail). Secrets are resolved (the files
and variables are read) but never printed: a row says only that the secret was found and how
long it is. Endpoints tried: the Slurm CLI (locally or on the SSH login node: ``scontrol ping``),
slurmrestd (``/ping`` with the JWT), the Temporal frontend (connect + namespace), job logs (the
first readable job log through the site's reader), and each node's kernel log (through the jump
host in SSH mode). Nothing here changes the cluster.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from revive.config import ClusterConfig
from revive.errors import ConfigError, ReviveError


@dataclass
class CheckRow:
    what: str
    target: str
    ok: bool
    detail: str
    seconds: float = 0.0


def _secret_rows(cfg: ClusterConfig) -> list[CheckRow]:
    rows: list[CheckRow] = []
    ssh = cfg.scheduler.ssh
    if ssh is not None:
        try:
            key = ssh.private_key()
            if key is not None:
                rows.append(CheckRow("ssh key", f"env {ssh.key_env}", True, f"{len(key)} characters (not shown)"))
            elif ssh.key_file:
                from pathlib import Path

                p = Path(ssh.key_file).expanduser()
                rows.append(CheckRow("ssh key", ssh.key_file, p.is_file(), "readable" if p.is_file() else "missing"))
        except ConfigError as e:
            rows.append(CheckRow("ssh key", ssh.key_env or ssh.key_file or "-", False, str(e)))
        if ssh.known_hosts:
            from pathlib import Path

            p = Path(ssh.known_hosts).expanduser()
            rows.append(CheckRow("known_hosts", ssh.known_hosts, p.is_file(),
                                 "host keys are verified against it" if p.is_file() else "missing: every host refused"))
    rest = cfg.scheduler.rest
    if rest is not None:
        try:
            tok = rest.token()
            rows.append(CheckRow("slurmrestd token", rest.token_file or f"env {rest.token_env}", bool(tok),
                                 f"{len(tok)} characters (not shown)"))
        except ConfigError as e:
            rows.append(CheckRow("slurmrestd token", rest.token_file or f"env {rest.token_env}", False, str(e)))
    rows += _temporal_secret_rows(cfg)
    return rows


def _temporal_secret_rows(cfg: ClusterConfig) -> list[CheckRow]:
    """Temporal API key and TLS files: path and length only, never the content."""
    from pathlib import Path

    t = cfg.temporal
    rows: list[CheckRow] = []
    files = [("temporal api key", t.api_key_file)]
    if t.tls is not None:
        files += [("temporal tls ca", t.tls.ca_file), ("temporal tls cert", t.tls.cert_file),
                  ("temporal tls key", t.tls.key_file)]
    for what, path in files:
        if not path:
            continue
        try:
            n = len(Path(path).expanduser().read_bytes().strip())
            rows.append(CheckRow(what, path, n > 0, f"{n} bytes (not shown)" if n else "empty"))
        except OSError as e:
            rows.append(CheckRow(what, path, False, f"cannot read: {e.strerror}"))
    return rows


async def _timed(what: str, target: str, coro) -> CheckRow:  # noqa: ANN001
    t0 = time.monotonic()
    try:
        ok, detail = await asyncio.wait_for(coro, 30)
    except (ReviveError, OSError, TimeoutError, RuntimeError) as e:
        ok, detail = False, f"{type(e).__name__}: {e}"
    return CheckRow(what, target, ok, detail[:300], round(time.monotonic() - t0, 2))


async def check_config(cfg: ClusterConfig) -> list[CheckRow]:
    """Every row of the check, in order. Never raises for an unreachable endpoint."""
    from revive.scheduler.slurm_cli import SlurmCLI
    from revive.site import build_site

    rows = [CheckRow("config", cfg.name, True, f"valid (scheduler {cfg.scheduler.mode}, reads {cfg.scheduler.read})")]
    rows += _secret_rows(cfg)
    site = build_site(cfg)
    where = (f"ssh {cfg.scheduler.ssh.user or ''}@{cfg.scheduler.ssh.host}:{cfg.scheduler.ssh.port}"
             if cfg.scheduler.ssh and cfg.scheduler.mode == "ssh" else "local")
    cli = SlurmCLI.from_config(cfg, runner=site.runner)

    async def slurm_cli() -> tuple[bool, str]:
        ok = await cli.ping()
        return ok, "scontrol ping: slurmctld answers" if ok else "scontrol ping: slurmctld does not answer"

    rows.append(await _timed("slurm cli", where, slurm_cli()))
    jobs: list = []
    if cfg.scheduler.rest is not None:
        async def rest_ping() -> tuple[bool, str]:
            ok = await site.scheduler.ping()
            return ok, "reads from slurmrestd" if ok else "no UP ping"

        if cfg.scheduler.read == "rest":
            rows.append(await _timed("slurmrestd", cfg.scheduler.rest.url, rest_ping()))
        else:
            rows.append(CheckRow("slurmrestd", cfg.scheduler.rest.url, True, "configured, not used (scheduler.read: cli)"))

    async def list_jobs() -> tuple[bool, str]:
        jobs.extend(await site.scheduler.list_jobs())
        return True, f"{len(jobs)} job(s) listed"

    rows.append(await _timed("job list", where if cfg.scheduler.read == "cli" else "slurmrestd", list_jobs()))

    async def temporal() -> tuple[bool, str]:
        from revive.temporal import connect

        client = await connect(cfg.temporal, identity="revive-config-check")
        await client.service_client.check_health()
        return True, f"namespace {cfg.temporal.namespace}, task queue {cfg.temporal.task_queue}"

    rows.append(await _timed("temporal", cfg.temporal.address, temporal()))
    # running jobs first, then the newest: a finished job's log may be gone (that is no config error)
    with_logs = sorted((j for j in jobs if j.std_out), key=lambda j: (j.state != "RUNNING", -_num(j.job_id)))[:5]
    where_log = f"{cfg.logs.backend} {cfg.logs.url}" if cfg.logs.backend != "file" else (
        "sftp (login node)" if cfg.logs.over_ssh else "local files")

    async def logs() -> tuple[bool, str]:
        for job in with_logs:
            try:
                _, size = await site.logs.read_tail(job.std_out or "", 4096, job_id=job.job_id)
            except FileNotFoundError:
                continue
            return True, f"job {job.job_id}: {size} bytes of {job.std_out}"
        return True, "no job log to read right now" + (" (the listed jobs' files are gone)" if with_logs else "")

    rows.append(await _timed("job log", where_log, logs()))
    nodes = sorted({n for j in jobs for n in j.nodes}) or [n.name for n in (await _nodes(site))[:1]]
    for node in nodes[:4]:
        async def kern(node: str = node) -> tuple[bool, str]:
            got = await site.kernel.read(node)
            return got.available, (f"{len(got.lines)} line(s)" if got.available else f"unavailable: {got.why}")

        rows.append(await _timed("kernel log", node, kern()))
    await site.close()
    return rows


def _num(job_id: str) -> int:
    head = job_id.split("_", 1)[0]
    return int(head) if head.isdigit() else 0


async def _nodes(site) -> list:  # noqa: ANN001
    try:
        return await site.scheduler.get_nodes(None)
    except ReviveError:
        return []
