"""Stage: throughput — the straggler rule (sustained slowdown vs the job's own baseline), survived
errors, and the slow node(s) from GPU clocks or per-host compute time."""

from __future__ import annotations

import statistics

from revive.attribution.collect import _Ctx, _Ev
from revive.models import (
    UNSUCCESSFUL_END,
    Domain,
    EvidenceBundle,
    TriggerKind,
)


def _straggler(ctx: _Ctx) -> tuple[bool, str, int | None]:
    """Sustained >=5% iteration-time increase vs the job's own baseline, no restart in between."""
    samples = ctx.progress
    # keep the samples after the last restart marker
    for k in range(len(samples) - 1, -1, -1):
        if samples[k][3] == "reset":
            samples = samples[k + 1:]
            break
    groups: dict[str, list[tuple[int | None, float, int]]] = {}
    for seq, it, secs, key in samples:
        g = groups.setdefault(key, [])
        if it is not None and g and g[-1][0] == it:
            continue
        g.append((it, secs, seq))
    if not groups:
        return False, "", None
    series = max(groups.values(), key=len)
    vals = [v for _, v, _ in series]
    if len(vals) >= 3 and vals[0] > 1.5 * statistics.median(vals[1:]):
        series, vals = series[1:], vals[1:]  # warm-up iteration
    n = len(vals)
    if n < 7:
        return False, "", None
    k = max(2, min(20, n // 4))
    base = statistics.median(vals[:k])
    if base <= 0:
        return False, "", None
    slow = [v >= base * 1.05 for v in vals]
    best_len, best_start, cur = 0, 0, 0
    for idx in range(k, n):
        cur = cur + 1 if slow[idx] else 0
        if cur > best_len:
            best_len, best_start = cur, idx - cur + 1
    if best_len == 0:
        return False, "", None
    iters = [it for it, _, _ in series]
    interval = 1
    known = [x for x in iters if x is not None]
    if len(known) >= 2:
        deltas = [b - a for a, b in zip(known, known[1:], strict=False) if b > a]
        interval = int(statistics.median(deltas)) if deltas else 1
    covered = best_len * max(1, interval)
    to_end = best_start + best_len == n
    if covered >= 10 or (to_end and best_len >= 5):
        drop = statistics.median(vals[best_start:best_start + best_len]) / base - 1
        return True, (f"iteration time {drop * 100:.1f}% above the job's baseline ({base:g}s) for "
                      f"{best_len} consecutive samples (~{covered} iterations)"
                      f"{' through the end of the log' if to_end else ''}"), series[best_start][2]
    return False, "", None


_RECOVER_MIN_PROGRESS = 3


NEVER_SURVIVED = frozenset({"app.nan_loss", "numerics.loss_scale_floor"})
"""Roots that progress lines after them never excuse: the loop keeps printing while nothing is learned
(a NaN loss; fp16 overflow at the loss-scale floor, every step skipped)."""


def survivable(ctx: _Ctx, roots: list[_Ev]) -> bool:
    """Could the run have survived these roots? Only job-log, non-kernel, non-hardware roots that are
    not ``NEVER_SURVIVED``, and no ``job_state`` / ``no_progress`` trigger (the monitor saw it stop).
    Shared by ``_recovered`` (progress followed) and the verdict's completed-job rule (Slurm says COMPLETED)."""
    b = ctx.bundle
    if b.trigger and b.trigger.kind in (TriggerKind.no_progress, TriggerKind.job_state):
        return False
    return all(e.source == b.job_log_source and not e.kernel and e.domain != Domain.hardware
               and e.m.id not in NEVER_SURVIVED for e in roots)


def _recovered(ctx: _Ctx, roots: list[_Ev]) -> int:
    """Progress lines after the last root when the errors were survivable (else 0).

    Only job-log, non-hardware roots count as survivable; ``NEVER_SURVIVED`` ones never are; a failed job state
    or a job_state / no_progress trigger rules it out; progress after a Slurm step-teardown line
    that follows the root does not count (``collect._STEP_TEARDOWN``)."""
    b = ctx.bundle
    if not survivable(ctx, roots) or (b.job and b.job.state in UNSUCCESSFUL_END):
        return 0
    last = max((e.line_no or 0 for e in roots), default=-1)
    last_idx = last - 1
    # a Slurm step teardown after the root ends the window: what follows is the dying step's flush
    stop = next((i for i in ctx.teardown_idx if i > last_idx), None)
    after = sum(1 for i in ctx.progress_idx if i > last_idx and (stop is None or i < stop))
    if last_idx < ctx.tail_start and after < _RECOVER_MIN_PROGRESS:
        return 0
    return after if after >= _RECOVER_MIN_PROGRESS else 0


_CLOCK_KEYS = ("clocks.sm", "clocks.current.sm", "sm_clock", "DCGM_FI_DEV_SM_CLOCK")


def _slow_nodes(bundle: EvidenceBundle) -> tuple[list[str], str]:
    """Nodes whose GPUs run their SM clock >= 10% below the other nodes' median (throttled or
    degraded), from per-node GPU samples. Needs samples from at least two nodes."""
    per_node: dict[str, list[float]] = {}
    for smp in bundle.gpu_metrics:
        if not smp.node:
            continue
        for k in _CLOCK_KEYS:
            v = smp.metrics.get(k)
            if isinstance(v, (int, float)) and v > 0:
                per_node.setdefault(smp.node, []).append(float(v))
                break
    if len(per_node) < 2:
        return [], ""
    med = {n: statistics.median(v) for n, v in per_node.items()}
    slow = []
    for n, v in med.items():
        others = [x for m, x in med.items() if m != n]
        ref = statistics.median(others)
        if ref > 0 and v <= 0.9 * ref:
            slow.append(n)
    if not slow or len(slow) * 2 >= len(med):
        return [], ""
    why = ", ".join(f"{n} SM clock {med[n]:g} MHz" for n in slow)
    return sorted(slow), f" GPU samples name the slow node(s): {why} vs {statistics.median(list(med.values())):g} MHz job median."


def _slow_hosts_from_compute(bundle: EvidenceBundle) -> tuple[list[str], str]:
    """Hosts whose ranks' compute time (``compute_ms``, which excludes the collective) rose to
    ≥ 1.3× their own baseline while other hosts' did not: with a collective every step one slow
    rank makes every rank's step slow, but only its own compute time shows it. Baseline = median of
    a host's first 5 samples in the window, recent = median of its last 10. Needs two or more hosts
    and at least one host that did not slow down (else it is job-wide, not a node)."""
    from revive.progress import parse_progress

    per_host: dict[str, list[float]] = {}
    for line in bundle.job_log.splitlines()[-400:]:
        if line.startswith("=== attempt"):
            per_host = {}  # only the current attempt counts
            continue
        p = parse_progress(line)
        if p and p.host and p.compute_ms is not None:
            per_host.setdefault(p.host, []).append(p.compute_ms)
    per_host = {h: v for h, v in per_host.items() if len(v) >= 15}
    if len(per_host) < 2:
        return [], ""
    ratio = {h: statistics.median(v[-10:]) / max(statistics.median(v[:5]), 1e-9) for h, v in per_host.items()}
    slow = sorted(h for h, r in ratio.items() if r >= 1.3)
    if not slow or len(slow) == len(ratio):
        return [], ""
    why = ", ".join(f"{h} compute ×{ratio[h]:.2f}" for h in slow)
    return slow, f" Per-rank compute time names the slow node(s): {why} of their own baseline; the others stayed level."


