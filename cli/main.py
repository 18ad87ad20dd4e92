"""``revive``: the operator's command line (typer).

Commands talk to Temporal with the pydantic converter; approve/reject send the ``decide`` Update,
so a refused decision (unknown incident, not awaiting approval, approver not allowed) is reported
with a non-zero exit. Short-lived Temporal clients can crash at interpreter exit (sdk-python #300),
so ``main`` ends with ``os._exit``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Revive: keeps distributed training runs alive.")
policy_app = typer.Typer(no_args_is_help=True, help="Recovery policy files.")
node_app = typer.Typer(no_args_is_help=True, help="Node return to service.")
progress_app = typer.Typer(no_args_is_help=True, help="Training progress in job logs (checkpoints, iterations).")
app.add_typer(policy_app, name="policy")
app.add_typer(node_app, name="node")
app.add_typer(progress_app, name="progress")
checkpoint_app = typer.Typer(no_args_is_help=True, help="Checkpoint changes Revive made on approval.")
app.add_typer(checkpoint_app, name="checkpoint")


def _mount_health() -> None:
    from cli.health import health_app

    app.add_typer(health_app, name="health")


_mount_health()


def _mount_agent() -> None:
    from revive.gpu.agent_cli import app as agent_app  # --help needs no NVML: nothing is loaded at import

    app.add_typer(agent_app, name="agent")


_mount_agent()


def _mount_safety() -> None:
    from cli.safety import mount  # revive mode set|show, revive policy apply|show (the cluster's guard)

    mount(app, policy_app)


_mount_safety()
console = Console()
err = Console(stderr=True)

_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _safe(text: object) -> str:
    """Untrusted text (log lines, paths, YAML errors) for a rich console: markup escaped and
    control characters (ANSI/OSC escapes) made visible, so they neither raise nor reach the terminal."""
    return escape(_CTRL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)))


def _error(msg: object) -> None:
    err.print("[red]error:[/]", _safe(msg))

DEFAULT_CONFIG = "/tmp/revive-cluster/cluster.yaml"
ConfigOpt = Annotated[str, typer.Option("--config", "-c", envvar="REVIVE_CONFIG", help="cluster config YAML")]


from cli.errors import Fail  # noqa: E402  (shared with cli.safety)


def _cfg(path: str):
    from revive.config import load_cluster_config

    return load_cluster_config(path)


def _run(coro):
    return asyncio.run(coro)


async def _client(config: str, identity: str):
    from revive.temporal import connect

    return await connect(_cfg(config).temporal, identity=identity)


MetricsPortOpt = Annotated[int | None, typer.Option(
    "--metrics-port", envvar="REVIVE_METRICS_PORT",
    help="serve Prometheus /metrics on this port (default: off)")]
MetricsAddrOpt = Annotated[str, typer.Option(
    "--metrics-addr", envvar="REVIVE_METRICS_ADDR", help="address /metrics listens on (0.0.0.0, like the GPU agent: the chart and compose scrape it from outside the container)")]


def _serve_metrics(port: int | None, addr: str) -> object | None:
    """Start the exposition server when a port is given (0: any free port); None when off."""
    if port is None:
        return None
    if not 0 <= port <= 65535:
        raise Fail(f"--metrics-port {port}: not a TCP port", 2)
    from revive import metrics as rm

    try:
        srv = rm.serve(port, addr)
    except OSError as e:
        raise Fail(f"cannot serve metrics on {addr}:{port}: {e.strerror or e}", 2) from None
    err.print(f"metrics on http://{_safe(addr)}:{srv.port}/metrics")
    return srv


@app.command()
def worker(config: ConfigOpt = DEFAULT_CONFIG, metrics_port: MetricsPortOpt = None,
           metrics_addr: MetricsAddrOpt = "0.0.0.0",
           policy: Annotated[str | None, typer.Option(
               help="policy YAML: with return_to_service.enabled, create/update the return-to-service schedule")] = None,
           ) -> None:
    """Run the Temporal worker (workflows + activities) for a cluster."""
    from worker.main import run_worker

    cfg = _cfg(config)
    if policy:
        from revive.policy import load_policy

        load_policy(policy)  # a bad file fails here, with the field named
    _serve_metrics(metrics_port, metrics_addr)
    _run(run_worker(cfg, policy_path=policy))


@app.command()
def monitor(
    config: ConfigOpt = DEFAULT_CONFIG,
    policy: Annotated[str | None, typer.Option(help="policy YAML (default: built-in, observe mode)")] = None,
    ui: Annotated[str | None, typer.Option(help="Web UI base URL for incident links")] = None,
    metrics_port: MetricsPortOpt = None,
    metrics_addr: MetricsAddrOpt = "0.0.0.0",
    shard: Annotated[str | None, typer.Option(help="i/n: watch only shard i of n of the jobs (stable hash)")] = None,
    jobs_poll_s: Annotated[float | None, typer.Option(help="seconds between job-list polls (default: every pass)")] = None,
) -> None:
    """Watch opted-in jobs and open incidents."""
    from revive.policy import load_policy
    from worker.monitor import parse_shard, run_monitor

    try:
        sh = parse_shard(shard) if shard else None
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--shard") from None
    cfg, pol = _cfg(config), load_policy(policy)
    _serve_metrics(metrics_port, metrics_addr)
    _run(run_monitor(cfg, pol, policy_path=policy, ui_base=ui, shard=sh, jobs_poll_s=jobs_poll_s))


@app.command()
def server(
    port: int = 7233, ui_port: int = 8233, db: str = "/tmp/revive-temporal/temporal.db",
    ip: str = "127.0.0.1",
) -> None:
    """Run the embedded Temporal dev server (SQLite + Web UI) in the foreground."""
    import subprocess

    from revive import search_attributes as sa
    from revive.temporal import temporal_cli_path

    Path(db).parent.mkdir(parents=True, exist_ok=True)
    argv = [temporal_cli_path(), "server", "start-dev", "--ip", ip, "--port", str(port), "--ui-port", str(ui_port),
            "--db-filename", db]
    for name, kind in sa.TYPES.items():
        argv += ["--search-attribute", f"{name}={kind}"]
    raise SystemExit(subprocess.call(argv))


DECIDE_TIMEOUT_S = 10.0
"""How long ``revive approve/reject`` waits for a worker to take the decision (a live worker
answers in well under a second); the decision's ``valid_until`` ends with it."""


