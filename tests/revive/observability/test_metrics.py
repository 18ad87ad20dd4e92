"""revive.metrics against isolated registries (values read with registry.get_sample_value)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import temporalio.activity
import temporalio.exceptions
from prometheus_client import CollectorRegistry
from temporalio.testing import ActivityEnvironment
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

import revive.metrics as rm
from revive.metrics import ReviveMetrics, TimedScheduler, lag_bytes, metrics_interceptor
from revive.models import Category, IncidentOutcome, IncidentResult
from revive.policy import Mode

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def result(iid: str = "inc-1", *, fault: float | None = 0.0, detect: float | None = 0.4, action: float | None = 4.0,
           resume: float | None = 14.0, outcome=IncidentOutcome.recovered, category=Category.gpu_hardware):
    def at(s):
        return (None if s is None else T0 + timedelta(seconds=s))
    return IncidentResult(incident_id=iid, outcome=outcome, category=category, fault_time=at(fault),
                          detected_at=at(detect), first_action_at=at(action), resumed_at=at(resume),
                          closed_at=T0 + timedelta(seconds=20))


@pytest.fixture
def m() -> ReviveMetrics:
    return ReviveMetrics(version="9.9.9-test")


def v(m: ReviveMetrics, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_registries_are_isolated_and_all_names_are_revive():
    a, b = ReviveMetrics(), ReviveMetrics()
    a.incident_opened("gpu")
    assert v(a, "revive_incidents_opened_total", family="gpu") == 1
    assert v(b, "revive_incidents_opened_total", family="gpu") is None
    names = {s.name for fam in rm.METRICS.registry.collect() for s in fam.samples}
    assert names and all(n.startswith("revive_") for n in names), sorted(n for n in names if not n.startswith("revive_"))


def test_build_info(m):
    assert v(m, "revive_build_info", version="9.9.9-test") == 1
    from importlib.metadata import version

    assert ReviveMetrics().registry.get_sample_value("revive_build_info", {"version": version("revive")}) == 1


def test_incident_closed_counts_and_timings(m):
    assert m.observe_incident_closed(result(), Mode.auto) is True
    assert v(m, "revive_incidents_total", category="gpu_hardware", outcome="recovered", mode="auto") == 1
    assert v(m, "revive_mttd_seconds_count") == 1
    assert v(m, "revive_mttd_seconds_sum") == pytest.approx(0.4)
    assert v(m, "revive_mttd_seconds_bucket", le="0.25") == 0
    assert v(m, "revive_mttd_seconds_bucket", le="0.5") == 1
    assert v(m, "revive_time_to_action_seconds_sum") == pytest.approx(4.0)
    assert v(m, "revive_time_to_action_seconds_bucket", le="5.0") == 1
    assert v(m, "revive_mttr_seconds_sum") == pytest.approx(14.0)
    assert v(m, "revive_mttr_seconds_bucket", le="10.0") == 0
    assert v(m, "revive_mttr_seconds_bucket", le="15.0") == 1
    assert v(m, "revive_mttr_seconds_bucket", le="+Inf") == 1


def test_buckets_span_a_tenth_of_a_second_to_an_hour(m):
    les = sorted(float(s.labels["le"]) for fam in m.registry.collect() if fam.name == "revive_mttr_seconds"
                 for s in fam.samples if s.name.endswith("_bucket"))
    assert les[0] == 0.1 and les[-2] == 3600.0 and les[-1] == float("inf")
    m.observe_incident_closed(result(resume=7200.0), "auto")
    assert v(m, "revive_mttr_seconds_bucket", le="3600.0") == 0
    assert v(m, "revive_mttr_seconds_bucket", le="+Inf") == 1


def test_missing_and_negative_timestamps_are_skipped(m):
    m.observe_incident_closed(result("a", action=None, resume=None, outcome=IncidentOutcome.rejected), "observe")
    assert v(m, "revive_incidents_total", category="gpu_hardware", outcome="rejected", mode="observe") == 1
    assert v(m, "revive_mttd_seconds_count") == 1
    assert v(m, "revive_time_to_action_seconds_count") == 0
    assert v(m, "revive_mttr_seconds_count") == 0
    assert v(m, "revive_incident_timings_skipped_total", metric="time_to_action", reason="missing") == 1
    assert v(m, "revive_incident_timings_skipped_total", metric="mttr", reason="missing") == 1
    # no fault time (IncidentWorkflow does not set it yet): nothing can be measured
    m.observe_incident_closed(result("b", fault=None), "auto")
    assert v(m, "revive_mttd_seconds_count") == 1
    assert v(m, "revive_incident_timings_skipped_total", metric="mttd", reason="missing") == 1
    # a fault stamped after detection (clock skew between the node and the monitor)
    m.observe_incident_closed(result("c", fault=1.0, detect=0.5), "auto")
    assert v(m, "revive_mttd_seconds_count") == 1
    assert v(m, "revive_incident_timings_skipped_total", metric="mttd", reason="negative") == 1
    assert v(m, "revive_mttr_seconds_count") == 1


def test_incident_closed_once_per_id_and_odd_labels(m):
    assert m.observe_incident_closed(result("x"), "auto")
    assert not m.observe_incident_closed(result("x"), "auto")  # a retried activity
    assert v(m, "revive_incidents_total", category="gpu_hardware", outcome="recovered", mode="auto") == 1
    assert v(m, "revive_mttr_seconds_count") == 1
    m.observe_incident_closed(result("y", category=None, outcome=IncidentOutcome.expired), "weird-mode")
    assert v(m, "revive_incidents_total", category="unknown", outcome="expired", mode="other") == 1
    m.observe_incident_closed(result("z"), "OBSERVE")
    assert v(m, "revive_incidents_total", category="gpu_hardware", outcome="recovered", mode="observe") == 1


def test_dedupe_window_is_bounded():
    m = ReviveMetrics(dedupe_window=2)
    for i in ("a", "b", "c"):
        m.observe_incident_closed(result(i), "auto")
    assert m.observe_incident_closed(result("a"), "auto")  # forgotten: counted again
    assert not m.observe_incident_closed(result("c"), "auto")


def test_opened_actions_breaker_approvals(m, caplog):
    m.incident_opened("gpu")
    m.incident_opened("gpu")
    m.incident_opened("hang")
    assert v(m, "revive_incidents_opened_total", family="gpu") == 2
    assert v(m, "revive_incidents_opened_total", family="hang") == 1
    m.action_issued("drain", 2)
    m.action_issued("requeue")
    m.action_issued("resume")
    with caplog.at_level(logging.WARNING, logger="revive.metrics"):
        m.action_issued("reboot")
        m.action_issued("reboot")
    assert [r.getMessage() for r in caplog.records].count(
        "action_issued: unknown kind 'reboot' ignored (expected ('drain', 'requeue', 'resume'))") == 1
    assert v(m, "revive_drains_total") == 2
    assert v(m, "revive_requeues_total") == 1
    assert v(m, "revive_resumes_total") == 1
    m.set_breaker("h200-a", True)
    m.set_breaker("h200-b", False)
    assert v(m, "revive_breaker_open", cluster="h200-a") == 1
    assert v(m, "revive_breaker_open", cluster="h200-b") == 0
    m.set_breaker("h200-a", False)
    assert v(m, "revive_breaker_open", cluster="h200-a") == 0
    m.set_approvals([12.5, 300.0, 4.0])
    assert v(m, "revive_approvals_pending") == 3
    assert v(m, "revive_oldest_approval_age_seconds") == 300.0
    m.set_approvals([])
    assert v(m, "revive_approvals_pending") == 0
    assert v(m, "revive_oldest_approval_age_seconds") == 0


def test_label_values_are_bounded():
    m = ReviveMetrics(max_label_values=3)
    for f in ("a", "b", "c", "d", "e"):
        m.incident_opened(f)
    m.incident_opened("a")
    assert v(m, "revive_incidents_opened_total", family="a") == 2
    assert v(m, "revive_incidents_opened_total", family="d") is None
    assert v(m, "revive_incidents_opened_total", family="other") == 2
    m.set_breaker('bad"name\n{x}', True)
    assert v(m, "revive_breaker_open", cluster="bad_name__x_") == 1


def test_monitor_pass_top_n_lag(m):
    small = ReviveMetrics(lag_top_n=2)
    small.monitor_pass(0.02, {"/l/a": 10, "/l/b": 500, "/l/c": 40, "/l/d": 0}, jobs_watched=4)
    assert v(small, "revive_monitor_poll_seconds_count") == 1
    assert v(small, "revive_monitor_poll_seconds_bucket", le="0.025") == 1
    assert v(small, "revive_jobs_watched") == 4
    assert v(small, "revive_monitor_lag_bytes_max") == 500
    assert v(small, "revive_monitor_logs_followed") == 4
    assert v(small, "revive_monitor_lag_bytes", log="/l/b") == 500
    assert v(small, "revive_monitor_lag_bytes", log="/l/c") == 40
    assert v(small, "revive_monitor_lag_bytes", log="/l/a") is None
    # /l/c caught up, /l/a fell behind: the series follow the top 2, nothing else stays
    small.monitor_pass(0.3, {"/l/a": 90, "/l/b": 200, "/l/c": 0}, jobs_watched=3)
    assert v(small, "revive_monitor_lag_bytes", log="/l/a") == 90
    assert v(small, "revive_monitor_lag_bytes", log="/l/c") is None
    assert v(small, "revive_monitor_lag_bytes_max") == 200
    series = [s for fam in small.registry.collect() if fam.name == "revive_monitor_lag_bytes" for s in fam.samples]
    assert len(series) == 2
    small.monitor_pass(0.01, {}, jobs_watched=0)
    assert v(small, "revive_monitor_lag_bytes_max") == 0
    assert [s for fam in small.registry.collect() if fam.name == "revive_monitor_lag_bytes" for s in fam.samples] == []


def test_lag_bytes(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"x" * 100)
    b.write_bytes(b"y" * 10)
    assert lag_bytes({str(a): 40, str(b): 50, str(tmp_path / "gone.log"): 0}) == {str(a): 60, str(b): 10}


async def test_scheduler_call_forms(m):
    m.scheduler_call("list_jobs", 0.2)
    with m.scheduler_call("get_nodes"):
        pass
    async with m.scheduler_call("get_job"):
        await asyncio.sleep(0)

    @m.scheduler_call("requeue")
    async def requeue(job_id: str) -> list[str]:
        await asyncio.sleep(0.01)
        return ["scontrol", "requeue", job_id]

    @m.scheduler_call("parse")
    def parse(x: str) -> int:
        return int(x)

    assert await requeue("7") == ["scontrol", "requeue", "7"]
    assert requeue.__name__ == "requeue"
    assert parse("3") == 3
    with pytest.raises(ValueError):
        parse("x")
    with pytest.raises(RuntimeError):
        async with m.scheduler_call("get_job"):
            raise RuntimeError("slurmctld down")
    assert v(m, "revive_scheduler_call_seconds_count", call="list_jobs") == 1
    assert v(m, "revive_scheduler_call_seconds_sum", call="list_jobs") == pytest.approx(0.2)
    assert v(m, "revive_scheduler_call_seconds_count", call="get_nodes") == 1
    assert v(m, "revive_scheduler_call_seconds_count", call="get_job") == 2
    assert v(m, "revive_scheduler_call_errors_total", call="get_job") == 1
    assert v(m, "revive_scheduler_call_seconds_count", call="requeue") == 1
    assert v(m, "revive_scheduler_call_seconds_sum", call="requeue") >= 0.01
    assert v(m, "revive_scheduler_call_seconds_count", call="parse") == 2
    assert v(m, "revive_scheduler_call_errors_total", call="parse") == 1


async def test_timed_scheduler_wraps_a_backend(m, tmp_path):
    from revive.scheduler.base import Scheduler
    from revive.scheduler.fake import FakeScheduler

    fake = FakeScheduler()
    timed = TimedScheduler(fake, m)
    assert isinstance(timed, Scheduler)
    assert timed.cluster == fake.cluster
    await timed.list_jobs()
    await timed.ping()
    assert v(m, "revive_scheduler_call_seconds_count", call="list_jobs") == 1
    assert v(m, "revive_scheduler_call_seconds_count", call="ping") == 1
    assert timed.calls is fake.calls  # plain attributes pass through


def test_module_functions_use_the_process_metrics(monkeypatch):
    mine = ReviveMetrics()
    monkeypatch.setattr(rm, "METRICS", mine)
    rm.incident_opened("io")
    rm.observe_incident_closed(result("mod-1"), "auto")
    rm.action_issued("drain")
    rm.set_breaker("c1", True)
    rm.set_approvals([1.0])
    rm.monitor_pass(0.1, {"/x": 3}, 1)
    rm.scheduler_call("ping", 0.01)
    with rm.scheduler_call("ping"):
        pass
    assert v(mine, "revive_incidents_opened_total", family="io") == 1
    assert v(mine, "revive_incidents_total", category="gpu_hardware", outcome="recovered", mode="auto") == 1
    assert v(mine, "revive_drains_total") == 1
    assert v(mine, "revive_breaker_open", cluster="c1") == 1
    assert v(mine, "revive_approvals_pending") == 1
    assert v(mine, "revive_monitor_lag_bytes", log="/x") == 3
    assert v(mine, "revive_scheduler_call_seconds_count", call="ping") == 2


def test_serve_exposes_the_registry(m):
    m.incident_opened("gpu")
    stop = m.serve(0)
    try:
        r = httpx.get(f"http://127.0.0.1:{stop.port}/metrics", timeout=5)
        assert r.status_code == 200
        assert 'revive_incidents_opened_total{family="gpu"} 1.0' in r.text
        assert "revive_build_info" in r.text
    finally:
        stop()
    stop()  # idempotent
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{stop.port}/metrics", timeout=2)


async def test_approval_ages_from_visibility():
    class WF:
        def __init__(self, start):
            self.start_time = start

    class Client:
        query = None

        async def list_workflows(self, query):
            Client.query = query
            for s in (T0 - timedelta(seconds=30), T0 - timedelta(seconds=5), None):
                yield WF(s)

    ages = await rm.approval_ages(Client(), now=T0)
    assert ages == [30.0, 5.0]
    assert "ReviveState='awaiting_approval'" in Client.query and "ExecutionStatus='Running'" in Client.query


# ---- the activity interceptor, run through the SDK's activity context ----------------------------

class _Terminal(ActivityInboundInterceptor):
    """What the SDK's own innermost interceptor does: call the activity function."""

    def __init__(self) -> None:
        pass

    def init(self, outbound) -> None:  # noqa: ANN001
        pass

    async def execute_activity(self, input: ExecuteActivityInput):
        return await input.fn(*input.args)


