"""``revive health …``: return to service of the nodes Revive drained.

- ``revive health schedule --policy P`` — create or update the cluster's Temporal Schedule
  ``revive-rts-<cluster>`` (interval, check, method from the policy's ``return_to_service:``;
  paused when ``enabled`` is false); ``--delete`` removes it; ``--trigger`` also starts a run now.
- ``revive health run --policy P`` — one pass now (``ReturnToServiceWorkflow``), waits and prints
  each node's outcome (exit 1 when a check failed); when the Schedule is running a pass, it waits for
  that one instead of starting a second (two passes would run up to 2 x ``max_concurrent`` checks).
- ``revive health status`` — node checks from visibility (state, node, incident).

Observe mode: a passed node waits for ``revive approve revive-rts-<cluster>-node-<node> --as <you>``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

health_app = typer.Typer(no_args_is_help=True, help="Return to service: health checks of nodes Revive drained.")

_CONFIG = Annotated[str, typer.Option("--config", "-c", envvar="REVIVE_CONFIG", help="cluster config YAML")]
_POLICY = Annotated[str | None, typer.Option(help="policy YAML (its return_to_service: section)")]
_DEFAULT_CONFIG = "/tmp/revive-cluster/cluster.yaml"


@health_app.command("schedule")
def schedule(
    config: _CONFIG = _DEFAULT_CONFIG,
    policy: _POLICY = None,
    delete: Annotated[bool, typer.Option("--delete", help="delete the schedule")] = False,
    trigger: Annotated[bool, typer.Option("--trigger", help="also start one run now")] = False,
) -> None:
    """Create/update (or delete) the return-to-service Temporal Schedule."""
    from cli.main import _cfg, _client, _run, console
    from revive.policy import load_policy
    from worker.rts_schedule import delete_rts_schedule, ensure_rts_schedule

    cfg, pol = _cfg(config), load_policy(policy)

    async def go() -> None:
        client = await _client(config, "revive-cli")
        tq = cfg.temporal.task_queue
        if delete:
            gone = await delete_rts_schedule(client, cfg.name, tq)
            console.print("deleted" if gone else "no schedule to delete")
            return
        sid, created = await ensure_rts_schedule(client, cfg.name, pol, policy, tq)
        rts = pol.return_to_service
        console.print(f"schedule {sid} {'created' if created else 'updated'}: every {rts.interval}, "
                      f"method {rts.method.value}, at most {rts.max_concurrent} at once"
                      + ("" if rts.enabled else " (paused: return_to_service.enabled is false)"))
        if trigger:
            await client.get_schedule_handle(sid).trigger()
            console.print("triggered one run")

    _run(go())


async def _scheduled_pass(client: Any, schedule_id: str) -> str | None:
    """Workflow id of the pass the Schedule ``schedule_id`` is running now, or None (no schedule,
    none running, or the schedule cannot be read: the manual pass then starts as usual)."""
    from temporalio.service import RPCError

    try:
        desc = await client.get_schedule_handle(schedule_id).describe()
    except RPCError:
        return None
    running = [a.workflow_id for a in desc.info.running_actions]
    return running[-1] if running else None


@health_app.command("run")
def run(
    config: _CONFIG = _DEFAULT_CONFIG,
    policy: _POLICY = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """One return-to-service pass now; prints each node's outcome."""
    from temporalio.common import WorkflowIDConflictPolicy

    from cli.main import Fail, _cfg, _client, _run, _safe, console
    from revive import ids
    from revive.decide.rts import RtsInput, RtsOutcome, RtsResult
    from revive.policy import load_policy

    cfg, pol = _cfg(config), load_policy(policy)

    async def go() -> RtsResult:
        client = await _client(config, "revive-cli")
        tq = cfg.temporal.task_queue
        running = await _scheduled_pass(client, ids.rts_schedule_id(cfg.name, tq))
        if running:
            # a second pass beside the scheduled one would run up to 2 x max_concurrent checks
            console.print(f"a scheduled pass is running ({_safe(running)}): waiting for it instead of starting "
                          "a second one")
            return await client.get_workflow_handle(running, result_type=RtsResult).result()
        h = await client.start_workflow(ids.RTS_WORKFLOW, RtsInput(cluster=cfg.name, policy=pol, policy_path=policy, task_queue=tq),
                                        id=ids.rts_run_id(cfg.name, tq), task_queue=tq, result_type=RtsResult,
                                        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        return await h.result()

    res = _run(go())
    if as_json:
        print(json.dumps(res.model_dump(mode="json"), indent=2))
    else:
        for r in res.checked:
            console.print(f"{_safe(r.node)}: {r.outcome.value} — {_safe(r.detail)} (incident {_safe(r.incident_id)})")
        for c in res.skipped:
            console.print(f"{_safe(c.drain.node)}: skipped — {_safe(c.why)}")
        for n in res.busy:
            console.print(f"{_safe(n)}: a check is already running")
        if not (res.checked or res.skipped or res.busy):
            console.print("no node drained by Revive")
    if any(r.outcome == RtsOutcome.check_failed for r in res.checked):
        raise Fail("a health check failed; the node stays drained", 1)


@health_app.command("status")
def status(config: _CONFIG = _DEFAULT_CONFIG, limit: int = 50) -> None:
    """Recent node checks (``NodeCheckWorkflow``) of this cluster, newest first."""
    from cli.main import _cfg, _client, _run, _safe, console
    from revive import ids
    from revive import search_attributes as sa
    from revive.ids import NODE_CHECK_WORKFLOW

    cfg = _cfg(config)
    from activities.guard import _q

    async def go() -> None:
        client = await _client(config, "revive-cli")
        q = f"WorkflowType='{NODE_CHECK_WORKFLOW}' AND ReviveCluster={_q(cfg.name, 'cluster')}"
        n = 0
        async for wf in client.list_workflows(q, limit=limit):
            attrs = wf.typed_search_attributes
            console.print(f"{_safe(wf.id)}  {_safe(attrs.get(sa.STATE) or '?')}  nodes={_safe(attrs.get(sa.NODES))}  "
                          f"incident={_safe(attrs.get(sa.INCIDENT_ID))}  {wf.start_time:%Y-%m-%d %H:%M:%S}")
            n += 1
        if not n:
            console.print(f"no node checks on {cfg.name} (schedule {ids.rts_schedule_id(cfg.name)})")

    _run(go())
