"""Compile the signature catalog and match log lines against it.

Fast path: google-re2 (``re2``). One combined alternation of every entry's literal prefilter
gates each line (or, for bulk scans, a whole multi-megabyte buffer at once, so benign lines never
reach Python); only lines that contain a prefilter literal run the entries' own regexes. Without
``re2`` the same happens with the standard library ``re`` (slower, same results): catalog regexes
are kept in the subset both engines accept.

Public API:
    default_matcher() -> Matcher (cached)
    Matcher.match(line) -> list[SignatureMatch]      (benign noise → [])
    scan_text(text) -> list[tuple[int, SignatureMatch]]
    Matcher.scan_file(path) / Matcher.scan_bytes(data) for bulk scans
    split_prefix(line) -> (body, LinePrefix)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from revive.logline import MATCH_CAP, log_int, match_window
from revive.models import Action, Category, Domain
from revive.signatures import xid as xidmod

NOT_PROGRESS_PREFIXES = ("# nThread ",)
"""Lines that read like a counter but never report training progress: nccl-tests' and rccl-tests'
parameter banner (src/common.cu, nccl-tests 2.x: ``# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728
step: 2(factor) warmup iters: 5 iters: 20 ...``)."""

_CHAR_CLASS = re.compile(r"\[(?:\\.|[^\]\\])*\]")


def _anchored(regex: str) -> bool:
    """True when the regex has a ``^`` anchor (outside character classes and escapes): such an entry
    needs the prefix-stripped body, so the raw-line benign fast path cannot decide it."""
    return "^" in _CHAR_CLASS.sub("", regex.replace("\\\\", "").replace("\\^", ""))


try:  # pragma: no cover - exercised implicitly
    import re2 as _re2

    HAVE_RE2 = True
except Exception:  # pragma: no cover
    _re2 = None
    HAVE_RE2 = False

CATALOG_DIR = Path(__file__).with_name("catalog")


class SignatureMatch(BaseModel):
    id: str
    category: Category
    domain: Domain
    role: str
    """``root`` | ``cascade`` | ``benign``."""
    tier: int = 5
    action: Action = Action.restart_in_place
    family: str = ""
    fields: dict[str, str] = Field(default_factory=dict)
    source: str = ""
    note: str = ""
    generic: bool = False


@dataclass
class Signature:
    id: str
    family: str
    regex: str
    prefilter: list[str]
    category: Category
    domain: Domain
    role: str
    tier: int
    action: Action
    fields: list[str]
    source: str
    generic: bool = False
    resolver: str | None = None
    shadows: list[str] = field(default_factory=list)
    """Ids this signature supersedes on the same line: a message that quotes other failures as a list
    of possible causes (Ray's "potential root causes ... SIGSEGV") is not those failures."""
    compiled: Any = None


@dataclass
class ProgressPattern:
    id: str
    regex: str
    prefilter: list[str]
    progress_only: bool = False
    compiled: Any = None


@dataclass
class LinePrefix:
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    ts: str | None = None
    ts_kind: str | None = None
    kernel: bool = False
    extra: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------- prefixes
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\r")
_PREFIXES: list[tuple[str, re.Pattern[str]]] = [
    ("syslog_pri", re.compile(r"^<\d{1,3}>")),
    # Kubernetes CRI container-log line ("2024-05-01T12:00:00.123456789Z stderr F msg"; F = full line,
    # P = partial): kubelet pkg/kubelet/kuberuntime/logs/logs.go, CRI log format (k8s 1.14+)
    ("cri", re.compile(
        r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (?:stdout|stderr) [FP] ")),
    ("syslog", re.compile(
        r"^(?P<ts>[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?) (?P<host>[\w.-]+) (?P<tag>[\w./-]+)(?:\[\d+\])?: ")),
    ("iso", re.compile(
        r"^(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
        r"(?: (?P<host>[\w.-]+) (?P<tag>kernel|slurmd|slurmstepd)(?:\[\d+\])?:)?:? ")),
    ("bracket_ts", re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\] ?")),
    ("dmesg", re.compile(r"^\[ *\d+\.\d+\] ")),
    ("kernel", re.compile(r"^kernel: ")),
    ("rank_host", re.compile(r"^\[rank (?P<rank>\d+) host (?P<host>[\w.-]+)\] ?")),
    ("rank", re.compile(r"^\[rank:? ?(?P<rank>\d+)\]:? ?")),
    ("default", re.compile(r"^\[default(?P<local_rank>\d+)\]: ?")),
    ("stream", re.compile(r"^(?P<host>[\w.-]+) \[(?:stderr|stdout)\] ")),
    ("nccl", re.compile(r"^(?P<host>[\w.-]+):\d+:\d+ \[(?P<gpu>\d+)\] ")),
    ("srun_l", re.compile(r"^(?P<rank>\d{1,6}): ")),
    # Open MPI ``mpirun --tag-output``: "[1,3]<stdout>:msg" (job, rank); with ``--timestamp-output``
    # a ctime(3) stamp comes first: "Mon May 24 06:43:04 2021[1,3]<stdout>:msg" (orte/mca/iof/base/
    # iof_base_output.c, Open MPI 3.x-4.x; Horovod's horovodrun passes both)
    ("mpirun", re.compile(r"^(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"
                          r"\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr)>: ?")),
    # MPICH Hydra / Intel MPI ``mpiexec -prepend-rank`` (``-l``): "[3] msg" (Hydra ui/utils: "[%d] ")
    ("prepend_rank", re.compile(r"^\[(?P<rank>\d{1,6})\] (?=\S)")),
    # Docker Compose v2 service prefix: "trainer-1  | msg" (docker/compose cmd/formatter/logs.go:
    # the container name padded to the widest, then "| "); the container name is not a node name
    ("compose", re.compile(r"^[A-Za-z][\w.-]*-\d+ +\| ")),
    # indentation (a torchrun error summary's traceback, a wrapped continuation line): anchored
    # signatures ("ValueError: …" at the start of a line) read the text after it
    ("indent", re.compile(r"^[ \t]+(?=\S)")),
    # Ray's worker-output prefix ("(RayTrainWorker pid=1234, ip=10.0.0.1) ", "(pid=1234) ", verl's
    # "(WorkerDict pid=..., ip=...) "; ray/_private/worker.py print_worker_logs, Ray 2.x)
    ("ray", re.compile(r"^\((?:[\w.:-]+ )?pid=\d+(?:, ip=(?P<ray_ip>[0-9A-Fa-f.:]+))?\) ")),
    # the run before the first digit holds no digit: one way to match, linear time (``[\w.-]*\d``
    # backtracked quadratically: 0.3 s on an 8 KB line of "a2026-01-01…"); a Huawei CANN error
    # code ("EI0002: ", "EE1002: ", "EZ9999: ": E, a module letter, four digits; CANN 7.x-8.x error
    # code reference, as torch_npu prints it) is the message's start, not a host
    ("pdsh", re.compile(r"^(?!E[A-Z]\d{4}: )(?P<phost>[A-Za-z](?:[^\W\d]|[.-])*\d[\w.-]*): (?=\S)")),
]
_GLOG = re.compile(r"^\[?[IWEF](?P<md>\d{3,4}) (?P<t>\d\d:\d\d:\d\d(?:\.\d+)?)")
_BODY_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]")


def _utf8(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot encode) replaced by ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


def strip_ansi(line: str) -> str:
    if "\x1b" in line or "\r" in line:
        return _ANSI.sub("", line)
    return line


def split_prefix(line: str) -> tuple[str, LinePrefix]:
    """Strip ANSI escapes and known line prefixes; return the body and what the prefixes said."""
    meta = LinePrefix()
    body = strip_ansi(line).rstrip("\n")
    for _ in range(8):
        for name, pat in _PREFIXES:
            m = pat.match(body)
            if not m:
                continue
            gd = m.groupdict()
            if gd.get("ts") and meta.ts is None:
                meta.ts, meta.ts_kind = gd["ts"], name
            if gd.get("host"):
                if name == "syslog" or gd.get("tag"):
                    meta.kernel = meta.kernel or gd.get("tag") == "kernel"
                meta.host = meta.host or gd["host"]
            if gd.get("rank") is not None and meta.rank is None:
                meta.rank = log_int(gd["rank"])
            if gd.get("local_rank") is not None and meta.local_rank is None:
                meta.local_rank = log_int(gd["local_rank"])
            if gd.get("phost"):
                # pdsh/accelerate "host: " prefix: only a candidate (a driver tag looks the same);
                # the engine keeps it when it names one of the job's nodes
                meta.extra.setdefault("pdsh_host", gd["phost"])
            if gd.get("ray_ip"):
                meta.extra.setdefault("ray_ip", gd["ray_ip"])
            if gd.get("gpu") is not None:
                meta.extra["gpu_index"] = gd["gpu"]
            if name == "kernel":
                meta.kernel = True
            body = body[m.end():]
            break
        else:
            break
    if meta.ts is None:
        g = _GLOG.match(body)
        if g:
            meta.ts, meta.ts_kind = f"{g.group('md')} {g.group('t')}", "glog"
    if meta.rank is None and "Rank " in body:
        r = _BODY_RANK.search(body)
        if r:
            meta.rank = log_int(r.group("rank"))
    return body, meta


# ----------------------------------------------------------------------------- catalog
def _compile(pattern: str, use_re2: bool) -> Any:
    if use_re2 and HAVE_RE2:
        try:
            return _re2.compile(pattern)
        except Exception:  # pragma: no cover - catalog tests keep patterns RE2-clean
            pass
    return re.compile(pattern)


MAX_UNTRUSTED_PATTERN = 1000
"""Longest pattern (characters) ``compile_untrusted`` accepts."""
MAX_UNTRUSTED_PROGRAM = 2000
"""Largest compiled RE2 program (instructions) ``compile_untrusted`` accepts."""


class UntrustedPatternError(ValueError):
    """A user-supplied pattern was refused (too long, not RE2, too large once compiled, RE2 missing)."""


def compile_untrusted(pattern: str) -> Any:
    """Compile a pattern that comes from outside the catalog (a user, an API caller).

    RE2 only — linear-time matching, no backreferences or lookaround, so no catastrophic
    backtracking — never the stdlib ``re`` fallback; the pattern is capped at
    ``MAX_UNTRUSTED_PATTERN`` characters and its compiled program at ``MAX_UNTRUSTED_PROGRAM``
    instructions. Raises ``UntrustedPatternError`` with a message fit to show the caller.
    """
    if not isinstance(pattern, str):
        raise UntrustedPatternError(f"pattern must be a string, not {type(pattern).__name__}")
    if not pattern:
        raise UntrustedPatternError("pattern is empty")
    if len(pattern) > MAX_UNTRUSTED_PATTERN:
        raise UntrustedPatternError(f"pattern is {len(pattern)} characters; the limit is {MAX_UNTRUSTED_PATTERN}")
    if "\x00" in pattern:
        raise UntrustedPatternError("pattern contains a NUL character")
    if not HAVE_RE2 or _re2 is None:
        raise UntrustedPatternError("untrusted patterns need google-re2 (pip install google-re2); refusing the "
                                    "backtracking stdlib engine")
    try:
        opts = _re2.Options()
        opts.max_mem = 8 << 20
        compiled = _re2.compile(pattern, options=opts)
    except Exception as exc:  # re2.error and friends
        why = exc.args[0] if exc.args else exc
        if isinstance(why, bytes):
            why = why.decode("utf-8", "replace")
        raise UntrustedPatternError(f"not a valid RE2 pattern (no backreferences or lookaround): {why}") from exc
    size = getattr(compiled, "programsize", None)
    if isinstance(size, int) and size > MAX_UNTRUSTED_PROGRAM:
        raise UntrustedPatternError(f"pattern compiles to {size} RE2 instructions; the limit is "
                                    f"{MAX_UNTRUSTED_PROGRAM} (simplify the repetition counts)")
    return compiled


def load_catalog(path: Path | None = None) -> dict[str, Any]:
    docs: dict[str, Any] = {"signatures": [], "progress": [], "hardware_typical": []}
    paths = [path] if path else sorted(CATALOG_DIR.glob("*.yaml"))
    for p in paths:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        for key in ("signatures", "progress", "hardware_typical"):
            docs[key].extend(data.get(key) or [])
        for key in ("version", "xid_doc", "confidence_calibration", "program_error"):
            if key in data:
                docs[key] = data[key]
    return docs



_ALTERNATE = re.compile(r"^(?P<base>\w+?)_[b-z]$")


def fold_alternates(groups: dict[str, str | None]) -> dict[str, str]:
    """Named groups that matched, with each alternate group folded into its base name.

    RE2 refuses a group name used twice, so an entry whose alternatives capture the same field
    names the later ones ``<field>_b``, ``<field>_c`` … (``mpi.abort``: ``rank`` for Open MPI,
    ``rank_b`` for MPICH). The alternate keys stay; the base key (``rank``) is set from the first
    alternate that matched when the base group did not, so readers need only the base name.
    ``{"rank": None, "rank_b": "3"}`` → ``{"rank_b": "3", "rank": "3"}``."""
    out = {k: v for k, v in (groups or {}).items() if v is not None}
    for k in sorted(out):
        a = _ALTERNATE.match(k)
        if a and a.group("base") not in out:
            out[a.group("base")] = out[k]
    return out


class Matcher:
    def __init__(self, catalog: dict[str, Any] | None = None, use_re2: bool = True) -> None:
        cat = catalog if catalog is not None else load_catalog()
        self.version: str = str(cat.get("version", ""))
        self.use_re2 = use_re2 and HAVE_RE2
        self.signatures: list[Signature] = []
        seen: set[str] = set()
        for e in cat.get("signatures", []):
            if e["id"] in seen:
                raise ValueError(f"duplicate signature id {e['id']}")
            seen.add(e["id"])
            sig = Signature(
                id=e["id"], family=e.get("family", e["id"].split(".")[0]), regex=e["regex"],
                prefilter=list(e.get("prefilter") or []), category=Category(e["category"]),
                domain=Domain(e["domain"]), role=e["role"], tier=int(e.get("tier", 5)),
                action=Action(e.get("action", "restart_in_place")), fields=list(e.get("fields") or []),
                source=e.get("source", ""), generic=bool(e.get("generic", False)),
                resolver=e.get("resolver"), shadows=list(e.get("shadows") or []),
            )
            if not sig.prefilter:
                raise ValueError(f"signature {sig.id} has no prefilter")
            sig.compiled = _compile(sig.regex, self.use_re2)
            self.signatures.append(sig)
        self.by_id = {s.id: s for s in self.signatures}
        self._shadows: dict[str, tuple[str, ...]] = {s.id: tuple(s.shadows) for s in self.signatures if s.shadows}
        for sid, ids in self._shadows.items():
            if unknown := [x for x in ids if x not in self.by_id]:
                raise ValueError(f"signature {sid} shadows unknown signature id(s) {unknown}")
        self._benign = [s for s in self.signatures if s.role == "benign" and not _anchored(s.regex)]
        self.progress: list[ProgressPattern] = []
        for e in cat.get("progress", []):
            pp = ProgressPattern(e["id"], e["regex"], list(e.get("prefilter") or []), bool(e.get("progress_only")))
            pp.compiled = _compile(pp.regex, self.use_re2)
            self.progress.append(pp)
        self.hardware_typical = [h["id"] for h in cat.get("hardware_typical", [])]
        pe = cat.get("program_error") or {}
        self.program_error_types: tuple[str, ...] = tuple(
            str(x).lower() for x in (pe.get("exclude_types") or []) if isinstance(x, str) and x) if isinstance(pe, dict) else ()
        self.program_error_words: tuple[str, ...] = tuple(
            str(x).lower() for x in (pe.get("exclude_words") or []) if isinstance(x, str) and x) if isinstance(pe, dict) else ()
        self.program_error_phrases: tuple[str, ...] = tuple(
            str(x).lower() for x in (pe.get("program_phrases") or []) if isinstance(x, str) and x) if isinstance(pe, dict) else ()
        calib = cat.get("confidence_calibration") or {}
        self.calibration: list[dict[str, Any]] = list(calib.get("table") or []) if isinstance(calib, dict) else []
        lits = sorted({lit for s in self.signatures for lit in s.prefilter}, key=len, reverse=True)
        self.literals = lits
        alt = "|".join(re.escape(x) for x in lits)
        self._gate = _compile(alt, self.use_re2)
        balt = b"|".join(re.escape(x.encode()) for x in lits)
        if self.use_re2:
            self._gate_bytes = _re2.compile(balt)
        else:
            self._gate_bytes = re.compile(balt)

    # ------------------------------------------------------------------ single line
    def gate(self, line: str) -> bool:
        try:
            return self._gate.search(line) is not None
        except UnicodeEncodeError:  # a lone surrogate: see match
            return self._gate.search(_utf8(line)) is not None

    def match(self, line: str, include_benign: bool = False) -> list[SignatureMatch]:
        """Signatures on one line. Benign noise → ``[]`` (unless ``include_benign``)."""
        if not line:
            return []
        try:
            return self._match(line, include_benign)
        except UnicodeEncodeError:  # a lone surrogate (a JSON "\udcff" escape): RE2 reads UTF-8 only
            return self._match(_utf8(line), include_benign)

    def _match(self, line: str, include_benign: bool) -> list[SignatureMatch]:
        if len(line) > MATCH_CAP:  # search the head and the tail independently
            return self._match_parts(match_window(line).split("\n"), include_benign)
        return self._match_one(line, include_benign)

    def _match_parts(self, parts: list[str], include_benign: bool) -> list[SignatureMatch]:
        out: list[SignatureMatch] = []
        for p in parts:
            for m in self._match_one(p, include_benign):
                if all(m.id != o.id for o in out):
                    out.append(m)
        return out

    def _match_one(self, line: str, include_benign: bool) -> list[SignatureMatch]:
        if "\n" in line:
            line = line.replace("\n", " ")
        if self._gate.search(line) is None:
            return []
        if not include_benign:
            # benign noise is decided on the raw line, before any prefix parsing (cheap path)
            for sig in self._benign:
                if any(lit in line for lit in sig.prefilter) and sig.compiled.search(line):
                    return []
        body, meta = split_prefix(line)
        found: list[SignatureMatch] = []
        benign: list[SignatureMatch] = []
        for sig in self.signatures:
            if not any(lit in line for lit in sig.prefilter):
                continue
            m = sig.compiled.search(body)
            if m is None:
                continue
            fields = fold_alternates(m.groupdict())
            sm = self._make(sig, fields, meta)
            if sm is None:
                continue
            (benign if sm.role == "benign" else found).append(sm)
        if benign and any(b.id.startswith("benign.") for b in benign):
            return benign if include_benign else []
        if any(not f.generic for f in found):
            found = [f for f in found if not f.generic]
        shadowed = {x for f in found for x in self._shadows.get(f.id, ())}
        if shadowed:
            found = [f for f in found if f.id not in shadowed]
        if include_benign:
            found.extend(benign)
        return found

    def _make(self, sig: Signature, fields: dict[str, str], meta: LinePrefix) -> SignatureMatch | None:
        if meta.host and "host" not in fields:
            fields["host"] = meta.host
        if meta.rank is not None and "rank" not in fields:
            fields["rank"] = str(meta.rank)
        if meta.local_rank is not None and "local_rank" not in fields:
            fields["local_rank"] = str(meta.local_rank)
        if meta.kernel:
            fields.setdefault("kernel", "1")
        category, domain, role, tier, action, note = sig.category, sig.domain, sig.role, sig.tier, sig.action, ""
        code = log_int(fields.get(sig.resolver or "", ""))  # a 5000-digit "code" is junk: the entry's defaults
        if sig.resolver == "xid" and code is not None:
            v = xidmod.resolve_xid(code, fields.get("detail", ""))
            category, domain, role, tier, action, note = v.category, v.domain, v.role, v.tier, v.action, v.note
            fields["resolution"] = v.resolution
            fields["effective_xid"] = str(v.effective_code)
            fields["xid_name"] = v.name
        elif sig.resolver == "sxid" and code is not None:
            v = xidmod.resolve_sxid(code, fields.get("severity"), fields.get("detail", ""))
            category, domain, role, tier, action, note = v.category, v.domain, v.role, v.tier, v.action, v.note
            fields["resolution"] = v.resolution
        return SignatureMatch(id=sig.id, category=category, domain=domain, role=role, tier=tier,
                              action=action, family=sig.family, fields=fields, source=sig.source,
                              note=note, generic=sig.generic)

    # ------------------------------------------------------------------ progress
    def progress_of(self, body: str) -> tuple[bool, int | None, float | None]:
        """(is_progress_line, iteration, iteration_time_seconds) for one line body. A pattern gives the
        time as ``ms``, ``seconds`` or ``per_second`` (a throughput: samples/s, it/s → 1/rate seconds per unit)."""
        try:
            return self._progress_of(body)
        except UnicodeEncodeError:  # a lone surrogate: see match
            return self._progress_of(_utf8(body))

    def _progress_of(self, body: str) -> tuple[bool, int | None, float | None]:
        if body.lstrip().startswith(NOT_PROGRESS_PREFIXES):
            return False, None, None
        is_prog = False
        for pp in self.progress:
            if not any(lit in body for lit in pp.prefilter):
                continue
            m = pp.compiled.search(body)
            if m is None:
                continue
            is_prog = True
            if pp.progress_only:
                continue
            gd = m.groupdict()
            it = log_int(gd.get("iter"))
            try:
                if gd.get("ms"):
                    return True, it, float(gd["ms"]) / 1000.0
                if gd.get("seconds"):
                    return True, it, float(gd["seconds"])
                if gd.get("per_second") and float(gd["per_second"]) > 0:
                    return True, it, 1.0 / float(gd["per_second"])  # a rate: seconds per unit of work
            except ValueError:
                continue
        return is_prog, None, None

    # ------------------------------------------------------------------ bulk
    def scan_bytes(self, data: bytes, first_line_no: int = 1) -> Iterator[tuple[int, SignatureMatch]]:
        """Scan a buffer of whole lines. The gate runs over the buffer in one call."""
        out: list[tuple[int, SignatureMatch]] = []
        self._scan_chunk(data, len(data), first_line_no, out)
        yield from out

    def _scan_chunk(self, data: bytes, end: int, line_no: int, out: list[tuple[int, SignatureMatch]]) -> int:
        """Append matches in ``data[:end]`` to ``out``; return the line number after ``end``."""
        pos = 0
        last_line_start = -1
        for m in self._gate_bytes.finditer(data, 0, end):
            start = m.start()
            ls = data.rfind(b"\n", 0, start) + 1
            if ls == last_line_start:
                continue
            last_line_start = ls
            line_no += data.count(b"\n", pos, ls)
            pos = ls
            le = data.find(b"\n", start, end)
            if le < 0:
                le = end
            text = data[ls:le].decode("utf-8", "replace")
            for sm in self.match(text):
                out.append((line_no, sm))
        return line_no + data.count(b"\n", pos, end)

    def scan_file(self, path: str | Path, chunk_size: int = 4 << 20) -> Iterator[tuple[int, SignatureMatch]]:
        """Scan a file in chunks (bounded memory); yields (line_no, match)."""
        line_no = 1
        carry = b""
        with open(path, "rb") as fh:
            while True:
                block = fh.read(chunk_size)
                if not block:
                    break
                if carry:
                    block = carry + block
                cut = block.rfind(b"\n")
                if cut < 0:
                    if len(block) > 16 * chunk_size:  # pathological line: scan it anyway
                        cut = len(block) - 1
                    else:
                        carry = block
                        continue
                out: list[tuple[int, SignatureMatch]] = []
                line_no = self._scan_chunk(block, cut + 1, line_no, out)
                carry = block[cut + 1:]
                yield from out
        if carry:
            out = []
            self._scan_chunk(carry, len(carry), line_no, out)
            yield from out

    def scan_text(self, text: str) -> list[tuple[int, SignatureMatch]]:
        out: list[tuple[int, SignatureMatch]] = []
        for i, line in enumerate(text.splitlines(), 1):
            for sm in self.match(line):
                out.append((i, sm))
        return out


@functools.lru_cache(maxsize=1)
def default_matcher() -> Matcher:
    return Matcher()


def scan_text(text: str) -> list[tuple[int, SignatureMatch]]:
    return default_matcher().scan_text(text)
