"""Load a case folder (or a plain log file) into an ``EvidenceBundle``.

Case folder layout (tests/data/cases/README.md):
    job.log            the job's stdout/stderr (ranks interleaved)
    dmesg.log          kernel lines; a line without a syslog host belongs to the first job node
    dmesg.<node>.log   kernel lines of <node> (also kern.log / kern.<node>.log)
    slurm.json         {"job_id", "nodes", "state", "exit_code", "reason", "time_limit", "elapsed", ...}
    gpu_metrics.csv    nvidia-smi --query-gpu CSV samples
    trigger.json       optional: a ``Trigger`` (Revive's own cases)
    bundle.json        optional: extra ``EvidenceBundle`` fields (node_states, ip_to_node, node_history, ...)

Never raises on unreadable or binary input: the problem is written to ``bundle.notes``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import stat
from datetime import UTC, datetime
from pathlib import Path

from revive.logline import LINE_CAP as MAX_LINE
from revive.logline import cap_line
from revive.models import EvidenceBundle, GpuSample, JobRecord, Trigger

MAX_LOG_BYTES = 64 << 20

_NODE_RANGE = re.compile(r"^(?P<prefix>[^\[]*)\[(?P<body>[^\]]+)\](?P<suffix>.*)$")
_DIGITS = re.compile(r"[0-9]+")
MAX_NODES = 100000
"""Largest hostlist range expanded (``gpu-[1-999999]`` names no real allocation: it expands to nothing)."""
MAX_JSON_BYTES = 2 * MAX_LOG_BYTES
"""Largest slurm.json / trigger.json / bundle.json read (bundle.json may carry a job log)."""
_CONTROL_OK = frozenset(b"\x07\x08\x1b")
"""Control bytes a terminal log carries (BEL ends OSC sequences, BS, ESC starts ANSI colours): not binary."""


def expand_nodelist(spec: str | list[str] | None) -> list[str]:
    """``gpu-node-[001-003,007]`` → names. Lists pass through."""
    if spec is None:
        return []
    if isinstance(spec, list):
        out: list[str] = []
        for s in spec:
            if isinstance(s, (str, int)) and not isinstance(s, bool):  # null/list/dict entries are not names
                out.extend(expand_nodelist(str(s)))
        return out
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    parts.append(cur)
    out = []
    for p in (x.strip() for x in parts if x.strip()):
        m = _NODE_RANGE.match(p)
        if not m:
            out.append(p)
            continue
        for item in m.group("body").split(","):
            if "-" in item:
                a, b = item.split("-", 1)
                if _DIGITS.fullmatch(a) and _DIGITS.fullmatch(b):
                    if len(a) <= 9 and len(b) <= 9 and int(b) - int(a) < MAX_NODES:
                        w = len(a)
                        out.extend(f"{m.group('prefix')}{i:0{w}d}{m.group('suffix')}" for i in range(int(a), int(b) + 1))
                    # else: far more nodes than any cluster has; never invent a name from the range
                    continue
            out.append(f"{m.group('prefix')}{item}{m.group('suffix')}")
    return out


def _read_text(path: Path, notes: list[str]) -> str:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            notes.append(f"{path.name} unreadable: not a regular file")
            return ""
        with open(path, "rb") as fh:
            if st.st_size > MAX_LOG_BYTES:  # read only the tail: a 2 GB log never lands in memory
                notes.append(f"{path.name}: {st.st_size} bytes, kept the last {MAX_LOG_BYTES}")
                fh.seek(st.st_size - MAX_LOG_BYTES)
                data = fh.read(MAX_LOG_BYTES)
                data = data[data.find(b"\n") + 1:]
            else:
                data = fh.read(MAX_LOG_BYTES + 1)
    except OSError as exc:
        notes.append(f"{path.name} unreadable: {exc}")
        return ""
    if b"\x00" in data:
        # NUL runs are what copytruncate/crash recovery leave in front of a log: drop them, then
        # judge what is left (a log padded with NULs is still a log)
        n = len(data)
        data = data.replace(b"\x00", b"")
        notes.append(f"{path.name}: {n - len(data)} NUL bytes removed")
    sample = data[:65536]
    if sample:
        bad = sum(1 for b in sample if (b < 9 or 13 < b < 32) and b not in _CONTROL_OK)
        invalid = sample.decode("utf-8", "replace").count("\ufffd")
        if bad > len(sample) * 0.05 or invalid > len(sample) * 0.1:
            notes.append(f"{path.name} looks binary ({bad} control bytes, {invalid} invalid UTF-8 sequences "
                         f"in the first {len(sample)}); not read")
            return ""
    text = data.decode("utf-8", "replace")
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\ufffd" in text:
        notes.append(f"{path.name}: invalid UTF-8 replaced")
    if "\r" in text:  # CRLF lines end in "\n"; a CR-only log (no "\n" at all) ends its lines in "\r"
        text = text.replace("\r\n", "\n") if "\n" in text else text.replace("\r", "\n")
    lines = text.split("\n")
    if any(len(line) > MAX_LINE for line in lines):
        notes.append(f"{path.name}: lines longer than {MAX_LINE} characters were capped")
        text = "\n".join(cap_line(line) for line in lines)
    return text


_MISSING = object()
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
"""What ``dmesg.<node>.log`` may call a node: an RFC 1123 host label or dotted name (≤ 63
characters), as Slurm's NodeName takes it; anything else (spaces, shell metacharacters, an empty
name) is kept as kernel lines of no node."""


def _read_json(path: Path, notes: list[str]) -> object:
    """A case's JSON file, or ``_MISSING`` with the reason in ``notes``: regular files only (a FIFO or
    /dev/zero never ends), at most ``MAX_JSON_BYTES``; lone surrogates (``"\\udcff"``, which UTF-8 and
    RE2 cannot take) become ``?``."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            notes.append(f"{path.name} unreadable: not a regular file")
            return _MISSING
        if st.st_size > MAX_JSON_BYTES:
            notes.append(f"{path.name}: {st.st_size} bytes, over the {MAX_JSON_BYTES}-byte limit; not read")
            return _MISSING
        with open(path, "rb") as fh:
            text = fh.read(MAX_JSON_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        notes.append(f"{path.name} unreadable: {exc}")
        return _MISSING
    try:
        raw = json.loads(text)
        if "\\u" in text:
            raw = json.loads(json.dumps(raw, ensure_ascii=False).encode("utf-8", "replace").decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        notes.append(f"{path.name} unreadable: {exc}"[:300])
        return _MISSING
    return raw


def _job_record(path: Path, notes: list[str]) -> tuple[JobRecord | None, dict]:
    raw = _read_json(path, notes)
    if raw is _MISSING:
        return None, {}
    if not isinstance(raw, dict):
        notes.append(f"{path.name}: not a JSON object")
        return None, {}
    try:
        rec = dict(raw)
        rec["job_id"] = str(rec.get("job_id", "unknown"))
        rec["nodes"] = expand_nodelist(rec.get("nodes") or rec.get("nodelist"))
        if isinstance(rec.get("state"), list):
            rec["state"] = rec["state"][0] if rec["state"] else "UNKNOWN"
        if rec.get("exit_code") is not None:
            rec["exit_code"] = str(rec["exit_code"])
        for k in ("time_limit", "elapsed", "reason"):
            if rec.get(k) is not None:
                rec[k] = str(rec[k])
        return JobRecord.model_validate(rec), raw
    except Exception as exc:  # pydantic ValidationError and friends
        notes.append(f"{path.name}: invalid job record: {exc}"[:300])
        return None, raw


_UNIT = re.compile(r"^\s*(-?[0-9.]+)\s*(?:%|MiB|W|MHz|C|GiB|KiB|B)?\s*$")


def _gpu_metrics(path: Path, notes: list[str]) -> list[GpuSample]:
    text = _read_text(path, notes)
    out: list[GpuSample] = []
    try:
        reader = csv.reader(io.StringIO(text))
        header = None
        for row in reader:
            if not row:
                continue
            if header is None:
                header = [h.strip().lower() for h in row]
                continue
            d = {h: (row[i].strip() if i < len(row) else "") for i, h in enumerate(header)}
            s = GpuSample()
            for k, v in d.items():
                key = k.split(" [")[0]
                if key in ("timestamp", "time"):
                    s.timestamp = _parse_time(v)
                elif key == "index":
                    s.index = int(v) if v.isdigit() else None
                elif key in ("uuid", "gpu_uuid"):
                    s.uuid = v or None
                elif key in ("pci.bus_id", "pci_bus_id", "bus_id"):
                    s.pci_bus_id = v.lower() or None
                elif key in ("node", "host", "hostname"):
                    s.node = v or None
                else:
                    m = _UNIT.match(v)
                    try:
                        s.metrics[key] = float(m.group(1)) if m else v
                    except ValueError:  # "1.2.3 %": one garbled cell, not the rest of the file
                        s.metrics[key] = v
            out.append(s)
    except Exception as exc:  # csv.Error, ValueError
        notes.append(f"{path.name}: unparsable CSV: {exc}"[:300])
    return out


def _parse_time(v: str) -> datetime | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(v, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    try:
        d = datetime.fromisoformat(v.replace("Z", "+00:00"))
        return d if d.tzinfo else d.replace(tzinfo=UTC)
    except ValueError:
        return None


def _kernel_lines(path: Path, notes: list[str]) -> list[str]:
    text = _read_text(path, notes)
    return [line for line in text.split("\n") if line.strip()]


def load_case(path: Path | str) -> EvidenceBundle:
    """Case folder or plain log file → ``EvidenceBundle``. Never raises."""
    p = Path(path)
    notes: list[str] = []
    try:
        if p.is_file():
            text = _read_text(p, notes)
            return EvidenceBundle(job_log=text, job_log_source=p.name, notes=notes)
        if not p.is_dir():
            why = "not a regular file or folder" if p.exists() else "no such file or folder"
            return EvidenceBundle(notes=[f"{p}: {why}"])
        job = None
        raw: dict = {}
        sj = p / "slurm.json"
        if sj.exists():
            job, raw = _job_record(sj, notes)
        job_log = ""
        jl = p / "job.log"
        if jl.exists():
            job_log = _read_text(jl, notes)
        else:
            notes.append("job.log missing")
        kernel: dict[str, list[str]] = {}
        for f in sorted(p.iterdir()):
            name = f.name
            for stem in ("dmesg", "kern"):
                if name == f"{stem}.log":
                    kernel.setdefault("", []).extend(_kernel_lines(f, notes))
                elif name.startswith(f"{stem}.") and name.endswith(".log"):
                    node = name[len(stem) + 1:-4]
                    if not _NODE_NAME.match(node):  # a file name is not proof of a host name
                        notes.append(f"{name[:120]!r}: not a node name (letters, digits, '.', '_', '-'); "
                                     "its lines count for no node")
                        node = ""
                    kernel.setdefault(node, []).extend(_kernel_lines(f, notes))
        gpu = _gpu_metrics(p / "gpu_metrics.csv", notes) if (p / "gpu_metrics.csv").exists() else []
        bundle = EvidenceBundle(job_log=job_log, kernel_logs=kernel, job=job, gpu_metrics=gpu, notes=notes,
                                node_states={str(k): str(v) for k, v in (raw.get("node_states") or {}).items()}
                                if isinstance(raw.get("node_states"), dict) else {})
        tj = p / "trigger.json"
        if tj.exists():
            traw = _read_json(tj, bundle.notes)  # the bundle holds its own copy of the notes
            try:
                if traw is not _MISSING:
                    bundle.trigger = Trigger.model_validate(traw)
            except Exception as exc:
                bundle.notes.append(f"trigger.json invalid: {exc}"[:300])
        bj = p / "bundle.json"
        extra = _read_json(bj, bundle.notes) if bj.exists() else _MISSING
        if extra is not _MISSING:
            try:
                if not isinstance(extra, dict):
                    raise ValueError(f"not a JSON object ({type(extra).__name__})")
                merged = bundle.model_dump()
                merged.update(extra)
                bundle = EvidenceBundle.model_validate(merged)
            except Exception as exc:
                bundle.notes.append(f"bundle.json invalid: {exc}"[:300])
        return bundle
    except Exception as exc:  # last resort: a bundle with a note, never an exception
        return EvidenceBundle(notes=notes + [f"{p}: could not load case: {type(exc).__name__}: {exc}"[:300]])
