"""Every committed incident history replays against the current workflow code (determinism gate).

Histories are recorded by ``tests/workflows/record_histories.py``; ``temporal workflow show -w ID
--output json`` exports from a real server load the same way (``revive replay FILE``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from cli.replay import load_history, replay_files
from worker.main import WORKFLOWS

HISTORIES = sorted((Path(__file__).resolve().parents[1] / "histories").glob("*.json"))


def test_histories_are_committed():
    assert len(HISTORIES) >= 4


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path):
    await Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter).replay_workflow(load_history(path))


async def test_revive_replay_reports_no_failures():
    assert await replay_files(HISTORIES) == {}


async def test_a_changed_workflow_fails_replay():
    path = next(p for p in HISTORIES if "runbook" not in p.name)
    from temporalio.workflow import NondeterminismError

    from tests.workflows.changed_incident import ChangedIncidentWorkflow

    with pytest.raises(NondeterminismError):
        await Replayer(workflows=[ChangedIncidentWorkflow], data_converter=pydantic_data_converter).replay_workflow(
            load_history(path))
