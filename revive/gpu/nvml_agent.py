"""NVML agent: reads GPU health from the driver through ``pynvml`` (package ``nvidia-ml-py``), serves
it as Prometheus text and turns Xid events into Revive triggers.

One agent runs per GPU node (``revive agent run``). It needs ``libnvidia-ml.so.1`` (installed with the
NVIDIA driver); without it :meth:`NvmlReader.open` raises :class:`NvmlUnavailable`.

What is read, per device (units in brackets):

- identity: index, UUID, PCI bus id (``domain:bus:device.function``, lower case), product name;
- ECC error counts, volatile (since the last driver load) and aggregate (lifetime, kept in the
  infoROM), corrected and uncorrected [errors];
- retired pages (page retirement, Volta and older) by cause [pages] and pending retirement [0/1];
- row remapping (Ampere and newer): rows remapped for correctable / uncorrectable errors [rows],
  remap pending [0/1] and remap failure [0/1];
- SM clock [MHz] and the current clocks-event ("throttle") reasons [bitmask];
- GPU core temperature [°C];
- power draw [W] (NVML reports mW);
- NVLink error counters per active link: CRC FLIT, CRC DATA, replay, recovery [errors].

Every NVML call is isolated: an error on one field (``NVML_ERROR_NOT_SUPPORTED`` on a GPU without
the feature, ``NVML_ERROR_GPU_IS_LOST`` after Xid 79 …) is recorded in
:attr:`GpuReading.unavailable` under the field name and the read goes on.

Xid events: :meth:`NvmlReader.register_xid` registers ``nvmlEventTypeXidCriticalError`` on every
device that supports it (a device answering ``NVML_ERROR_NOT_SUPPORTED`` is recorded, not fatal);
:meth:`NvmlReader.wait_xid` blocks in ``nvmlEventSetWait_v2`` for at most ``timeout_ms``.
:class:`NvmlAgent` runs that wait in a worker thread (``asyncio.to_thread``) so the event loop never
blocks, and hands each event to an async ``on_xid`` callback (:class:`JsonlXidSink`,
:class:`HttpXidSink`, or the team's Temporal starter).

Constants and function names are those of ``pynvml.py`` in nvidia-ml-py 13.615.71 (the version in
this project's environment), which mirrors ``nvml.h`` and the NVML API Reference Guide
(https://docs.nvidia.com/deploy/nvml-api/). The reader takes the NVML module as a parameter
(default ``pynvml``) so tests substitute :mod:`revive.gpu.fake_nvml` at exactly that boundary.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from revive.errors import ReviveError

log = logging.getLogger(__name__)

# pynvml names used by the reader. The fake NVML implements exactly these; a test checks that each
# exists in the real pynvml, so a typo cannot hide behind the fake.
NVML_FUNCTIONS_USED = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetName",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)
NVML_CONSTANTS_USED = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_TIMEOUT",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "NVML_AGGREGATE_ECC",
    "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
    "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",
    "NVML_CLOCK_SM",
    "NVML_TEMPERATURE_GPU",
    "NVML_NVLINK_MAX_LINKS",
    "NVML_NVLINK_ERROR_DL_REPLAY",
    "NVML_NVLINK_ERROR_DL_RECOVERY",
    "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "NVML_NVLINK_ERROR_DL_CRC_DATA",
    "nvmlEventTypeXidCriticalError",
)

# Clocks-event reason bits, pynvml ``nvmlClocksEventReason*`` (nvml.h ``nvmlClocksEventReason*``;
# the older ``nvmlClocksThrottleReason*`` names carry the same values).
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

# NVLink counters read per link: (pynvml constant name, label value).
NVLINK_COUNTERS = (
    ("NVML_NVLINK_ERROR_DL_CRC_FLIT", "crc_flit"),
    ("NVML_NVLINK_ERROR_DL_CRC_DATA", "crc_data"),
    ("NVML_NVLINK_ERROR_DL_REPLAY", "replay"),
    ("NVML_NVLINK_ERROR_DL_RECOVERY", "recovery"),
)


class NvmlUnavailable(ReviveError):
    """NVML could not be initialised (no driver, no ``libnvidia-ml.so.1``, no permission …).

    ``code`` is the NVML return code when NVML gave one (e.g. 12 = ``NVML_ERROR_LIBRARY_NOT_FOUND``,
    9 = ``NVML_ERROR_DRIVER_NOT_LOADED``), else ``None``."""

    def __init__(self, msg: str, code: int | None = None) -> None:
        super().__init__(msg)
        self.code = code


@dataclass
class XidEvent:
    """One Xid reported by the driver (``nvmlEventTypeXidCriticalError``).

    ``xid`` is the Xid number (NVML ``eventData``); ``at`` is when the agent received it (UTC; NVML
    event data carries no timestamp). ``gpu_index`` is the NVML index (``nvidia-smi`` order), not the
    CUDA index."""

    node: str
    gpu_index: int | None
    uuid: str | None
    pci_bus_id: str | None
    xid: int
    at: datetime
    gpu_instance_id: int | None = None
    """MIG GPU instance the event belongs to, when NVML names one (else ``None``)."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["at"] = self.at.isoformat()
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def kernel_line(self) -> str:
        """The event as the driver's own kernel-log line (``NVRM: Xid (PCI:0000:18:00): 79, …``), so
        the catalog signature ``xid.event`` and the Xid resolver can read it unchanged. NVML's
        8-digit PCI domain is shortened to the kernel's 4."""
        bus = (self.pci_bus_id or "").split(".")[0]
        parts = bus.split(":")
        if len(parts) == 3:
            bus = f"{parts[0][-4:]}:{parts[1]}:{parts[2]}"
        return (f"NVRM: Xid (PCI:{bus or '0000:00:00'}): {self.xid}, reported by the Revive NVML agent on "
                f"{self.node} (GPU {self.gpu_index}, {self.uuid or 'no uuid'})")


