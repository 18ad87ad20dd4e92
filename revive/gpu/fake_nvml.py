"""A fake NVML at the ``pynvml`` boundary: replays a JSON call table, and records one on a real GPU.

:class:`FakeNvml` is a module object with the same function names (:data:`NVML_FUNCTIONS_USED`),
constants and exception classes as ``pynvml`` (the constants and ``NVMLError`` classes ARE pynvml's,
so ``except pynvml.NVMLError`` and ``exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED`` behave as with
the real library). Pass it to :class:`~revive.gpu.nvml_agent.NvmlReader` (``NvmlReader(nvml=fake)``)
or monkeypatch it over ``pynvml``; the reader's code path is the one used on a GPU node.

Fixture format (JSON)::

    {
      "meta": {...},                                  # free text: where the values came from
      "nvmlInit": {"error": "NVML_ERROR_LIBRARY_NOT_FOUND"},   # optional: init fails
      "nvmlSystemGetDriverVersion": "550.90.07",
      "devices": [                                    # list position = NVML index
        {
          "nvmlDeviceGetUUID": "GPU-…",
          "nvmlDeviceGetPciInfo": {"busId": "00000000:18:00.0"},
          "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED,NVML_VOLATILE_ECC)":
              {"series": [0, 3, {"error": "NVML_ERROR_GPU_IS_LOST"}]},
          "nvmlDeviceGetNvLinkErrorCounter(*,NVML_NVLINK_ERROR_DL_REPLAY)": 0,
          "nvmlDeviceRegisterEvents": {"error": "NVML_ERROR_NOT_SUPPORTED"}
        }
      ],
      "events": [{"device": 0, "eventType": "nvmlEventTypeXidCriticalError", "eventData": 79,
                  "after_timeouts": 1}]
    }

A key is the function name, with the arguments after the device handle in parentheses (pynvml
constant names or integers; ``*`` matches any value; an exact key wins over a wildcard). A value is
returned on every call; ``{"error": NAME}`` raises ``pynvml.NVMLError(<NAME's code>)``; ``{"series":
[...]}`` answers successive calls in order and then repeats its last element. A call with no
recorded answer raises ``NVML_ERROR_NOT_SUPPORTED`` and is listed in :attr:`FakeNvml.unrecorded`,
so a test can assert the fixture covers the reader.

Events are delivered in order by ``nvmlEventSetWait_v2`` to event sets on which that device
registered that event type; ``after_timeouts`` makes that many waits time out first. With no event
pending, a wait sleeps ``min(timeout_ms, 5)`` ms and raises ``NVML_ERROR_TIMEOUT`` as NVML does.

Recording (on a GPU node; not exercised here, there is no GPU on the development machine)::

    python -m revive.gpu.fake_nvml record out.json --reads 3 --wait-ms 10000

wraps the real ``pynvml`` in :class:`RecordingNvml`, runs the reader ``--reads`` times, waits for Xid
events, and writes the calls and answers in the format above.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pynvml

from revive.gpu.nvml_agent import NVML_FUNCTIONS_USED, NvmlReader

_ERROR_NAMES = {getattr(pynvml, n): n for n in dir(pynvml) if n.startswith("NVML_ERROR_")}


def _const(token: str) -> Any:
    token = token.strip()
    if token == "*":
        return "*"
    if token.lstrip("-").isdigit():
        return int(token)
    if not hasattr(pynvml, token):
        raise ValueError(f"fake NVML fixture: unknown pynvml constant {token!r}")
    return int(getattr(pynvml, token))


def _parse_key(key: str) -> tuple[str, tuple]:
    if "(" not in key:
        return key, ()
    name, rest = key.split("(", 1)
    inner = rest.rstrip().removesuffix(")")
    args = tuple(_const(t) for t in inner.split(",")) if inner.strip() else ()
    return name.strip(), args


def _error(spec: Any) -> pynvml.NVMLError:
    code = spec if isinstance(spec, int) else getattr(pynvml, str(spec), None)
    if not isinstance(code, int):
        raise ValueError(f"fake NVML fixture: unknown NVML error {spec!r}")
    return pynvml.NVMLError(code)


class FakeHandle:
    """An opaque device handle (the real one is a ctypes pointer)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<FakeHandle {self.index}>"


class FakeEventSet:
    __slots__ = ("registered", "freed")

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # device index -> event type mask
        self.freed = False