async def _decide(config: str, incident: str, decision: str, approver: str, note: str | None,
                  timeout_s: float = DECIDE_TIMEOUT_S) -> str:
    """Send the ``decide`` Update, after checking that the incident is open and that a worker
    polls its task queue (else nothing is sent and the message says so within seconds)."""
    from temporalio.client import (
        WorkflowExecutionStatus,
        WorkflowUpdateFailedError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
    )
    from temporalio.service import RPCError, RPCStatusCode

    from cli.ops import live_pollers
    from revive.models import Decision

    if not approver:
        raise Fail(f"{decision}: say who decides with --as <you>", 2)
    client = await _client(config, f"revive-cli:{approver}")
    h = client.get_workflow_handle(incident)
    try:
        desc = await h.describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise Fail(f"no incident {incident!r} (list them with: revive incidents)", 2) from None
        raise
    if desc.status != WorkflowExecutionStatus.RUNNING:
        raise Fail(f"{decision} refused: incident {incident!r} is closed "
                   f"({desc.status.name.lower() if desc.status else 'unknown'}); see: revive show {incident}", 3)
    try:
        pollers = await live_pollers(client, desc.task_queue)
    except RPCError:
        pollers = ["?"]  # cannot tell (permissions): the update's own timeout below still applies
    if not pollers:
        raise Fail(f"{decision} not sent: no worker is polling task queue {desc.task_queue!r}; start one "
                   f"(revive worker --config ...) and retry", 4)
    try:
        return await asyncio.wait_for(
            h.execute_update("decide", Decision(
                decision=decision, approver=approver, note=note,
                # stale after this call gives up: a worker that returns later refuses it (no ghost approval)
                valid_until=datetime.now(UTC) + timedelta(seconds=timeout_s)), result_type=str),
            timeout=timeout_s)
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        # the worker seen polling is gone (a dead poller stays listed for up to ~90 s): the
        # decision carries valid_until, so a worker that comes back later refuses it as stale
        raise Fail(f"{decision}: no worker answered within {timeout_s:.0f}s (task queue {desc.task_queue!r}); "
                   f"nothing was decided (the {decision} expires now and a returning worker refuses it): "
                   f"check the worker, then decide again (revive show {incident})", 4) from None
    except WorkflowUpdateFailedError as e:
        raise Fail(f"{decision} refused: {getattr(e.cause, 'message', None) or e}", 3) from None
    except RPCError as e:
        raise Fail(f"{decision} refused: {e.message}", 3) from None


DecideTimeoutOpt = Annotated[float, typer.Option(
    "--timeout", help="seconds to wait for the worker's answer; the decision is void after it")]


