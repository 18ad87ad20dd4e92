"""GPU signals: the NVML node agent (:mod:`revive.gpu.nvml_agent`), the dcgm-exporter reader
(:mod:`revive.gpu.dcgm`), a fake NVML for tests (:mod:`revive.gpu.fake_nvml`) and the ``revive agent``
command line (:mod:`revive.gpu.agent_cli`). See ``docs/gpu-signals.md``.

Importing this package touches neither NVML nor prometheus-client; both load when first used.
"""

from revive.gpu.dcgm import DcgmParseError, DcgmScrapeError, DcgmScraper, DcgmTracker, GpuEvidence, parse_dcgm
from revive.gpu.nvml_agent import (
    GpuReading,
    HttpXidSink,
    JsonlXidSink,
    NodeReading,
    NvmlAgent,
    NvmlCollector,
    NvmlReader,
    NvmlUnavailable,
    XidEvent,
    exposition,
    serve,
)

__all__ = [
    "DcgmParseError", "DcgmScrapeError", "DcgmScraper", "DcgmTracker", "GpuEvidence", "parse_dcgm",
    "GpuReading", "HttpXidSink", "JsonlXidSink", "NodeReading", "NvmlAgent", "NvmlCollector", "NvmlReader",
    "NvmlUnavailable", "XidEvent", "exposition", "serve",
]
