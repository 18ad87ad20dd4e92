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
   drain unless the domain is hardware.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from revive.attribution.calibrate import apply as apply_calibration
from revive.logline import LINE_CAP as MAX_TEXT
from revive.logline import cap_line, match_window
from revive.models import (
    UNSUCCESSFUL_END,
    Action,
    Attribution,
    Category,
    Domain,
    Event,
    EvidenceBundle,
    GpuRef,
    TriggerKind,
)
from revive.signatures.matcher import Matcher, SignatureMatch, default_matcher, split_prefix

MAX_CASCADES = 25
MAX_PROGRESS = 5000

_ATTEMPT = "=== attempt restart="
_RESUMED = "resumed from checkpoint"
_EXTRA_LITERALS = [_ATTEMPT, _RESUMED, "GPU at PCI:", "Root Cause (first observed failure)"]
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_TB_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")
_TB_HOST = re.compile(r"^\s*host\s*:\s*(?P<host>[\w.-]+)")
_GPU_UUID = re.compile(r"GPU at PCI:(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[.0-9]*: (?P<uuid>GPU-[0-9A-Fa-f-]+)")
_MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1)}

_HW_CATEGORIES = {Category.gpu_hardware, Category.gpu_memory_ecc, Category.nvlink, Category.cuda_error}
_CONFIDENCE = {1: 0.9, 2: 0.85, 3: 0.85, 4: 0.6, 5: 0.5, 6: 0.5, 7: 0.5, 8: 0.3, 9: 0.25}
MIN_CONFIDENCE = 0.5
"""Policy floor (issue #8): below it the engine never recommends ``drain_and_requeue``. Read by
callers as a module constant until the policy file carries it."""
_SYSTEM_DRAIN = {"storage.hung_task"}
"""System-domain signatures whose remedy is draining the node (a task stuck in D state on a wedged
mount): the one exception to "a drain only with domain hardware"."""


def _conf(_sig_id: str, default: float) -> float:
    return default


@dataclass
class _Ev:
    source: str
    line_no: int | None
    text: str
    m: SignatureMatch
    seq: int
    ts: datetime | None = None
    node: str | None = None
    rank: int | None = None
    kernel: bool = False
    ts_exact: bool = False
    """True when the timestamp carried its own year and UTC offset."""
    tier: int = 5
    category: Category = Category.none
    domain: Domain = Domain.unknown
    action: Action = Action.restart_in_place
    upgraded: str = ""

    def __post_init__(self) -> None:
        if self.ts is not None and self.ts.tzinfo is None:
            self.ts = self.ts.replace(tzinfo=UTC)
        self.tier = self.m.tier
        self.category = self.m.category
        self.domain = self.m.domain
        self.action = self.m.action

    def event(self) -> Event:
        return Event(source=self.source, line_no=self.line_no, timestamp=self.ts,
                     text=cap_line(self.text), signature_id=self.m.id)


@dataclass
class _Ctx:
    bundle: EvidenceBundle
    matcher: Matcher
    events: list[_Ev] = field(default_factory=list)
    progress: list[tuple[int, int | None, float, str]] = field(default_factory=list)
    progress_lines: dict[int, tuple[int, str, datetime | None]] = field(default_factory=dict)
    progress_idx: list[int] = field(default_factory=list)
    tail_start: int = 0
    first_progress_seq: int | None = None
    rank_host: dict[int, str] = field(default_factory=dict)
    uuid_by_pci: dict[str, str] = field(default_factory=dict)
    ref_year: int = 1970
    attempt_start: datetime | None = None
    notes: list[str] = field(default_factory=list)
    seq: int = 0


# ----------------------------------------------------------------------------- time
def _ref_year(bundle: EvidenceBundle) -> int:
    for cand in (bundle.trigger.at if bundle.trigger else None,
                 bundle.job.start_time if bundle.job else None,
                 bundle.job.submit_time if bundle.job else None):
        if cand is not None:
            return cand.year
    m = re.search(r"\b(20\d\d)-\d\d-\d\d[T ]", bundle.job_log[:200000])
    return int(m.group(1)) if m else 1970


def _parse_ts(ts: str | None, kind: str | None, year: int) -> datetime | None:
    if not ts:
        return None
    try:
        if kind in ("iso", "bracket_ts"):
            s = ts.replace(",", ".").replace("_", "T").replace(" ", "T", 1)
            if s.endswith("Z"):
                s = s[:-1] + "+00:00"
            if "." in s:
                head, _, tail = s.partition(".")
                digits = re.match(r"\d*", tail).group(0)  # type: ignore[union-attr]  # \d* always matches
                s = head + "." + digits[:6].ljust(6, "0") + tail[len(digits):]
            d = datetime.fromisoformat(s)
            return d if d.tzinfo else d.replace(tzinfo=UTC)
        if kind == "syslog":
            mon, day, clock = ts.split()[:3]
            hh, mm, ss = clock.split(":")
            sec = float(ss)
            return datetime(year, _MONTHS[mon], int(day), int(hh), int(mm), int(sec),
                            int((sec % 1) * 1e6), tzinfo=UTC)
        if kind == "glog":
            md, clock = ts.split()
            month, mday = (int(md[:-2]), int(md[-2:]))
            hh, mm, ss = clock.split(":")
            whole, _, frac = ss.partition(".")
            return datetime(year, month, mday, int(hh), int(mm), int(whole),
                            int((frac or "0")[:6].ljust(6, "0")), tzinfo=UTC)
    except (ValueError, KeyError, AttributeError, IndexError, OverflowError):
        return None
    return None


def _roll_year(ts: datetime, ctx: _Ctx) -> datetime:
    """Syslog stamps carry no year: one stamped more than half a year away from the incident's
    reference time belongs to the neighbouring year (a job that started on Dec 31 and died on Jan 1)."""
    b = ctx.bundle
    ref = ctx.attempt_start or (b.trigger.at if b.trigger else None) or (b.job.start_time if b.job else None)
    if ref is None:
        return ts
    if ref.tzinfo is None:
        ref = ref.replace(tzinfo=UTC)
    try:
        if ts < ref - timedelta(days=183):
            return ts.replace(year=ts.year + 1)
        if ts > ref + timedelta(days=183):
            return ts.replace(year=ts.year - 1)
    except (ValueError, OverflowError):  # Feb 29; stamps at the edge of the calendar
        pass
    return ts


