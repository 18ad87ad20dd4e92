"""Stage: collect — turn the job log, kernel logs and the Slurm record into events (``_Ev``)
through the signature catalog; the per-incident context (``_Ctx``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from revive.attribution.timestamps import _parse_ts, _roll_year
from revive.logline import LINE_CAP as MAX_TEXT
from revive.logline import cap_line, log_int, match_window
from revive.models import (
    Action,
    Category,
    Domain,
    Event,
    EvidenceBundle,
    JobState,
    TriggerKind,
)
from revive.signatures.matcher import Matcher, SignatureMatch, split_prefix

MAX_CASCADES = 25
MAX_PROGRESS = 5000
MAX_SIGNATURE_LINES = 20000
"""Signature lines matched per log (the first three quarters and the last quarter of them): a log
that repeats one error a million times says nothing new after the first thousands, and matching
each line costs ~0.1 ms (a 64 MiB log of errors would take minutes and gigabytes)."""

_ATTEMPT = "=== attempt restart="
MAX_PREV_ATTEMPT_LINES = 2000
"""How much of the previous attempt's tail rule 3ad compares (its last lines hold its failure)."""
_RESUMED = "resumed from checkpoint"
_STEP_TEARDOWN = ("srun: Job step aborted", "srun: forcing job termination", " CANCELLED AT ")
"""Slurm tearing the step (or job) down: srun 22.05 ``srun: Job step aborted: Waiting up to N seconds
for job step to finish.``, ``srun: forcing job termination``, slurmstepd ``*** STEP|JOB <id> ON <node>
CANCELLED AT <time> ***``. Output after one is the dying step's buffered lines (srun holds a task's
partial line, e.g. a tqdm bar, until the task exits), never progress of a run that survived."""
_EXTRA_LITERALS = [_ATTEMPT, _RESUMED, "GPU at PCI:", "Root Cause (first observed failure)", *_STEP_TEARDOWN]
_ZERO_BAR = re.compile(r"(?:^|[\s|:])0%\||\| *0/(?:\d+|\?) \[")
"""A tqdm bar at its first render (``  0%|          | 0/188 [00:00<?, ?it/s]``, tqdm 4.x
``format_meter``): the loop was entered but no step has finished - not a first progress line."""
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_TB_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")
_TB_HOST = re.compile(r"^\s*host\s*:\s*(?P<host>[\w.-]+)")
_GPU_UUID = re.compile(r"GPU at PCI:(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[.0-9]*: (?P<uuid>GPU-[0-9A-Fa-f-]+)")


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
    teardown_idx: list[int] = field(default_factory=list)
    """Line indices of the attempt's Slurm step-teardown lines (``_STEP_TEARDOWN``)."""
    tail_start: int = 0
    first_progress_seq: int | None = None
    """``seq`` of the attempt's first progress line that shows a finished step (a tqdm bar's first
    ``0/N`` render does not)."""
    rank_host: dict[int, str] = field(default_factory=dict)
    uuid_by_pci: dict[str, str] = field(default_factory=dict)
    ref_year: int = 1970
    attempt_start: datetime | None = None
    notes: list[str] = field(default_factory=list)
    seq: int = 0
    lines: list[str] = field(default_factory=list)
    """The job log split once into lines (``job_log.split("\n")``, set by ``_collect_job_log``):
    every rule reads these, index = line number - 1."""
    prev_attempt: list[str] = field(default_factory=list)
    """Raw lines of the attempt before the window (rule 3ad: an error that repeats is not transient)."""



_PLAIN_CANCEL = re.compile(r"\*\*\* (?:STEP|JOB) [\w.]+ ON [\w.-]+ CANCELLED AT \S+ \*\*\*")
"""slurmstepd's line for a job or step cancelled by a person or a wrapper (``scancel``), with no ``DUE TO``
reason after the time: ``*** JOB <id> ON <node> CANCELLED AT <time> ***`` (src/slurmd/slurmstepd/mgr.c,
Slurm 22.05-24.x; a time limit, a preemption, a node failure and a task failure add ``DUE TO ...``)."""


def ended_state(ctx: _Ctx) -> str:
    """The job's end state, upper case: the Slurm record's (``bundle.job.state``); with no record, ``CANCELLED``
    when one of the attempt's last 20 lines is slurmstepd's plain cancellation line (``_PLAIN_CANCEL``), else ``""``.
    A log captured without ``sacct`` (a pasted job output) still says how the job ended."""
    b = ctx.bundle
    if b.job:
        st = b.job.state
        return str(getattr(st, "value", st) or "").upper()
    tail = ctx.lines[max(ctx.tail_start, len(ctx.lines) - 20):]
    return "CANCELLED" if any(_PLAIN_CANCEL.search(x[:MAX_TEXT]) for x in tail) else ""


# ----------------------------------------------------------------------------- helpers
def _nodes(bundle: EvidenceBundle) -> list[str]:
    return list(bundle.job.nodes) if bundle.job and bundle.job.nodes else []


_IFACE_HOST_SUFFIX = re.compile(r"-(?:ib|eth|hsn|opa|roce|ipoib|bond|mlx)\d*$")
"""A host name with its network interface appended (``gpu-node-001-ib0``: the name sites give a
node's InfiniBand/Slingshot address, which torch.elastic and NCCL then print)."""


