"""A 'deploy' of IncidentWorkflow that changed its command sequence without ``workflow.patched``.
Its own module: the sandbox re-imports a workflow's module, so keep it free of other imports."""

from __future__ import annotations

from temporalio import workflow


@workflow.defn(name="IncidentWorkflow")
class ChangedIncidentWorkflow:
    @workflow.init
    def __init__(self, inp: dict) -> None:
        pass

    @workflow.run
    async def run(self, inp: dict) -> None:
        await workflow.sleep(1)