# ----------------------------------------------------------------------------- helpers
def _nodes(bundle: EvidenceBundle) -> list[str]:
    return list(bundle.job.nodes) if bundle.job and bundle.job.nodes else []


def _norm_host(host: str | None, nodes: list[str]) -> str | None:
    if not host:
        return None
    if not nodes or host in nodes:
        return host
    for n in nodes:
        if host.startswith(n + ".") or host.endswith("." + n):
            return n
    return host


def _hit_lines(matcher: Matcher, text: str, extra_gate) -> tuple[list[str], set[int], set[int]]:
    """Split the text once; return lines, the indices of lines a signature literal hits and the
    indices of lines an extra (progress/attempt) literal hits. The gates run over the whole buffer."""
    lines = text.split("\n")
    data = text.encode("utf-8", "surrogatepass")
    out: list[set[int]] = []
    for gate in (matcher._gate_bytes, extra_gate):
        idx: set[int] = set()
        line_no, pos, last = 0, 0, -1
        for m in gate.finditer(data):
            ls = data.rfind(b"\n", 0, m.start()) + 1
            if ls == last:
                continue
            last = ls
            line_no += data.count(b"\n", pos, ls)
            pos = ls
            if line_no < len(lines):
                idx.add(line_no)
        out.append(idx)
    return lines, out[0], out[1]


def _compile_literals(matcher: Matcher, kind: str, lits: list[str], as_bytes: bool):
    cache = matcher.__dict__.setdefault("_engine_gates", {})
    g = cache.get(kind)
    if g is None:
        uniq = sorted(set(lits), key=len, reverse=True)
        pat: bytes | str = (b"|".join(re.escape(x.encode()) for x in uniq) if as_bytes
                            else "|".join(re.escape(x) for x in uniq))
        g = re.compile(pat)
        if matcher.use_re2 and as_bytes:
            try:
                import re2  # noqa: PLC0415

                g = re2.compile(pat)
            except Exception:  # pragma: no cover
                pass
        cache[kind] = g
    return g


def _extra_gate(matcher: Matcher):
    """Rare markers (attempt boundaries, resumes, torchrun summaries, GPU UUID lines)."""
    return _compile_literals(matcher, "markers", list(_EXTRA_LITERALS), True)


def _progress_gate(matcher: Matcher):
    return _compile_literals(matcher, "progress", [lit for p in matcher.progress for lit in p.prefilter], False)


# ----------------------------------------------------------------------------- collection
def _collect_job_log(ctx: _Ctx) -> None:
    b = ctx.bundle
    text = b.job_log or ""
    if not text:
        return
    matcher = ctx.matcher
    lines, sig_hits, extra_hits = _hit_lines(matcher, text, _extra_gate(matcher))
    # attempt segmentation
    attempts = sorted(i for i in extra_hits if _ATTEMPT in lines[i])
    start, end = 0, len(lines)
    if attempts:
        target = None
        trig = b.trigger
        if trig and trig.line_no and (not trig.source or trig.source == b.job_log_source):
            target = trig.line_no - 1
        if target is None:
            start = attempts[-1]
        else:
            before = [a for a in attempts if a <= target]
            after = [a for a in attempts if a > target]
            start = before[-1] if before else 0
            end = after[0] if after else len(lines)
        body, meta = split_prefix(lines[start][:MAX_TEXT])
        m = re.search(r"restart=\d+ (\S+)", body)
        if m:
            ctx.attempt_start = _parse_ts(m.group(1), "iso", ctx.ref_year)
    nodes = _nodes(b)
    last_ts: datetime | None = None
    tb_rank: int | None = None
    tb_host: str | None = None
    tb_until = -1
    # progress lines: the first one (did the run make progress before an error?) and those among
    # the last MAX_PROGRESS lines (straggler series) are parsed; markers and signature lines always are.
    keep = {i for i in extra_hits if start <= i < end}
    prog = _progress_gate(matcher).search
    first_sig = min((i for i in sig_hits if start <= i < end), default=end)
    for i in range(start, min(end, first_sig + 1)):
        if prog(lines[i][:MAX_TEXT]):
            keep.add(i)
            break
    ctx.tail_start = max(start, end - MAX_PROGRESS)
    for i in range(ctx.tail_start, end):
        if prog(lines[i][:MAX_TEXT]):
            keep.add(i)
    todo = sorted({i for i in sig_hits if start <= i < end} | keep)
    for i in todo:
        ctx.seq = i
        raw = lines[i]
        line = match_window(raw)
        body, meta = split_prefix(line[:2 * MAX_TEXT])
        ts = _parse_ts(meta.ts, meta.ts_kind, ctx.ref_year)
        if ts is not None:
            last_ts = ts
        if meta.host is None and meta.extra.get("pdsh_host") in nodes:
            meta.host = meta.extra["pdsh_host"]
        host_node = _norm_host(meta.host, nodes)
        if meta.rank is not None and host_node:
            ctx.rank_host.setdefault(meta.rank, host_node)
        if _RESUMED in body or _ATTEMPT in body:
            ctx.progress.append((-1, None, -1.0, "reset"))
        if "Root Cause (first observed failure)" in body:
            tb_rank, tb_host, tb_until = None, None, i + 12
            for j in range(i + 1, min(i + 12, len(lines))):
                r = _TB_RANK.match(lines[j])
                h = _TB_HOST.match(lines[j])
                if r:
                    tb_rank = int(r.group("rank"))
                if h:
                    tb_host = h.group("host")
        is_prog, it, secs = matcher.progress_of(body)
        if is_prog:
            ctx.progress_idx.append(i)
            if ctx.first_progress_seq is None:
                ctx.first_progress_seq = ctx.seq
            if secs is not None:
                key = str(meta.rank if meta.rank is not None else
                          (f"l{meta.local_rank}" if meta.local_rank is not None else "-"))
                ctx.progress.append((ctx.seq, it, secs, key))
                ctx.progress_lines[ctx.seq] = (i + 1, cap_line(raw), ts or last_ts)
        for sm in (matcher.match(line) if i in sig_hits else ()):
            rank = meta.rank
            if rank is None and sm.id == "host.killed" and sm.fields.get("task", "").isdigit():
                rank = int(sm.fields["task"])
            host = meta.host or sm.fields.get("host")
            if rank is None and sm.fields.get("rank", "").isdigit():
                rank = int(sm.fields["rank"])
            if i <= tb_until:
                rank = tb_rank if rank is None else rank
                host = host or tb_host
            if sm.id in ("srun.task_exited", "host.killed") and sm.fields.get("host") and sm.fields.get("task"):
                hn = _norm_host(sm.fields["host"], nodes)
                for task_rank in _task_ranks(sm.fields["task"]):
                    if hn:
                        ctx.rank_host.setdefault(task_rank, hn)
            ev = _Ev(source=b.job_log_source, line_no=i + 1, text=cap_line(raw), m=sm, seq=ctx.seq,
                     ts=ts or last_ts, node=_norm_host(host, nodes), rank=rank, kernel=meta.kernel)
            ctx.events.append(ev)
        if "GPU at PCI:" in body:
            g = _GPU_UUID.search(body)
            if g:
                ctx.uuid_by_pci[g.group("pci").lower()] = g.group("uuid")


