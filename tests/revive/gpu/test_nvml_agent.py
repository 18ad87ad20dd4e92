"""NVML agent against the fake NVML (tests/data/gpu/fake_nvml_h100x2.json): reader → collector →
Prometheus text parsed back, Xid wait loop, NOT_SUPPORTED / GPU_IS_LOST fields, init failure, sinks."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC

import httpx
import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from revive.gpu import fake_nvml
from revive.gpu.fake_nvml import FakeNvml, RecordingNvml
from revive.gpu.nvml_agent import (
    NVML_CONSTANTS_USED,
    NVML_FUNCTIONS_USED,
    HttpXidSink,
    JsonlXidSink,
    NvmlAgent,
    NvmlCollector,
    NvmlReader,
    NvmlUnavailable,
    XidEvent,
    exposition,
    serve,
)

from .conftest import nvml_library_present

NODE = "gpu-node-07"
UUID0 = "GPU-3f1c9a52-7d0e-4b8a-9c61-2e5f8a1d4b70"
UUID1 = "GPU-8a27d4e1-05b3-4f9c-a2d8-6c4e1b9f3a05"


def reader_for(fx: dict, **kw) -> tuple[FakeNvml, NvmlReader]:
    fake = FakeNvml(fx, **kw)
    return fake, NvmlReader(nvml=fake, node=NODE).open()


def scrape(reader: NvmlReader, collector: NvmlCollector | None = None) -> dict[str, list]:
    """Exposition text parsed back with prometheus_client's parser: sample name → samples."""
    text = exposition(collector or NvmlCollector(reader))
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def one(samples: list, **labels) -> float:
    hits = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (labels, hits)
    return hits[0].value


# -- the boundary -----------------------------------------------------------------------------

def test_every_name_used_exists_in_real_pynvml_and_in_the_fake():
    fake = FakeNvml()
    for name in NVML_FUNCTIONS_USED:
        assert callable(getattr(pynvml, name)), name
        assert callable(getattr(fake, name)), name
    for name in NVML_CONSTANTS_USED:
        assert getattr(fake, name) == getattr(pynvml, name), name
    assert fake.NVMLError is pynvml.NVMLError
    assert fake.NVMLError_NotSupported is pynvml.NVMLError_NotSupported


def test_fake_raises_real_pynvml_errors(fixture_dict):
    fake, _ = reader_for(fixture_dict)
    h = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported) as e:
        fake.nvmlDeviceGetRetiredPagesPendingStatus(h)
    assert e.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    fake.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


# -- reader → collector → text --------------------------------------------------------------

def test_reader_collector_exposition_round_trip(fixture_dict):
    fake, reader = reader_for(fixture_dict)
    assert [(d.index, d.uuid, d.pci_bus_id) for d in reader.devices] == [
        (0, UUID0, "00000000:18:00.0"), (1, UUID1, "00000000:2a:00.0")]
    m = scrape(reader)
    assert not fake.unrecorded, fake.unrecorded  # the fixture answers every call the reader makes
    lab1 = dict(node=NODE, gpu="1", uuid=UUID1, pci_bus_id="00000000:2a:00.0")
    assert one(m["revive_gpu_agent_up"], node=NODE) == 1
    assert one(m["revive_gpu_count"], node=NODE) == 2
    assert one(m["revive_gpu_info"], gpu="0", name="NVIDIA H100 80GB HBM3", driver_version="550.90.07") == 1
    assert one(m["revive_gpu_sm_clock_mhz"], **lab1) == 1035
    assert one(m["revive_gpu_power_watts"], gpu="0") == pytest.approx(412.345)  # 412345 mW
    assert one(m["revive_gpu_temperature_celsius"], gpu="1") == 86
    assert one(m["revive_gpu_ecc_errors_total"], gpu="0", error_type="corrected", counter="aggregate") == 7
    assert one(m["revive_gpu_ecc_errors_total"], gpu="0", error_type="uncorrected", counter="volatile") == 0
    assert one(m["revive_gpu_remapped_rows"], gpu="0", error_type="uncorrectable") == 0
    assert one(m["revive_gpu_clocks_event_reasons"], gpu="1") == 0x48
    assert one(m["revive_gpu_clock_event_active"], gpu="1", reason="hw_slowdown") == 1
    assert one(m["revive_gpu_clock_event_active"], gpu="1", reason="hw_thermal_slowdown") == 1
    assert one(m["revive_gpu_clock_event_active"], gpu="1", reason="sw_power_cap") == 0
    assert one(m["revive_gpu_nvlink_errors_total"], gpu="1", link="5", counter="crc_flit") == 12
    assert one(m["revive_gpu_nvlink_errors_total"], gpu="1", link="5", counter="replay") == 2
    assert len([s for s in m["revive_gpu_nvlink_errors_total"] if s.labels["gpu"] == "0"]) == 18 * 4
    # H100: page retirement is not supported (row remapping replaces it): recorded, not raised
    assert one(m["revive_gpu_field_unavailable"], gpu="0", field="retired_pages_dbe",
               reason="Not Supported (NVML 3)") == 1
    assert "revive_gpu_retired_pages" not in m
    for s in m["revive_gpu_sm_clock_mhz"]:
        assert set(s.labels) == {"node", "gpu", "uuid", "pci_bus_id"}


