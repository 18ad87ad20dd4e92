"""``revive agent``: the GPU node agent's command line (a typer sub-app).

Mount with ``app.add_typer(agent_app, name="agent")`` in ``revive/cli.py``; until then it runs as
``python -m revive.gpu.agent_cli``. ``--help`` works on any machine (nothing touches NVML before a
command runs). A command that needs NVML on a machine without the NVIDIA driver
(``libnvidia-ml.so.1``) prints ``NVML unavailable: …`` and exits 3.

Commands:

- ``run``: serve ``/metrics`` (``revive_gpu_*``) on ``--addr:--port`` and send every Xid event to
  ``--xid-jsonl`` (JSON lines) and/or ``--xid-url`` (HTTP POST of the JSON); runs until SIGINT/SIGTERM;
- ``check``: read every GPU once and print what was read and what was unavailable (``--json``);
- ``dump``: print one scrape's Prometheus text;
- ``dcgm``: scrape dcgm-exporter URLs ``--count`` times and print the evidence (JSON lines).

``--fake FIXTURE`` (hidden) runs any command on :mod:`revive.gpu.fake_nvml` instead of the driver.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Annotated, Any

import typer

from revive.gpu.nvml_agent import (
    HttpXidSink,
    JsonlXidSink,
    KernelLineXidSink,
    NvmlAgent,
    NvmlCollector,
    NvmlReader,
    NvmlUnavailable,
    XidStats,
    exposition,
    serve,
)

EXIT_NVML_UNAVAILABLE = 3
DEFAULT_PORT = 9835

app = typer.Typer(name="agent", no_args_is_help=True, add_completion=False,
                  help="GPU node agent: NVML health as Prometheus metrics, Xid events as Revive triggers. "
                       "Run one per GPU node.")

FakeOpt = Annotated[str | None, typer.Option("--fake", hidden=True, help="fake NVML fixture (JSON) instead of the driver")]
NodeOpt = Annotated[str | None, typer.Option("--node", help="node name in labels and events (default: hostname)")]


def load_nvml(fake: str | None) -> Any:
    """The NVML module: ``pynvml``, or a :class:`~revive.gpu.fake_nvml.FakeNvml` for ``--fake``.
    Tests monkeypatch this."""
    if fake:
        from revive.gpu.fake_nvml import FakeNvml

        return FakeNvml.from_file(fake)
    import pynvml

    return pynvml


def _open(fake: str | None, node: str | None) -> NvmlReader:
    try:
        return NvmlReader(nvml=load_nvml(fake), node=node).open()
    except NvmlUnavailable as exc:
        typer.echo(f"{exc}. The agent needs an NVIDIA GPU with its driver (libnvidia-ml.so.1) on this machine.",
                   err=True)
        raise typer.Exit(EXIT_NVML_UNAVAILABLE) from None
    except (OSError, ValueError) as exc:  # unreadable --fake fixture
        typer.echo(f"error: cannot load NVML: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command("check")
def check(node: NodeOpt = None, as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
          fake: FakeOpt = None) -> None:
    """Read every GPU once; print values and the fields NVML could not read."""
    reader = _open(fake, node)
    try:
        r = reader.read()
        reader.register_xid()
        xid_un = reader.xid_unavailable
    finally:
        reader.close()
    if as_json:
        typer.echo(json.dumps({
            "node": r.node, "at": r.at.isoformat(), "driver_version": r.driver_version,
            "gpus": [{"index": g.index, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id, "name": g.name,
                      "lost": g.lost, "values": g.values,
                      "nvlink": {str(k): v for k, v in g.nvlink.items()}, "unavailable": g.unavailable,
                      "xid_events": "unavailable: " + xid_un[g.index] if g.index in xid_un else "registered"}
                     for g in r.gpus]}, indent=1, sort_keys=True))
        return
    typer.echo(f"{r.node}: {len(r.gpus)} GPU(s), driver {r.driver_version or '?'}")
    for g in r.gpus:
        vals = ", ".join(f"{k}={v:g}" for k, v in sorted(g.values.items()))
        nvl = sum(sum(c.values()) for c in g.nvlink.values())
        typer.echo(f"  GPU {g.index} {g.name or '?'} {g.uuid or '?'} {g.pci_bus_id or '?'}{' LOST' if g.lost else ''}")
        typer.echo(f"    {vals or 'no values'}; NVLink links {len(g.nvlink)}, error counts total {nvl:g}")
        if g.index in xid_un:
            typer.echo(f"    Xid events unavailable: {xid_un[g.index]}")
        for f, why in sorted(g.unavailable.items()):
            typer.echo(f"    unavailable {f}: {why}")


@app.command("dump")
def dump(node: NodeOpt = None, fake: FakeOpt = None) -> None:
    """Print the Prometheus text one scrape of the agent would return."""
    reader = _open(fake, node)
    try:
        typer.echo(exposition(NvmlCollector(reader)), nl=False)
    finally:
        reader.close()


@app.command("run")
def run(
    port: Annotated[int, typer.Option("--port", help="port for /metrics")] = DEFAULT_PORT,
    addr: Annotated[str, typer.Option("--addr", help="address to bind /metrics on")] = "0.0.0.0",
    node: NodeOpt = None,
    xid_jsonl: Annotated[str | None, typer.Option("--xid-jsonl", help="append each Xid event to this JSON-lines file")] = None,
    xid_url: Annotated[str | None, typer.Option("--xid-url", help="POST each Xid event as JSON to this URL")] = None,
    xid_kernel_log: Annotated[str | None, typer.Option(
        "--xid-kernel-log", help="append each Xid event as an 'NVRM: Xid' line to this file (Revive's kernel_log)")] = None,
    xid_timeout_s: Annotated[float, typer.Option("--xid-timeout", help="seconds per POST attempt")] = 5.0,
    wait_ms: Annotated[int, typer.Option("--wait-ms", help="NVML event wait slice [ms]")] = 1000,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="do not serve /metrics")] = False,
    max_events: Annotated[int | None, typer.Option("--max-events", hidden=True)] = None,
    fake: FakeOpt = None,
) -> None:
    """Serve /metrics and forward Xid events until SIGINT/SIGTERM."""
    reader = _open(fake, node)
    sinks: list[Any] = []
    if xid_jsonl:
        sinks.append(JsonlXidSink(xid_jsonl))
    if xid_kernel_log:
        sinks.append(KernelLineXidSink(xid_kernel_log))
    if xid_url:
        sinks.append(HttpXidSink(xid_url, timeout_s=xid_timeout_s))
    if not sinks:
        typer.echo("warning: no --xid-jsonl / --xid-url: Xid events are only counted in the metrics", err=True)
    stats = XidStats()
    server = None
    try:
        if not no_metrics:
            try:
                server, _thread = serve(NvmlCollector(reader, stats), port=port, addr=addr)
            except OSError as exc:
                typer.echo(f"error: cannot serve /metrics on {addr}:{port}: {exc}", err=True)
                raise typer.Exit(2) from None
            typer.echo(f"serving /metrics on {addr}:{port} for {reader.node} ({len(reader.devices)} GPU(s))", err=True)

        async def main() -> int:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, stop.set)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass
            agent = NvmlAgent(reader, sinks, wait_timeout_ms=wait_ms, xid_stats=stats)
            return await agent.run(stop, max_events=max_events)

        seen = asyncio.run(main())
        typer.echo(f"stopped after {seen} Xid event(s)", err=True)
    finally:
        if server is not None:
            server.shutdown()
        reader.close()


@app.command("dcgm")
def dcgm(
    urls: Annotated[list[str], typer.Argument(help="dcgm-exporter /metrics URLs, one per node")],
    count: Annotated[int, typer.Option("--count", help="number of scrapes (evidence needs 2 or more)")] = 2,
    interval_s: Annotated[float, typer.Option("--interval", help="seconds between scrapes")] = 15.0,
    timeout_s: Annotated[float, typer.Option("--timeout", help="seconds per request")] = 5.0,
    samples: Annotated[bool, typer.Option("--samples", help="also print every GpuSample")] = False,
) -> None:
    """Scrape dcgm-exporters and print evidence (new Xid, DBE rise, remap failure, slow node) as JSON lines."""
    import httpx

    from revive.errors import EvidenceError
    from revive.gpu.dcgm import DcgmScraper, DcgmTracker

    async def main() -> int:
        tracker = DcgmTracker()
        failures = 0
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            scrapers = [DcgmScraper(u, client, timeout_s=timeout_s) for u in urls]
            for i in range(count):
                batch = []
                results = await asyncio.gather(*(s.scrape() for s in scrapers), return_exceptions=True)
                for _s, res in zip(scrapers, results, strict=False):
                    if isinstance(res, EvidenceError):
                        failures += 1
                        typer.echo(json.dumps({"kind": "scrape_error", "detail": str(res)}))
                    elif isinstance(res, BaseException):
                        raise res
                    else:
                        batch.extend(res)
                if samples:
                    for smp in batch:
                        typer.echo(smp.model_dump_json())
                for ev in tracker.update(batch):
                    typer.echo(json.dumps(ev.to_dict(), default=str))
                if i + 1 < count:
                    await asyncio.sleep(interval_s)
        return failures

    failures = asyncio.run(main())
    if failures and failures == count * len(urls):
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
