"""``revive report``: incidents, recovery, MTTD/MTTR and a goodput ledger from the audit file.

Pure (no I/O but ``read_resumes``/``record_resume``/``chart``): input is the audit file's records
(``AuditRecord`` dicts; older records lacking a field still count where they can) and the
return-to-service log (``node-resumes.jsonl`` beside the audit file, written by ``revive node resume``).

Definitions (all times UTC; an incident falls in the period and partition of its fault):

- fault time: ``IncidentResult.fault_time`` (the root event's own time), else ``detected_at``
  (then MTTD is not counted for it);
- MTTD = detected_at − fault; MTTR = resumed_at − fault (recovered incidents only); p50/p95 by
  linear interpolation between the closest ranks (numpy's default);
- recovery rate = recovered ÷ incidents whose runbook ran (``recovered`` + ``not_recovered``);
  rejected, expired, escalated, stopped and no-action incidents are counted but not in the rate;
- false isolations (until return-to-service checks exist): resumes of nodes Revive drained
  (``revive node resume``) after which no later incident blamed that node, up to the report's end;
- goodput ledger, per incident: GPUs = nodes × GPUs per node from the job record's
  ``tres_per_node`` (``gres/gpu:8``, ``gres:gpu:a100:4``, ``gpu=8``) when known, else 1 per node
  (``gpus_source`` says which); downtime = fault → resumed_at (not recovered: → closed_at, marked
  ``open_ended``); recompute = (last iteration reached before the fault − checkpoint iteration) ×
  seconds per iteration (the job's cadence: ``step_time_ms`` of the last progress lines, else the
  median gap between iteration stamps, else unknown); loss window = [fault, resumed + recompute].
  A job's windows are merged before multiplying by GPUs, so overlapping incidents of one job are
  not counted twice: the overlap belongs to the earlier incident (per-incident counted hours add
  up to the job's total).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from revive.appendfile import append_line

RESUMES_FILE = "node-resumes.jsonl"

_GPU_TRES = re.compile(r"(?:gres[/:])?gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)", re.I)
_ITER = re.compile(r"\biteration\s+(\d+)", re.I)
_STEP_MS = re.compile(r"step_time_ms\s*[:=]?\s*([0-9.]+)", re.I)
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)")


def _dt(x: Any) -> datetime | None:
    if isinstance(x, datetime):
        return x if x.tzinfo else x.replace(tzinfo=UTC)
    if not isinstance(x, str) or not x:
        return None
    try:
        d = datetime.fromisoformat(x.replace("Z", "+00:00"))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy ``percentile`` default); None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def gpus_per_node(tres_per_node: str | None) -> int | None:
    if not tres_per_node:
        return None
    m = _GPU_TRES.search(tres_per_node)
    return int(m.group(1)) if m else None


def cadence_s(last_progress: dict[str, str]) -> float | None:
    """Seconds per iteration from the last progress lines: ``step_time_ms`` (median), else None."""
    ms = [float(m.group(1)) for line in last_progress.values() if (m := _STEP_MS.search(line))]
    return statistics.median(ms) / 1000.0 if ms else None


def last_iteration(last_progress: dict[str, str]) -> int | None:
    its = [int(m.group(1)) for line in last_progress.values() if (m := _ITER.search(line))]
    return max(its) if its else None


def period_key(d: datetime, period: str) -> str:
    d = d.astimezone(UTC)
    if period == "day":
        return d.strftime("%Y-%m-%d")
    if period == "week":
        y, w, _ = d.isocalendar()
        return f"{y}-W{w:02d}"
    if period == "month":
        return d.strftime("%Y-%m")
    raise ValueError(f"period must be day, week or month, not {period!r}")


@dataclass
class IncidentLoss:
    incident_id: str
    job_id: str
    partition: str
    period: str
    outcome: str
    fault: datetime
    fault_source: str
    """``fault_time`` or ``detected_at`` (no fault time recorded)."""
    gpus: int
    gpus_source: str
    """``tres_per_node`` or ``assumed 1 per node``."""
    nodes: int
    downtime_s: float | None
    open_ended: bool
    iterations_lost: int | None
    cadence_s: float | None
    recompute_s: float | None
    window_end: datetime | None
    job_key: str = ""
    """The job's identity across its incidents: ``<cluster>-<job>-<first SubmitTime>`` (the incident
    id without ``-a<attempt>-<family>``): job ids restart at 1 on a fresh cluster, so the id alone
    would merge different jobs."""
    counted_gpu_h: float = 0.0
    """GPU-hours of this incident's window not already counted for an earlier incident of the job."""
    mttd_s: float | None = None
    mttr_s: float | None = None
    culprits: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("fault", "window_end"):
            d[k] = d[k].isoformat() if d[k] else None
        return d


