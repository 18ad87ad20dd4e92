"""Stage: explain — the cited frame of a traceback and the GPUs a verdict names."""

from __future__ import annotations

from revive.attribution.collect import _FRAME, _Ctx, _Ev
from revive.logline import LINE_CAP as MAX_TEXT
from revive.models import (
    EvidenceBundle,
    GpuRef,
)
from revive.signatures.matcher import split_prefix


def _explain_frame(lines: list[str], bundle: EvidenceBundle, ev: _Ev) -> str:
    """The traceback frame just above ``ev``'s line (``lines``: the job log split once, ``_Ctx.lines``)."""
    if ev.source != bundle.job_log_source or not ev.line_no:
        return ""
    lo = max(0, ev.line_no - 60)
    for j in range(ev.line_no - 2, lo - 1, -1):
        body, _ = split_prefix(lines[j][:MAX_TEXT])
        f = _FRAME.match(body)
        if f:
            return f" Last frame: {f.group('file')}:{f.group('line')} in {f.group('func')}."
        if j < ev.line_no - 2 and body.startswith("Traceback (most recent call last)"):
            break
    return ""


def _gpus(ctx: _Ctx, evs: list[_Ev]) -> list[GpuRef]:
    out: list[GpuRef] = []
    seen: set[tuple[str | None, str]] = set()
    for ev in evs:
        pci = ev.m.fields.get("pci")
        if not pci:
            continue
        pci = pci.lower()
        key = (ev.node, pci)
        if key in seen:
            continue
        seen.add(key)
        ref = GpuRef(node=ev.node, pci_bus_id=pci, uuid=ctx.uuid_by_pci.get(pci))
        for s in ctx.bundle.gpu_metrics:
            sp = (s.pci_bus_id or "").lower()
            if sp and (sp.endswith(pci) or pci in sp) and (s.node in (None, ev.node)):
                ref.index = s.index if ref.index is None else ref.index
                ref.uuid = ref.uuid or s.uuid
        out.append(ref)
    return out


