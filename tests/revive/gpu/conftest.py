from __future__ import annotations

import ctypes.util
import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "gpu"
FAKE_FIXTURE = DATA / "fake_nvml_h100x2.json"


def nvml_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return ctypes.util.find_library("nvidia-ml") is not None


@pytest.fixture
def fixture_dict() -> dict:
    return json.loads(FAKE_FIXTURE.read_text())


@pytest.fixture
def data_dir() -> Path:
    return DATA
