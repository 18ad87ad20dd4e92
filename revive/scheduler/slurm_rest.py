"""``Scheduler`` reads over slurmrestd (OpenAPI v0.0.38, Slurm 22.05); actions via ``SlurmCLI``.

22.05's REST API can list jobs and nodes, but cannot drain/resume a node, requeue a job or set
``ExcNodeList``; every action (and ``batch_script``, ``run_on_node``) is therefore delegated to
the ``SlurmCLI`` passed in. REST reports ``standard_output`` *unexpanded* (``out-%j.log``):
``%j``, ``%x``, ``%u``, ``%N`` and ``%%`` are expanded here; for other patterns use the CLI.
"""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from revive.errors import JobNotFound, SchedulerCommandError, SchedulerUnavailable
from revive.models import JobRecord, NodeRecord
from revive.scheduler.hostlist import expand_hostlist
from revive.scheduler.slurm_cli import SlurmCLI
from revive.signals import SignalScope

__all__ = ["SlurmREST"]


def _ts(v) -> datetime | None:
    if isinstance(v, dict):  # later API versions: {"set": bool, "number": int}
        v = v.get("number") if v.get("set", True) else None
    if not v:
        return None
    return datetime.fromtimestamp(int(v), tz=UTC)


def _str(v) -> str | None:
    if v is None:
        return None
    s = str(v).strip()
    return None if s in ("", "None", "(null)") else s