def _task_ranks(spec: str) -> list[int]:
    """srun's ``tasks 0-7,16`` → [0..7, 16] (global ranks of the tasks on that host)."""
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        if a.isdigit() and (not b or b.isdigit()):
            lo, hi = int(a), int(b or a)
            if 0 <= hi - lo < 4096:
                out.extend(range(lo, hi + 1))
    return out


def _collect_kernel(ctx: _Ctx) -> None:
    b = ctx.bundle
    ctx.seq = 10**9
    nodes = _nodes(b)
    default_node = nodes[0] if nodes else None
    for key, lines in b.kernel_logs.items():
        src = f"kern.log:{key}" if key else "kern.log"
        for n, raw in enumerate(lines, 1):
            if not raw:
                continue
            line = match_window(raw)
            if "GPU at PCI:" in line:
                g = _GPU_UUID.search(line)
                if g:
                    ctx.uuid_by_pci[g.group("pci").lower()] = g.group("uuid")
            if not ctx.matcher.gate(line):
                continue
            body, meta = split_prefix(line)
            ts = _parse_ts(meta.ts, meta.ts_kind, ctx.ref_year)
            off = ctx.bundle.kernel_log_utc_offset_s
            syslog_known_zone = meta.ts_kind == "syslog" and ts is not None and off is not None
            if meta.ts_kind == "syslog" and ts is not None:
                ts = _roll_year(ts, ctx)
            if syslog_known_zone and ts is not None and off is not None:
                ts = ts - timedelta(seconds=off)  # the stamp is the node's local time
            node = _norm_host(meta.host, nodes) or key or default_node
            for sm in ctx.matcher.match(line, include_benign=True):
                if sm.id.startswith("benign."):
                    continue
                ctx.events.append(_Ev(source=src, line_no=n, text=cap_line(raw), m=sm, seq=ctx.seq,
                                      ts=ts, node=node, kernel=True,
                                      ts_exact=syslog_known_zone or bool(meta.ts_kind == "iso" and meta.ts and
                                                    re.search(r"(?:Z|[+-]\d\d:?\d\d)$", meta.ts))))
            ctx.seq += 1


def _slurm_seconds(v: str) -> float | None:
    """Slurm durations: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``."""
    v = (v or "").strip()
    if not v or not re.fullmatch(r"(?:\d+-)?\d+(?::\d+){0,2}", v):
        return None
    days = 0
    if "-" in v:
        d, v = v.split("-", 1)
        days = int(d)
        parts = [int(x) for x in v.split(":")] + [0, 0]
        h, m, sec = parts[0], parts[1], parts[2]
    else:
        parts = [int(x) for x in v.split(":")]
        if len(parts) == 1:
            h, m, sec = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, sec = 0, parts[0], parts[1]
        else:
            h, m, sec = parts[0], parts[1], parts[2]
    return float(days * 86400 + h * 3600 + m * 60 + sec)


