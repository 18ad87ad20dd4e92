"""The Temporal Schedule that runs return to service: ``revive-rts-<cluster>``.

One Schedule per cluster (and task queue) starts ``ReturnToServiceWorkflow`` every
``policy.return_to_service.interval`` with overlap policy ``SKIP`` (a run still going — e.g. a
node check waiting for approval — makes the next tick a no-op, so checks never run twice at
once; each node's check also has its own deterministic workflow id). The worker creates or
updates it on start when the policy enables return to service (``revive worker --policy P``);
``revive health schedule`` does the same by hand, or deletes it.
"""

from __future__ import annotations

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from revive import ids
from revive.decide.rts import RtsInput
from revive.policy import RecoveryPolicy


def rts_schedule(cluster: str, policy: RecoveryPolicy, policy_path: str | None, task_queue: str) -> Schedule:
    """The Schedule's definition (interval from the policy, overlap SKIP, paused when disabled)."""
    rts = policy.return_to_service
    return Schedule(
        action=ScheduleActionStartWorkflow(
            ids.RTS_WORKFLOW, RtsInput(cluster=cluster, policy=policy, policy_path=policy_path, task_queue=task_queue),
            id=ids.rts_schedule_id(cluster, task_queue), task_queue=task_queue,
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=rts.interval)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(paused=not rts.enabled,
                            note="return_to_service.enabled is false" if not rts.enabled else "revive worker"),
    )


async def ensure_rts_schedule(client: Client, cluster: str, policy: RecoveryPolicy, policy_path: str | None,
                              task_queue: str = ids.DEFAULT_TASK_QUEUE) -> tuple[str, bool]:
    """Create the Schedule, or update an existing one to this policy. Returns ``(schedule id,
    created)``. RPC errors propagate."""
    sid = ids.rts_schedule_id(cluster, task_queue)
    sched = rts_schedule(cluster, policy, policy_path, task_queue)
    try:
        await client.create_schedule(sid, sched)
        return sid, True
    except ScheduleAlreadyRunningError:
        pass

    def _update(_: ScheduleUpdateInput) -> ScheduleUpdate:
        return ScheduleUpdate(schedule=sched)

    await client.get_schedule_handle(sid).update(_update)
    return sid, False


async def delete_rts_schedule(client: Client, cluster: str, task_queue: str = ids.DEFAULT_TASK_QUEUE) -> bool:
    """Delete the Schedule; False when there was none. Runs already started finish."""
    try:
        await client.get_schedule_handle(ids.rts_schedule_id(cluster, task_queue)).delete()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


__all__ = ["delete_rts_schedule", "ensure_rts_schedule", "rts_schedule"]