def incident_loss(rec: dict, period: str = "day") -> IncidentLoss | None:
    """One audit record's ledger entry (None when it has no usable time at all)."""
    res = rec.get("result") if isinstance(rec.get("result"), dict) else {}
    assert isinstance(res, dict)
    detected, fault_t = _dt(res.get("detected_at")), _dt(res.get("fault_time"))
    resumed, closed = _dt(res.get("resumed_at")), _dt(res.get("closed_at"))
    fault = fault_t or detected
    if fault is None:
        return None
    job = rec.get("job") if isinstance(rec.get("job"), dict) else {}
    assert isinstance(job, dict)
    nodes = int(job.get("num_nodes") or len(job.get("nodes") or []) or 1)
    per = gpus_per_node(job.get("tres_per_node"))
    gpus, src = (nodes * per, "tres_per_node") if per else (nodes, "assumed 1 per node")
    outcome = str(res.get("outcome") or "unknown")
    end = resumed or closed
    open_ended = resumed is None
    downtime = max(0.0, (end - fault).total_seconds()) if end else None
    lp = rec.get("last_progress") if isinstance(rec.get("last_progress"), dict) else {}
    assert isinstance(lp, dict)
    ckpt = res.get("checkpoint_iteration")
    last = last_iteration(lp)
    it_lost = max(0, last - int(ckpt)) if last is not None and isinstance(ckpt, int) else None
    cad = cadence_s(lp)
    recompute = it_lost * cad if it_lost is not None and cad is not None else None
    window_end = end + timedelta(seconds=recompute or 0.0) if end else None
    plan = rec.get("plan") if isinstance(rec.get("plan"), dict) else {}
    assert isinstance(plan, dict)
    drained = list(plan.get("drain_nodes") or []) if rec.get("runbook") else []
    partition = str(rec.get("partition") or job.get("partition") or "unknown")
    return IncidentLoss(
        incident_id=str(rec.get("incident_id") or res.get("incident_id") or "?"),
        job_id=str(rec.get("job_id") or res.get("job_id") or "?"), partition=partition,
        period=period_key(fault, period), outcome=outcome, fault=fault,
        fault_source="fault_time" if fault_t else "detected_at", gpus=gpus, gpus_source=src, nodes=nodes,
        downtime_s=downtime, open_ended=open_ended, iterations_lost=it_lost, cadence_s=cad, recompute_s=recompute,
        window_end=window_end,
        mttd_s=max(0.0, (detected - fault_t).total_seconds()) if detected and fault_t else None,
        mttr_s=max(0.0, (resumed - fault).total_seconds()) if resumed and fault_t else None,
        culprits=list(res.get("culprit_nodes") or []), drained=drained,
        job_key=job_key_of(str(rec.get("incident_id") or res.get("incident_id") or ""),
                           str(rec.get("cluster") or ""), str(rec.get("job_id") or res.get("job_id") or "?")),
    )


def job_key_of(incident_id: str, cluster: str, job_id: str) -> str:
    """``<cluster>-<job>-<first SubmitTime>`` from an incident id (``revive.ids.incident_id``)."""
    key = re.sub(r"-a\d+(?:-[a-z]+)?$", "", incident_id)
    return key if key and key != incident_id else f"{cluster}-{job_id}"


