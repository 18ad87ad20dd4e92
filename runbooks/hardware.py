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
            await steps.check_same_job(inp)
            log.add(await steps.drain(inp, inp.plan.drain_nodes))
            # Drain first, then a plain requeue: no hold to strand, and Slurm never picks a drained node.
            requeued = await steps.requeue(inp)
            log.add(requeued)
        except steps.StepRefused as e:
            return log.refused(str(e))
        return log.done(await steps.verify(inp, excluded=inp.plan.drain_nodes, requeued=requeued))
