"""Attribution engine: ``attribute(bundle) -> Attribution``. Pure: no I/O, no clock, no network.

How a verdict is reached (docs/attribution.md has the long version):

1. Every job-log line (of the attempt the incident is about), every kernel line and the Slurm
   record/trigger become events through the signature catalog (``revive/signatures``).
2. Roots compete by ``tier`` (hardware/node events explain everything else; NCCL errors and
   watchdog timeouts explain least), then by time and order. Cascades are cited, never decide
   while a root exists. Hardware-typical rules (CUDA ``unknown error`` in a run that was making
   progress with no application error before it; a sustained throughput drop) are applied here.
3. Culprit nodes only when the root is the node's own fault (hardware/kernel event, node failure,
   a slow node) and a line names the node (or the job ran on one node). Culprit ranks only from
   the root event (or the same signature restated), never for system-domain faults.
4. The action follows the root's signature (Xid resolution for Xids) with the guards: never a
   drain unless the domain is hardware; below ``MIN_CONFIDENCE`` never a drain at all.

Stages (one module each): ``collect`` (events from the evidence), ``timestamps`` (stamps, silent
hangs), ``throughput`` (straggler, slow nodes), ``verdict`` (rules, culprits, action, guard,
calibrated confidence), ``explain`` (frames, GPUs). This module is the pipeline.
"""

from __future__ import annotations

from revive.attribution.collect import _collect_job_log, _collect_kernel, _Ctx, _synthetic
from revive.attribution.throughput import _slow_hosts_from_compute, _slow_nodes, _straggler
from revive.attribution.timestamps import _ref_year
from revive.attribution.verdict import _CONFIDENCE, _SYSTEM_DRAIN, MIN_CONFIDENCE, _apply_rules, _decide, _guard
from revive.models import Attribution, EvidenceBundle
from revive.signatures.matcher import Matcher, default_matcher

__all__ = ["MIN_CONFIDENCE", "attribute"]
# kept importable from here: callers and tests use these names
_REEXPORTED = (_CONFIDENCE, _SYSTEM_DRAIN, _slow_nodes, _slow_hosts_from_compute, _straggler)


def attribute(bundle: EvidenceBundle, matcher: Matcher | None = None) -> Attribution:
    """Attribute an incident from its evidence bundle. Pure.

    Odd input (truncated logs, binary junk, unknown codes) gives a verdict, never an exception;
    a bug in the engine does raise — the attribute activity turns it into the one recorded
    fallback (``revive.attribution.fallback``), and the property tests see it.
    """
    return _attribute(bundle, matcher or default_matcher())


def _attribute(bundle: EvidenceBundle, matcher: Matcher) -> Attribution:
    ctx = _Ctx(bundle=bundle, matcher=matcher, ref_year=_ref_year(bundle))
    _collect_job_log(ctx)     # collect: job-log events, progress, attempt window, rank→host
    _collect_kernel(ctx)      #          kernel lines per node
    _synthetic(ctx)           #          Slurm state, exit code, trigger
    _apply_rules(ctx)         # rules: hardware-typical upgrades, field precedence
    verdict = _decide(ctx)    # verdict: root, culprits, action, explanation
    if ctx.notes:             #          what the engine left out (a log too repetitive to match whole)
        verdict.explanation += " Engine notes: " + "; ".join(ctx.notes)
    return _guard(verdict, matcher)  # guard: calibrated confidence, no drain below MIN_CONFIDENCE