def ledger(losses: list[IncidentLoss]) -> list[dict[str, Any]]:
    """Per job: merged loss windows × GPUs. Sets each incident's ``counted_gpu_h``."""
    by_job: dict[str, list[IncidentLoss]] = defaultdict(list)
    for x in losses:
        by_job[x.job_key or x.job_id].append(x)
    out = []
    for job, xs in sorted(by_job.items()):
        xs.sort(key=lambda x: x.fault)
        covered: datetime | None = None
        total = 0.0
        for x in xs:
            if x.window_end is None:
                x.counted_gpu_h = 0.0
                continue
            start = max(x.fault, covered) if covered else x.fault
            secs = max(0.0, (x.window_end - start).total_seconds())
            x.counted_gpu_h = secs / 3600.0 * x.gpus
            total += x.counted_gpu_h
            covered = max(covered, x.window_end) if covered else x.window_end
        known_its = [x.iterations_lost for x in xs if x.iterations_lost is not None]
        out.append({
            "job_id": xs[0].job_id, "job": job, "incidents": len(xs), "gpu_h_lost": round(total, 4),
            "gpus": sorted({x.gpus for x in xs}), "gpus_source": sorted({x.gpus_source for x in xs}),
            "downtime_h": round(_union_s([(x.fault, x.fault + timedelta(seconds=x.downtime_s))
                                          for x in xs if x.downtime_s is not None]) / 3600.0, 4),
            "iterations_lost": sum(known_its) if known_its else None,
            "open_ended": any(x.open_ended for x in xs),
        })
    return out


def _union_s(intervals: list[tuple[datetime, datetime]]) -> float:
    """Seconds covered by the union of ``intervals``."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += (b - a).total_seconds()
            end = b
        elif b > end:
            total += (b - end).total_seconds()
            end = b
    return total


def false_isolations(losses: list[IncidentLoss], resumes: list[dict], until: datetime) -> list[dict[str, Any]]:
    """Resumes of Revive's drains with no later incident blaming the node (up to ``until``)."""
    by_id = {x.incident_id: x for x in losses}
    out = []
    for r in resumes:
        node, at = r.get("node"), _dt(r.get("at"))
        if not node or at is None or at > until:
            continue
        later = [x for x in losses if x.fault > at and node in x.culprits]
        if later:
            continue
        src = by_id.get(str(r.get("incident_id") or ""))
        out.append({"node": node, "resumed_at": at.isoformat(), "incident_id": r.get("incident_id"),
                    "partition": src.partition if src else "unknown",
                    "period": src.period if src else None})
    return out


@dataclass
class Report:
    groups: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    incidents: list[IncidentLoss]
    false_isolations: list[dict[str, Any]]
    notes: list[str]
    period: str

    def as_json(self) -> dict[str, Any]:
        return {"period": self.period, "groups": self.groups, "jobs": self.jobs,
                "incidents": [x.as_json() for x in self.incidents], "false_isolations": self.false_isolations,
                "notes": self.notes}


