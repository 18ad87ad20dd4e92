"""``revive mode …`` and ``revive policy apply|show``: the cluster's mode and policy, held by the
per-cluster guard workflow (``ClusterGuardWorkflow``) and changed by its Updates.

- ``revive mode set auto|observe [--partition P] --as WHO [--note TEXT]`` → ``set_mode``;
- ``revive mode show`` → the guard's ``settings`` query;
- ``revive policy apply FILE --as WHO [--note TEXT]`` → ``apply_policy`` (validated here and again
  by the guard's validator: an invalid file is refused and nothing is recorded);
- ``revive policy show`` → the policy the guard holds, with its version and who applied it.

Each change carries one update id (``--update-id``, default a fresh one), so a retried call applies
once. The guard is created on first use (update-with-start); ``RESOURCE_EXHAUSTED`` is retried.
Exit codes: 2 bad input (nothing sent), 3 refused by the guard, 4 no worker answered within 30 s,
0 applied.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Annotated

import typer

mode_app = typer.Typer(no_args_is_help=True, help="Observe/auto mode, held by the cluster's guard workflow.")

WhoOpt = Annotated[str, typer.Option("--as", help="who changes it (recorded in the guard with the time)")]
NoteOpt = Annotated[str, typer.Option("--note", help="why (recorded; at most 1000 characters)")]
UpdateIdOpt = Annotated[str | None, typer.Option(
    "--update-id", help="one id per decision: a retried call with the same id applies once (default: a new id)")]


def _cfg_and_tq(config: str) -> tuple[str, str]:
    from cli.main import _cfg

    cfg = _cfg(config)
    return cfg.name, cfg.temporal.task_queue


async def _send(config: str, who: str, update: str, payload: dict) -> str:
    from activities.guard import update_guard_settings
    from cli.errors import Fail
    from cli.main import _client

    cluster, tq = _cfg_and_tq(config)
    client = await _client(config, f"revive-cli:{who}")
    try:
        answer = await asyncio.wait_for(update_guard_settings(client, cluster, tq, update, payload), timeout=30)
    except ValueError as e:
        raise Fail(f"refused by the guard of {cluster}: {e}", 3) from None
    except TimeoutError:
        raise Fail(f"no answer from the guard of {cluster} within 30s: is a worker polling task queue {tq!r}? "
                   "(revive worker --config ...); the change applies once a worker runs, or retry with the "
                   "same --update-id", 4) from None
    return answer.summary if answer.applied else f"already applied (same update id): {answer.summary}"


def _check_who(who: str, note: str) -> None:
    from cli.errors import Fail
    from revive.decide.settings import MAX_NOTE, MAX_WHO

    if not who:
        raise Fail("say who changes it with --as <you>", 2)
    if len(who) > MAX_WHO or len(note) > MAX_NOTE:
        raise Fail(f"--as is at most {MAX_WHO} characters and --note at most {MAX_NOTE}", 2)


@mode_app.command("set")
def mode_set(
    mode: Annotated[str, typer.Argument(help="auto or observe")],
    who: WhoOpt = "",
    partition: Annotated[str | None, typer.Option("--partition", help="this partition only")] = None,
    note: NoteOpt = "",
    update_id: UpdateIdOpt = None,
    config: Annotated[str, typer.Option("--config", "-c", envvar="REVIVE_CONFIG")] = "/tmp/revive-cluster/cluster.yaml",
) -> None:
    """Set the mode for the cluster (or one partition); running incidents read it at their gate."""
    from cli.errors import Fail
    from cli.main import _run, _safe, console
    from revive.policy import Mode

    if mode not in {m.value for m in Mode}:
        raise Fail(f"mode must be one of {', '.join(m.value for m in Mode)}, got {mode!r}", 2)
    _check_who(who, note)
    payload = {"mode": mode, "partition": partition, "who": who, "note": note,
               "update_id": update_id or f"mode-{uuid.uuid4()}"}
    console.print(_safe(_run(_send(config, who, "set_mode", payload))))


@mode_app.command("show")
def mode_show(
    config: Annotated[str, typer.Option("--config", "-c", envvar="REVIVE_CONFIG")] = "/tmp/revive-cluster/cluster.yaml",
) -> None:
    """The mode in force (cluster, per partition), who set it and when."""
    from rich.table import Table

    from cli.main import _run, _safe, console

    s = _run(_settings(config))
    cluster, _ = _cfg_and_tq(config)
    if s is None or not s.modes:
        console.print(_safe(f"{cluster}: no mode set in the guard: incidents use their policy's mode "
                            "(the monitor's policy file)"))
        return
    t = Table("scope", "mode", "set by", "at (UTC)", "note")
    for key, m in sorted(s.modes.items()):
        t.add_row("cluster" if key == "*" else f"partition {_safe(key)}", m.mode.value, _safe(m.who),
                  m.at.isoformat(timespec="seconds"), _safe(m.note))
    console.print(t)


async def _settings(config: str):  # noqa: ANN202 — GuardSettings | None
    from activities.guard import guard_settings
    from cli.errors import Fail
    from cli.main import _client

    cluster, tq = _cfg_and_tq(config)
    client = await _client(config, "revive-cli")
    try:
        return await asyncio.wait_for(guard_settings(client, cluster, tq), timeout=30)
    except TimeoutError:
        raise Fail(f"no answer from the guard of {cluster} within 30s: is a worker polling task queue {tq!r}?",
                   4) from None


def policy_apply(
    file: Path,
    who: WhoOpt = "",
    note: NoteOpt = "",
    update_id: UpdateIdOpt = None,
    config: Annotated[str, typer.Option("--config", "-c", envvar="REVIVE_CONFIG")] = "/tmp/revive-cluster/cluster.yaml",
) -> None:
    """Validate a policy file and store it in the cluster's guard as the next version."""
    from cli.main import _run, _safe, console
    from revive.policy import load_policy

    _check_who(who, note)
    # ConfigError (exit 2) names the invalid fields and nothing is sent; the guard gets the validated
    # document as JSON (durations as ISO-8601), which its validator checks again
    doc = load_policy(file).model_dump(mode="json")
    payload = {"policy": doc, "who": who, "note": note, "update_id": update_id or f"policy-{uuid.uuid4()}"}
    console.print(_safe(_run(_send(config, who, "apply_policy", payload))))


def policy_show(
    config: Annotated[str, typer.Option("--config", "-c", envvar="REVIVE_CONFIG")] = "/tmp/revive-cluster/cluster.yaml",
) -> None:
    """The policy the cluster's guard holds (version, who applied it when), as JSON."""
    from cli.main import _run, _safe, console

    s = _run(_settings(config))
    cluster, _ = _cfg_and_tq(config)
    if s is None or s.policy is None:
        console.print(_safe(f"{cluster}: no policy applied in the guard (the monitor uses its policy file)"))
        return
    console.print(_safe(f"{cluster}: policy version {s.policy_version}, applied by {s.policy_by} at "
                        f"{s.policy_at.isoformat(timespec='seconds') if s.policy_at else '?'}"))
    console.print_json(s.policy.model_dump_json())


def mount(app: typer.Typer, policy_app: typer.Typer) -> None:
    """Register ``mode`` on ``app`` and ``apply``/``show`` on ``policy_app``."""
    app.add_typer(mode_app, name="mode")
    policy_app.command("apply")(policy_apply)
    policy_app.command("show")(policy_show)


__all__ = ["mode_app", "mount"]
