"""Replay exported incident histories against the current workflow code (the SDK's Replayer).

The ``temporal`` CLI exports (``temporal workflow show -w ID --output json``) but cannot replay;
this does. A history that no longer replays means a workflow change needs ``workflow.patched``.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer


def load_history(path: Path) -> WorkflowHistory:
    """Load a CLI- or SDK-exported JSON history; the workflow id is taken from the file name."""
    text = path.read_text()
    wid = path.stem
    try:
        first = json.loads(text)["events"][0]
        wid = first.get("workflowExecutionStartedEventAttributes", {}).get("workflowId", wid) or wid
    except (ValueError, KeyError, IndexError):
        pass
    return WorkflowHistory.from_json(wid, text)


async def replay_files(files: list[Path]) -> dict[str, str]:
    """Replay each file; returns {file: error} for those that fail (empty = all good)."""
    from worker.main import WORKFLOWS

    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    failures: dict[str, str] = {}
    for f in files:
        try:
            await replayer.replay_workflow(load_history(f))
        except Exception as e:
            failures[str(f)] = f"{type(e).__name__}: {e}"
    return failures