def test_rising_uncorrected_ecc_and_nvlink_crc_across_reads(fixture_dict):
    _, reader = reader_for(fixture_dict)
    a, b = reader.read(), reader.read()
    assert (a.gpus[0].values["ecc_volatile_uncorrected"], b.gpus[0].values["ecc_volatile_uncorrected"]) == (0, 2)
    assert b.gpus[0].values["remap_pending"] == 1 and b.gpus[0].values["remapped_rows_uncorrectable"] == 1
    assert (a.gpus[1].nvlink[5]["crc_flit"], b.gpus[1].nvlink[5]["crc_flit"]) == (12, 480)
    assert b.gpus[1].values["sm_clock_mhz"] == 990


def test_gpu_lost_is_recorded_and_the_other_gpu_still_read(fixture_dict):
    fake, reader = reader_for(fixture_dict)
    reader.read(), reader.read()
    before = len(fake.calls)
    r = reader.read()
    g0, g1 = r.gpus
    assert g0.lost and not g0.values and g0.unavailable["ecc_volatile_corrected"] == "GPU is lost (NVML 15)"
    calls_on_lost = [c for c in fake.calls[before:] if c[1][0] == 0]
    assert len(calls_on_lost) == 1  # the rest of the lost device is skipped
    assert g1.values["sm_clock_mhz"] == 1005 and not g1.lost
    m = scrape(reader)
    assert one(m["revive_gpu_lost"], gpu="0") == 1 and one(m["revive_gpu_lost"], gpu="1") == 0


def test_unsupported_and_failing_fields_never_raise(fixture_dict):
    d1 = fixture_dict["devices"][1]
    d1["nvmlDeviceGetPowerUsage"] = {"error": "NVML_ERROR_NOT_SUPPORTED"}
    d1["nvmlDeviceGetCurrentClocksEventReasons"] = {"error": "NVML_ERROR_FUNCTION_NOT_FOUND"}
    d1["nvmlDeviceGetCurrentClocksThrottleReasons"] = 4  # older driver: the deprecated call answers
    for k in [k for k in d1 if k.startswith("nvmlDeviceGetNvLinkState")]:
        del d1[k]
    d1["nvmlDeviceGetNvLinkState(*)"] = {"error": "NVML_ERROR_NOT_SUPPORTED"}  # PCIe card
    d1["nvmlDeviceGetRemappedRows"] = {"error": "NVML_ERROR_NO_PERMISSION"}
    fake, reader = reader_for(fixture_dict)

    def boom(*a):
        raise RuntimeError("driver hiccup")

    fake.nvmlDeviceGetTemperature = boom
    g = reader.read().gpus[1]
    assert g.unavailable["power_w"] == "Not Supported (NVML 3)"
    assert g.values["clocks_event_reasons"] == 4
    assert g.unavailable["nvlink"] == "Not Supported (NVML 3)" and g.nvlink == {}
    assert g.unavailable["remapped_rows"] == "Insufficient Permissions (NVML 4)"
    assert g.unavailable["temperature_c"] == "RuntimeError: driver hiccup"
    assert g.values["sm_clock_mhz"] == 1035
    m = scrape(reader)
    assert one(m["revive_gpu_field_unavailable"], gpu="1", field="power_w") == 1
    assert not [s for s in m.get("revive_gpu_power_watts", []) if s.labels["gpu"] == "1"]


