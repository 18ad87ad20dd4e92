"""Prometheus metrics for the worker and the monitor (``prometheus-client``).

Every metric name starts with ``revive_``. One class, ``ReviveMetrics``, owns its registry, so tests
build isolated instances (``ReviveMetrics()`` never touches ``prometheus_client.REGISTRY``); the
processes use the module-level ``METRICS`` through the module functions below, which delegate to it.

What the team calls (each is cheap, thread-safe and never raises on odd input: a metric must never
fail an activity or a monitor pass):

- ``incident_opened(family)``                     monitor, after ``start_workflow`` succeeded
- ``observe_incident_closed(result, mode)``       worker, once per incident (deduplicated by id)
- ``action_issued(kind, count=1)``                ``drain`` | ``requeue`` | ``resume`` (nodes or jobs)
- ``set_breaker(cluster, open)``                  after every drain grant decision
- ``set_approvals(pending_ages_s)``               from a periodic visibility query (``approval_ages``)
- ``monitor_pass(duration_s, lag_by_log, jobs_watched)``  end of every monitor pass
- ``scheduler_call(call, seconds)`` / ``with scheduler_call(call):`` / ``@scheduler_call(call)``
  (or wrap a whole backend: ``TimedScheduler(scheduler)``)
- ``metrics_interceptor()``                       a Temporal worker interceptor timing activities
- ``serve(port, addr="127.0.0.1")``               exposition over HTTP; returns a stop callable

Incident timings (histograms, seconds, buckets 0.1 s … 1 h) are measured from the *fault* (the
fault line's time, ``IncidentResult.fault_time``): ``revive_mttd_seconds`` to the incident's start
(``detected_at``), ``revive_time_to_action_seconds`` to the first cluster action
(``first_action_at``), ``revive_mttr_seconds`` to the first iteration past the checkpoint
(``resumed_at``). A missing timestamp, or one before the fault (clock skew), is skipped and counted
in ``revive_incident_timings_skipped_total{metric,reason}``.

Label cardinality is bounded: label values are cleaned (``[A-Za-z0-9_.:/-]``, at most 128
characters) and each label keeps at most ``max_label_values`` distinct values (later ones become
``other``); the per-log monitor lag is exported only for the ``lag_top_n`` most lagging logs,
beside ``revive_monitor_lag_bytes_max``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, overload

import temporalio.activity
import temporalio.exceptions
import temporalio.worker
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger("revive.metrics")

TIME_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)
"""Incident timings: 0.1 s … 1 h (anything longer lands in +Inf)."""
FAST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Monitor passes and scheduler calls (milliseconds to tens of seconds)."""
ACTIVITY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Activities: from a read (ms) to ``verify_progress`` / ``wait_for_checkpoint`` (minutes)."""

MODES = ("observe", "auto")
ACTION_KINDS = ("drain", "requeue", "resume")
OTHER = "other"
_CLEAN = re.compile(r"[^A-Za-z0-9_.:/-]")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("revive")
    except Exception:
        return "unknown"


def _value(x: Any) -> str:
    """Enum → its value, None → ``unknown``, anything else → str."""
    if x is None:
        return "unknown"
    return str(getattr(x, "value", x))


class _BoundedLabel:
    """Cleans label values and keeps at most ``limit`` distinct ones (the rest become ``other``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, raw: Any) -> str:
        v = _CLEAN.sub("_", _value(raw))[:128] or "unknown"
        with self.lock:
            if v in self.seen:
                return v
            if len(self.seen) >= self.limit:
                return OTHER
            self.seen.add(v)
            return v


def _seconds(start: datetime | None, end: datetime | None) -> tuple[float | None, str | None]:
    """(seconds, None) or (None, skip reason)."""
    if start is None or end is None:
        return None, "missing"
    try:
        s = (end - start).total_seconds()
    except TypeError:  # naive vs aware: not comparable
        return None, "naive_timestamp"
    if s < 0:
        return None, "negative"
    return s, None