@dataclass
class GpuReading:
    """One device's fields from one read. ``values`` keys and units:

    ``ecc_volatile_corrected``, ``ecc_volatile_uncorrected``, ``ecc_aggregate_corrected``,
    ``ecc_aggregate_uncorrected`` [errors]; ``retired_pages_sbe``, ``retired_pages_dbe`` [pages];
    ``retired_pages_pending`` [0/1]; ``remapped_rows_correctable``, ``remapped_rows_uncorrectable``
    [rows]; ``remap_pending``, ``remap_failure`` [0/1]; ``sm_clock_mhz`` [MHz];
    ``clocks_event_reasons`` [bitmask]; ``temperature_c`` [°C]; ``power_w`` [W].

    ``nvlink[link][counter]`` [errors] for ``counter`` in ``crc_flit``, ``crc_data``, ``replay``,
    ``recovery``. ``unavailable[field]`` is the NVML error text for each field that could not be read
    (``nvlink`` fields are named ``nvlink<link>.<counter>``; ``nvlink`` alone when the device has none).
    """

    index: int
    uuid: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    nvlink: dict[int, dict[str, float]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    lost: bool = False
    """NVML answered ``NVML_ERROR_GPU_IS_LOST`` (typically after Xid 79): the remaining fields of
    this read were skipped."""


@dataclass
class NodeReading:
    node: str
    at: datetime
    driver_version: str | None
    gpus: list[GpuReading]


def _err_text(exc: BaseException) -> str:
    code = getattr(exc, "value", None)
    text = str(exc) or type(exc).__name__
    return f"{text} (NVML {code})" if isinstance(code, int) else f"{type(exc).__name__}: {text}"


def _s(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class _GpuLost(Exception):
    pass


class NvmlReader:
    """Reads the fields above through ``nvml`` (the ``pynvml`` module, or a fake with the same names).

    Not tied to a thread: NVML is thread-safe, and one lock serialises this reader's own calls so a
    Prometheus scrape and the Xid wait never interleave state here. Use as a context manager or call
    :meth:`open` / :meth:`close`.
    """

    def __init__(self, nvml: ModuleType | Any | None = None, node: str | None = None) -> None:
        if nvml is None:
            import pynvml  # nvidia-ml-py; importing needs no driver, nvmlInit does

            nvml = pynvml
        self.nvml = nvml
        self.node = node or socket.gethostname()
        self._lock = threading.RLock()
        # held for the whole of one event wait; close() takes it first (order: _wait_lock, _lock) so
        # the event set is never freed under a wait still running in a worker thread
        self._wait_lock = threading.Lock()
        self._handles: list[Any] = []
        self._static: list[GpuReading] = []
        self._event_set: Any = None
        self._xid_unavailable: dict[int, str] = {}
        self.driver_version: str | None = None
        self._open = False

    # -- lifecycle -------------------------------------------------------------------------
    def open(self) -> NvmlReader:
        n = self.nvml
        with self._lock:
            if self._open:
                return self
            try:
                n.nvmlInit()
            except n.NVMLError as exc:
                raise NvmlUnavailable(f"NVML unavailable: {_err_text(exc)}", getattr(exc, "value", None)) from exc
            except OSError as exc:  # a broken libnvidia-ml (wrong arch, missing symbol at load)
                raise NvmlUnavailable(f"NVML unavailable: {exc}") from exc
            self._open = True
            try:
                self.driver_version = _s(n.nvmlSystemGetDriverVersion())
            except n.NVMLError:
                self.driver_version = None
            try:
                count = int(n.nvmlDeviceGetCount())
            except n.NVMLError as exc:
                self._open = False
                try:
                    n.nvmlShutdown()
                except n.NVMLError:
                    pass
                raise NvmlUnavailable(f"NVML initialised but the device count failed: {_err_text(exc)}",
                                      getattr(exc, "value", None)) from exc
            self._handles, self._static = [], []
            for i in range(count):
                g = GpuReading(index=i)
                try:
                    h = n.nvmlDeviceGetHandleByIndex(i)
                except n.NVMLError as exc:  # e.g. NVML_ERROR_GPU_IS_LOST for one device
                    g.unavailable["handle"] = _err_text(exc)
                    h = None
                self._handles.append(h)
                if h is not None:
                    try:
                        self._read_identity(n, h, g)
                    except _GpuLost:
                        pass
                self._static.append(g)
        return self

    def _read_identity(self, n: Any, h: Any, g: GpuReading) -> None:
        g.uuid = self._field(g, "uuid", lambda: _s(n.nvmlDeviceGetUUID(h)))
        g.pci_bus_id = self._field(g, "pci_bus_id", lambda: _s(n.nvmlDeviceGetPciInfo(h).busId).lower())
        g.name = self._field(g, "name", lambda: _s(n.nvmlDeviceGetName(h)))

    def close(self) -> None:
        """Free the event set and shut NVML down; waits for an in-flight :meth:`wait_xid` (at most
        its ``timeout_ms``)."""
        n = self.nvml
        with self._wait_lock, self._lock:
            if not self._open:
                return
            if self._event_set is not None:
                try:
                    n.nvmlEventSetFree(self._event_set)
                except n.NVMLError:
                    pass
                self._event_set = None
            try:
                n.nvmlShutdown()
            except n.NVMLError:
                pass
            self._open = False

    def __enter__(self) -> NvmlReader:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def devices(self) -> list[GpuReading]:
        """Static identity of each device (index, uuid, pci_bus_id, name) as found by :meth:`open`."""
        return [GpuReading(index=g.index, uuid=g.uuid, pci_bus_id=g.pci_bus_id, name=g.name,
                           unavailable=dict(g.unavailable)) for g in self._static]

    # -- fields ----------------------------------------------------------------------------
    def _field(self, g: GpuReading, name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self.nvml.NVMLError as exc:
            g.unavailable[name] = _err_text(exc)
            if getattr(exc, "value", None) == self.nvml.NVML_ERROR_GPU_IS_LOST:
                g.lost = True
                raise _GpuLost from exc
        except Exception as exc:  # never let one field take the read down
            g.unavailable[name] = _err_text(exc)
        return None

    def _value(self, g: GpuReading, name: str, fn: Callable[[], Any]) -> None:
        v = self._field(g, name, fn)
        if v is not None:
            g.values[name] = float(v)

    def read(self) -> NodeReading:
        """Read every field of every device now. Never raises for a field; raises
        :class:`NvmlUnavailable` only when the reader was not opened."""
        if not self._open:
            raise NvmlUnavailable("NVML reader is not open (call open() first)")
        n = self.nvml
        out: list[GpuReading] = []
        with self._lock:
            for h, st in zip(self._handles, self._static, strict=False):
                g = GpuReading(index=st.index, uuid=st.uuid, pci_bus_id=st.pci_bus_id, name=st.name,
                               unavailable=dict(st.unavailable))
                if h is not None:
                    try:
                        self._read_device(n, h, g)
                    except _GpuLost:
                        pass  # recorded on the field that saw it; the rest of this device is skipped
                out.append(g)
        return NodeReading(node=self.node, at=datetime.now(UTC), driver_version=self.driver_version, gpus=out)

    def _read_device(self, n: Any, h: Any, g: GpuReading) -> None:
        for counter, cname in ((n.NVML_VOLATILE_ECC, "volatile"), (n.NVML_AGGREGATE_ECC, "aggregate")):
            for etype, ename in ((n.NVML_MEMORY_ERROR_TYPE_CORRECTED, "corrected"),
                                 (n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "uncorrected")):
                def ecc_errors(e: Any = etype, c: Any = counter) -> Any:
                    return n.nvmlDeviceGetTotalEccErrors(h, e, c)

                self._value(g, f"ecc_{cname}_{ename}", ecc_errors)
        self._value(g, "retired_pages_sbe", lambda: len(n.nvmlDeviceGetRetiredPages(
            h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)))
        self._value(g, "retired_pages_dbe", lambda: len(n.nvmlDeviceGetRetiredPages(
            h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)))
        self._value(g, "retired_pages_pending", lambda: n.nvmlDeviceGetRetiredPagesPendingStatus(h))
        rows = self._field(g, "remapped_rows", lambda: n.nvmlDeviceGetRemappedRows(h))
        if rows is not None:
            corr, unc, pending, failure = rows
            g.values.update(remapped_rows_correctable=float(corr), remapped_rows_uncorrectable=float(unc),
                            remap_pending=float(bool(pending)), remap_failure=float(bool(failure)))
        self._value(g, "sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        self._value(g, "clocks_event_reasons", lambda: self._clock_reasons(n, h))
        self._value(g, "temperature_c", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
        self._value(g, "power_w", lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0)  # NVML: milliwatts
        self._read_nvlink(n, h, g)

    @staticmethod
    def _clock_reasons(n: Any, h: Any) -> int:
        # nvmlDeviceGetCurrentClocksEventReasons (driver >= 535) replaces ...ThrottleReasons.
        fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is not None:
            try:
                return fn(h)
            except n.NVMLError as exc:
                if getattr(exc, "value", None) != n.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
        return n.nvmlDeviceGetCurrentClocksThrottleReasons(h)

    def _read_nvlink(self, n: Any, h: Any, g: GpuReading) -> None:
        counters = [(getattr(n, cname), label) for cname, label in NVLINK_COUNTERS]
        for link in range(int(n.NVML_NVLINK_MAX_LINKS)):
            try:
                active = n.nvmlDeviceGetNvLinkState(h, link)
            except n.NVMLError as exc:
                code = getattr(exc, "value", None)
                if link == 0:  # no NVLink (PCIe GPU: NOT_SUPPORTED), or the device is gone
                    g.unavailable["nvlink"] = _err_text(exc)
                    if code == n.NVML_ERROR_GPU_IS_LOST:
                        g.lost = True
                    break
                if code in (n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_INVALID_ARGUMENT):
                    break  # past the last link of this device
                g.unavailable[f"nvlink{link}"] = _err_text(exc)
                continue
            except Exception as exc:
                g.unavailable[f"nvlink{link}"] = _err_text(exc)
                continue
            if not active:
                continue
            got: dict[str, float] = {}
            for cid, label in counters:
                def error_counter(c: Any = cid, lk: int = link) -> Any:
                    return n.nvmlDeviceGetNvLinkErrorCounter(h, lk, c)

                v = self._field(g, f"nvlink{link}.{label}", error_counter)
                if v is not None:
                    got[label] = float(v)
            g.nvlink[link] = got

    # -- Xid events ------------------------------------------------------------------------
    def register_xid(self) -> list[int]:
        """Register Xid critical-error events on every device; returns the indices registered.
        Devices that refuse (``NVML_ERROR_NOT_SUPPORTED`` …) are listed in :attr:`xid_unavailable`."""
        n = self.nvml
        with self._lock:
            if not self._open:
                raise NvmlUnavailable("NVML reader is not open (call open() first)")
            if self._event_set is None:
                try:
                    self._event_set = n.nvmlEventSetCreate()
                except n.NVMLError as exc:
                    for g in self._static:
                        self._xid_unavailable[g.index] = _err_text(exc)
                    return []
            ok: list[int] = []
            for h, g in zip(self._handles, self._static, strict=False):
                if h is None:
                    self._xid_unavailable[g.index] = g.unavailable.get("handle", "no handle")
                    continue
                try:
                    n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, self._event_set)
                except n.NVMLError as exc:
                    self._xid_unavailable[g.index] = _err_text(exc)
                    continue
                ok.append(g.index)
            return ok

    @property
    def xid_unavailable(self) -> dict[int, str]:
        """GPU index → why Xid events could not be registered for it."""
        return dict(self._xid_unavailable)

    def wait_xid(self, timeout_ms: int = 1000) -> XidEvent | None:
        """Block up to ``timeout_ms`` [ms] for the next Xid; ``None`` on timeout or when no device is
        registered. Blocking: call it from a worker thread (``NvmlAgent`` does)."""
        n = self.nvml
        with self._wait_lock:
            es = self._event_set
            if es is None or not self._open:
                return None
            try:
                data = n.nvmlEventSetWait_v2(es, int(timeout_ms))
            except n.NVMLError as exc:
                if getattr(exc, "value", None) == n.NVML_ERROR_TIMEOUT:
                    return None
                raise
            return self._event(n, data)

    def _event(self, n: Any, data: Any) -> XidEvent | None:
        if not (int(data.eventType) & int(n.nvmlEventTypeXidCriticalError)):
            return None
        at = datetime.now(UTC)
        st = self._device_for(n, data.device)
        gi = getattr(data, "gpuInstanceId", None)
        gi = None if gi is None or int(gi) == 0xFFFFFFFF else int(gi)
        return XidEvent(node=self.node, gpu_index=st.index if st else None, uuid=st.uuid if st else None,
                        pci_bus_id=st.pci_bus_id if st else None, xid=int(data.eventData), at=at,
                        gpu_instance_id=gi)

    def _device_for(self, n: Any, handle: Any) -> GpuReading | None:
        # ctypes handles do not compare equal by value: match on UUID, then on NVML index.
        with self._lock:
            try:
                uuid = _s(n.nvmlDeviceGetUUID(handle))
                for g in self._static:
                    if g.uuid == uuid:
                        return g
            except n.NVMLError:
                pass
            try:
                idx = int(n.nvmlDeviceGetIndex(handle))
                for g in self._static:
                    if g.index == idx:
                        return g
            except n.NVMLError:
                pass
        return None


# -- Prometheus ----------------------------------------------------------------------------

LABELS = ["node", "gpu", "uuid", "pci_bus_id"]


class XidStats:
    """Xid events seen by this agent, for ``revive_gpu_xid_events_total`` / ``revive_gpu_last_xid``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[tuple[int | None, int], int] = {}
        self.last: dict[int | None, int] = {}

    def add(self, ev: XidEvent) -> None:
        with self._lock:
            k = (ev.gpu_index, ev.xid)
            self.counts[k] = self.counts.get(k, 0) + 1
            self.last[ev.gpu_index] = ev.xid

    def snapshot(self) -> tuple[dict[tuple[int | None, int], int], dict[int | None, int]]:
        with self._lock:
            return dict(self.counts), dict(self.last)


class NvmlCollector:
    """A prometheus-client custom collector: reads NVML at scrape time and yields ``revive_gpu_*``
    families, every series labelled ``node``, ``gpu`` (NVML index), ``uuid``, ``pci_bus_id``.

    A read that fails as a whole yields ``revive_gpu_agent_up 0`` and nothing else; a field that
    fails yields ``revive_gpu_field_unavailable{field,reason} 1`` instead of its series."""

    def __init__(self, reader: NvmlReader, xid_stats: XidStats | None = None) -> None:
        self.reader = reader
        self.xid_stats = xid_stats or XidStats()

    def describe(self) -> list:  # no NVML call at registration time
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        up = GaugeMetricFamily("revive_gpu_agent_up", "1 when the last NVML read succeeded.", labels=["node"])
        try:
            r = self.reader.read()
        except Exception as exc:  # NvmlUnavailable, or the driver went away under us
            log.warning("NVML read failed: %s", exc)
            up.add_metric([self.reader.node], 0)
            yield up
            return
        up.add_metric([r.node], 1)
        yield up
        count = GaugeMetricFamily("revive_gpu_count", "GPUs NVML reports on this node.", labels=["node"])
        count.add_metric([r.node], len(r.gpus))
        yield count

        def g(name: str, doc: str, extra: list[str] | None = None) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=LABELS + (extra or []))

        def c(name: str, doc: str, extra: list[str] | None = None) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=LABELS + (extra or []))

        info = g("revive_gpu_info", "Device identity (value 1).", ["name", "driver_version"])
        ecc = c("revive_gpu_ecc_errors", "ECC errors [errors]; volatile since driver load, aggregate lifetime.",
                ["error_type", "counter"])
        retired = g("revive_gpu_retired_pages", "Retired framebuffer pages by cause [pages].", ["cause"])
        retired_pending = g("revive_gpu_retired_pages_pending", "Page retirement pending a reset [0/1].")
        remapped = g("revive_gpu_remapped_rows", "Rows remapped by the row remapper [rows].", ["error_type"])
        remap_pending = g("revive_gpu_remap_pending", "Row remapping pending a GPU reset [0/1].")
        remap_failure = g("revive_gpu_remap_failure", "Row remapping failed: no spare rows left [0/1].")
        sm = g("revive_gpu_sm_clock_mhz", "Current SM clock [MHz].")
        reasons = g("revive_gpu_clocks_event_reasons", "Clocks-event (throttle) reasons bitmask [bitmask].")
        reason = g("revive_gpu_clock_event_active", "One clocks-event reason is active [0/1].", ["reason"])
        temp = g("revive_gpu_temperature_celsius", "GPU core temperature [°C].")
        power = g("revive_gpu_power_watts", "Power draw [W].")
        lost = g("revive_gpu_lost", "NVML answered GPU_IS_LOST for this device on this read [0/1].")
        nvl = c("revive_gpu_nvlink_errors", "NVLink data-link error counters [errors].", ["link", "counter"])
        unavail = g("revive_gpu_field_unavailable", "A field NVML could not read on this device (value 1).",
                    ["field", "reason"])
        xid_total = c("revive_gpu_xid_events", "Xid events received by this agent since it started [events].",
                      ["xid"])
        last_xid = g("revive_gpu_last_xid", "Last Xid received by this agent since it started.")

        by_index = {gr.index: gr for gr in r.gpus}
        for gr in r.gpus:
            lab = [r.node, str(gr.index), gr.uuid or "", gr.pci_bus_id or ""]
            v = gr.values
            info.add_metric(lab + [gr.name or "", r.driver_version or ""], 1)
            lost.add_metric(lab, 1 if gr.lost else 0)
            for cname in ("volatile", "aggregate"):
                for ename in ("corrected", "uncorrected"):
                    key = f"ecc_{cname}_{ename}"
                    if key in v:
                        ecc.add_metric(lab + [ename, cname], v[key])
            for key, cause in (("retired_pages_sbe", "multiple_single_bit_ecc"), ("retired_pages_dbe", "double_bit_ecc")):
                if key in v:
                    retired.add_metric(lab + [cause], v[key])
            if "retired_pages_pending" in v:
                retired_pending.add_metric(lab, v["retired_pages_pending"])
            for key, et in (("remapped_rows_correctable", "correctable"), ("remapped_rows_uncorrectable", "uncorrectable")):
                if key in v:
                    remapped.add_metric(lab + [et], v[key])
            if "remap_pending" in v:
                remap_pending.add_metric(lab, v["remap_pending"])
            if "remap_failure" in v:
                remap_failure.add_metric(lab, v["remap_failure"])
            if "sm_clock_mhz" in v:
                sm.add_metric(lab, v["sm_clock_mhz"])
            if "clocks_event_reasons" in v:
                bits = int(v["clocks_event_reasons"])
                reasons.add_metric(lab, bits)
                for bit, rname in CLOCK_EVENT_REASONS.items():
                    reason.add_metric(lab + [rname], 1 if bits & bit else 0)
            if "temperature_c" in v:
                temp.add_metric(lab, v["temperature_c"])
            if "power_w" in v:
                power.add_metric(lab, v["power_w"])
            for link, ctrs in sorted(gr.nvlink.items()):
                for cname, val in ctrs.items():
                    nvl.add_metric(lab + [str(link), cname], val)
            for fname, why in sorted(gr.unavailable.items()):
                unavail.add_metric(lab + [fname, why[:200]], 1)
        for idx, why in sorted(self.reader.xid_unavailable.items()):
            dev = by_index.get(idx)
            lab = [r.node, str(idx), (dev.uuid if dev else "") or "", (dev.pci_bus_id if dev else "") or ""]
            unavail.add_metric(lab + ["xid_events", why[:200]], 1)
        counts, last = self.xid_stats.snapshot()
        for (ev_idx, xid), n_ev in sorted(counts.items(), key=lambda kv: (kv[0][0] if kv[0][0] is not None else -1, kv[0][1])):
            dev = by_index.get(ev_idx) if ev_idx is not None else None
            lab = [r.node, "" if ev_idx is None else str(ev_idx), (dev.uuid if dev else "") or "", (dev.pci_bus_id if dev else "") or ""]
            xid_total.add_metric(lab + [str(xid)], n_ev)
        for ev_idx, xid in sorted(last.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
            dev = by_index.get(ev_idx) if ev_idx is not None else None
            lab = [r.node, "" if ev_idx is None else str(ev_idx), (dev.uuid if dev else "") or "", (dev.pci_bus_id if dev else "") or ""]
            last_xid.add_metric(lab, xid)
        yield from (info, lost, ecc, retired, retired_pending, remapped, remap_pending, remap_failure, sm, reasons,
                    reason, temp, power, nvl, unavail, xid_total, last_xid)


def make_registry(collector: NvmlCollector):
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def exposition(collector: NvmlCollector) -> str:
    """The Prometheus text one scrape would return (for tests and ``revive agent dump``)."""
    from prometheus_client import generate_latest

    return generate_latest(make_registry(collector)).decode()


def serve(collector: NvmlCollector, port: int = 9835, addr: str = "0.0.0.0"):
    """Serve ``/metrics`` on ``addr:port`` in a daemon thread (``prometheus_client.start_http_server``).
    Returns ``(server, thread)``; ``server.shutdown()`` stops it."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=addr, registry=make_registry(collector))


# -- Xid sinks -----------------------------------------------------------------------------

XidCallback = Callable[[XidEvent], Awaitable[Any]]


class JsonlXidSink:
    """Appends each event as one JSON line to ``path`` (file written in a worker thread)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _write(self, line: str) -> None:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")

    async def __call__(self, ev: XidEvent) -> None:
        await asyncio.to_thread(self._write, ev.to_json())


class KernelLineXidSink(JsonlXidSink):
    """Appends each event as an ``NVRM: Xid`` kernel-log line (:meth:`XidEvent.kernel_line`) to
    ``path``: point the cluster config's ``kernel_log.path_template`` at that file and Revive reads
    the agent's Xid events as evidence exactly like the kernel's own lines (locally or over SSH)."""

    async def __call__(self, ev: XidEvent) -> None:
        await asyncio.to_thread(self._write, ev.kernel_line())


class HttpXidSink:
    """POSTs each event as JSON (:meth:`XidEvent.to_dict`) to ``url``.

    Bounded: ``1 + retries`` attempts of at most ``timeout_s`` [s] each, retried on connection
    errors, timeouts, 429 and 5xx. Never raises; returns True when delivered. The URL is redacted
    in logs (it may carry a token)."""

    def __init__(self, url: str, client: httpx.AsyncClient | None = None, timeout_s: float = 5.0,
                 retries: int = 2, backoff_s: float = 0.5) -> None:
        self.url = url
        self._client = client
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s

    async def __call__(self, ev: XidEvent) -> bool:
        from revive.notify import redact

        client = self._client or httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s))
        try:
            for attempt in range(1 + self.retries):
                try:
                    resp = await client.post(self.url, json=ev.to_dict(), timeout=self.timeout_s)
                    if resp.status_code < 300:
                        return True
                    if resp.status_code != 429 and resp.status_code < 500:
                        log.error("Xid POST to %s refused: HTTP %s", redact(self.url), resp.status_code)
                        return False
                    why = f"HTTP {resp.status_code}"
                except httpx.HTTPError as exc:
                    why = type(exc).__name__
                log.warning("Xid POST to %s failed (%s), attempt %d", redact(self.url), why, attempt + 1)
                if attempt < self.retries:
                    await asyncio.sleep(self.backoff_s * (attempt + 1))
            return False
        finally:
            if self._client is None:
                await client.aclose()


# -- agent ---------------------------------------------------------------------------------


class NvmlAgent:
    """Waits for Xid events in a worker thread and dispatches each to every ``on_xid`` callback as
    its own task, so a slow sink never delays the next wait. Callback errors are logged, never
    raised."""

    def __init__(self, reader: NvmlReader, on_xid: XidCallback | Iterable[XidCallback] = (),
                 wait_timeout_ms: int = 1000, xid_stats: XidStats | None = None) -> None:
        self.reader = reader
        self.callbacks: list[XidCallback] = [on_xid] if callable(on_xid) else list(on_xid)
        self.wait_timeout_ms = wait_timeout_ms
        self.xid_stats = xid_stats or XidStats()
        self._tasks: set[asyncio.Task] = set()
        self.dispatched = 0  # events handed to every callback (whether or not a callback failed)

    async def _dispatch(self, ev: XidEvent) -> None:
        for cb in self.callbacks:
            try:
                await cb(ev)
            except Exception:
                log.exception("Xid callback %r failed for %s", cb, ev.to_json())
        self.dispatched += 1

    async def run(self, stop: asyncio.Event, max_events: int | None = None) -> int:
        """Wait/dispatch until ``stop`` is set (checked at least every ``wait_timeout_ms``) or
        ``max_events`` events were seen. Returns the number of events seen; pending deliveries are
        awaited before returning."""
        registered = await asyncio.to_thread(self.reader.register_xid)
        if not registered:
            log.warning("no GPU on %s accepts Xid event registration: %s", self.reader.node, self.reader.xid_unavailable)
        seen = 0
        try:
            while not stop.is_set() and registered:
                try:
                    ev = await asyncio.to_thread(self.reader.wait_xid, self.wait_timeout_ms)
                except Exception as exc:  # NVMLError other than timeout (e.g. GPU lost): keep watching
                    log.warning("NVML event wait failed: %s", exc)
                    await asyncio.sleep(min(self.wait_timeout_ms / 1000.0, 1.0))
                    continue
                if ev is None:
                    continue
                seen += 1
                self.xid_stats.add(ev)
                t = asyncio.create_task(self._dispatch(ev))
                self._tasks.add(t)
                t.add_done_callback(self._tasks.discard)
                if max_events is not None and seen >= max_events:
                    break
        finally:
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
        return seen