def _synthetic(ctx: _Ctx) -> None:
    """Slurm state and trigger as events."""
    b = ctx.bundle
    states: list[tuple[str, str]] = []
    trig = b.trigger
    if trig and trig.kind == TriggerKind.job_state and trig.state_to:
        states.append((trig.state_to, f"job state {trig.state_from or '?'} -> {trig.state_to}"
                       + (f" reason={trig.reason}" if trig.reason else "")))
    if b.job and b.job.state:
        states.append((b.job.state, f"job {b.job.job_id} state={b.job.state}"
                       + (f" reason={b.job.reason}" if b.job.reason else "")
                       + (f" exit_code={b.job.exit_code}" if b.job.exit_code else "")))
    table = {
        "NODE_FAIL": ("slurm.state_node_fail", Category.node_failure, Domain.hardware, 1, Action.requeue_exclude_nodes),
        "TIMEOUT": ("slurm.state_timeout", Category.timeout, Domain.system, 2, Action.restart_in_place),
        "DEADLINE": ("slurm.state_timeout", Category.timeout, Domain.system, 2, Action.restart_in_place),
        "PREEMPTED": ("slurm.state_preempted", Category.preempted, Domain.system, 2, Action.restart_in_place),
        "OUT_OF_MEMORY": ("slurm.state_oom", Category.oom_host, Domain.application, 2, Action.stop_no_retry),
    }
    seen: set[str] = set()
    for state, text in states:
        base = state.upper().split("+")[0].split()[0] if state else ""
        if base in table and base not in seen:
            seen.add(base)
            sid, cat, dom, tier, act = table[base]
            sm = SignatureMatch(id=sid, category=cat, domain=dom, role="root", tier=tier, action=act,
                                family="slurm", source="Slurm job state")
            ctx.events.append(_Ev(source="slurm", line_no=None, text=text, m=sm, seq=10**12 + len(seen),
                                  ts=trig.at if trig and trig.kind == TriggerKind.job_state else None))
    # a job that ran into its time limit without a TIMEOUT state (e.g. CANCELLED by a wrapper)
    if b.job and "TIMEOUT" not in seen and b.job.time_limit and b.job.elapsed:
        lim, ela = _slurm_seconds(b.job.time_limit), _slurm_seconds(b.job.elapsed)
        if lim and ela and ela >= lim and str(b.job.state).upper().split(".")[-1] in ("CANCELLED", "FAILED", "TIMEOUT"):
            sm = SignatureMatch(id="slurm.state_timeout", category=Category.timeout, domain=Domain.system, role="root",
                                tier=2, action=Action.restart_in_place, family="slurm", source="Slurm elapsed >= time limit")
            ctx.events.append(_Ev(source="slurm", line_no=None, m=sm, seq=10**12 + 9,
                                  text=f"job {b.job.job_id} elapsed {b.job.elapsed} >= time limit {b.job.time_limit}"))
    # bare SIGKILL / 137 in the exit code: a weak crash hint (never OOM by itself)
    if b.job and b.job.exit_code:
        ec = b.job.exit_code.split(":")
        if (len(ec) == 2 and ec[1] == "9") or ec[0] == "137":
            sm = SignatureMatch(id="slurm.exit_sigkill", category=Category.crash, domain=Domain.unknown,
                                role="root", tier=8, action=Action.restart_in_place, family="slurm",
                                source="Slurm exit code")
            ctx.events.append(_Ev(source="slurm", line_no=None, text=f"exit_code={b.job.exit_code}", m=sm,
                                  seq=10**12 + 10))
    # a log_signature trigger whose line is not in the log window
    if trig and trig.kind == TriggerKind.log_signature and trig.text:
        if not any(e.text.strip() == trig.text.strip() for e in ctx.events):
            for sm in ctx.matcher.match(trig.text):
                ctx.events.append(_Ev(source=trig.source or "trigger", line_no=trig.line_no,
                                      text=cap_line(trig.text), m=sm, seq=-1, ts=trig.at))


# ----------------------------------------------------------------------------- rules
def _apply_hardware_typical(ctx: _Ctx) -> None:
    app_roots_seen = False
    for ev in sorted(ctx.events, key=lambda e: e.seq):
        if ev.m.role == "root" and ev.domain == Domain.application:
            app_roots_seen = True
        if ev.m.id == "cuda.unknown_error" and not app_roots_seen:
            if ctx.first_progress_seq is not None and ctx.first_progress_seq < ev.seq:
                ev.domain, ev.tier, ev.action = Domain.hardware, 2, Action.drain_and_requeue
                ev.upgraded = ("CUDA 'unknown error' in a run that was making progress, with no "
                               "application error before it: typical of a GPU failing")


_NVLINK_XIDS = {74, 144, 145, 146, 147, 148, 149, 150}
_GPU_FAULT_XIDS = {31, 43, 48}
_GPU_FAULT_SIGS = {"cuda.oom", "cuda.cudnn_error", "cuda.dnn_init_failed"}
_WATCHDOG_SIGS = {"nccl.watchdog_timeout", "nccl.watchdog_terminated", "nccl.heartbeat_timeout"}


def _xid_code(ev: _Ev) -> int | None:
    if ev.m.id != "xid.event":
        return None
    code = ev.m.fields.get("effective_xid") or ev.m.fields.get("xid") or ""
    return int(code) if code.isdigit() else None


_HCA = re.compile(r"\b(?:hca|dev|device|HCA) (?:mlx\d_\d+|\w+_\d+)(?::\d+)?|\bmlx\d_\d+:\d+")
_CKPT_LOAD = re.compile(r"[Ll]oading (?:checkpoint|model|the model|weights|state dict|state_dict|shards|"
                        r"distributed checkpoint)|Loading checkpoint shards|load_checkpoint|torch\.load\(|"
                        r"from_pretrained\(")


def _after(e: _Ev, ref: _Ev) -> bool:
    if e.ts is not None and ref.ts is not None:
        return e.ts >= ref.ts
    return e.seq >= ref.seq


def _is_sigkill(e: _Ev) -> bool:
    f = e.m.fields
    if e.m.id == "host.killed":
        return True
    if e.m.id == "host.launcher_signal":
        return "9" in (f.get("signal"), f.get("signal_b"), f.get("signal_c"), f.get("signal_d"))
    return e.m.id == "slurm.exit_sigkill"