class ReviveMetrics:
    """All of Revive's metrics on one registry.

    ``registry=None`` creates a private ``CollectorRegistry`` (tests: one instance each). Set
    ``process_metrics=True`` to add ``revive_process_*`` (CPU, memory, fds) from /proc.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, lag_top_n: int = 10,
                 max_label_values: int = 64, process_metrics: bool = False, version: str | None = None,
                 dedupe_window: int = 4096) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.lag_top_n = max(0, lag_top_n)
        r = self.registry
        self._label = {k: _BoundedLabel(max_label_values)
                       for k in ("category", "outcome", "family", "cluster", "activity", "call", "version")}

        self.incidents = Counter("revive_incidents_total", "Incidents closed, by attributed category, outcome and mode.",
                                 ["category", "outcome", "mode"], registry=r)
        self.incidents_opened = Counter("revive_incidents_opened_total", "Incidents opened by the monitor, by fault family.",
                                        ["family"], registry=r)
        self.mttd = Histogram("revive_mttd_seconds", "Seconds from the fault line to the incident's start.",
                              buckets=TIME_BUCKETS, registry=r)
        self.time_to_action = Histogram("revive_time_to_action_seconds",
                                        "Seconds from the fault line to the first cluster action.",
                                        buckets=TIME_BUCKETS, registry=r)
        self.mttr = Histogram("revive_mttr_seconds",
                              "Seconds from the fault line to the first training iteration past the checkpoint.",
                              buckets=TIME_BUCKETS, registry=r)
        self.timings_skipped = Counter("revive_incident_timings_skipped_total",
                                       "Incident timings not observed (missing timestamp, or one before the fault).",
                                       ["metric", "reason"], registry=r)
        self.drains = Counter("revive_drains_total", "Nodes drained by Revive.", registry=r)
        self.resumes = Counter("revive_resumes_total", "Nodes Revive returned to service (scontrol resume).",
                               registry=r)
        self.requeues = Counter("revive_requeues_total", "Jobs Revive requeued (or resubmitted).", registry=r)
        self.false_isolations = Counter(
            "revive_false_isolations_total",
            "Nodes drained for a hardware fault whose return-to-service health check found nothing (resumed).",
            ["category"], registry=r)
        self.rts_checks = Counter("revive_rts_checks_total",
                                  "Return-to-service health checks run, by result (passed | failed).",
                                  ["result"], registry=r)
        self.breaker_open = Gauge("revive_breaker_open", "1 while the cluster's drain circuit breaker refuses drains.",
                                  ["cluster"], registry=r)
        self.approvals_pending = Gauge("revive_approvals_pending", "Incidents waiting for a person's decision.",
                                       registry=r)
        self.oldest_approval_age = Gauge("revive_oldest_approval_age_seconds",
                                         "Age of the oldest incident waiting for a decision (0 when none).", registry=r)
        self.monitor_lag = Gauge("revive_monitor_lag_bytes",
                                 f"Bytes the monitor is behind, for the {self.lag_top_n} most lagging logs only.",
                                 ["log"], registry=r)
        self.monitor_lag_max = Gauge("revive_monitor_lag_bytes_max", "Bytes behind of the most lagging followed log.",
                                     registry=r)
        self.monitor_logs = Gauge("revive_monitor_logs_followed", "Logs the monitor follows.", registry=r)
        self.monitor_poll = Histogram("revive_monitor_poll_seconds", "Duration of one monitor pass.",
                                      buckets=FAST_BUCKETS, registry=r)
        self.scheduler_seconds = Histogram("revive_scheduler_call_seconds", "Duration of scheduler (Slurm) calls.",
                                           ["call"], buckets=FAST_BUCKETS, registry=r)
        self.scheduler_errors = Counter("revive_scheduler_call_errors_total", "Scheduler calls that raised.",
                                        ["call"], registry=r)
        self.jobs_watched = Gauge("revive_jobs_watched", "Opted-in jobs the monitor watches.", registry=r)
        self.activity_seconds = Histogram("revive_activity_seconds", "Duration of Temporal activities in this worker.",
                                          ["activity", "outcome"], buckets=ACTIVITY_BUCKETS, registry=r)
        self.build_info = Gauge("revive_build_info", "Always 1; the label carries Revive's version.", ["version"],
                                registry=r)
        self.build_info.labels(self._label["version"](version or _version())).set(1)
        if process_metrics:
            from prometheus_client import ProcessCollector

            ProcessCollector(namespace="revive", registry=r)

        self._lock = threading.Lock()
        self._lag_exported: set[str] = set()
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._dedupe_window = dedupe_window
        self._warned: set[str] = set()

    # ---- incidents -------------------------------------------------------------------------------
    def incident_opened(self, family: str) -> None:
        self.incidents_opened.labels(self._label["family"](family)).inc()

    def observe_incident_closed(self, result: Any, mode: Any) -> bool:
        """Count a closed incident (``revive.models.IncidentResult``) and observe its timings.

        ``mode``: ``observe`` / ``auto`` (a ``Mode`` or a str; anything else is ``other``). Returns
        False (and records nothing) for an incident id already counted by this process, so a retried
        activity does not count twice.
        """
        iid = getattr(result, "incident_id", None)
        with self._lock:
            if iid is not None:
                if iid in self._closed:
                    return False
                self._closed[iid] = None
                while len(self._closed) > self._dedupe_window:
                    self._closed.popitem(last=False)
        m = _value(mode).lower()
        self.incidents.labels(self._label["category"](result.category), self._label["outcome"](result.outcome),
                              m if m in MODES else OTHER).inc()
        fault = result.fault_time
        for name, hist, end in (("mttd", self.mttd, result.detected_at),
                                ("time_to_action", self.time_to_action, result.first_action_at),
                                ("mttr", self.mttr, result.resumed_at)):
            s, why = _seconds(fault, end)
            if s is None:
                self.timings_skipped.labels(name, why).inc()
            else:
                hist.observe(s)
        return True

    def action_issued(self, kind: str, count: int = 1) -> None:
        """``drain`` (nodes drained), ``requeue`` (jobs requeued/resubmitted), ``resume`` (nodes
        resumed). An unknown kind is logged once and ignored."""
        c = {"drain": self.drains, "requeue": self.requeues, "resume": self.resumes}.get(_value(kind))
        if c is None:
            self._warn_once(f"kind:{kind}", "action_issued: unknown kind %r ignored (expected %s)", kind, ACTION_KINDS)
            return
        if count > 0:
            c.inc(count)

    def false_isolation(self, category: str) -> None:
        """One node drained for ``category`` (a hardware category) passed its health check."""
        self.false_isolations.labels(self._label["category"](category)).inc()

    def rts_check(self, passed: bool) -> None:
        """One return-to-service health check ran (``activities.health.run_health_check``)."""
        self.rts_checks.labels("passed" if passed else "failed").inc()

    # ---- guards and approvals --------------------------------------------------------------------
    def set_breaker(self, cluster: str, open: bool) -> None:
        self.breaker_open.labels(self._label["cluster"](cluster)).set(1 if open else 0)

    def set_approvals(self, pending_ages_s: Iterable[float]) -> None:
        ages = [max(0.0, float(a)) for a in pending_ages_s]
        self.approvals_pending.set(len(ages))
        self.oldest_approval_age.set(max(ages) if ages else 0.0)

    # ---- monitor ---------------------------------------------------------------------------------
    def monitor_pass(self, duration_s: float, lag_by_log: Mapping[str, int], jobs_watched: int) -> None:
        """One monitor pass: its duration, the bytes behind per followed log, the jobs watched.

        Only the ``lag_top_n`` largest lags get a ``{log}`` series (ties: by name); series of logs
        that left the top are removed, so the label set stays bounded."""
        self.monitor_poll.observe(max(0.0, duration_s))
        self.jobs_watched.set(jobs_watched)
        lags = {str(k): max(0, int(v)) for k, v in lag_by_log.items()}
        self.monitor_logs.set(len(lags))
        self.monitor_lag_max.set(max(lags.values()) if lags else 0)
        top = sorted(lags.items(), key=lambda kv: (-kv[1], kv[0]))[: self.lag_top_n]
        keep = {k for k, _ in top}
        with self._lock:
            for gone in self._lag_exported - keep:
                try:
                    self.monitor_lag.remove(gone)
                except KeyError:
                    pass
            for k, v in top:
                self.monitor_lag.labels(k).set(v)
            self._lag_exported = keep

    # ---- scheduler -------------------------------------------------------------------------------
    @overload
    def scheduler_call(self, call: str, seconds: None = None) -> _CallTimer: ...
    @overload
    def scheduler_call(self, call: str, seconds: float) -> None: ...
    @overload
    def scheduler_call(self, call: str, seconds: float | None = None) -> _CallTimer | None: ...

    def scheduler_call(self, call: str, seconds: float | None = None) -> _CallTimer | None:
        """With ``seconds``: observe it. Without: a timer usable as ``with``/``async with`` block or
        as a decorator of a sync or async function (an exception also counts
        ``revive_scheduler_call_errors_total``)."""
        label = self._label["call"](call)
        if seconds is not None:
            self.scheduler_seconds.labels(label).observe(max(0.0, seconds))
            return None
        return _CallTimer(self, label)

    # ---- exposition ------------------------------------------------------------------------------
    def serve(self, port: int, addr: str = "127.0.0.1") -> MetricsServer:
        """Serve ``/metrics`` on ``addr:port`` (``port=0``: any free port, see ``.port``) in a daemon
        thread. Returns a callable that stops the server."""
        httpd, thread = start_http_server(port, addr=addr, registry=self.registry)
        srv = MetricsServer(httpd, thread)
        log.info("metrics on http://%s:%d/metrics", addr, srv.port)
        return srv

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned and len(self._warned) < 100:
            self._warned.add(key)
            log.warning(msg, *args)


class MetricsServer:
    """The running exposition server; call it (or ``.stop()``) to stop it. ``.port``: bound port."""

    def __init__(self, httpd: Any, thread: threading.Thread) -> None:
        self.httpd, self.thread = httpd, thread
        self.port: int = httpd.server_address[1]
        self._stopped = False

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    __call__ = stop


class _CallTimer:
    """Times a scheduler call: ``with``, ``async with`` or decorator (sync or async function)."""

    def __init__(self, metrics: ReviveMetrics, call: str) -> None:
        self.metrics, self.call = metrics, call
        self._t0 = 0.0

    def _done(self, t0: float, failed: bool) -> None:
        self.metrics.scheduler_seconds.labels(self.call).observe(time.perf_counter() - t0)
        if failed:
            self.metrics.scheduler_errors.labels(self.call).inc()

    def __enter__(self) -> _CallTimer:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._done(self._t0, exc_type is not None)

    async def __aenter__(self) -> _CallTimer:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def awrapper(*a: Any, **kw: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    r = await fn(*a, **kw)
                except BaseException:
                    self._done(t0, True)
                    raise
                self._done(t0, False)
                return r

            return awrapper

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                r = fn(*a, **kw)
            except BaseException:
                self._done(t0, True)
                raise
            self._done(t0, False)
            return r

        return wrapper


class TimedScheduler:
    """Wraps a ``revive.scheduler.base.Scheduler``: every coroutine method is timed as
    ``revive_scheduler_call_seconds{call=<method>}``; other attributes pass through unchanged.

    ``SlurmCLI.from_config(cfg)`` → ``TimedScheduler(SlurmCLI.from_config(cfg))``: one line per process.
    """

    def __init__(self, inner: Any, metrics: ReviveMetrics | None = None) -> None:
        self._inner = inner
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(attr):
            return attr
        timer = (self._metrics or METRICS).scheduler_call(name)
        assert timer is not None  # no seconds given: always a timer
        return timer(attr)

    def __repr__(self) -> str:
        return f"TimedScheduler({self._inner!r})"


# ---- Temporal worker interceptor ---------------------------------------------------------------

def _activity_outcome(err: BaseException | None) -> str:
    if err is None:
        return "completed"
    if isinstance(err, temporalio.activity._CompleteAsyncError):  # raise_complete_async(): not an error
        return "async"
    if isinstance(err, (asyncio.CancelledError, temporalio.exceptions.CancelledError)):
        return "cancelled"
    return "failed"


class _MetricsActivityInbound(temporalio.worker.ActivityInboundInterceptor):
    def __init__(self, next: temporalio.worker.ActivityInboundInterceptor, metrics: ReviveMetrics | None) -> None:
        super().__init__(next)
        self._metrics = metrics

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        m = self._metrics or METRICS
        try:
            name = temporalio.activity.info().activity_type
        except RuntimeError:  # no activity context (never in a real worker)
            name = getattr(input.fn, "__name__", "unknown")
        t0 = time.perf_counter()
        err: BaseException | None = None
        try:
            return await self.next.execute_activity(input)
        except BaseException as e:
            err = e
            raise
        finally:
            m.activity_seconds.labels(m._label["activity"](name), _activity_outcome(err)).observe(
                time.perf_counter() - t0)


class MetricsInterceptor(temporalio.worker.Interceptor):
    """Worker interceptor: ``revive_activity_seconds{activity,outcome}`` for every activity run
    (outcome ``completed`` | ``failed`` | ``cancelled`` | ``async``). Workflows are not intercepted
    (no side effects in workflow code: replays would count twice)."""

    def __init__(self, metrics: ReviveMetrics | None = None) -> None:
        self.metrics = metrics

    def intercept_activity(self, next: temporalio.worker.ActivityInboundInterceptor
                           ) -> temporalio.worker.ActivityInboundInterceptor:
        return _MetricsActivityInbound(next, self.metrics)


def metrics_interceptor(metrics: ReviveMetrics | None = None) -> MetricsInterceptor:
    """For ``Worker(..., interceptors=[metrics_interceptor()])``; ``metrics=None``: the module's ``METRICS``
    (looked up at each activity, so tests may swap it)."""
    return MetricsInterceptor(metrics)


# ---- helpers for the hooks -----------------------------------------------------------------------

def lag_bytes(offsets: Mapping[str, int]) -> dict[str, int]:
    """Bytes behind per path, from the follower's read offsets: ``size - offset`` (a file smaller
    than its offset was truncated and is re-read from the start: lag = size). Missing files are
    left out. For the monitor: ``lag_bytes({p: s.offset for p, s in follower.states.items()})``."""
    out: dict[str, int] = {}
    for path, off in offsets.items():
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        out[path] = size if size < off else size - off
    return out


async def approval_ages(client: Any, now: datetime | None = None) -> list[float]:
    """Ages (seconds since the workflow started) of running incidents whose ``ReviveState`` is
    ``awaiting_approval``, from Temporal visibility: ``set_approvals(await approval_ages(client))``.
    Needs a server with visibility (not the time-skipping test server)."""
    from datetime import UTC

    now = now or datetime.now(UTC)
    q = "WorkflowType='IncidentWorkflow' AND ReviveState='awaiting_approval' AND ExecutionStatus='Running'"
    ages = []
    async for wf in client.list_workflows(q):
        if wf.start_time is not None:
            ages.append(max(0.0, (now - wf.start_time).total_seconds()))
    return ages


# ---- module-level instance and functions -----------------------------------------------------------

METRICS = ReviveMetrics(process_metrics=True)
"""The process's metrics (worker or monitor). Tests build their own ``ReviveMetrics()``."""


