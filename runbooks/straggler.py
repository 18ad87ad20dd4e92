"""Runbook: a straggler — the job keeps running, slower, because of one slow node."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from revive.models import ActionKind, ActionResult, RunbookInput, RunbookName, RunbookResult
    from runbooks import steps

CHECKPOINT_WAIT = timedelta(minutes=30)
"""Longest wait for the next checkpoint before requeueing anyway (the job is slow, not stopped)."""


@workflow.defn
class StragglerRunbook:
    """Save first (no work lost): the job's save signal when its profile or the policy names one
    (``steps.save_before_requeue``), else wait for its next checkpoint boundary; then requeue
    excluding the slow node, then verify the job resumes from that checkpoint."""

    @workflow.run
    async def run(self, inp: RunbookInput) -> RunbookResult:
        log = steps.RunbookLog(RunbookName.straggler)
        try:
            job = await steps.check_same_job(inp)
            # a job that saves on a signal saves now; otherwise wait for its next checkpoint
            before = len(log.actions)
            inp = await steps.save_before_requeue(inp, log, job)
            if not any(a.action == ActionKind.signal and a.changed for a in log.actions[before:]):
                saved = await steps.wait_for_checkpoint(inp, CHECKPOINT_WAIT)
                log.add(ActionResult(action=ActionKind.wait_for_checkpoint, ok=saved is not None, changed=False,
                                     detail=f"checkpoint saved at iteration {saved}" if saved is not None
                                     else f"no checkpoint within {CHECKPOINT_WAIT}; requeueing anyway"))
                if saved is not None:
                    inp = inp.model_copy(update={"checkpoint_iteration": saved})
            requeued = await steps.drain_offenders_and_requeue_excluding(inp, log)
        except steps.StepRefused as e:
            return log.refused(str(e))
        return await steps.finish(inp, log, requeued, excluded=inp.plan.exclude_nodes)