def _expand_pattern(pattern: str | None, job: dict) -> str | None:
    if not pattern:
        return None
    subs = {
        "j": str(job.get("job_id", "")),
        "x": str(job.get("name") or ""),
        "u": str(job.get("user_name") or ""),
        "N": str(job.get("batch_host") or ""),
        "%": "%",
    }
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern) and pattern[i + 1] in subs:
            out.append(subs[pattern[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def job_from_rest(j: dict) -> JobRecord:
    state = str(j.get("job_state") or "UNKNOWN").split("+", 1)[0]
    reason = _str(j.get("state_reason"))
    priority = j.get("priority")
    hold = (state == "PENDING" and priority == 0) or bool(
        reason and (reason.startswith("JobHeld") or reason == "job_requeued_in_held_state")
    )
    tl = j.get("time_limit")
    job_id = str(j["job_id"])
    array_job, array_task = j.get("array_job_id"), j.get("array_task_id")
    if array_job and array_task is not None and str(array_task).isdigit():
        job_id = f"{array_job}_{array_task}"  # the <ArrayJobId>_<ArrayTaskId> address (revive.scheduler.arrays)
    else:
        array_job = array_task = None
    return JobRecord(
        job_id=job_id,
        name=_str(j.get("name")),
        user=_str(j.get("user_name")),
        state=state,
        reason=reason,
        exit_code=None if j.get("exit_code") is None else str(j.get("exit_code")),
        nodes=expand_hostlist(_str(j.get("nodes"))),
        partition=_str(j.get("partition")),
        restart_count=int(j.get("restart_cnt") or 0),
        submit_time=_ts(j.get("submit_time")),
        start_time=_ts(j.get("start_time")),
        end_time=_ts(j.get("end_time")),
        std_out=_expand_pattern(_str(j.get("standard_output")), j),
        std_err=_expand_pattern(_str(j.get("standard_error")), j),
        work_dir=_str(j.get("current_working_directory")),
        command=_str(j.get("command")),
        comment=_str(j.get("comment")),
        requeue=j.get("requeue"),
        exc_nodes=expand_hostlist(_str(j.get("excluded_nodes"))),
        batch_host=_str(j.get("batch_host")),
        time_limit=None if tl is None else str(tl),
        num_nodes=j.get("node_count"),
        num_tasks=j.get("tasks"),
        tres_per_node=_str(j.get("tres_per_node")),
        hold=hold,
        array_job_id=None if array_job is None else str(array_job),
        array_task_id=None if array_task is None else str(array_task),
        dependency=_str(j.get("dependency")),
    )


def node_from_rest(n: dict) -> NodeRecord:
    state = str(n.get("state") or "unknown").upper()
    flags = [str(f).upper() for f in n.get("state_flags") or []]
    return NodeRecord(
        name=n["name"],
        state="+".join([state, *flags]),
        reason=_str(n.get("reason")),
        partitions=list(n.get("partitions") or []),
    )


class SlurmREST:
    """Reads from slurmrestd (JWT: ``X-SLURM-USER-NAME`` / ``X-SLURM-USER-TOKEN``)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        user: str,
        token: str,
        cli: SlurmCLI,
        api_version: str = "v0.0.38",
    ) -> None:
        self.client = client
        self.base = f"{base_url.rstrip('/')}/slurm/{api_version}"
        self.headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}
        self.cli = cli
        self.cluster = cli.cluster

    async def _get(self, path: str) -> dict:
        url = f"{self.base}/{path}"
        try:
            r = await self.client.get(url, headers=self.headers)
        except httpx.HTTPError as e:
            raise SchedulerUnavailable(f"slurmrestd {url}: {type(e).__name__}: {e}") from e
        try:
            body = r.json()
        except ValueError:
            body = {}
        errors = body.get("errors") or []
        msgs = "; ".join(str(e.get("error") or e.get("description")) for e in errors)
        if any("Invalid job id" in str(e.get("error")) for e in errors):
            raise JobNotFound(f"{path}: {msgs}")
        if r.status_code in (401, 403):
            raise SchedulerCommandError(["GET", url], r.status_code, f"slurmrestd auth failed: {r.text[:200]}")
        if r.status_code >= 500 or any("contact slurm controller" in str(e.get("error", "")).lower() for e in errors):
            raise SchedulerUnavailable(f"slurmrestd {url}: HTTP {r.status_code} {msgs or r.text[:200]}")
        if r.status_code != 200 or errors:
            raise SchedulerCommandError(["GET", url], r.status_code, msgs or r.text[:500])
        return body

    # ---- reads --------------------------------------------------------------------------------
    async def ping(self) -> bool:
        try:
            body = await self._get("ping")
        except (SchedulerUnavailable, SchedulerCommandError):
            return False
        return any(p.get("ping") == "UP" for p in body.get("pings") or [])

    async def list_jobs(self) -> list[JobRecord]:
        body = await self._get("jobs")
        return [job_from_rest(j) for j in body.get("jobs") or []]

    async def get_job(self, job_id: str) -> JobRecord:
        if "_" in str(job_id):  # an array task: scontrol takes the <ArrayJobId>_<ArrayTaskId> form
            return await self.cli.get_job(job_id)
        body = await self._get(f"job/{job_id}")
        for j in body.get("jobs") or []:
            if str(j.get("job_id")) == str(job_id):
                return job_from_rest(j)
        raise JobNotFound(f"job {job_id} not found on cluster {self.cluster!r}")

    async def get_nodes(self, names: list[str] | None = None) -> list[NodeRecord]:
        body = await self._get("nodes")
        nodes = [node_from_rest(n) for n in body.get("nodes") or []]
        return nodes if names is None else [n for n in nodes if n.name in set(names)]

    # ---- actions: the CLI (22.05 REST has no drain/resume/requeue/ExcNodeList) ---------------
    async def drain_nodes(self, nodes: list[str], reason: str) -> list[str]:
        return await self.cli.drain_nodes(nodes, reason)

    async def resume_nodes(self, nodes: list[str]) -> list[str]:
        return await self.cli.resume_nodes(nodes)

    async def requeue(self, job_id: str, hold: bool = False) -> list[str]:
        return await self.cli.requeue(job_id, hold=hold)

    async def update_job(self, job_id: str, **fields: str) -> list[str]:
        return await self.cli.update_job(job_id, **fields)

    async def hold(self, job_id: str) -> list[str]:
        return await self.cli.hold(job_id)

    async def release(self, job_id: str) -> list[str]:
        return await self.cli.release(job_id)

    async def cancel(self, job_id: str, signal: str | None = None) -> list[str]:
        return await self.cli.cancel(job_id, signal)

    async def signal_job(self, job_id: str, signal: str, scope: SignalScope = SignalScope.steps) -> list[str]:
        return await self.cli.signal_job(job_id, signal, scope)

    async def submit(self, script: str, options: list[str]) -> str:
        return await self.cli.submit(script, options)

    async def create_maintenance_window(self, name: str, nodes: list[str], duration_s: float,
                                        users: list[str]) -> list[str]:
        return await self.cli.create_maintenance_window(name, nodes, duration_s, users)

    async def delete_maintenance_window(self, name: str) -> list[str]:
        return await self.cli.delete_maintenance_window(name)

    async def list_maintenance_windows(self) -> list[str]:
        return await self.cli.list_maintenance_windows()

    async def batch_script(self, job_id: str) -> str:
        return await self.cli.batch_script(job_id)

    async def run_on_node(self, node: str, argv: list[str], timeout_s: float = 30.0) -> tuple[int, str]:
        return await self.cli.run_on_node(node, argv, timeout_s)
