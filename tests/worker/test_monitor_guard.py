"""The monitor takes the policy and mode an operator set on the cluster guard (``revive policy
apply`` / ``revive mode set``): hang settings for new watches, the mode an incident opens with.
Until then, and when the guard cannot be read, the policy file (the bootstrap) applies."""

from __future__ import annotations

import uuid

import pytest

from activities.guard import update_guard_settings
from revive.policy import RecoveryPolicy
from tests.helpers.builders import fake_cluster
from worker.main import build_worker
from worker.monitor import Monitor

pytestmark = pytest.mark.temporal


async def test_the_monitor_follows_the_policy_and_mode_set_on_the_guard(local_env, tmp_path):
    sched, cfg, _ = fake_cluster(tmp_path, "hang")
    tq = f"tq-{uuid.uuid4().hex[:6]}"
    file_policy = RecoveryPolicy(mode="observe")
    async with build_worker(local_env.client, cfg, sched, task_queue=tq):
        m = Monitor(cfg, file_policy, local_env.client, sched, task_queue=tq)
        await m.poll_once()  # no guard yet: the file's policy
        assert m.guard is None and m.policy is file_policy and m.mode_for("debug") == "observe"
        assert m.watches == {}  # the file's policy does not opt partition debug in

        await update_guard_settings(local_env.client, cfg.name, tq, "apply_policy", {
            "policy": {"name": "site", "mode": "observe", "hang": {"k": 7, "floor": 120},
                       "opt_in": {"partitions": ["debug"]}},
            "who": "oncall-alice", "update_id": "p-1"})
        await update_guard_settings(local_env.client, cfg.name, tq, "set_mode", {
            "mode": "auto", "partition": "debug", "who": "oncall-alice", "update_id": "m-1"})
        m._last_guard = None  # the next pass refreshes (every GUARD_REFRESH_S in service)
        await m.poll_once()
    assert m.policy_version == 1 and m.policy.name == "site"
    assert m.policy.hang.k == 7 and m.policy.hang.floor.total_seconds() == 120
    assert m.mode_for("debug") == "auto" and m.mode_for("gpu") == "observe"
    tracker = m.watches["7"].tracker  # the guard's policy opted the partition in, with its hang settings
    assert tracker.k == 7 and tracker.floor_s == 120


async def test_a_guard_that_cannot_be_read_keeps_the_current_policy(tmp_path):
    sched, cfg, _ = fake_cluster(tmp_path, "hang")

    class NoTemporal:
        def get_workflow_handle(self, wid: str):  # noqa: ANN201
            raise ConnectionError("frontend unreachable")

    pol = RecoveryPolicy(mode="auto")
    m = Monitor(cfg, pol, NoTemporal(), sched)  # type: ignore[arg-type]
    await m.poll_once()
    assert m.policy is pol and m.guard is None and m.mode_for("debug") == "auto"