def _apply_field_rules(ctx: _Ctx) -> None:
    """Precedence rules learnt from the field (docs/attribution.md, rules 3a-3d)."""
    evs = ctx.events
    xids = [(e, _xid_code(e)) for e in evs if e.m.id == "xid.event"]
    # 3a. CUDA OOM / cuDNN failures on a node whose driver logged Xid 31/43/48: the GPU's fault
    #     (a page fault or stopped channel under an allocation/cuDNN error is not the app's sizing)
    app_gpu = [e for e in evs if e.m.id in _GPU_FAULT_SIGS]
    if app_gpu:
        for e, code in xids:
            if code in _GPU_FAULT_XIDS:
                e.category = Category.gpu_memory_ecc if code == 48 else Category.gpu_hardware
                e.domain, e.tier, e.action = Domain.hardware, 1, Action.drain_and_requeue
                e.upgraded = (f"Xid {code} on this node under a CUDA memory/cuDNN error: the GPU is faulting, "
                              "not the application")
        if any(code in _GPU_FAULT_XIDS for _, code in xids):
            for e in app_gpu:
                e.tier, e.m = 6, e.m.model_copy(update={"role": "cascade"})
    # 3g. an NVSwitch SXid that raised no incident by itself (non-fatal / severity not stated) beside a
    #     job-side CUDA error of unknown cause on the node: the CUDA error is the NVLink fabric's
    sx = [e for e in evs if e.m.id == "sxid.event" and e.action != Action.drain_and_requeue]
    if sx and any(e.m.role == "root" and e.category == Category.cuda_error and e.domain == Domain.unknown
                  and not e.kernel for e in evs):
        for e in sx:
            e.m = e.m.model_copy(update={"role": "root"})
            e.category, e.domain, e.tier, e.action = Category.nvlink, Domain.unknown, 2, Action.restart_in_place
            e.upgraded = "an NVSwitch error on this node beside the job's CUDA error: the NVLink fabric"
    # 3b. Xid 94/95 (contained/uncontained ECC) right after NVLink Xids on the same node: NVLink
    nvl_nodes = {e.node for e, code in xids if code in _NVLINK_XIDS}
    for e, code in xids:
        if code in (94, 95) and e.node in nvl_nodes:
            e.category = Category.nvlink
    # 3c. a watchdog timeout (any format) on a line also matched by a c10d/NCCL error, or before
    #     every NCCL error of unknown cause (the abort that follows the timeout prints them): a hang
    wd = [e for e in evs if e.m.id in _WATCHDOG_SIGS and e.m.role == "root"]
    wd_lines = {(e.source, e.line_no) for e in wd}
    if wd_lines:
        evs = [e for e in evs if not ((e.source, e.line_no) in wd_lines and e.m.id not in _WATCHDOG_SIGS
                                      and e.category == Category.nccl_error and e.domain == Domain.unknown)]
        first_wd = min(wd, key=lambda e: (e.ts is None, e.ts or datetime.min.replace(tzinfo=UTC), e.seq))
        generic_nccl = [e for e in evs if e.m.role == "root" and e.category == Category.nccl_error
                        and e.domain == Domain.unknown and e.m.id not in _WATCHDOG_SIGS]
        if generic_nccl and all(_after(e, first_wd) for e in generic_nccl):
            for e in generic_nccl:
                e.m = e.m.model_copy(update={"role": "cascade"})
    # 3d. an IB completion error that names the local HCA (NCCL 2.19+ "hca mlx5_N"): the host's link
    for e in evs:
        if e.m.id in ("nccl.ib_completion_error", "nccl.ib_retry_exceeded") and e.node and _HCA.search(e.text):
            e.domain, e.action = Domain.hardware, Action.requeue_exclude_nodes
            e.upgraded = "the error names the host's HCA: its InfiniBand link/port is at fault"
    # 3e. SIGKILL while a checkpoint/model is being loaded, with no OOM line: the host OOM killer
    lines = ctx.bundle.job_log.split("\n") if ctx.bundle.job_log else []
    for e in evs:
        if e.m.role == "root" and _is_sigkill(e) and e.source == ctx.bundle.job_log_source and e.line_no:
            window = lines[max(0, e.line_no - 40):e.line_no - 1]
            if any(_CKPT_LOAD.search(x) for x in window):
                e.category, e.domain, e.tier, e.action = Category.oom_host, Domain.application, 2, Action.stop_no_retry
                e.upgraded = ("killed by SIGKILL while loading a checkpoint/model, no other error: the host's "
                              "OOM killer (every rank loading the full state into RAM)")
    ctx.events = evs


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


def _recovered(ctx: _Ctx, roots: list[_Ev]) -> int:
    """Progress lines after the last root when the errors were survivable (else 0).

    Only job-log, non-hardware roots count as survivable; NaN loss never is; a failed job state
    or a job_state / no_progress trigger rules it out."""
    b = ctx.bundle
    if b.trigger and b.trigger.kind in (TriggerKind.no_progress, TriggerKind.job_state):
        return 0
    if b.job and b.job.state in UNSUCCESSFUL_END:
        return 0
    last = -1
    for e in roots:
        if e.source != b.job_log_source or e.kernel or e.domain == Domain.hardware or e.m.id == "app.nan_loss":
            return 0
        last = max(last, e.line_no or 0)
    last_idx = last - 1
    after = sum(1 for i in ctx.progress_idx if i > last_idx)
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


_TPN = [
    re.compile(r"SLURM_(?:N)?TASKS_PER_NODE=(?P<n>\d+)"),
    re.compile(r"--ntasks-per-node[= ](?P<n>\d+)"),
    re.compile(r"--nproc[_-]per[_-]node[= ](?P<n>\d+)"),
    re.compile(r"nproc_per_node\W{1,3}(?P<n>\d+)"),
]
_WORLD = [
    re.compile(r"\bnranks (?P<n>\d+)\b"),
    re.compile(r"[Ww]orld[ _][Ss]ize\W{1,3}(?P<n>\d+)"),
    re.compile(r"WORLD_SIZE=(?P<n>\d+)"),
]
_NODELIST = re.compile(r"SLURM_(?:JOB_)?NODELIST=(?P<v>\S+)")