@pytest.mark.parametrize("err,code,text", [
    ("NVML_ERROR_LIBRARY_NOT_FOUND", 12, "NVML Shared Library Not Found"),
    ("NVML_ERROR_DRIVER_NOT_LOADED", 9, "Driver Not Loaded"),
    ("NVML_ERROR_NO_PERMISSION", 4, "Insufficient Permissions"),
])
def test_init_failure_is_a_clear_error(fixture_dict, err, code, text):
    with pytest.raises(NvmlUnavailable) as e:
        NvmlReader(nvml=FakeNvml(fixture_dict, init_error=err), node=NODE).open()
    assert e.value.code == code
    assert str(e.value).startswith("NVML unavailable:") and text in str(e.value)


@pytest.mark.skipif(nvml_library_present(), reason="this machine has libnvidia-ml")
def test_real_pynvml_without_the_driver_library():
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found"):
        NvmlReader().open()


def test_read_before_open_and_a_failing_collector(fixture_dict):
    r = NvmlReader(nvml=FakeNvml(fixture_dict), node=NODE)
    with pytest.raises(NvmlUnavailable, match="not open"):
        r.read()
    m = scrape(r)  # a scrape of a reader that cannot read: up 0, nothing else, no exception
    assert one(m["revive_gpu_agent_up"], node=NODE) == 0 and set(m) == {"revive_gpu_agent_up"}


def test_serve_over_http(fixture_dict):
    _, reader = reader_for(fixture_dict)
    server, thread = serve(NvmlCollector(reader), port=0, addr="127.0.0.1")
    try:
        resp = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5)
        assert resp.status_code == 200
        assert 'revive_gpu_sm_clock_mhz{gpu="1",node="gpu-node-07"' in resp.text
    finally:
        server.shutdown()


# -- Xid events -------------------------------------------------------------------------------

async def test_wait_loop_delivers_one_trigger_per_event(fixture_dict):
    fixture_dict["events"] = [
        {"device": 0, "eventType": "nvmlEventTypeXidCriticalError", "eventData": 79, "after_timeouts": 2},
        {"device": 1, "eventType": "nvmlEventTypeXidCriticalError", "eventData": 74},
        {"device": 0, "eventType": "nvmlEventTypeXidCriticalError", "eventData": 79},
        {"device": 1, "eventType": "nvmlEventTypeSingleBitEccError", "eventData": 0},  # not registered
    ]
    fake, reader = reader_for(fixture_dict)
    got: list[XidEvent] = []

    async def on_xid(ev: XidEvent) -> None:
        got.append(ev)

    agent = NvmlAgent(reader, on_xid, wait_timeout_ms=20)
    stop = asyncio.Event()
    seen = await asyncio.wait_for(agent.run(stop, max_events=3), timeout=10)
    assert seen == 3 and agent.dispatched == 3
    assert [(e.gpu_index, e.uuid, e.pci_bus_id, e.xid, e.node) for e in got] == [
        (0, UUID0, "00000000:18:00.0", 79, NODE), (1, UUID1, "00000000:2a:00.0", 74, NODE),
        (0, UUID0, "00000000:18:00.0", 79, NODE)]
    assert all(e.at.tzinfo is not None and e.gpu_instance_id is None for e in got)
    assert fake.pending_events == 1  # the SBE event was never delivered: only Xid was registered
    m = scrape(reader, NvmlCollector(reader, agent.xid_stats))
    assert one(m["revive_gpu_xid_events_total"], gpu="0", xid="79") == 2
    assert one(m["revive_gpu_last_xid"], gpu="1") == 74


