"""Read NVIDIA dcgm-exporter's ``/metrics`` text and turn successive scrapes into GPU evidence.

:func:`parse_dcgm` parses exporter text with ``prometheus_client.parser.text_string_to_metric_families``
into one :class:`revive.models.GpuSample` per physical GPU (node, timestamp, index, uuid,
pci_bus_id, ``metrics``). :class:`DcgmScraper` fetches a URL with an ``httpx.AsyncClient``.
:class:`DcgmTracker` keeps the previous sample per (node, GPU) and yields :class:`GpuEvidence`:

- ``xid``: ``DCGM_FI_DEV_XID_ERRORS`` changed to a new non-zero value. That field is a gauge holding
  only the LAST Xid a GPU reported (DCGM field 230, "Value of the last XID error encountered"), so
  what can be detected is a CHANGE of value between two scrapes, not an occurrence:

  * the same Xid repeating between scrapes leaves the value unchanged and is NOT seen;
  * several different Xids between two scrapes show only the last one;
  * the value is not reset when the GPU recovers (NVIDIA/dcgm-exporter#500), so a non-zero value on
    the first scrape may be hours old: it is taken as the baseline, not reported
    (``report_initial=True`` to report it);
  * a drop to 0 (exporter or DCGM restarted) only resets the baseline.

  Where the exporter's ``DCGM_EXP_XID_ERRORS_COUNT`` is enabled (a count per ``xid`` label over the
  exporter's window), a rise of that count is also reported as ``xid``; it sees repeats that the
  gauge cannot. The NVML agent (``revive.gpu.nvml_agent``) receives every Xid as an event and is the
  authoritative source where it runs.
- ``ecc_dbe``: ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` or ``DCGM_FI_DEV_ECC_DBE_AGG_TOTAL`` (double-bit,
  i.e. uncorrectable, ECC errors) rose;
- ``row_remap_failure``: ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` is 1 (reported on the scrape where it
  becomes 1, including the first: it is a state, not a history);
- ``uncorrectable_remapped_rows``: ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`` rose;
- ``slow_node``: one node's median ``DCGM_FI_DEV_SM_CLOCK`` is ``slow_ratio`` (default 0.9, i.e. 10 %)
  or more below the median of the other nodes, or its median SM activity
  (``DCGM_FI_PROF_SM_ACTIVE``, else ``DCGM_FI_DEV_GPU_UTIL``) is ``activity_ratio`` (default 0.8) or
  more below. Needs fresh samples from ``min_nodes`` (default 3) nodes, and fewer than half of them
  slow (else it is job-wide, not a node). Reported when a node becomes slow, again only after it
  recovered. The clock rule is the one ``revive.attribution.engine`` applies to ``gpu_metrics``.

Labels read: ``gpu`` (NVML index), ``UUID`` (``uuid`` with the exporter's old-namespace option),
``pci_bus_id`` (lower-cased), ``Hostname`` (renamed ``hostname`` in dcgm-exporter after 4.4.1-4.6.0,
NVIDIA/dcgm-exporter#655; both accepted), ``modelName``, ``DCGM_FI_DRIVER_VERSION`` and, for MIG
instances, ``GPU_I_ID``. Values DCGM marks blank / not supported (int64 ``0x7ffffffffffffff0`` and
above, the int32 equivalents, fp64 ``2**47`` and above) are dropped, as the exporter README's own
sample shows one (``DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794``).

Malformed text raises :class:`DcgmParseError` (a :class:`revive.errors.EvidenceError`) naming the
problem; a failed HTTP scrape raises :class:`DcgmScrapeError`. Nothing here crashes on bad input.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from revive.errors import EvidenceError
from revive.models import GpuSample

XID = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
DBE_VOL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
DBE_AGG = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
UNC_REMAPPED = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"

_IDENTITY_LABELS = {"gpu", "UUID", "uuid", "pci_bus_id", "Hostname", "hostname", "device", "modelName",
                    "GPU_I_PROFILE", "GPU_I_ID", "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod",
                    "pod_uid", "err_code", "err_msg", "window_size_in_ms"}

_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
_INT32_BLANK = 0x7FFFFFF0
_FP64_BLANK = 140737488355328.0  # 2**47


class DcgmParseError(EvidenceError):
    """The exporter text is not valid Prometheus text (or holds no usable GPU series)."""


class DcgmScrapeError(EvidenceError):
    """The exporter could not be fetched (connection error, timeout, non-200)."""


def _blank(raw: Any) -> bool:
    """DCGM's blank / not-found / not-supported / not-permissioned markers. Integers and floats are
    told apart by how the exporter printed them (``%d`` vs ``%f``), as prometheus-client's parser
    keeps them: a large integer counter (NVLink bytes) is a value, a float at ``2**47`` a blank."""
    if isinstance(raw, bool):
        return False
    if isinstance(raw, int):
        return raw >= _INT64_BLANK or _INT32_BLANK <= raw <= _INT32_BLANK + 3
    v = float(raw)
    return math.isnan(v) or math.isinf(v) or v >= _FP64_BLANK


def _key_suffix(labels: dict[str, str]) -> str:
    extra = {k: v for k, v in labels.items() if k not in _IDENTITY_LABELS}
    if "xid" in extra:
        return f"{{xid={extra['xid']}}}"
    if extra:
        return "{" + ",".join(f"{k}={v}" for k, v in sorted(extra.items())) + "}"
    return ""


def parse_dcgm(text: str, *, node: str | None = None, at: datetime | None = None) -> list[GpuSample]:
    """One :class:`GpuSample` per physical GPU in ``text``.

    ``node`` overrides the ``Hostname``/``hostname`` label (use the Slurm node name of the scrape
    target when the exporter's hostname differs, e.g. FQDN vs short name, or inside Kubernetes).
    ``at`` is the sample time (default: now, UTC). ``metrics`` holds each ``DCGM_*`` field by name;
    a series with extra labels is stored as ``NAME{label=value,...}`` (``DCGM_EXP_XID_ERRORS_COUNT``
    as ``DCGM_EXP_XID_ERRORS_COUNT{xid=N}``); MIG instance series (``GPU_I_ID``) as
    ``NAME{GPU_I_ID=n}``, and a device field seen only on instances is also stored under its plain
    name (its value is the device's, the same on every instance). ``modelName`` and
    ``DCGM_FI_DRIVER_VERSION`` are kept as strings.
    """
    from prometheus_client.parser import text_string_to_metric_families

    if not isinstance(text, str):
        raise DcgmParseError(f"exporter text must be str, got {type(text).__name__}")
    at = at or datetime.now(UTC)
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises ValueError/IndexError/KeyError on bad lines
        first = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), "")
        raise DcgmParseError(f"malformed dcgm-exporter text ({type(exc).__name__}: {exc}); "
                             f"first data line: {first[:120]!r}") from exc
    by_gpu: dict[tuple[str | None, str, str], GpuSample] = {}
    mig_only: dict[tuple, dict[str, float]] = {}
    for fam in families:
        for s in fam.samples:
            name = s.name
            if not name.startswith("DCGM_"):
                continue
            if name.endswith("_total"):
                # prometheus_client's text parser appends "_total" to the samples of a family whose
                # TYPE is counter; DCGM field names are upper case and never end that way.
                name = name[: -len("_total")]
            lab = s.labels
            gpu = lab.get("gpu")
            if gpu is None or not gpu.isdigit():
                continue  # NvSwitch / NVLink / CPU entities have no GPU index
            uuid = lab.get("UUID") or lab.get("uuid") or ""
            host = node or lab.get("Hostname") or lab.get("hostname") or None
            key = (host, gpu, uuid)
            smp = by_gpu.get(key)
            if smp is None:
                smp = by_gpu[key] = GpuSample(node=host, timestamp=at, index=int(gpu), uuid=uuid or None,
                                              pci_bus_id=(lab.get("pci_bus_id") or "").lower() or None)
                if lab.get("modelName"):
                    smp.metrics["modelName"] = lab["modelName"]
                if lab.get("DCGM_FI_DRIVER_VERSION"):
                    smp.metrics["DCGM_FI_DRIVER_VERSION"] = lab["DCGM_FI_DRIVER_VERSION"]
            try:
                v = float(s.value)
                if _blank(s.value):
                    continue
            except (TypeError, ValueError, OverflowError):
                continue
            suffix = _key_suffix(lab)
            gi = lab.get("GPU_I_ID")
            if gi:
                smp.metrics[f"{name}{{GPU_I_ID={gi}}}{suffix}"] = v
                mig_only.setdefault(key, {}).setdefault(name + suffix, v)
            else:
                smp.metrics[name + suffix] = v
    for key, vals in mig_only.items():
        smp = by_gpu[key]
        for name, v in vals.items():
            if name.startswith("DCGM_FI_DEV_") and name not in smp.metrics:
                smp.metrics[name] = v
    return sorted(by_gpu.values(), key=lambda x: (x.node or "", x.index or 0, x.uuid or ""))


class DcgmScraper:
    """Fetch and parse one exporter: ``await DcgmScraper(url, client).scrape()``.

    ``timeout_s`` bounds the whole request [s]. ``node`` overrides the exporter's hostname label."""

    def __init__(self, url: str, client: httpx.AsyncClient, *, node: str | None = None, timeout_s: float = 5.0) -> None:
        self.url = url
        self.client = client
        self.node = node
        self.timeout_s = timeout_s

    async def scrape(self) -> list[GpuSample]:
        from revive.notify import redact

        try:
            resp = await self.client.get(self.url, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise DcgmScrapeError(f"dcgm-exporter {redact(self.url)}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise DcgmScrapeError(f"dcgm-exporter {redact(self.url)}: HTTP {resp.status_code}")
        return parse_dcgm(resp.text, node=self.node)


@dataclass
class GpuEvidence:
    """One change worth an incident. ``kind``: ``xid``, ``ecc_dbe``, ``row_remap_failure``,
    ``uncorrectable_remapped_rows`` or ``slow_node`` (``gpu_index``/``uuid`` empty for ``slow_node``)."""

    kind: str
    node: str | None
    at: datetime
    detail: str
    gpu_index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    metric: str | None = None
    value: float | None = None
    previous: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "node": self.node, "at": self.at.isoformat(), "detail": self.detail,
                "gpu_index": self.gpu_index, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id,
                "metric": self.metric, "value": self.value, "previous": self.previous, **self.extra}


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def _num(smp: GpuSample, name: str) -> float | None:
    v = smp.metrics.get(name)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class DcgmTracker:
    """Keeps the previous sample per (node, GPU index, uuid) across scrapes; :meth:`update` returns
    the evidence the new samples show (see module doc for each kind and the Xid limitation)."""

    def __init__(self, *, slow_ratio: float = 0.9, activity_ratio: float = 0.8, min_nodes: int = 3,
                 max_age_s: float = 300.0, report_initial: bool = False) -> None:
        self.slow_ratio = slow_ratio
        self.activity_ratio = activity_ratio
        self.min_nodes = min_nodes
        self.max_age = timedelta(seconds=max_age_s)
        self.report_initial = report_initial
        self.previous: dict[tuple[str | None, int | None, str | None], GpuSample] = {}
        self.slow: set[str] = set()

    def update(self, samples: Iterable[GpuSample]) -> list[GpuEvidence]:
        out: list[GpuEvidence] = []
        latest_at: datetime | None = None
        for smp in samples:
            key = (smp.node, smp.index, smp.uuid)
            prev = self.previous.get(key)
            out.extend(self._changes(prev, smp))
            self.previous[key] = smp
            if smp.timestamp and (latest_at is None or smp.timestamp > latest_at):
                latest_at = smp.timestamp
        out.extend(self._slow_nodes(latest_at or datetime.now(UTC)))
        return out

    def _ev(self, kind: str, smp: GpuSample, detail: str, metric: str, value: float | None,
            previous: float | None, **extra: Any) -> GpuEvidence:
        return GpuEvidence(kind=kind, node=smp.node, at=smp.timestamp or datetime.now(UTC),
                           detail=detail, gpu_index=smp.index, uuid=smp.uuid, pci_bus_id=smp.pci_bus_id,
                           metric=metric, value=value, previous=previous, extra=extra)

    def _changes(self, prev: GpuSample | None, cur: GpuSample) -> list[GpuEvidence]:
        out: list[GpuEvidence] = []
        where = f"{cur.node or '?'} GPU {cur.index} ({cur.pci_bus_id or cur.uuid or 'no id'})"
        first = prev is None
        # Xid gauge: a change to a new non-zero value
        x = _num(cur, XID)
        px = _num(prev, XID) if prev else None
        if x is not None and x != 0:
            if (first and self.report_initial) or (not first and px is not None and x != px):
                out.append(self._ev("xid", cur, f"{where}: last Xid changed {_fmt(px)} → {x:g}"
                                    + (" (first scrape: may predate it)" if first else ""),
                                    XID, x, px, xid=int(x), first_scrape=first))
            elif not first and px is None:  # field newly present
                out.append(self._ev("xid", cur, f"{where}: last Xid {x:g} (field newly present)", XID, x, None,
                                    xid=int(x), first_scrape=False))
        # exporter's per-Xid window count, where enabled
        for name, raw in cur.metrics.items():
            if not name.startswith(XID_COUNT + "{xid=") or not isinstance(raw, (int, float)):
                continue
            pv = _num(prev, name) if prev else None
            xid = name[len(XID_COUNT) + 5:].split("}")[0]
            if raw > 0 and ((first and self.report_initial) or (not first and raw > (pv or 0))):
                out.append(self._ev("xid", cur, f"{where}: Xid {xid} count in the exporter window "
                                    f"{_fmt(pv if pv is not None else 0.0)} → {raw:g}", name, float(raw), pv,
                                    xid=int(xid) if xid.isdigit() else xid, first_scrape=first))
        # double-bit ECC, uncorrectable remapped rows: a rise
        for metric, kind, what in ((DBE_VOL, "ecc_dbe", "volatile double-bit ECC errors"),
                                   (DBE_AGG, "ecc_dbe", "aggregate double-bit ECC errors"),
                                   (UNC_REMAPPED, "uncorrectable_remapped_rows", "rows remapped for uncorrectable errors")):
            v = _num(cur, metric)
            pv = _num(prev, metric) if prev else None
            if v is None:
                continue
            if (not first and pv is not None and v > pv) or (first and self.report_initial and v > 0):
                out.append(self._ev(kind, cur, f"{where}: {what} {_fmt(pv)} → {v:g}",
                                    metric, v, pv))
        # row remap failure: a state, reported when it becomes 1
        v = _num(cur, REMAP_FAILURE)
        pv = _num(prev, REMAP_FAILURE) if prev else None
        if v is not None and v >= 1 and (pv is None or pv < 1):
            out.append(self._ev("row_remap_failure", cur, f"{where}: row remapping failed (no spare rows)",
                                REMAP_FAILURE, v, pv))
        return out

    def _slow_nodes(self, now: datetime) -> list[GpuEvidence]:
        fresh = [(s.node, s) for s in self.previous.values()
                 if s.node and (s.timestamp is None or now - s.timestamp <= self.max_age)]
        activity = SM_ACTIVE if any(_num(s, SM_ACTIVE) is not None for _, s in fresh) else GPU_UTIL
        slow_now: dict[str, GpuEvidence] = {}
        for metric, ratio, label, unit in ((SM_CLOCK, self.slow_ratio, "SM clock", " MHz"),
                                           (activity, self.activity_ratio,
                                            "SM activity" if activity == SM_ACTIVE else "GPU utilisation",
                                            "" if activity == SM_ACTIVE else " %")):
            per_node: dict[str, list[float]] = {}
            for node, s in fresh:
                v = _num(s, metric)
                if v is not None and (v > 0 or metric != SM_CLOCK):  # a 0 MHz clock is a missing reading
                    per_node.setdefault(node, []).append(v)
            if len(per_node) < self.min_nodes:
                continue
            med = {n: statistics.median(v) for n, v in per_node.items()}
            slow = []
            for n, v in med.items():
                ref = statistics.median([x for m2, x in med.items() if m2 != n])
                if ref > 0 and v <= ratio * ref:
                    slow.append((n, v, ref))
            if not slow or len(slow) * 2 >= len(med):
                continue
            for n, v, ref in slow:
                if n in slow_now:
                    continue
                slow_now[n] = GpuEvidence(
                    kind="slow_node", node=n, at=now, metric=metric, value=v, previous=None,
                    detail=f"{n}: median {label} {v:g}{unit} vs {ref:g}{unit} median of the other "
                           f"{len(med) - 1} nodes (at or below {ratio:g}×): straggler",
                    extra={"reference": ref, "ratio": ratio, "nodes_compared": len(med)})
        out = [ev for n, ev in sorted(slow_now.items()) if n not in self.slow]
        self.slow = set(slow_now)
        return out
