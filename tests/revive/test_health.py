"""revive node resume: health check, then resume only Revive's own drains."""

from __future__ import annotations

import sys

from revive.health import resume_node
from revive.models import NodeRecord
from revive.policy import RecoveryPolicy

try:
    from revive.scheduler.fake import FakeScheduler
except ImportError:  # pragma: no cover — tiny local fallback
    class FakeScheduler:  # type: ignore[no-redef]
        def __init__(self, cluster: str = "fake", nodes=None, **_) -> None:  # type: ignore[no-untyped-def]
            self.cluster = cluster
            self.nodes = {n.name: n for n in nodes or []}
            self.calls: list = []

        async def get_nodes(self, names=None):  # type: ignore[no-untyped-def]
            return [n for n in self.nodes.values() if names is None or n.name in names]

        async def resume_nodes(self, nodes):  # type: ignore[no-untyped-def]
            self.calls.append(("resume_nodes", {"nodes": nodes}))
            for n in nodes:
                self.nodes[n] = self.nodes[n].model_copy(update={"state": "IDLE", "reason": None})
            return ["scontrol", "update", f"NodeName={','.join(nodes)}", "State=RESUME"]

        @property
        def mutating_calls(self):  # type: ignore[no-untyped-def]
            return self.calls


class Runner:
    def __init__(self, rc: int = 0, exc: Exception | None = None) -> None:
        self.rc, self.exc, self.argvs = rc, exc, []

    async def run(self, argv, input=None, timeout_s=30.0, env=None):  # type: ignore[no-untyped-def]
        self.argvs.append(list(argv))
        if self.exc:
            raise self.exc
        return self.rc, "", "GPU 0: Xid 79" if self.rc else ""


def sched() -> FakeScheduler:
    return FakeScheduler(nodes=[
        NodeRecord(name="n1", state="IDLE+DRAIN", reason="revive:inc-1 gpu_hardware"),
        NodeRecord(name="n2", state="IDLE+DRAIN", reason="maintenance by bob"),
        NodeRecord(name="n3", state="IDLE"),
    ])


POL = RecoveryPolicy()


async def test_resumes_own_drain_after_healthy_check() -> None:
    s, r = sched(), Runner(0)
    ok, msg = await resume_node(s, r, "n1", ["ssh", "{node}", "nvidia-smi"], POL)
    assert ok, msg
    assert r.argvs == [["ssh", "n1", "nvidia-smi"]]
    assert "passed" in msg and [c[0] for c in s.mutating_calls] == ["resume_nodes"]
    assert not (await s.get_nodes(["n1"]))[0].drained


async def test_never_touches_foreign_drain() -> None:
    s, r = sched(), Runner(0)
    ok, msg = await resume_node(s, r, "n2", ["true"], POL)
    assert not ok and "not set by Revive" in msg and "maintenance by bob" in msg
    assert r.argvs == [] and s.mutating_calls == []


async def test_unhealthy_or_unrunnable_check_refuses() -> None:
    s = sched()
    ok, msg = await resume_node(s, Runner(1), "n1", ["check"], POL)
    assert not ok and "exited 1" in msg and "Xid 79" in msg
    ok, msg = await resume_node(s, Runner(exc=OSError("ssh down")), "n1", ["check"], POL)
    assert not ok and "could not run" in msg
    assert s.mutating_calls == []


async def test_real_local_command() -> None:
    runners = __import__("revive.scheduler.runners", fromlist=["LocalRunner"])
    s = sched()
    ok, msg = await resume_node(s, runners.LocalRunner(), "n1", [sys.executable, "-c", "import sys; sys.exit(3)"], POL)
    assert not ok and "exited 3" in msg
    ok, msg = await resume_node(s, runners.LocalRunner(), "n1", [sys.executable, "-c", "pass"], POL)
    assert ok, msg


async def test_not_drained_unknown_and_no_check() -> None:
    s = sched()
    assert (await resume_node(s, None, "n3", None, POL))[0] is False
    ok, msg = await resume_node(s, None, "nX", None, POL)
    assert not ok and "unknown" in msg
    ok, msg = await resume_node(s, None, "n1", None, POL)
    assert ok and "no health check configured" in msg