def observe_incident_closed(result: Any, mode: Any) -> bool:
    return METRICS.observe_incident_closed(result, mode)


def incident_opened(family: str) -> None:
    METRICS.incident_opened(family)


def action_issued(kind: str, count: int = 1) -> None:
    METRICS.action_issued(kind, count)


def set_breaker(cluster: str, open: bool) -> None:
    METRICS.set_breaker(cluster, open)


def false_isolation(category: str) -> None:
    METRICS.false_isolation(category)


def rts_check(passed: bool) -> None:
    METRICS.rts_check(passed)


def set_approvals(pending_ages_s: Iterable[float]) -> None:
    METRICS.set_approvals(pending_ages_s)


def monitor_pass(duration_s: float, lag_by_log: Mapping[str, int], jobs_watched: int) -> None:
    METRICS.monitor_pass(duration_s, lag_by_log, jobs_watched)


def scheduler_call(call: str, seconds: float | None = None) -> _CallTimer | None:
    return METRICS.scheduler_call(call, seconds)


def serve(port: int, addr: str = "127.0.0.1") -> MetricsServer:
    return METRICS.serve(port, addr)


# ---- monitor hooks (one line each in worker/monitor.py) ---------------------------------------------

def monitor_observed(monitor: Any, started_monotonic: float, metrics: ReviveMetrics | None = None) -> None:
    """End of one ``Monitor.poll_once`` pass: ``rm.monitor_observed(self, now)`` (``now`` is the
    pass's ``time.monotonic()`` at its start). Reads ``monitor.follower.states`` (read offsets) and
    ``monitor.watches`` (jobs watched); never raises."""
    try:
        states = getattr(getattr(monitor, "follower", None), "states", {}) or {}
        offsets = {str(p): int(getattr(s, "offset", 0)) for p, s in states.items()}
        (metrics or METRICS).monitor_pass(time.monotonic() - started_monotonic, lag_bytes(offsets),
                                          len(getattr(monitor, "watches", {}) or {}))
    except Exception as e:  # noqa: BLE001 - a metric must never fail a monitor pass
        log.debug("monitor_observed: %s", e)


async def refresh_approvals(client: Any, metrics: ReviveMetrics | None = None) -> None:
    """``revive_approvals_pending`` / ``revive_oldest_approval_age_seconds`` from visibility (a
    periodic call, e.g. beside the monitor's 10 s watchdog: ``await rm.refresh_approvals(self.client)``).
    Never raises (visibility down: the gauges keep their last values)."""
    try:
        (metrics or METRICS).set_approvals(await approval_ages(client))
    except Exception as e:  # noqa: BLE001
        log.debug("refresh_approvals: %s", e)