async def test_wait_runs_in_a_thread_and_stop_is_prompt(fixture_dict):
    fixture_dict["events"] = []
    _, reader = reader_for(fixture_dict)
    agent = NvmlAgent(reader, [], wait_timeout_ms=50)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    ticks = 0
    for _ in range(20):  # the loop keeps running while NVML waits
        await asyncio.sleep(0.01)
        ticks += 1
    stop.set()
    assert await asyncio.wait_for(task, timeout=2) == 0
    assert ticks == 20


async def test_xid_registration_not_supported_on_one_device(fixture_dict):
    fixture_dict["devices"][1]["nvmlDeviceRegisterEvents"] = {"error": "NVML_ERROR_NOT_SUPPORTED"}
    fixture_dict["events"] = [{"device": 1, "eventData": 31}, {"device": 0, "eventData": 79}]
    _, reader = reader_for(fixture_dict)
    got: list[XidEvent] = []

    async def on_xid(ev):
        got.append(ev)

    await asyncio.wait_for(NvmlAgent(reader, on_xid, wait_timeout_ms=10).run(asyncio.Event(), max_events=1), 10)
    assert [e.xid for e in got] == [79]
    assert reader.xid_unavailable == {1: "Not Supported (NVML 3)"}
    m = scrape(reader)
    assert one(m["revive_gpu_field_unavailable"], gpu="1", field="xid_events") == 1


async def test_no_device_accepts_xid_registration(fixture_dict):
    for d in fixture_dict["devices"]:
        d["nvmlDeviceRegisterEvents"] = {"error": "NVML_ERROR_NOT_SUPPORTED"}
    _, reader = reader_for(fixture_dict)
    assert await asyncio.wait_for(NvmlAgent(reader, []).run(asyncio.Event()), 5) == 0


async def test_failing_or_slow_callback_never_blocks_the_wait(fixture_dict):
    fixture_dict["events"] = [{"device": 0, "eventData": 79}, {"device": 1, "eventData": 48}]
    _, reader = reader_for(fixture_dict)
    started: list[float] = []
    ok: list[int] = []
    t0 = time.monotonic()

    async def slow(ev):
        started.append(time.monotonic() - t0)
        await asyncio.sleep(0.3)

    async def broken(ev):
        raise ValueError("sink down")

    async def good(ev):
        ok.append(ev.xid)

    agent = NvmlAgent(reader, [broken, slow, good], wait_timeout_ms=10)
    assert await asyncio.wait_for(agent.run(asyncio.Event(), max_events=2), 10) == 2
    assert ok == [79, 48] and agent.dispatched == 2
    assert started[1] < 0.25  # the second event was dispatched while the first sink still slept


# -- sinks ------------------------------------------------------------------------------------

def _ev(xid: int = 79) -> XidEvent:
    from datetime import datetime

    return XidEvent(node=NODE, gpu_index=0, uuid=UUID0, pci_bus_id="00000000:18:00.0", xid=xid,
                    at=datetime(2026, 12, 1, 9, 30, tzinfo=UTC))


async def test_jsonl_sink(tmp_path):
    sink = JsonlXidSink(tmp_path / "sub" / "xid.jsonl")
    await sink(_ev(79))
    await sink(_ev(48))
    lines = [json.loads(x) for x in (tmp_path / "sub" / "xid.jsonl").read_text().splitlines()]
    assert [x["xid"] for x in lines] == [79, 48]
    assert lines[0] == {"node": NODE, "gpu_index": 0, "uuid": UUID0, "pci_bus_id": "00000000:18:00.0", "xid": 79,
                        "at": "2026-12-01T09:30:00+00:00", "gpu_instance_id": None}


async def test_http_sink_posts_json_retries_5xx_not_4xx():
    seen: list[dict] = []
    answers = [503, 200, 400]

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(json.loads(req.content))
        return httpx.Response(answers.pop(0))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        sink = HttpXidSink("http://revive.example/xid?token=secret", client=client, retries=2, backoff_s=0)
        assert await sink(_ev(79)) is True  # 503 then 200
        assert await sink(_ev(48)) is False  # 400: not retried
    assert [s["xid"] for s in seen] == [79, 79, 48]