@app.command()
def approve(
    incident: str,
    approver: Annotated[str, typer.Option("--as", help="who approves (recorded in history)")] = "",
    note: str | None = None,
    config: ConfigOpt = DEFAULT_CONFIG,
    timeout: DecideTimeoutOpt = DECIDE_TIMEOUT_S,
) -> None:
    """Approve an incident's proposed plan."""
    console.print(_safe(_run(_decide(config, incident, "approve", approver or os.environ.get("USER", ""), note,
                                     timeout))))


@app.command()
def reject(
    incident: str,
    approver: Annotated[str, typer.Option("--as", help="who rejects (recorded in history)")] = "",
    note: str | None = None,
    config: ConfigOpt = DEFAULT_CONFIG,
    timeout: DecideTimeoutOpt = DECIDE_TIMEOUT_S,
) -> None:
    """Reject an incident's proposed plan (nothing runs)."""
    console.print(_safe(_run(_decide(config, incident, "reject", approver or os.environ.get("USER", ""), note,
                                     timeout))))


def _query(state: str | None = None, job: str | None = None, node: str | None = None,
           since: str | None = None) -> str:
    from cli.ops import QueryValueError, incidents_query, parse_since

    try:
        return incidents_query(state=state, job=job, node=node, since=parse_since(since) if since else None)
    except QueryValueError as e:
        raise Fail(str(e), 2) from None


def _rows_table(rows: list) -> Table:
    t = Table("job", "category", "state", "temporal", "mode", "culprits", "started (UTC)", "incident")
    t.columns[-1].overflow = "fold"  # ids are long: wrap, never cut (they are copied into approve/show)
    t.columns[-1].min_width = 20
    for r in rows:
        t.add_row(*[_safe(x) if x is not None else "" for x in (
            r.job, r.category, r.state, r.temporal_status, r.mode, ",".join(r.culprits) or "-",
            r.started.replace("T", " ").rstrip("Z"), r.incident)])
    return t


@app.command()
def incidents(
    config: ConfigOpt = DEFAULT_CONFIG,
    state: Annotated[str | None, typer.Option(help="filter by ReviveState (an open stage: running incidents only)")] = None,
    job: Annotated[str | None, typer.Option(help="filter by job id")] = None,
    node: Annotated[str | None, typer.Option(help="incidents on this node (job node or culprit)")] = None,
    since: Annotated[str | None, typer.Option(help="started since: 30m, 2h, 7d or an ISO time")] = None,
    limit: int = 50,
    ids: Annotated[bool, typer.Option("--ids", help="print only incident ids, one per line")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="a JSON array of incidents")] = False,
) -> None:
    """List incidents (Temporal visibility): Revive's state beside the workflow's Temporal status."""
    from cli.ops import list_incidents

    q = _query(state, job, node, since)

    async def go() -> list:
        return await list_incidents(await _client(config, "revive-cli"), q, limit)

    rows = _run(go())
    if ids:
        for r in rows:
            sys.stdout.write(f"{r.incident}\n")
        return
    if as_json:
        sys.stdout.write(json.dumps([r.as_json() for r in rows], indent=1) + "\n")
        return
    console.print(_rows_table(rows))


async def _handle(config: str, incident: str):
    from temporalio.service import RPCError

    client = await _client(config, "revive-cli")
    h = client.get_workflow_handle(incident)
    try:
        desc = await h.describe()
    except RPCError:
        raise Fail(f"no incident {incident!r}", 2) from None
    return client, h, desc


@app.command()
def show(incident: str, config: ConfigOpt = DEFAULT_CONFIG) -> None:
    """Timeline of an incident: durations per stage, its history events (the audit log), its status."""
    from datetime import UTC, datetime

    from cli.ops import fmt_seconds, stages_from_events

    async def go() -> None:
        _, h, desc = await _handle(config, incident)
        console.print(f"[bold]{_safe(incident)}[/] — {desc.status.name if desc.status else '?'}")
        events = [ev async for ev in h.fetch_history_events()]
        st = stages_from_events(events, now=datetime.now(UTC))
        t = Table("stage", "entered (UTC)", "duration")
        for s in st.stages:
            t.add_row(_safe(s.state), s.entered.strftime("%H:%M:%S.%f")[:-3],
                      fmt_seconds(s.seconds) + (" so far" if s.current else ""))
        if st.started and st.closed:
            t.add_row("[bold]total[/]", "", fmt_seconds((st.closed - st.started).total_seconds()))
        console.print(t)
        from revive.timeline import timeline

        for ts, what in await timeline(h):
            console.print(f"  {ts}  {_safe(what)}")

    _run(go())


