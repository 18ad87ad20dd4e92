"""Runbook: unknown crash, transient communication error, preemption or time limit."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.models import RunbookInput, RunbookName, RunbookResult
    from runbooks import steps


@workflow.defn
class RestartInPlaceRunbook:
    """Requeue the job as it is and watch it resume (the retry budget stops a repeat)."""

    @workflow.run
    async def run(self, inp: RunbookInput) -> RunbookResult:
        log = steps.RunbookLog(RunbookName.restart_in_place)
        try:
            job = await steps.check_same_job(inp)
            stop = await steps.stop_on_suspect(inp, log)
            if stop is not None:
                return stop
            inp = await steps.save_before_requeue(inp, log, job)
            requeued = await steps.requeue(inp)
            log.add(requeued)
        except steps.StepRefused as e:
            return log.refused(str(e))
        return await steps.finish(inp, log, requeued, excluded=[])