async def test_http_sink_connection_errors_are_bounded(caplog):
    calls = 0

    def handler(req):
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("refused", request=req)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        sink = HttpXidSink("http://revive.example/xid?token=secret", client=client, retries=1, backoff_s=0)
        assert await sink(_ev()) is False
    assert calls == 2
    assert "secret" not in caplog.text


# -- recording ----------------------------------------------------------------------------------

def test_recording_replays_to_the_same_readings(fixture_dict):
    """RecordingNvml around an NVML module (here the fake standing in for the driver) writes a
    fixture that the fake replays into the same readings: the recorder works without a GPU."""
    source = FakeNvml(fixture_dict)
    rec = RecordingNvml(nvml=source)
    r1 = NvmlReader(nvml=rec, node=NODE).open()
    first = [r1.read(), r1.read()]
    r1.register_xid()
    while source.pending_events:
        r1.wait_xid(10)
    fx = rec.fixture({"recorded_by": "test"})
    json.dumps(fx)  # serialisable
    assert fx["events"] and fx["events"][0]["eventData"] == 79
    replay = FakeNvml(fx)
    r2 = NvmlReader(nvml=replay, node=NODE).open()
    again = [r2.read(), r2.read()]
    for a, b in zip(first, again, strict=False):
        for ga, gb in zip(a.gpus, b.gpus, strict=False):
            assert (ga.values, ga.nvlink, ga.unavailable, ga.uuid, ga.pci_bus_id) == \
                   (gb.values, gb.nvlink, gb.unavailable, gb.uuid, gb.pci_bus_id)
    assert not replay.unrecorded


def test_fixture_key_errors_are_clear():
    with pytest.raises(ValueError, match="unknown pynvml constant 'NVML_NO_SUCH'"):
        FakeNvml({"devices": [{"nvmlDeviceGetClockInfo(NVML_NO_SUCH)": 1}]})
    assert fake_nvml.load_fixture  # public helper


def test_close_during_a_wait_does_not_free_the_set_under_it(fixture_dict):
    import threading

    fixture_dict["events"] = []
    fake, reader = reader_for(fixture_dict)
    reader.register_xid()
    errors: list[BaseException] = []

    def waiter():
        try:
            for _ in range(20):
                reader.wait_xid(5)
        except BaseException as exc:  # pragma: no cover - the failure being guarded against
            errors.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.02)
    reader.close()
    t.join(5)
    assert not t.is_alive() and not errors
    assert fake.event_sets[0].freed and fake.init_count == 0
    assert reader.wait_xid(5) is None  # closed: no wait at all


def test_xid_event_as_a_kernel_line_matches_the_catalog():
    from revive.signatures.matcher import scan_text

    line = _ev(79).kernel_line()
    assert line.startswith("NVRM: Xid (PCI:0000:18:00): 79, ")
    hits = [m for _, m in scan_text(line) if m.id == "xid.event"]
    assert hits and hits[0].fields["pci"] == "0000:18:00" and hits[0].fields["xid"] == "79"


def test_fake_monkeypatched_over_pynvml_drives_the_default_reader(monkeypatch, fixture_dict):
    import sys

    fake = FakeNvml(fixture_dict)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reader = NvmlReader(node=NODE).open()  # no module passed: the default import path
    assert reader.nvml is fake and reader.read().gpus[1].values["sm_clock_mhz"] == 1035


def test_device_count_failure_after_init(fixture_dict):
    fixture_dict["nvmlDeviceGetCount"] = {"error": "NVML_ERROR_UNKNOWN"}
    fake = FakeNvml(fixture_dict)
    with pytest.raises(NvmlUnavailable, match="device count failed: Unknown Error") as e:
        NvmlReader(nvml=fake, node=NODE).open()
    assert e.value.code == pynvml.NVML_ERROR_UNKNOWN and fake.init_count == 0