config_app = typer.Typer(no_args_is_help=True, help="Cluster config files.")
app.add_typer(config_app, name="config")


@config_app.command("check")
def config_check(config: ConfigOpt = DEFAULT_CONFIG) -> None:
    """Validate a cluster config, resolve its secrets (never printed) and try every endpoint."""
    from revive.config_check import check_config

    rows = _run(check_config(_cfg(config)))
    t = Table("check", "target", "ok", "detail", "s")
    for r in rows:
        t.add_row(_safe(r.what), _safe(r.target), "[green]ok[/]" if r.ok else "[red]FAIL[/]", _safe(r.detail),
                  f"{r.seconds:.2f}")
    console.print(t)
    if not all(r.ok for r in rows):
        raise Fail(f"{sum(not r.ok for r in rows)} check(s) failed", 1)


@app.command()
def classify(
    paths: Annotated[list[Path], typer.Argument(help="case folders or log files")],
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per path, one per line")] = False,
) -> None:
    """Attribute failure logs offline (case folder: job.log, dmesg*.log, slurm.json, gpu_metrics.csv)."""
    from revive.attribution.cases import load_case
    from revive.attribution.engine import attribute
    from revive.attribution.fallback import unknown_attribution

    t = Table("path", "category", "domain", "culprit nodes", "ranks", "action", "conf", "root event")
    for p in paths:
        if not p.exists():
            raise Fail(f"{p}: no such file or folder", 2)
        if not (p.is_file() or p.is_dir()):  # a FIFO, a device (/dev/zero): nothing to classify
            raise Fail(f"{p}: not a regular file or folder", 2)
        bundle = load_case(p)
        try:
            a = attribute(bundle)
        except Exception as e:  # noqa: BLE001 - as the attribute activity: a recorded unknown, never a crash
            a = unknown_attribution(bundle, f"{type(e).__name__}: {e}")
        for note in bundle.notes:  # what could not be read: a "none" verdict then means "no evidence"
            err.print(f"[yellow]warning:[/] {_safe(p)}: {_safe(note)}")
        if as_json:
            sys.stdout.write(json.dumps({"path": str(p), **a.model_dump(mode="json"),
                                         "evidence_notes": list(bundle.notes)}) + "\n")
        else:
            t.add_row(_safe(p), a.category.value, a.domain.value, _safe(",".join(a.culprit_nodes) or "-"),
                      ",".join(map(str, a.culprit_ranks)) or "-", a.action.value, f"{a.confidence:.2f}",
                      _safe(a.root_event.text[:80] if a.root_event else "-"))
    if not as_json:
        console.print(t)


@policy_app.command("check")
def policy_check(file: Path) -> None:
    """Validate a policy file and print the effective settings."""
    from revive.policy import load_policy

    pol = load_policy(file)
    console.print_json(pol.model_dump_json())


@node_app.command("resume")
def node_resume(
    node: str,
    config: ConfigOpt = DEFAULT_CONFIG,
    health_cmd: Annotated[str | None, typer.Option(help="health check command (exit 0 = healthy)")] = None,
    policy: str | None = None,
) -> None:
    """Health-check a node and resume it — only if Revive drained it."""
    import shlex

    from revive.health import resume_node
    from revive.models import NodeRecord
    from revive.policy import load_policy
    from revive.report import record_resume
    from revive.site import build_site

    cfg = _cfg(config)
    pol = load_policy(policy)

    def resumed(rec: NodeRecord) -> None:
        try:  # for `revive report` (false isolations); never fails the resume itself
            record_resume(cfg.audit_file, rec.name, rec.reason, pol.drain_reason_prefix)
        except OSError as e:
            err.print(f"[yellow]warning:[/] resume not recorded for revive report: {_safe(e)}")

    site = build_site(cfg)  # the health check runs on the controller side: here, or the login node
    ok, msg = _run(resume_node(site.scheduler, site.runner, node,
                               shlex.split(health_cmd) if health_cmd else None, pol, on_resumed=resumed))
    console.print(_safe(msg))
    if not ok:
        raise Fail(msg, 1)


