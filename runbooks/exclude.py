"""Runbook: node failure, straggler, or a communication error that names its node."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.models import RunbookInput, RunbookName, RunbookResult
    from runbooks import steps


@workflow.defn
class RequeueExcludeRunbook:
    """Requeue the job with the named nodes in ExcNodeList (drain only repeat offenders), verify.

    When Slurm already requeued the job itself (node failure), only ``ExcNodeList`` is set on the
    pending job; otherwise requeuehold → ExcNodeList → release, with a fail-open release armed first.
    """

    @workflow.run
    async def run(self, inp: RunbookInput) -> RunbookResult:
        log = steps.RunbookLog(RunbookName.requeue_exclude)
        try:
            job = await steps.check_same_job(inp)
            stop = await steps.stop_on_suspect(inp, log)
            if stop is not None:
                return stop
            inp = await steps.save_before_requeue(inp, log, job)
            requeued = await steps.drain_offenders_and_requeue_excluding(inp, log)
        except steps.StepRefused as e:
            return log.refused(str(e))
        return await steps.finish(inp, log, requeued, excluded=inp.plan.exclude_nodes)