def _r(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


def build(records: Iterable[dict], resumes: Iterable[dict] = (), period: str = "day",
          since: datetime | None = None, until: datetime | None = None) -> Report:
    """The report over ``records`` (audit dicts) whose fault lies in [since, until]."""
    period_key(datetime.now(UTC), period)  # validates the period
    until = until or datetime.now(UTC)
    notes: list[str] = []
    losses, seen = [], set()
    for rec in records:
        x = incident_loss(rec, period)
        if x is None:
            notes.append(f"skipped {rec.get('incident_id')!r}: no fault or detection time")
            continue
        if x.incident_id in seen:
            continue
        seen.add(x.incident_id)
        if (since and x.fault < since) or x.fault > until:
            continue
        losses.append(x)
    jobs = ledger(losses)
    fis = false_isolations(losses, list(resumes), until)
    groups: dict[tuple[str, str], list[IncidentLoss]] = defaultdict(list)
    for x in losses:
        groups[(x.period, x.partition)].append(x)
    rows = []
    for (per, part), xs in sorted(groups.items()):
        ran = [x for x in xs if x.outcome in ("recovered", "not_recovered")]
        rec_n = sum(1 for x in xs if x.outcome == "recovered")
        mttd = [x.mttd_s for x in xs if x.mttd_s is not None]
        mttr = [x.mttr_s for x in xs if x.mttr_s is not None]
        rows.append({
            "period": per, "partition": part, "incidents": len(xs), "recovered": rec_n,
            "runbooks_run": len(ran), "recovery_rate": _r(rec_n / len(ran)) if ran else None,
            "mttd_p50_s": _r(percentile(mttd, 50)), "mttd_p95_s": _r(percentile(mttd, 95)),
            "mttr_p50_s": _r(percentile(mttr, 50)), "mttr_p95_s": _r(percentile(mttr, 95)),
            "drained_nodes": sum(len(x.drained) for x in xs),
            "false_isolations": sum(1 for f in fis if f["period"] == per and f["partition"] == part),
            "gpu_h_lost": round(sum(x.counted_gpu_h for x in xs), 4),
        })
    if any(x.gpus_source != "tres_per_node" for x in losses):
        notes.append("GPUs: job record without GPU TRES for some incidents: assumed 1 GPU per node (see gpus_source)")
    if any(x.open_ended for x in losses):
        notes.append("open_ended: some incidents never resumed; their downtime ends at the incident's close (a lower bound)")
    if any(x.fault_source != "fault_time" for x in losses):
        notes.append("some incidents have no fault time (older records): their window starts at detection, no MTTD")
    return Report(rows, jobs, losses, fis, notes, period)


# ---- files -----------------------------------------------------------------------------------

def resumes_path(audit_file: str | Path) -> Path:
    return Path(audit_file).with_name(RESUMES_FILE)


def record_resume(audit_file: str | Path, node: str, drain_reason: str | None, prefix: str,
                  at: datetime | None = None, incident_id: str | None = None) -> None:
    """Append one return-to-service line (``revive node resume``, ``NodeCheckWorkflow``), O_APPEND +
    fsync. ``incident_id``: the incident that drained the node when the caller knows it (a reason
    rewritten after a failed health check no longer starts with the id); else read from the reason."""
    reason = drain_reason or ""
    iid = reason[len(prefix):].split()[0] if reason.startswith(prefix) and len(reason) > len(prefix) else None
    iid = incident_id or iid
    line = json.dumps({"kind": "node_resume", "node": node, "at": (at or datetime.now(UTC)).isoformat(),
                       "drain_reason": reason, "incident_id": iid}) + "\n"
    append_line(resumes_path(audit_file), line)


def read_resumes(audit_file: str | Path) -> list[dict]:
    path = resumes_path(audit_file)
    out = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            out.append(d)
    return out


def chart(rep: Report, path: str | Path) -> Path:
    """PNG: incidents per period (bars) and MTTR p50/p95 (lines, minutes), all partitions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per: dict[str, list[IncidentLoss]] = defaultdict(list)
    for x in rep.incidents:
        per[x.period].append(x)
    keys = sorted(per)
    counts = [len(per[k]) for k in keys]
    p50 = [percentile([x.mttr_s for x in per[k] if x.mttr_s is not None], 50) for k in keys]
    p95 = [percentile([x.mttr_s for x in per[k] if x.mttr_s is not None], 95) for k in keys]
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    ax.bar(keys, counts, color="#7aa6c2", label="incidents")
    ax.set_ylabel("incidents")
    ax.set_xlabel(f"{rep.period} (UTC)")
    ax2 = ax.twinx()
    xs = list(range(len(keys)))
    ax2.plot(xs, [v / 60 if v is not None else float("nan") for v in p50], "o-", color="#c0392b", label="MTTR p50")
    ax2.plot(xs, [v / 60 if v is not None else float("nan") for v in p95], "s--", color="#8e44ad", label="MTTR p95")
    ax2.set_ylabel("MTTR (min)")
    ax2.set_ylim(bottom=0)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left")
    ax.set_title("Revive: incidents and time to recovery")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, format="png")
    plt.close(fig)
    return out
