"""NVIDIA Xid / SXid code table with NVIDIA's documented resolution.

Source: "Xid Errors", NVIDIA GPU Deployment and Management Documentation, r570 (2025), and the
NVSwitch SXid section of the Fabric Manager User Guide (r570). Descriptions are paraphrased.

Resolution → Revive action (issue #3):
    restart_app      → restart_in_place
    reset_gpu/reboot → drain_and_requeue (the node needs work before reuse)
    contact_support  → drain_and_requeue, with an escalation note
    ignore           → none (no incident; may leave a node note)
An Xid that is not in the table resolves to ``contact_support``, never ``ignore``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from revive.logline import log_int
from revive.models import Action, Category, Domain

XID_DOC_VERSION = "NVIDIA Xid Errors (r570, 2025)"

RESTART_APP = "restart_app"
RESET_GPU = "reset_gpu"
REBOOT = "reboot"
CONTACT_SUPPORT = "contact_support"
IGNORE = "ignore"

RESOLUTION_ACTION: dict[str, Action] = {
    RESTART_APP: Action.restart_in_place,
    RESET_GPU: Action.drain_and_requeue,
    REBOOT: Action.drain_and_requeue,
    CONTACT_SUPPORT: Action.drain_and_requeue,
    IGNORE: Action.none,
}


@dataclass(frozen=True)
class XidInfo:
    code: int
    name: str
    resolution: str
    category: Category
    domain: Domain
    note: str = ""

    @property
    def action(self) -> Action:
        return RESOLUTION_ACTION[self.resolution]


_H, _U = Domain.hardware, Domain.unknown
_GH, _ECC, _NVL, _CE = Category.gpu_hardware, Category.gpu_memory_ecc, Category.nvlink, Category.cuda_error

XID_TABLE: dict[int, XidInfo] = {
    x.code: x
    for x in [
        XidInfo(13, "Graphics Engine Exception", RESTART_APP, _CE, _U, "usually an application fault (out-of-range access)"),
        XidInfo(31, "GPU memory page fault", RESTART_APP, _CE, _U, "usually an application illegal address"),
        XidInfo(43, "GPU stopped processing", RESTART_APP, _CE, _U, "the channel hit a fault; app-side"),
        XidInfo(45, "Preemptive cleanup, due to previous errors", IGNORE, _CE, _U, "consequence of another error"),
        XidInfo(48, "Double Bit ECC Error (DBE)", RESET_GPU, _ECC, _H),
        XidInfo(61, "Internal micro-controller breakpoint/warning", RESET_GPU, _GH, _H),
        XidInfo(62, "Internal micro-controller halt", RESET_GPU, _GH, _H),
        XidInfo(63, "ECC page retirement / row remapping recording event", IGNORE, _ECC, _H,
                "pending row remap: reset the GPU at the next opportunity"),
        XidInfo(64, "ECC page retirement / row remapper recording failure", RESET_GPU, _ECC, _H),
        XidInfo(68, "NVDEC0 / video processor exception", RESTART_APP, _CE, _U),
        XidInfo(74, "NVLink error", RESET_GPU, _NVL, _H),
        XidInfo(79, "GPU has fallen off the bus", REBOOT, _GH, _H),
        XidInfo(92, "High single-bit ECC error rate", IGNORE, _ECC, _H, "corrected errors; watch the rate"),
        XidInfo(94, "Contained ECC error", RESTART_APP, _ECC, _H, "row remap pending; reset at the next opportunity"),
        XidInfo(95, "Uncontained ECC error", RESET_GPU, _ECC, _H),
        XidInfo(109, "Context switch timeout", RESTART_APP, _CE, _U),
        XidInfo(119, "GSP RPC timeout", RESET_GPU, _GH, _H),
        XidInfo(120, "GSP error", RESET_GPU, _GH, _H),
        XidInfo(136, "Link / PCIe training failure", RESET_GPU, _GH, _H),
        XidInfo(140, "Unrecovered ECC error", RESET_GPU, _ECC, _H),
        XidInfo(143, "GPU initialization failure", RESET_GPU, _GH, _H),
        XidInfo(144, "NVLink: SAW / NETIR error", RESET_GPU, _NVL, _H),
        XidInfo(145, "NVLink: RLW error", RESET_GPU, _NVL, _H),
        XidInfo(146, "NVLink: TLW error", RESET_GPU, _NVL, _H),
        XidInfo(147, "NVLink: TREX error", RESET_GPU, _NVL, _H),
        XidInfo(148, "NVLink: NVLPW / NVLW error", RESET_GPU, _NVL, _H),
        XidInfo(149, "NVLink: NETIR error", RESET_GPU, _NVL, _H),
        XidInfo(150, "NVLink: MSE error", RESET_GPU, _NVL, _H),
        XidInfo(154, "GPU recovery action changed", CONTACT_SUPPORT, _GH, _H, "see the recovery action text"),
    ]
}

_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_RECOVERY = re.compile(r"recovery action changed from \S+ \(([^)]*)\) to \S+ \(([^)]*)\)")

_RECOVERY_TEXT = {
    "none": IGNORE,
    "gpu reset required": RESET_GPU,
    "node reboot required": REBOOT,
    "drain p2p": RESET_GPU,
    "drain and reset": RESET_GPU,
}


@dataclass(frozen=True)
class XidVerdict:
    code: int
    effective_code: int
    name: str
    resolution: str
    category: Category
    domain: Domain
    action: Action
    role: str
    tier: int
    note: str


def lookup(code: int) -> XidInfo:
    info = XID_TABLE.get(code)
    if info is None:
        return XidInfo(code, f"Xid {code} (not in table)", CONTACT_SUPPORT, _GH, _H,
                       "unknown Xid: contact NVIDIA support")
    return info


def resolve_xid(code: int, detail: str = "") -> XidVerdict:
    """Resolve one Xid line. ``detail`` is the text after ``<code>,``."""
    effective = code
    note = ""
    info = lookup(code)
    m = _CAUSED_BY.search(detail or "")
    caused_by = log_int(m.group(1)) if code == 45 and m else None
    if caused_by is not None:
        effective = caused_by
        info = lookup(effective)
        note = f"Xid 45 preemptive cleanup caused by previous Xid {effective}"
    resolution = info.resolution
    if effective == 154:
        r = _RECOVERY.search(detail or "")
        if r:
            resolution = _RECOVERY_TEXT.get(r.group(2).strip().lower(), CONTACT_SUPPORT)
            note = f"recovery action: {r.group(2)}"
    if resolution == CONTACT_SUPPORT and not note:
        note = info.note or "contact NVIDIA support"
    if not note:
        note = info.note
    if resolution == IGNORE:
        role, tier = "benign", 9
    elif resolution == RESTART_APP:
        role, tier = "root", (1 if info.domain == Domain.hardware else 5)
    else:
        role, tier = "root", 1
    return XidVerdict(code, effective, info.name, resolution, info.category, info.domain,
                      RESOLUTION_ACTION[resolution], role, tier, note)


def resolve_sxid(code: int, severity: str | None, detail: str = "") -> XidVerdict:
    """NVSwitch SXid: fatal → reset (drain); non-fatal → node note, no incident."""
    fatal = (severity or "").lower() == "fatal" or "fatal" in (detail or "").lower().split(",")[0]
    if (severity or "").lower() == "non-fatal":
        fatal = False
    stated = bool(severity) or "fatal" in (detail or "").lower()
    if not fatal and not stated:
        # newer drivers print "Severity N Engine instance …" instead of Fatal/Non-fatal: an NVSwitch
        # error of unknown severity is an NVLink fault on this node, but not proof enough to drain
        return XidVerdict(code, code, f"SXid {code} (severity not stated)", RESTART_APP, Category.nvlink,
                          Domain.unknown, Action.restart_in_place, "root", 2,
                          "NVSwitch error of unstated severity: check the fabric manager log and the node")
    if fatal:
        return XidVerdict(code, code, f"SXid {code} (fatal)", RESET_GPU, Category.nvlink, Domain.hardware,
                          Action.drain_and_requeue, "root", 1, "fatal NVSwitch error: reset the fabric")
    return XidVerdict(code, code, f"SXid {code} (non-fatal)", IGNORE, Category.nvlink, Domain.hardware,
                      Action.none, "benign", 9, "non-fatal NVSwitch error: watch the node")