@app.command()
def explain(incident: str, config: ConfigOpt = DEFAULT_CONFIG) -> None:
    """Evidence → attribution → rule → action → outcome: from the audit record of a closed
    incident, or from the ``status`` query of an open one."""
    from pydantic import ValidationError

    from revive.backtest import explain as explain_text

    cfg = _cfg(config)
    path = Path(cfg.audit_file)
    rec = _audit_record_or_none(path, incident)
    if rec is None:
        console.print(_safe(_explain_open(config, incident, path)))
        return
    from revive.models import AuditRecord

    try:
        r = AuditRecord.model_validate(rec)
    except ValidationError as e:
        why = "; ".join(f"{'.'.join(map(str, x['loc'])) or '<root>'}: {x['msg']}" for x in e.errors()[:5])
        raise Fail(f"audit record of {incident!r} in {cfg.audit_file} is invalid: {why}", 2) from None
    console.print(_safe(explain_text(r.result, r.attribution, r.plan)))


def _explain_open(config: str, incident: str, audit: Path) -> str:
    """The explanation of an incident still open (its ``status`` query), outcome ``open``."""
    from types import SimpleNamespace
    from typing import Any, cast

    from temporalio.client import WorkflowExecutionStatus

    from revive.backtest import explain as explain_text
    from revive.models import Attribution, Decision, IncidentResult, Plan

    async def go() -> tuple[object, dict | None]:
        from temporalio.service import RPCError

        try:
            _, h, desc = await _handle(config, incident)
        except RuntimeError:
            raise Fail(f"no closed incident {incident!r} in {audit}, and Temporal is unreachable", 2) from None
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return desc.status, None
        try:
            return desc.status, await h.query("status")
        except RPCError as e:
            raise Fail(f"incident {incident!r} is open but its status query failed (no worker?): {e.message}", 2) from None

    status, st = _run(go())
    if st is None:
        raise Fail(f"incident {incident!r} is {status.name.lower() if status else '?'} but has no audit record "
                   f"in {audit} (it ended without closing: see revive show {incident})", 2)
    a = Attribution.model_validate(st["attribution"]) if st.get("attribution") else None
    p = Plan.model_validate(st["plan"]) if st.get("plan") else None
    d = Decision.model_validate(st["decision"]) if st.get("decision") else None
    res = IncidentResult.model_construct(
        incident_id=incident, outcome=cast(Any, SimpleNamespace(value=f"open: {st.get('state')}")), reason="",
        category=a.category if a else None, recommended=a.action if a else None, executed=None,
        rule=p.rule if p else "", decided_by=d.approver if d else None, job_id=st.get("job_id"), attempt=None,
        breaker_reason=st.get("breaker_reason"), detected_at=None, first_action_at=None, resumed_at=None,
        closed_at=None)
    return explain_text(res, a, p)


def _audit_record_or_none(path: Path, incident: str) -> dict | None:
    try:
        return _audit_record(path, incident)
    except Fail:
        return None


@app.command()
def export(
    incident: str,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="folder (default: ./<incident>)")] = None,
    config: ConfigOpt = DEFAULT_CONFIG,
) -> None:
    """Everything about one incident in a folder, for a ticket: history JSON (and the runbook's),
    the audit record, the current status and card when it is open."""
    from temporalio.service import RPCError

    from revive import ids as rids

    cfg = _cfg(config)
    folder = out or Path(re.sub(r"[^A-Za-z0-9_.-]", "_", incident))
    folder.mkdir(parents=True, exist_ok=True)
    written: list[str] = []

    def put(name: str, data: str) -> None:
        (folder / name).write_text(data, encoding="utf-8")
        written.append(name)

    rec = _audit_record_or_none(Path(cfg.audit_file), incident)
    if rec is not None:
        put("audit.json", json.dumps(rec, indent=1) + "\n")

    async def go() -> None:
        try:
            client, h, desc = await _handle(config, incident)
        except (Fail, RuntimeError) as e:
            if rec is None:
                raise Fail(f"{incident!r}: no audit record and no history ({e})", 2) from None
            err.print(f"[yellow]warning:[/] history not exported: {_safe(e)}")
            return
        put("history.json", (await h.fetch_history()).to_json())
        try:
            child = client.get_workflow_handle(rids.runbook_id(incident))
            put("runbook-history.json", (await child.fetch_history()).to_json())
        except RPCError:
            pass  # no runbook ran
        put("describe.json", json.dumps({"status": desc.status.name if desc.status else None,
                                         "task_queue": desc.task_queue,
                                         "start_time": desc.start_time.isoformat() if desc.start_time else None,
                                         "close_time": desc.close_time.isoformat() if desc.close_time else None,
                                         "search_attributes": {p.key.name: p.value for p in desc.typed_search_attributes}},
                                        indent=1, default=str) + "\n")
        from temporalio.client import WorkflowExecutionStatus

        if desc.status == WorkflowExecutionStatus.RUNNING:
            try:
                put("status.json", json.dumps(await h.query("status"), indent=1, default=str) + "\n")
                meta = await h.query("__temporal_workflow_metadata")
                put("card.md", (meta.current_details or "") + "\n")
            except RPCError as e:
                err.print(f"[yellow]warning:[/] status not exported (no worker?): {_safe(e.message)}")

    _run(go())
    console.print(f"{_safe(folder)}: {', '.join(written)}")


