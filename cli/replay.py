"""Replay exported incident histories against the current workflow code (the SDK's Replayer).

The ``temporal`` CLI exports (``temporal workflow show -w ID --output json``) but cannot replay;
this does. A history that no longer replays means a workflow change needs ``workflow.patched``.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

MAX_HISTORY_BYTES = 256 << 20
"""Largest history file read (Temporal caps a history at 50 MB of events; its JSON export is larger)."""


class HistoryFileError(ValueError):
    """A file that is no exported workflow history (the replayer would crash or wait forever on it)."""


def _check_history(path: Path) -> tuple[str, str]:
    """(text, workflow id) of a history file, or ``HistoryFileError`` saying why it is none: only a
    regular file of at most ``MAX_HISTORY_BYTES``, a JSON object whose ``events`` start with a
    ``WorkflowExecutionStarted`` event naming a workflow this worker registers and its task queue,
    followed by at least one more event (the SDK's replayer panics or hangs on anything less)."""
    from worker.main import WORKFLOWS

    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise HistoryFileError("not a regular file")
        if st.st_size > MAX_HISTORY_BYTES:
            raise HistoryFileError(f"{st.st_size} bytes; the limit is {MAX_HISTORY_BYTES}")
        with open(path, "rb") as fh:
            text = fh.read(MAX_HISTORY_BYTES).decode("utf-8")
        doc = json.loads(text)
    except HistoryFileError:
        raise
    except OSError as e:
        raise HistoryFileError(f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise HistoryFileError(f"not a text file (invalid UTF-8 at byte {e.start})") from None
    except (ValueError, RecursionError) as e:
        raise HistoryFileError(f"not JSON: {e}") from None
    events = doc.get("events") if isinstance(doc, dict) else None
    if not isinstance(events, list) or len(events) < 2 or not all(isinstance(e, dict) for e in events):
        raise HistoryFileError("not a workflow history: 'events' must list two events or more")
    first = events[0]
    attrs = first.get("workflowExecutionStartedEventAttributes")
    if first.get("eventType") not in ("EVENT_TYPE_WORKFLOW_EXECUTION_STARTED", "WorkflowExecutionStarted") \
            or not isinstance(attrs, dict):
        raise HistoryFileError("not a workflow history: the first event is not WorkflowExecutionStarted")
    wf_type = (attrs.get("workflowType") or {}).get("name") if isinstance(attrs.get("workflowType"), dict) else None
    names = {getattr(getattr(w, "__temporal_workflow_definition", None), "name", w.__name__) for w in WORKFLOWS}
    if wf_type not in names:
        raise HistoryFileError(f"workflow type {str(wf_type)[:80]!r} is none of this worker's ({', '.join(sorted(names))})")
    queue = attrs.get("taskQueue")
    if not isinstance(queue, dict) or not isinstance(queue.get("name"), str) or not queue["name"]:
        raise HistoryFileError("not a workflow history: the start event names no task queue")
    wid = attrs.get("workflowId")
    return text, wid if isinstance(wid, str) and wid else path.stem


def load_history(path: Path) -> WorkflowHistory:
    """Load a CLI- or SDK-exported JSON history (``HistoryFileError`` when it is none); the workflow
    id is the start event's, else the file name's."""
    text, wid = _check_history(path)
    try:
        return WorkflowHistory.from_json(wid, text)
    except Exception as e:  # protobuf's ParseError: a field of the wrong type
        raise HistoryFileError(f"not a workflow history: {type(e).__name__}: {str(e)[:300]}") from None


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