def _rank_layout(ctx: _Ctx) -> dict[int, str]:
    """Global rank -> node, from the job's layout: SLURM_NODELIST order (or the Slurm record's node
    list) and tasks per node (SLURM_TASKS_PER_NODE, --ntasks-per-node, torchrun --nproc-per-node, or
    world size / nodes), block distribution as srun and torchrun use by default. Ranks a line ties to
    a host (``[rank N host H]``, NCCL prefixes, torchrun ``host :`` lines) override the layout."""
    b = ctx.bundle
    head = b.job_log[:400000]
    nodes = _nodes(b)
    m = _NODELIST.search(head)
    if m:
        from revive.attribution.cases import expand_nodelist  # noqa: PLC0415  (no I/O: a pure parser)

        listed = expand_nodelist(m.group("v"))
        if listed:
            nodes = listed
    out: dict[int, str] = {}
    if nodes:
        tpn = None
        for pat in _TPN:
            t = pat.search(head)
            if t and int(t.group("n")) > 0:
                tpn = int(t.group("n"))
                break
        if tpn is None:
            for pat in _WORLD:
                w = pat.search(head)
                if w and int(w.group("n")) >= len(nodes) and int(w.group("n")) % len(nodes) == 0:
                    tpn = int(w.group("n")) // len(nodes)
                    break
        if tpn is None and len(nodes) == 1:
            tpn = 1 << 20
        if tpn:
            for r in range(min(len(nodes) * tpn, 100000)):
                out[r] = nodes[r // tpn]
    out.update(ctx.rank_host)
    return out


def _ev_node(ev: _Ev, layout: dict[int, str], nodes: list[str]) -> str | None:
    if ev.node:
        return ev.node
    if ev.rank is not None and ev.rank in layout:
        return layout[ev.rank]
    if len(nodes) == 1:
        return nodes[0]
    return None


_FINAL_ITER = re.compile(r"(?:iteration|step|Step|Iteration|global_step)\s*:?\s*(?P<i>\d+)\s*/\s*(?P<n>\d+)")
_DONE = re.compile(r"after training is done|[Tt]raining (?:completed|complete|finished|done)\b|Trainer\.fit. stopped: .max_(?:steps|epochs)")


def _training_finished(ctx: _Ctx) -> bool:
    """The log shows the last iteration of the run (``iteration N/N``) or a framework's
    end-of-training line."""
    lines = ctx.bundle.job_log.split("\n")
    for i in reversed(ctx.progress_idx[-5:]):
        m = _FINAL_ITER.search(lines[i][:MAX_TEXT])
        if m and int(m.group("n")) > 0 and int(m.group("i")) >= int(m.group("n")):
            return True
    return any(_DONE.search(x) for x in lines[-50:])


_SILENT_FACTOR = 20
_SILENT_MIN_S = 600.0


def _silent_hang(ctx: _Ctx) -> str:
    """A run that made progress and then printed no progress for far longer than its own cadence,
    with no error: a hang. Offline evidence: the log's own timestamps (progress cadence vs the gap
    to the last stamped line or the job's end), or a job that was cancelled (not at its time limit)
    while the log still ends in progress."""
    b = ctx.bundle
    if not ctx.progress_idx:
        return ""
    lines = b.job_log.split("\n")
    stamps: list[datetime] = []
    last_prog_ts: datetime | None = None
    prog = set(ctx.progress_idx)
    end_ts: datetime | None = None
    for i in range(ctx.tail_start, len(lines)):
        raw = lines[i][:MAX_TEXT]
        if not raw.strip():
            continue
        _, meta = split_prefix(raw)
        ts = _parse_ts(meta.ts, meta.ts_kind, ctx.ref_year)
        if ts is None:
            c = re.search(r"CANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", raw)
            ts = _parse_ts(c.group(1), "iso", ctx.ref_year) if c else None
        if ts is None:
            continue
        end_ts = ts
        if i in prog:
            stamps.append(ts)
            last_prog_ts = ts
    if last_prog_ts is not None and end_ts is not None and len(stamps) >= 3:
        gaps = [(y - x).total_seconds() for x, y in zip(stamps, stamps[1:], strict=False) if y > x]
        if gaps:
            cadence = statistics.median(gaps)
            gap = (end_ts - last_prog_ts).total_seconds()
            if gap > max(_SILENT_FACTOR * cadence, _SILENT_MIN_S):
                return (f"progress lines came every ~{cadence:g}s, then none for {gap:.0f}s "
                        f"(last at {last_prog_ts.isoformat()}) with no error")
    state = (b.job.state.value if b.job and hasattr(b.job.state, "value") else str(b.job.state if b.job else "")).upper()
    if state.startswith("CANCELLED") and "TIME LIMIT" not in b.job_log[-4000:]:
        tail = [i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()][:3]
        if any(i in prog for i in tail):
            return "the job was cancelled while its log still ended in progress lines, with no error"
    return ""


def _order_key(ev: _Ev):
    # the driver's own verdict (Xid/SXid) outranks a job-side restatement of the same fault
    authoritative = ev.m.id in ("xid.event", "sxid.event")
    severity = 0 if (authoritative and ev.action == Action.drain_and_requeue) else 1
    return (ev.tier, not authoritative, severity, ev.ts is None, ev.ts or datetime.min.replace(tzinfo=UTC), ev.seq)


def _explain_frame(bundle: EvidenceBundle, ev: _Ev) -> str:
    if ev.source != bundle.job_log_source or not ev.line_no:
        return ""
    lines = bundle.job_log.split("\n")
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


def attribute(bundle: EvidenceBundle, matcher: Matcher | None = None) -> Attribution:
    """Attribute an incident from its evidence bundle. Pure.

    Odd input (truncated logs, binary junk, unknown codes) gives a verdict, never an exception;
    a bug in the engine does raise — the attribute activity turns it into the one recorded
    fallback (``revive.attribution.fallback``), and the property tests see it.
    """
    return _attribute(bundle, matcher or default_matcher())


def _attribute(bundle: EvidenceBundle, matcher: Matcher) -> Attribution:
    return _guard(_verdict(bundle, matcher), matcher)


def _guard(a: Attribution, matcher: Matcher) -> Attribution:
    """Calibrate the confidence (catalog table fitted on outcomes) and apply the policy floor:
    below ``MIN_CONFIDENCE`` a verdict never drains a node — it requeues without the named node(s),
    or escalates to a person when none is named."""
    raw = a.confidence
    conf = round(apply_calibration(getattr(matcher, "calibration", None), raw), 2)
    a.confidence = conf
    if conf < MIN_CONFIDENCE and a.action == Action.drain_and_requeue:
        if a.culprit_nodes:
            a.action = Action.requeue_exclude_nodes
            a.explanation += (f" Confidence {conf:.2f} is below the policy minimum {MIN_CONFIDENCE}: no drain; "
                              "requeue without the named node(s) instead.")
        else:
            a.action = Action.escalate
            a.explanation += (f" Confidence {conf:.2f} is below the policy minimum {MIN_CONFIDENCE} and no node "
                              "is named: escalate to a person instead of draining.")
    return a


def _verdict(bundle: EvidenceBundle, matcher: Matcher) -> Attribution:
    ctx = _Ctx(bundle=bundle, matcher=matcher, ref_year=_ref_year(bundle))
    _collect_job_log(ctx)
    _collect_kernel(ctx)
    _synthetic(ctx)
    _apply_hardware_typical(ctx)
    _apply_field_rules(ctx)
    nodes = _nodes(bundle)
    layout = _rank_layout(ctx)

    # kernel events from before this attempt started belong to an earlier incident. Syslog stamps
    # carry neither year nor zone: with the nodes' UTC offset known (bundle.kernel_log_utc_offset_s)
    # they are exact; without it, only drop those more than a day older.
    attempt_start = ctx.attempt_start
    if attempt_start is not None:
        def _old(e: _Ev) -> bool:
            # exact stamps: allow 10 s of clock skew between nodes (NTP keeps them well under that;
            # syslog has 1 s resolution)
            slack = timedelta(seconds=10) if e.ts_exact else timedelta(hours=26)
            return e.kernel and e.ts is not None and e.ts < attempt_start - slack
        ctx.events = [e for e in ctx.events if not _old(e)]

    node_notes: list[str] = []
    for e in ctx.events:
        if e.m.role == "benign" and e.m.note and e.m.fields.get("effective_xid") != "45":
            where = e.node or "unknown node"
            code = e.m.fields.get("xid") or e.m.fields.get("sxid")
            note = f"{where}: {'Xid' if e.m.id == 'xid.event' else 'SXid'} {code} on {e.m.fields.get('pci', '?')}: {e.m.note}"
            if note not in node_notes:
                node_notes.append(note)
    events = [e for e in ctx.events if e.m.role != "benign"]
    roots = sorted((e for e in events if e.m.role == "root"), key=_order_key)
    cascades_all = sorted((e for e in events if e.m.role == "cascade"), key=_order_key)
    trig = bundle.trigger

    def cite(exclude: _Ev | None) -> list[Event]:
        rest = sorted((e for e in events if e is not exclude), key=lambda e: (e.ts is None, e.ts or datetime.min.replace(tzinfo=UTC), e.seq))
        out, seen = [], set()
        for e in rest:
            k = (e.source, e.line_no)
            if k in seen:
                continue
            seen.add(k)
            out.append(e.event())
            if len(out) >= MAX_CASCADES:
                break
        return out

    # ---- no root at all
    if not roots:
        if trig and trig.kind == TriggerKind.no_progress:
            since = trig.since.isoformat() if trig.since else "?"
            ev = Event(source="monitor", timestamp=trig.at,
                       text=f"no progress since {since} (threshold {trig.threshold_s}s)", signature_id="monitor.no_progress")
            return Attribution(category=Category.hang, domain=Domain.unknown, confidence=0.6, root_event=ev,
                               cascade_events=cite(None), action=Action.restart_in_place, node_notes=node_notes,
                               explanation=f"The job stopped making progress (no progress line since {since}) and no "
                                           "error explains it: a hang of unknown cause. Restart in place.")
        silent = _silent_hang(ctx) if not cascades_all else ""
        if silent:
            ln = (ctx.progress_idx[-1] + 1) if ctx.progress_idx else None
            ev = Event(source=bundle.job_log_source, line_no=ln, text=cap_line(bundle.job_log.split("\n")[ln - 1]) if ln else "",
                       signature_id="engine.silent_hang")
            return Attribution(category=Category.hang, domain=Domain.application, confidence=_conf("engine.silent_hang", 0.5),
                               root_event=ev, cascade_events=cite(None), action=Action.restart_in_place,
                               node_notes=node_notes,
                               explanation=f"Silent hang: {silent}. Restart in place; if it recurs at the same "
                                           "point, it is the application's (collect py-spy stacks).")
        is_strag, why, first_seq = _straggler(ctx)
        if is_strag:
            root_ev = None
            if first_seq is not None and first_seq in ctx.progress_lines:
                ln, txt, ts = ctx.progress_lines[first_seq]
                root_ev = Event(source=bundle.job_log_source, line_no=ln, timestamp=ts, text=txt,
                                signature_id="engine.throughput_drop")
            slow, slow_why = _slow_nodes(bundle)
            if not slow:
                slow, slow_why = _slow_hosts_from_compute(bundle)
            tail = (slow_why + " Requeue without them." if slow else
                    " No node is named yet: find it from per-node evidence and requeue without it.")
            return Attribution(category=Category.straggler, domain=Domain.hardware, confidence=0.7 if slow else 0.6,
                               root_event=root_ev, culprit_nodes=slow,
                               action=Action.requeue_exclude_nodes, node_notes=node_notes,
                               cascade_events=cite(None),
                               explanation=f"Throughput dropped and stayed down: {why}, with no restart. Typical of a "
                                           f"slow node.{tail}")
        if cascades_all:
            c = sorted(cascades_all, key=_order_key)[0]
            return Attribution(category=c.category, domain=Domain.unknown, confidence=0.3, root_event=c.event(),
                               cascade_events=cite(c), action=Action.restart_in_place, node_notes=node_notes,
                               culprit_ranks=[c.rank] if c.rank is not None else [],
                               explanation=f"Only secondary errors were found (first: {c.m.id}); the initiating event "
                                           "is not in the evidence. Restart in place.")
        note = f" Notes: {'; '.join(bundle.notes)}" if bundle.notes else ""
        return Attribution(category=Category.none, domain=Domain.unknown, confidence=0.8 if not bundle.notes else 0.4,
                           action=Action.none, node_notes=node_notes,
                           explanation="No failure signature found: the run looks healthy." + note)

    # ---- pick the root
    root = roots[0]
    recovered = _recovered(ctx, roots)
    if recovered:
        return Attribution(category=Category.none, domain=Domain.unknown, confidence=0.5, action=Action.none,
                           cascade_events=cite(None), node_notes=node_notes,
                           explanation=f"Errors were printed (first: {root.m.id}, line {root.line_no}) but training "
                                       f"kept making progress after the last of them ({recovered} progress lines "
                                       "later) and the job has not failed: no incident.")
    cat, dom, act, tier = root.category, root.domain, root.action, root.tier
    sig = root.m
    teardown = ""
    if cat == Category.timeout and _training_finished(ctx):
        # the time limit killed a job that had already finished training: a teardown hang
        # (exit barrier, un-joined workers); a requeue would only hang again
        cat, dom, act = Category.hang, Domain.application, Action.stop_no_retry
        teardown = (" Training had already reached its last iteration before the time limit: the processes "
                    "hung on exit (teardown), not a wall-time problem.")

    # same-tier hardware conflict: different nodes with different hardware faults → keep all nodes
    culprit_nodes: list[str] = []
    extra = ""
    hw_node_events: list[_Ev] = []
    if cat == Category.node_failure:
        for e in roots:
            if e.category == Category.node_failure and e.m.id == "slurm.node_failure":
                h = _norm_host(e.m.fields.get("host"), nodes)
                if h and h not in culprit_nodes:
                    culprit_nodes.append(h)
        for n, st in bundle.node_states.items():
            s = st.upper()
            if ("DOWN" in s or "FAIL" in s) and (not nodes or n in nodes) and n not in culprit_nodes:
                culprit_nodes.append(n)
        dom, act = Domain.hardware, Action.requeue_exclude_nodes
    elif dom == Domain.hardware:
        hw_node_events = [e for e in roots if e.domain == Domain.hardware and e.tier <= tier
                          and (e.category in _HW_CATEGORIES | {Category.straggler} or e.m.id == sig.id)]
        for e in hw_node_events:
            node = _ev_node(e, layout, nodes)
            if node and node not in culprit_nodes:
                culprit_nodes.append(node)
    elif (dom == Domain.system and act in (Action.requeue_exclude_nodes, Action.drain_and_requeue)) or (
            cat in (Category.nvlink, Category.gpu_hardware, Category.gpu_memory_ecc)):
        # node-local system faults (memlock limit, /dev/shm, fabric manager, ACS/IOMMU, a wedged
        # mount) and NVLink/GPU faults of unproven severity: the node is where it happened
        for e in roots:
            if e.m.id == sig.id or e is root:
                node = _ev_node(e, layout, nodes)
                if node and node not in culprit_nodes:
                    culprit_nodes.append(node)
    elif sig.id == "nccl.ib_completion_error":
        ip = sig.fields.get("peer_ip")
        if ip and ip in bundle.ip_to_node:
            culprit_nodes = [bundle.ip_to_node[ip]]
            act = Action.requeue_exclude_nodes
            extra = f" The peer {ip} maps to {culprit_nodes[0]} in the cluster config; requeue without it."

    # no_progress trigger with only a watchdog hang: still a hang
    if trig and trig.kind == TriggerKind.no_progress and cat == Category.hang:
        act = Action.restart_in_place

    # ---- culprit ranks (root event only; the same signature restated may carry the rank)
    culprit_ranks: list[int] = []
    if dom != Domain.system and cat not in (Category.node_failure, Category.timeout, Category.preempted,
                                            Category.app_bug, Category.io_error):
        if root.rank is not None:
            culprit_ranks = [root.rank]
        else:
            same = {e.rank for e in events if e.m.id == sig.id and e.rank is not None}
            if len(same) == 1:
                culprit_ranks = sorted(same)
    if cat == Category.hang:
        lc: dict[int, int] = {}
        for e in events:
            if e.m.id == "nccl.watchdog_progress" and e.rank is not None:
                try:
                    lc[e.rank] = int(e.m.fields.get("last_completed", ""))
                except ValueError:
                    pass
        if len(set(lc.values())) > 1:
            low = min(lc.values())
            culprit_ranks = sorted(r for r, v in lc.items() if v == low)
            extra += (f" Rank(s) {culprit_ranks} completed fewer collectives (last completed work {low}) than the "
                      "others: they are the ones absent from the collective.")
        else:
            culprit_ranks = []

    # ---- guards
    if dom != Domain.hardware and act == Action.drain_and_requeue and not (
            sig.id in _SYSTEM_DRAIN and culprit_nodes):
        act = Action.restart_in_place
    if act == Action.requeue_exclude_nodes and not culprit_nodes and cat != Category.straggler and dom != Domain.hardware:
        act = Action.restart_in_place
    if cat == Category.straggler:
        act = Action.requeue_exclude_nodes
    escalation = ""
    if sig.fields.get("resolution") == "contact_support":
        escalation = " NVIDIA's resolution is 'contact support': drain the node and escalate to a person."

    # conflicting deciders at the same tier: different categories and different actions
    same_tier = [e for e in roots if e.tier == tier and e.category != cat and e.action != act
                 and e.domain not in (Domain.unknown,) and dom != Domain.unknown]
    confidence = _CONFIDENCE.get(tier, 0.4)
    if same_tier:
        confidence = max(0.2, confidence - 0.3)
        extra += f" Conflicting evidence at the same level: {same_tier[0].m.id} ({same_tier[0].category.value})."
    if dom == Domain.hardware and not culprit_nodes and cat in _HW_CATEGORIES:
        confidence = min(confidence, 0.6)
        extra += " The node is not named in the evidence: identify it from per-node logs before acting."
    if dom == Domain.unknown:
        confidence = min(confidence, 0.5)

    # ---- explanation
    where = ""
    if root.node:
        where += f" on {root.node}"
    if root.rank is not None:
        where += f" (rank {root.rank})"
    detail = ""
    if sig.id == "xid.event":
        detail = (f" Xid {sig.fields.get('xid')} ({sig.fields.get('xid_name', '')}); NVIDIA resolution: "
                  f"{sig.fields.get('resolution', '').replace('_', ' ')}.")
        if sig.note:
            detail += f" {sig.note}."
    elif sig.id.startswith("py.") or sig.id.startswith("cuda.") or sig.id.startswith("storage."):
        exc = sig.fields.get("exc_type")
        if exc:
            detail = f" Exception {exc}."
        detail += _explain_frame(bundle, root)
    if root.upgraded:
        detail += f" {root.upgraded}."
    n_casc = len(events) - 1
    explanation = (f"{cat.value} ({dom.value}): {sig.id}{where} — {root.text.strip()[:200]}.{detail}"
                   f"{teardown}{extra}{escalation}"
                   + (f" {n_casc} other event(s) cited as cascade." if n_casc > 0 else "")
                   + f" Recommended: {act.value}.")

    gpus = _gpus(ctx, hw_node_events or [root]) if dom == Domain.hardware else []
    return Attribution(category=cat, domain=dom, culprit_nodes=culprit_nodes, culprit_ranks=culprit_ranks,
                       gpus=gpus, confidence=round(confidence, 2), root_event=root.event(),
                       cascade_events=cite(root), action=act, explanation=explanation.strip(),
                       node_notes=node_notes)