@app.command()
def watch(
    config: ConfigOpt = DEFAULT_CONFIG,
    interval: Annotated[float, typer.Option(help="seconds between refreshes")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="print one refresh and exit")] = False,
    limit: int = 50,
) -> None:
    """Live view of open incidents (refreshed; Ctrl-C to stop)."""
    import time

    from rich.live import Live

    from cli.ops import list_incidents

    q = "WorkflowType='IncidentWorkflow' AND ExecutionStatus='Running'"

    async def rows() -> list:
        return await list_incidents(await _client(config, "revive-cli"), q, limit)

    def view() -> Table:
        from datetime import UTC, datetime

        try:
            t = _rows_table(_run(rows()))
        except RuntimeError as e:
            t = Table(f"[red]{_safe(e)}[/]")
        t.title = f"open incidents — {datetime.now(UTC).strftime('%H:%M:%S')} UTC"
        t.caption = "approve: revive approve <id> --as <you>"
        return t

    if once:
        console.print(view())
        return
    with Live(view(), console=console, refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(max(0.2, interval))
            live.update(view())


@progress_app.command("check")
def progress_check(
    log: Path,
    as_json: Annotated[bool, typer.Option("--json", help="the ProgressSummary as JSON")] = False,
) -> None:
    """Iterations, checkpoints and restarts found in a training log (built-in profiles)."""
    from revive.profiles import report

    if not log.is_file():
        raise Fail(f"{log}: {'not a regular file' if log.exists() else 'no such file'}", 2)
    try:
        with log.open(encoding="utf-8", errors="replace", newline="") as f:  # keep \r: progress bars
            text = report(f, fmt="json" if as_json else "text")
    except OSError as e:
        raise Fail(f"{log}: cannot read: {e.strerror}", 2) from None
    if as_json:
        sys.stdout.write(text)
    else:
        console.print(_safe(text.rstrip("\n")))


def _audit_record(path: Path, incident: str) -> dict:
    if not path.exists():
        raise Fail(f"audit file {path} does not exist yet", 2)
    for line in _audit_lines(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("incident_id") == incident:
            return d
    raise Fail(f"no closed incident {incident!r} in {path}", 2)


def _audit_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise Fail(f"audit file {path}: cannot read: {e.strerror}", 2) from None


def _audit_records(path: Path) -> list[dict]:
    """The audit file's JSON objects; corrupt lines are skipped with a warning, never fatal."""
    recs, bad = [], 0
    for x in _audit_lines(path) if path.exists() else []:
        if not x.strip():
            continue
        try:
            d = json.loads(x)
        except ValueError:
            d = None
        if isinstance(d, dict):
            recs.append(d)
        else:
            bad += 1
    if bad:
        err.print(f"[yellow]warning:[/] skipped {bad} unreadable line(s) of {_safe(path)}")
    return recs


def _result_of(rec: dict) -> dict:
    res = rec.get("result")
    return res if isinstance(res, dict) else {}


def _fmt_s(x: float | None) -> str:
    from cli.ops import fmt_seconds

    return fmt_seconds(x) if x is not None else "-"


async def _temporal_records(config: str, have: set[str]) -> list[dict]:
    """Closed incidents missing from the audit file, from Temporal (results only: no GPU data)."""
    from cli.ops import literal

    client = await _client(config, "revive-cli")
    out = []
    q = f"WorkflowType='IncidentWorkflow' AND ExecutionStatus='Completed' AND ReviveCluster={literal(_cfg(config).name, 'cluster')}"
    async for wf in client.list_workflows(q, limit=5000):
        if wf.id in have:
            continue
        from revive.models import IncidentResult

        try:
            r = await client.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=IncidentResult).result()
        except Exception:  # noqa: BLE001 - one unreadable result must not hide the rest
            continue
        out.append({"incident_id": wf.id, "job_id": r.job_id, "result": r.model_dump(mode="json"),
                    "source": "temporal"})
    return out


@app.command()
def report(
    config: ConfigOpt = DEFAULT_CONFIG,
    audit: Annotated[Path | None, typer.Option(help="audit JSONL (default: the config's audit_file)")] = None,
    period: Annotated[str, typer.Option(help="day | week | month")] = "day",
    since: Annotated[str | None, typer.Option(help="faults since: 7d, 30d or an ISO time")] = None,
    temporal: Annotated[bool | None, typer.Option(
        "--temporal/--no-temporal", help="add closed incidents missing from the audit file from Temporal "
                                         "(default: when no --audit is given, if reachable)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the whole report as JSON")] = False,
    png: Annotated[Path | None, typer.Option("--png", help="write a chart of incidents and MTTR over time")] = None,
) -> None:
    """Incidents, recovery rate, MTTD/MTTR p50/p95, false isolations and GPU-hours lost, per period
    and partition (definitions: revive/report.py)."""
    from cli.ops import QueryValueError, parse_since
    from revive import report as rr

    given = audit is not None
    if audit is None:
        audit = Path(_cfg(config).audit_file)
    recs = _audit_records(audit)
    notes = []
    if temporal or (temporal is None and not given):
        try:
            recs += _run(_temporal_records(config, {str(r.get("incident_id")) for r in recs}))
        except (RuntimeError, OSError) as e:
            notes.append(f"Temporal not read: {e}")
        except Exception as e:  # noqa: BLE001 - the audit file alone still makes a report
            notes.append(f"Temporal not read: {type(e).__name__}: {e}")
    try:
        rep = rr.build(recs, rr.read_resumes(audit), period=period, since=parse_since(since) if since else None)
    except (QueryValueError, ValueError) as e:
        raise Fail(str(e), 2) from None
    rep.notes = notes + rep.notes
    if png:
        try:
            rr.chart(rep, png)
        except ImportError:
            raise Fail("--png needs matplotlib: pip install 'revive[report]'", 2) from None
    if as_json:
        sys.stdout.write(json.dumps(rep.as_json(), indent=1) + "\n")
        return
    t = Table("period", "partition", "incidents", "recovered", "recovery", "MTTD p50", "MTTD p95", "MTTR p50",
              "MTTR p95", "drained", "false isol.", "GPU-h lost", title=f"Revive report ({_safe(audit)})")
    for g in rep.groups:
        rate = f"{g['recovery_rate']:.0%}" if g["recovery_rate"] is not None else "-"
        t.add_row(g["period"], _safe(g["partition"]), str(g["incidents"]), str(g["recovered"]), rate,
                  _fmt_s(g["mttd_p50_s"]), _fmt_s(g["mttd_p95_s"]), _fmt_s(g["mttr_p50_s"]), _fmt_s(g["mttr_p95_s"]),
                  str(g["drained_nodes"]), str(g["false_isolations"]), f"{g['gpu_h_lost']:.2f}")
    console.print(t)
    j = Table("job", "incidents", "GPUs", "GPUs from", "downtime h", "iterations lost", "GPU-h lost",
              title="goodput ledger per job")
    for r in rep.jobs:
        j.add_row(_safe(r.get("job") or r["job_id"]), str(r["incidents"]), ",".join(map(str, r["gpus"])),
                  _safe(", ".join(r["gpus_source"])), f"{r['downtime_h']:.2f}", "-" if r["iterations_lost"] is None else str(r["iterations_lost"]),
                  f"{r['gpu_h_lost']:.2f}" + (" (open-ended)" if r["open_ended"] else ""))
    console.print(j)
    for n in rep.notes:
        console.print(f"[dim]note:[/] {_safe(n)}")
    if png:
        console.print(f"chart: {_safe(png)}")


@app.command()
def backtest(
    policy: Annotated[Path, typer.Option(help="candidate policy YAML")],
    config: ConfigOpt = DEFAULT_CONFIG,
    since: Annotated[str | None, typer.Option(help="only incidents closed at/after this ISO time")] = None,
) -> None:
    """Re-decide recorded incidents with a candidate policy and print where it differs."""
    from revive.backtest import backtest as run_backtest
    from revive.policy import load_policy

    cfg = _cfg(config)
    path = Path(cfg.audit_file)
    recs = _audit_records(path)
    if since:
        recs = [r for r in recs if str(_result_of(r).get("closed_at") or "") >= since]
    diffs = run_backtest(recs, load_policy(policy))
    console.print(f"{len(recs)} incidents, {len(diffs)} differ")
    for d in diffs:
        console.print(f"  {_safe(d)}")


@app.command()
def replay(files: list[Path]) -> None:
    """Replay exported incident histories (``temporal workflow show -w ID --output json``) against
    the current workflow code; non-zero exit when any history no longer replays."""
    from cli.replay import HistoryFileError, load_history, replay_files

    bad = []
    for f in files:  # refused before any replay: the SDK's replayer panics or waits forever on such files
        try:
            load_history(f)
        except HistoryFileError as exc:
            bad.append(f"{f}: {exc}")
    if bad:
        for b in bad[:-1]:
            _error(b)
        raise Fail(bad[-1] if len(bad) == 1 else f"{bad[-1]} ({len(bad)} of {len(files)} files are no history)", 2)
    failures = _run(replay_files(files))
    for f, e in failures.items():
        err.print(f"[red]FAIL[/] {_safe(f)}: {_safe(e)}")
    if failures:
        raise Fail(f"{len(failures)} of {len(files)} histories do not replay", 1)
    console.print(f"{len(files)} histories replay cleanly")


@app.command()
def demo(
    fault: Annotated[str, typer.Option(help="xid79 | crash | hang")] = "xid79",
    interactive: Annotated[bool, typer.Option(help="wait for a person to approve")] = False,
    keep: Annotated[bool, typer.Option(help="leave everything running afterwards")] = False,
    access: Annotated[str, typer.Option(help="local | ssh (reach the cluster only through the SSH login node)")] = "local",
    framework: Annotated[str, typer.Option(help="revive (the example job) | hf (HF Trainer) | lightning")] = "revive",
) -> None:
    """A real recovery on the local cluster: submit, inject a fault, detect, attribute, approve, act, verify."""
    from cli.demo import run_demo

    rc = run_demo(fault=fault, interactive=interactive, keep=keep, access=access, framework=framework)
    raise typer.Exit(rc)


def main() -> None:
    """Entry point: runs the typer app, turns ``Fail``/ReviveError into messages, exits via os._exit."""
    from revive.errors import ReviveError

    code = 0
    try:
        rv = app(standalone_mode=False)
        if isinstance(rv, int):  # click returns typer.Exit's code when not in standalone mode
            code = rv
    except Fail as e:
        _error(e)
        code = e.code
    except ReviveError as e:
        _error(e)
        code = 2
    except RuntimeError as e:
        _error(e)
        code = 2
    except typer.Exit as e:
        code = e.exit_code
    except SystemExit as e:
        if isinstance(e.code, str):
            _error(e.code)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    except Exception as e:  # click usage errors and the like
        show, exit_code = getattr(e, "show", None), getattr(e, "exit_code", None)
        if callable(show) and isinstance(exit_code, int):  # a ClickException (typer may vendor click)
            show()
            code = exit_code
        else:  # a bug or an input nobody anticipated: one clear line, the traceback only on request
            if os.environ.get("REVIVE_DEBUG"):
                import traceback

                traceback.print_exc()
            _error(f"unexpected {type(e).__name__}: {e} (set REVIVE_DEBUG=1 for the traceback)")
            code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@checkpoint_app.command("undo")
def checkpoint_undo(
    incident: Annotated[str, typer.Argument(help="incident id whose approved checkpoint change to undo")],
    config: ConfigOpt = DEFAULT_CONFIG,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the recorded change and its undo only")] = False,
) -> None:
    """Undo what Revive changed in a job's checkpoint directory when a person approved resuming
    from the previous checkpoint (the record under ``<state_dir>/rollback/<incident>.json``). Runs
    on the controller side (here, or the login node over SSH), argument lists only."""
    from activities.rollback import load_record, undo_rollback
    from revive.rollback import RollbackRefused, argv_for, describe
    from revive.site import build_site
    from worker.main import rollback_dir

    cfg = _cfg(config)
    root = rollback_dir(cfg)
    rec = load_record(root, incident)
    if rec is None:
        raise Fail(f"no checkpoint change recorded for incident {incident} under {root}", 1)
    console.print(f"incident {_safe(rec.incident_id)} job {_safe(rec.job_id)}: {_safe(rec.plan.detail)}")
    for op in rec.plan.undo:
        console.print(f"  undo: {_safe(describe(op))}   ({_safe(' '.join(argv_for(op)[0]))})")
    if dry_run:
        return
    site = build_site(cfg)
    try:
        _run(undo_rollback(site.runner, root, incident))
    except RollbackRefused as e:
        raise Fail(str(e), 1) from None
    console.print(f"undone: checkpoint {rec.plan.suspect} is back; requeue the job yourself if it should use it")


if __name__ == "__main__":
    main()