class FakeEventData:
    """Shape of ``pynvml.c_nvmlEventData_t``: device, eventType, eventData, gpuInstanceId,
    computeInstanceId."""

    def __init__(self, device: FakeHandle, eventType: int, eventData: int,
                 gpuInstanceId: int = 0xFFFFFFFF, computeInstanceId: int = 0xFFFFFFFF) -> None:
        self.device = device
        self.eventType = eventType
        self.eventData = eventData
        self.gpuInstanceId = gpuInstanceId
        self.computeInstanceId = computeInstanceId


class _Answer:
    def __init__(self, spec: Any) -> None:
        if isinstance(spec, dict) and "series" in spec:
            self.items = list(spec["series"]) or [None]
        else:
            self.items = [spec]
        self.calls = 0

    def next(self) -> Any:
        item = self.items[min(self.calls, len(self.items) - 1)]
        self.calls += 1
        if isinstance(item, dict) and set(item) == {"error"}:
            raise _error(item["error"])
        return copy.deepcopy(item)


class FakeNvml(types.ModuleType):
    """Replays a fixture (see module doc). ``FakeNvml.from_file(path)`` or ``FakeNvml(dict)``."""

    def __init__(self, fixture: dict[str, Any] | None = None, *, init_error: str | int | None = None) -> None:
        super().__init__("fake_pynvml", "revive.gpu.fake_nvml.FakeNvml")
        for name in dir(pynvml):  # constants and exception classes, the real ones
            obj = getattr(pynvml, name)
            if name.startswith(("NVML_", "nvmlEventType", "nvmlClocksEventReason", "nvmlClocksThrottleReason")) and \
                    isinstance(obj, int):
                setattr(self, name, obj)
            elif name.startswith("NVMLError") and isinstance(obj, type):
                setattr(self, name, obj)
        self.nvmlExceptionClass = pynvml.nvmlExceptionClass
        fixture = copy.deepcopy(fixture or {"devices": []})
        self.meta = fixture.get("meta", {})
        if init_error is not None:
            fixture["nvmlInit"] = {"error": init_error}
        self._global = {k: _Answer(v) for k, v in fixture.items() if k.startswith("nvml")}
        self._devices: list[dict[tuple[str, tuple], _Answer]] = []
        for dev in fixture.get("devices", []):
            table: dict[tuple[str, tuple], _Answer] = {}
            for k, v in dev.items():
                if k.startswith("nvml"):
                    table[_parse_key(k)] = _Answer(v)
            self._devices.append(table)
        self._events: list[dict[str, Any]] = [dict(e) for e in fixture.get("events", [])]
        self._lock = threading.Lock()
        self.init_count = 0
        self.calls: list[tuple[str, tuple]] = []
        self.unrecorded: set[str] = set()
        self.event_sets: list[FakeEventSet] = []

    @classmethod
    def from_file(cls, path: str | Path, **kw: Any) -> FakeNvml:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")), **kw)

    # -- plumbing --------------------------------------------------------------------------
    def _check_init(self) -> None:
        if self.init_count <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _dev(self, handle: Any) -> int:
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self._devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle.index

    def _answer(self, fn: str, handle: Any, *args: Any) -> Any:
        with self._lock:
            self._check_init()
            idx = self._dev(handle)
            args = tuple(int(a) for a in args)
            self.calls.append((fn, (idx,) + args))
            table = self._devices[idx]
            for cand in _candidates(args):
                a = table.get((fn, cand))
                if a is not None:
                    return a.next()
            self.unrecorded.add(f"device {idx}: {fn}{args}")
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _global_answer(self, fn: str, default: Any) -> Any:
        a = self._global.get(fn)
        return default if a is None else a.next()

    # -- library ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        with self._lock:
            self._global_answer("nvmlInit", None)
            self.init_count += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            self._check_init()
            self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        with self._lock:
            self._check_init()
            return self._global_answer("nvmlSystemGetDriverVersion", "")

    def nvmlDeviceGetCount(self) -> int:
        with self._lock:
            self._check_init()
            return self._global_answer("nvmlDeviceGetCount", len(self._devices))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        with self._lock:
            self._check_init()
            if not 0 <= int(index) < len(self._devices):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            a = self._devices[int(index)].get(("nvmlDeviceGetHandleByIndex", ()))
            if a is not None:
                a.next()  # may raise the recorded error
            return FakeHandle(int(index))

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        with self._lock:
            self._check_init()
            return self._dev(handle)

    # -- device fields ---------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._answer("nvmlDeviceGetUUID", handle)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> types.SimpleNamespace:
        v = self._answer("nvmlDeviceGetPciInfo", handle)
        return types.SimpleNamespace(**v) if isinstance(v, dict) else types.SimpleNamespace(busId=v)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._answer("nvmlDeviceGetName", handle)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        return self._answer("nvmlDeviceGetTotalEccErrors", handle, errorType, counterType)

    def nvmlDeviceGetRetiredPages(self, handle: Any, sourceFilter: int) -> list[int]:
        return list(self._answer("nvmlDeviceGetRetiredPages", handle, sourceFilter))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        return self._answer("nvmlDeviceGetRetiredPagesPendingStatus", handle)

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        return tuple(self._answer("nvmlDeviceGetRemappedRows", handle))

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        return self._answer("nvmlDeviceGetClockInfo", handle, type)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._answer("nvmlDeviceGetCurrentClocksEventReasons", handle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._answer("nvmlDeviceGetCurrentClocksThrottleReasons", handle)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return self._answer("nvmlDeviceGetTemperature", handle, sensor)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._answer("nvmlDeviceGetPowerUsage", handle)

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        return self._answer("nvmlDeviceGetNvLinkState", handle, link)

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        return self._answer("nvmlDeviceGetNvLinkErrorCounter", handle, link, counter)

    # -- events ----------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> FakeEventSet:
        with self._lock:
            self._check_init()
            self._global_answer("nvmlEventSetCreate", None)
            es = FakeEventSet()
            self.event_sets.append(es)
            return es

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: FakeEventSet) -> None:
        self._answer_default("nvmlDeviceRegisterEvents", handle)
        with self._lock:
            idx = handle.index
            eventSet.registered[idx] = eventSet.registered.get(idx, 0) | int(eventTypes)

    def _answer_default(self, fn: str, handle: Any) -> None:
        # registration succeeds unless the fixture records an error for it
        with self._lock:
            self._check_init()
            idx = self._dev(handle)
            self.calls.append((fn, (idx,)))
            a = self._devices[idx].get((fn, ()))
        if a is not None:
            a.next()

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:
        with self._lock:
            self._check_init()
            if eventSet.freed:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            for i, ev in enumerate(self._events):
                dev = int(ev["device"])
                etype = int(getattr(pynvml, ev.get("eventType", "nvmlEventTypeXidCriticalError"))) \
                    if isinstance(ev.get("eventType", "x"), str) else int(ev["eventType"])
                if not eventSet.registered.get(dev, 0) & etype:
                    continue
                if ev.get("after_timeouts", 0) > 0:
                    ev["after_timeouts"] -= 1
                    break
                del self._events[i]
                return FakeEventData(FakeHandle(dev), etype, int(ev["eventData"]),
                                     int(ev.get("gpuInstanceId", 0xFFFFFFFF)),
                                     int(ev.get("computeInstanceId", 0xFFFFFFFF)))
        time.sleep(min(int(timeoutms), 5) / 1000.0)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        with self._lock:
            self._check_init()
            eventSet.freed = True

    @property
    def pending_events(self) -> int:
        return len(self._events)


