"""Runbook: a hung job (no progress line within the hang window)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.models import RunbookInput, RunbookName, RunbookResult
    from runbooks import steps


@workflow.defn
class HangRunbook:
    """Diagnostics first, then end the stuck attempt by requeueing it, then verify.

    Diagnostics: ``scontrol show job``, the last progress line per rank, and a ``py-spy dump`` of
    the training processes on each node where py-spy is installed. ``scontrol requeue`` terminates
    the stuck attempt and queues the next one from the last checkpoint.
    """

    @workflow.run
    async def run(self, inp: RunbookInput) -> RunbookResult:
        log = steps.RunbookLog(RunbookName.hang)
        try:
            job = await steps.check_same_job(inp)
            log.diagnostics = await steps.diagnose(inp, job.nodes)
            inp = await steps.save_before_requeue(inp, log, job)  # only with save_before_requeue.on_hang
            requeued = await steps.requeue(inp)
            log.add(requeued)
        except steps.StepRefused as e:
            return log.refused(str(e))
        return await steps.finish(inp, log, requeued, excluded=[])