async def _run_activity(m: ReviveMetrics, activity_type: str, fn, *args):
    env = ActivityEnvironment()
    env.info = dataclasses.replace(ActivityEnvironment.default_info(), activity_type=activity_type)
    chain = metrics_interceptor(m).intercept_activity(_Terminal())
    assert isinstance(chain, ActivityInboundInterceptor)

    async def run():
        return await chain.execute_activity(ExecuteActivityInput(fn=fn, args=list(args), executor=None, headers={}))

    return await env.run(run)


async def test_activity_interceptor_outcomes(m):
    async def ok(x: int) -> int:
        await asyncio.sleep(0.01)
        return x * 2

    async def boom() -> None:
        raise temporalio.exceptions.ApplicationError("scontrol refused", non_retryable=True)

    async def cancelled() -> None:
        raise asyncio.CancelledError()

    async def later() -> None:
        temporalio.activity.raise_complete_async()

    assert await _run_activity(m, "drain_nodes", ok, 21) == 42
    with pytest.raises(temporalio.exceptions.ApplicationError):
        await _run_activity(m, "requeue_job", boom)
    with pytest.raises(asyncio.CancelledError):
        await _run_activity(m, "verify_progress", cancelled)
    with pytest.raises(BaseException) as ei:
        await _run_activity(m, "notify", later)
    assert type(ei.value).__name__ == "_CompleteAsyncError"
    assert v(m, "revive_activity_seconds_count", activity="drain_nodes", outcome="completed") == 1
    assert v(m, "revive_activity_seconds_sum", activity="drain_nodes", outcome="completed") >= 0.01
    assert v(m, "revive_activity_seconds_count", activity="requeue_job", outcome="failed") == 1
    assert v(m, "revive_activity_seconds_count", activity="verify_progress", outcome="cancelled") == 1
    assert v(m, "revive_activity_seconds_count", activity="notify", outcome="async") == 1