def _candidates(args: tuple) -> list[tuple]:
    """Exact args first, then with one or more positions wildcarded (fewest wildcards first)."""
    out = [args]
    n = len(args)
    for k in range(1, n + 1):
        from itertools import combinations

        for pos in combinations(range(n), k):
            out.append(tuple("*" if i in pos else a for i, a in enumerate(args)))
    return out


def load_fixture(path: str | Path, **kw: Any) -> FakeNvml:
    return FakeNvml.from_file(path, **kw)


# -- recording (real GPU) --------------------------------------------------------------------


class RecordingNvml(types.ModuleType):
    """Wraps the real ``pynvml``: every function in :data:`NVML_FUNCTIONS_USED` is called through and
    its answer (or NVML error) is appended to a call table in the fixture format."""

    def __init__(self, nvml: Any = pynvml) -> None:
        super().__init__("recording_pynvml")
        self._nvml = nvml
        self._handles: list[tuple[Any, int]] = []
        self.table: dict[str, Any] = {"devices": [], "events": []}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._nvml, name)
        if name not in NVML_FUNCTIONS_USED or not callable(real):
            return real

        def wrapped(*args: Any) -> Any:
            try:
                res = real(*args)
                rec: Any = self._encode(name, res)
            except self._nvml.NVMLError as exc:
                rec = {"error": _ERROR_NAMES.get(exc.value, exc.value)}
                self._store(name, args, rec)
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                with self._lock:
                    self._handles.append((res, int(args[0])))
                    while len(self.table["devices"]) <= int(args[0]):
                        self.table["devices"].append({})
            elif name == "nvmlEventSetWait_v2":
                idx = self._index_of(res.device)
                self.table["events"].append({"device": idx, "eventType": int(res.eventType),
                                             "eventData": int(res.eventData),
                                             "gpuInstanceId": int(res.gpuInstanceId),
                                             "computeInstanceId": int(res.computeInstanceId)})
            else:
                self._store(name, args, rec)
            return res

        return wrapped

    def _index_of(self, handle: Any) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetIndex(handle))
        except Exception:
            return None

    @staticmethod
    def _encode(name: str, res: Any) -> Any:
        if name == "nvmlDeviceGetPciInfo":
            bus = res.busId
            return {"busId": bus.decode() if isinstance(bus, bytes) else str(bus)}
        if isinstance(res, bytes):
            return res.decode(errors="replace")
        if isinstance(res, tuple):
            return list(res)
        if isinstance(res, (int, float, str, list)) or res is None:
            return res
        return repr(res)

    def _store(self, name: str, args: tuple, rec: Any) -> None:
        if name in ("nvmlEventSetWait_v2", "nvmlEventSetCreate", "nvmlEventSetFree", "nvmlShutdown",
                    "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetIndex"):
            return
        with self._lock:
            if args and not isinstance(args[0], (int, str)):
                idx = self._index_of(args[0])
                if idx is None or idx >= len(self.table["devices"]):
                    return
                rest = () if name == "nvmlDeviceRegisterEvents" else args[1:]  # its args: mask, set
                key = f"{name}({','.join(str(int(a)) for a in rest)})" if rest else name
                dev = self.table["devices"][idx]
                dev.setdefault(key, {"series": []})["series"].append(rec)
            else:
                self.table.setdefault(name, {"series": []})["series"].append(rec)

    def fixture(self, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        def collapse(v: Any) -> Any:
            if isinstance(v, dict) and "series" in v:
                s = v["series"]
                if s and all(x == s[0] for x in s):
                    return s[0]
            return v

        out: dict[str, Any] = {"meta": meta or {}}
        for k, v in self.table.items():
            if k == "devices":
                out["devices"] = [{dk: collapse(dv) for dk, dv in d.items()} for d in v]
            elif k == "events":
                out["events"] = v
            else:
                out[k] = collapse(v)
        return out


def record(out: str | Path, reads: int = 3, interval_s: float = 5.0, wait_ms: int = 10000) -> dict[str, Any]:
    """Record a fixture on a GPU node: ``reads`` full reads ``interval_s`` apart, then Xid waits
    totalling ``wait_ms``."""
    rec = RecordingNvml()
    reader = NvmlReader(nvml=rec)
    reader.open()
    try:
        for i in range(reads):
            reader.read()
            if i + 1 < reads:
                time.sleep(interval_s)
        reader.register_xid()
        deadline = time.monotonic() + wait_ms / 1000.0
        while time.monotonic() < deadline:
            reader.wait_xid(min(1000, wait_ms))
    finally:
        reader.close()
    fx = rec.fixture({"recorded_by": "revive.gpu.fake_nvml.record", "node": reader.node,
                      "pynvml": getattr(pynvml, "__version__", "nvidia-ml-py"),
                      "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    Path(out).write_text(json.dumps(fx, indent=1) + "\n", encoding="utf-8")
    return fx


if __name__ == "__main__":  # pragma: no cover - needs a GPU
    import argparse

    p = argparse.ArgumentParser(prog="python -m revive.gpu.fake_nvml")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record a fake-NVML fixture from this node's real GPUs")
    r.add_argument("out")
    r.add_argument("--reads", type=int, default=3)
    r.add_argument("--interval", type=float, default=5.0)
    r.add_argument("--wait-ms", type=int, default=10000)
    a = p.parse_args()
    try:
        record(a.out, a.reads, a.interval, a.wait_ms)
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