def _norm_host(host: str | None, nodes: list[str]) -> str | None:
    """The job node that ``host`` (as a log line printed it) names: the node itself, its FQDN
    (``gpu-node-001.cluster``), or its interface name (``gpu-node-001-ib0``); with no node list,
    the interface suffix is dropped; ``None`` for no host."""
    if not host:
        return None
    if host in nodes:
        return host
    bare = _IFACE_HOST_SUFFIX.sub("", host)
    if not nodes:
        return bare or host
    if bare in nodes:
        return bare
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
    ctx.lines = lines
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
        prev = [a for a in attempts if a < start]
        if start > 0:
            ctx.prev_attempt = lines[(prev[-1] if prev else 0):start][-MAX_PREV_ATTEMPT_LINES:]
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
    ctx.teardown_idx = sorted(i for i in keep if any(t in lines[i] for t in _STEP_TEARDOWN))
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
    sig_hits = _cap_hits(ctx, {i for i in sig_hits if start <= i < end}, b.job_log_source)
    todo = sorted(sig_hits | keep)
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
                cont = split_prefix(lines[j][:MAX_TEXT])[0]  # under the same launcher prefix
                r = _TB_RANK.match(cont)
                h = _TB_HOST.match(cont)
                if r:
                    tb_rank = log_int(r.group("rank"))
                if h:
                    tb_host = h.group("host")
            tb_node = _norm_host(tb_host, nodes)
            if tb_rank is not None and tb_node and (not nodes or tb_node in nodes):
                ctx.rank_host.setdefault(tb_rank, tb_node)  # torchrun's summary ties the rank to its host
        is_prog, it, secs = matcher.progress_of(body)
        if is_prog:
            ctx.progress_idx.append(i)
            if ctx.first_progress_seq is None and not _ZERO_BAR.search(body):
                ctx.first_progress_seq = ctx.seq
            if secs is not None:
                key = str(meta.rank if meta.rank is not None else
                          (f"l{meta.local_rank}" if meta.local_rank is not None else "-"))
                ctx.progress.append((ctx.seq, it, secs, key))
                ctx.progress_lines[ctx.seq] = (i + 1, cap_line(raw), ts or last_ts)
        for sm in (matcher.match(line) if i in sig_hits else ()):
            rank = meta.rank
            if rank is None and sm.id == "host.killed" and sm.fields.get("task", "").isdigit():
                rank = log_int(sm.fields["task"])
            host = meta.host or sm.fields.get("host")
            if rank is None and sm.fields.get("rank", "").isdigit():
                rank = log_int(sm.fields["rank"])
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


def _cap_hits(ctx: _Ctx, hits: set[int], source: str) -> set[int]:
    """``hits`` (line indices), or only the first and last of them when there are more than
    ``MAX_SIGNATURE_LINES`` (a note says which were skipped)."""
    if len(hits) <= MAX_SIGNATURE_LINES:
        return hits
    order = sorted(hits)
    head = MAX_SIGNATURE_LINES * 3 // 4
    tail = MAX_SIGNATURE_LINES - head
    skipped = order[head:-tail]
    ctx.notes.append(f"{source}: {len(order)} lines with a signature literal; lines {skipped[0] + 1}-"
                     f"{skipped[-1] + 1} ({len(skipped)} of them) were not matched, only the first {head} "
                     f"and the last {tail}")
    return set(order[:head]) | set(order[-tail:])


def _task_ranks(spec: str) -> list[int]:
    """srun's ``tasks 0-7,16`` → [0..7, 16] (global ranks of the tasks on that host)."""
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        lo, hi = log_int(a), log_int(b or a)
        if lo is not None and hi is not None:
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
        kept: set[int] | None = None
        if len(lines) > MAX_SIGNATURE_LINES:
            gated = {n for n, raw in enumerate(lines, 1) if raw and ctx.matcher.gate(match_window(raw))}
            kept = _cap_hits(ctx, gated, src)
        for n, raw in enumerate(lines, 1):
            if not raw:
                continue
            line = match_window(raw)
            if "GPU at PCI:" in line:
                g = _GPU_UUID.search(line)
                if g:
                    ctx.uuid_by_pci[g.group("pci").lower()] = g.group("uuid")
            if kept is not None and n not in kept:
                continue
            if not ctx.matcher.gate(line):
                continue
            body, meta = split_prefix(line)
            ts = _parse_ts(meta.ts, meta.ts_kind, ctx.ref_year)
            off = ctx.bundle.kernel_log_utc_offset_s
            syslog_known_zone = meta.ts_kind == "syslog" and ts is not None and off is not None
            if meta.ts_kind == "syslog" and ts is not None:
                ts = _roll_year(ts, ctx)
            if syslog_known_zone and ts is not None and off is not None:
                try:
                    ts = ts - timedelta(seconds=off)  # the stamp is the node's local time
                except OverflowError:  # Jan 1 of year 1, or an offset of centuries: keep the stamp
                    pass
            host = meta.host
            if host is None and meta.extra.get("pdsh_host") in nodes:
                host = meta.extra["pdsh_host"]  # "gpu-node-3: kern: warning: ..." (pdsh/clush dmesg)
            node = _norm_host(host, nodes) or key or default_node
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


def exit_code_zero(exit_code: str | None) -> bool:
    """Slurm's ``exit_code`` (``"<code>:<signal>"``, sacct ExitCode) is all zeros; a missing one counts as 0."""
    return all(p.strip() in ("", "0") for p in str(exit_code or "0").split(":"))


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
    # bare SIGKILL / 137 in the exit code: a weak crash hint (never OOM by itself). Not for a CANCELLED
    # job: cancelling sends SIGTERM, then SIGKILL after KillWait (scancel(1), slurm.conf(5) KillWait,
    # Slurm 22.05), so the signal is the cancellation's own
    cancelled = b.job is not None and b.job.state == JobState.CANCELLED
    if b.job and b.job.exit_code and not cancelled:
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