async def test_interceptor_default_follows_module_metrics(monkeypatch):
    mine = ReviveMetrics(registry=CollectorRegistry())
    icpt = metrics_interceptor()
    monkeypatch.setattr(rm, "METRICS", mine)

    async def ok() -> str:
        return "x"

    env = ActivityEnvironment()
    env.info = dataclasses.replace(ActivityEnvironment.default_info(), activity_type="gather_evidence")
    chain = icpt.intercept_activity(_Terminal())

    async def run():
        return await chain.execute_activity(ExecuteActivityInput(fn=ok, args=[], executor=None, headers={}))

    assert await env.run(run) == "x"
    assert v(mine, "revive_activity_seconds_count", activity="gather_evidence", outcome="completed") == 1


def test_lag_from_the_monitors_follower(tmp_path, m):
    """The hook expression proposed for worker/monitor.py, on the real Follower."""
    from revive.tail import Follower

    log = tmp_path / "job.out"
    log.write_text("step 1\nstep 2\n")
    f = Follower()
    assert len(f.read_new(str(log))) == 2
    with log.open("a") as fh:
        fh.write("step 3\npartial")
    lag = lag_bytes({p: s.offset for p, s in f.states.items()})
    assert lag == {str(log): len("step 3\npartial")}
    m.monitor_pass(0.01, lag, jobs_watched=1)
    assert v(m, "revive_monitor_lag_bytes", log=str(log)) == 14
    f.read_new(str(log))
    assert lag_bytes({p: s.offset for p, s in f.states.items()}) == {str(log): 0}  # the partial line is read
