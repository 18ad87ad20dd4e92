"""Runbook: GPU hardware / ECC / NVLink / fatal Xid on an identified node."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.models import RunbookInput, RunbookName, RunbookResult
    from runbooks import steps


@workflow.defn
class DrainAndRequeueRunbook:
    """Drain the bad node (it needs work before reuse), requeue the job, verify it resumes."""

    @workflow.run
    async def run(self, inp: RunbookInput) -> RunbookResult:
        log = steps.RunbookLog(RunbookName.drain_and_requeue)
        try:
            job = await steps.check_same_job(inp)
            stop = await steps.stop_on_suspect(inp, log)
            if stop is not None:
                return stop
            log.add(await steps.drain(inp, inp.plan.drain_nodes))
            # drained first: a job that requeues itself after its save cannot land on the bad node
            inp = await steps.save_before_requeue(inp, log, job)
            # Drain first, then a plain requeue: no hold to strand, and Slurm never picks a drained node.
            requeued = await steps.requeue(inp)
            log.add(requeued)
        except steps.StepRefused as e:
            return log.refused(str(e))
        return await steps.finish(inp, log, requeued, excluded=inp.plan.drain_nodes)
