"""Fixtures for the observability tests: an OTLP/HTTP receiver on loopback, a clean OTEL_* env."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.revive.observability.otlp_receiver import OTLPReceiver


@pytest.fixture
def otlp_receiver() -> Iterator[OTLPReceiver]:
    """A started ``OTLPReceiver`` on 127.0.0.1 (free port); stopped after the test."""
    with OTLPReceiver() as rx:
        yield rx


@pytest.fixture
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No ``OTEL_*`` variable from the outer environment leaks into the test."""
    for k in list(os.environ):
        if k.startswith("OTEL_"):
            monkeypatch.delenv(k)
    return monkeypatch
