"""A monitor in its own process, for tests that SIGKILL it: ``python -m tests.helpers.monitor_proc
<cluster.json> <policy.json> <task queue>`` runs the production ``Monitor`` (local access) until
SIGTERM. The JSON files are ``ClusterConfig`` / ``RecoveryPolicy`` dumps (``temporal.address`` is the
test's dev server)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from revive.config import ClusterConfig
from revive.policy import RecoveryPolicy
from revive.site import build_site
from revive.temporal import connect
from worker.monitor import Monitor


async def main(cfg_path: str, policy_path: str, task_queue: str) -> None:
    cfg = ClusterConfig.model_validate_json(Path(cfg_path).read_text())
    pol = RecoveryPolicy.model_validate_json(Path(policy_path).read_text())
    client = await connect(cfg.temporal, identity="revive-monitor-test")
    site = build_site(cfg)
    mon = Monitor(cfg, pol, client, site.scheduler, task_queue=task_queue, logs=site.logs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await mon.run(stop)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main(*sys.argv[1:4]))
