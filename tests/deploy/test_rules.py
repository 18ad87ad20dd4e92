"""deploy/prometheus/rules.yaml checked by the real ``promtool`` (Debian package ``prometheus``):
syntax and templates (``check rules``), behaviour on synthetic series (``test rules`` with
rules_test.yaml) and the compose scrape config (``check config``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "rules.yaml"
RULES_TEST = PROM / "rules_test.yaml"
PROM_CONFIG = PROM / "prometheus.yml"

PROMTOOL = shutil.which("promtool")
def _needs_promtool(fn):  # noqa: ANN001, ANN202
    """make test installs Debian's prometheus (scripts/test-deps.sh): a missing promtool fails."""
    import functools

    @functools.wraps(fn)
    def wrapper(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        if PROMTOOL is None:
            pytest.fail("promtool not installed: run scripts/test-deps.sh (apt-get install -y prometheus)")
        return fn(*a, **kw)

    return wrapper


needs_promtool = _needs_promtool

# The metrics Revive exports (the contract the rules are written against).
REVIVE_METRICS = {
    "revive_incidents_total", "revive_mttd_seconds", "revive_time_to_action_seconds", "revive_mttr_seconds",
    "revive_drains_total", "revive_resumes_total", "revive_breaker_open", "revive_approvals_pending",
    "revive_oldest_approval_age_seconds", "revive_monitor_lag_bytes", "revive_monitor_poll_seconds",
    "revive_scheduler_call_seconds", "revive_jobs_watched",
    "revive_false_isolations_total", "revive_rts_checks_total",
}


def promtool(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


@needs_promtool
def test_promtool_check_rules():
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in out.stdout


@needs_promtool
def test_promtool_test_rules():
    out = promtool("test", "rules", RULES_TEST.name)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@needs_promtool
def test_promtool_check_compose_config():
    out = promtool("check", "config", str(PROM_CONFIG))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 rule files found" in out.stdout


@needs_promtool
def test_promtool_test_rules_catches_a_wrong_expectation(tmp_path):
    shutil.copy(RULES, tmp_path / RULES.name)
    text = RULES_TEST.read_text()
    assert "severity: critical, category: gpu_hardware" in text
    (tmp_path / RULES_TEST.name).write_text(text.replace("severity: critical, category: gpu_hardware",
                                                         "severity: critical, category: crash"))
    out = promtool("test", "rules", RULES_TEST.name, cwd=tmp_path)
    assert out.returncode != 0 and "ReviveRecoveryFailing" in out.stdout + out.stderr


@needs_promtool
def test_promtool_check_rules_catches_a_bad_template(tmp_path):
    bad = tmp_path / "rules.yaml"
    bad.write_text(RULES.read_text().replace("humanizeDuration", "humaniseDuration", 1))
    out = promtool("check", "rules", str(bad))
    assert out.returncode != 0 and "humaniseDuration" in out.stdout + out.stderr


# ---- without promtool ------------------------------------------------------------------------

def test_every_alert_is_tested_firing():
    tests = yaml.safe_load(RULES_TEST.read_text())
    assert tests["rule_files"] == ["rules.yaml"]
    fired = {c["alertname"] for t in tests["tests"] for c in t["alert_rule_test"] if c["exp_alerts"]}
    quiet = {c["alertname"] for t in tests["tests"] for c in t["alert_rule_test"] if not c["exp_alerts"]}
    names = {a["alert"] for a in alerts()}
    assert fired == names
    assert quiet == names  # and each one is also shown not firing (pending or healthy)


def test_alerts_required_by_operations():
    names = {a["alert"] for a in alerts()}
    assert {"ReviveApprovalWaiting", "ReviveBreakerOpen", "ReviveMonitorLagging", "ReviveMonitorPollSlow",
            "ReviveRecoveryFailing", "ReviveWorkerDown", "ReviveWorkerAbsent"} <= names
    by = {a["alert"]: a for a in alerts()}
    assert 'outcome!="recovered"' in by["ReviveRecoveryFailing"]["expr"]
    assert 'up{component="worker"} == 0' in by["ReviveWorkerDown"]["expr"]
    # return to service (issue #12): drains that a health check found healthy, and failing checks
    assert "revive_false_isolations_total" in by["ReviveFalseIsolations"]["expr"]
    assert 'revive_rts_checks_total{result="failed"}' in by["ReviveHealthChecksFailing"]["expr"]


def test_alert_metadata_and_metric_names():
    for a in alerts():
        assert a["labels"]["severity"] in ("warning", "critical"), a["alert"]
        assert a["annotations"]["summary"] and a["annotations"]["description"], a["alert"]
        used = set(re.findall(r"\brevive_[a-z_]+", a["expr"] + a["annotations"]["description"]))
        base = {re.sub(r"_(bucket|sum|count)$", "", m) for m in used}
        assert base <= REVIVE_METRICS, (a["alert"], base - REVIVE_METRICS)


def test_the_metric_names_the_rules_may_use_are_revives():
    """Every name in ``REVIVE_METRICS`` is one ``revive.metrics`` registers (a rule on a renamed
    metric would never fire)."""
    from revive.metrics import METRICS

    names = {s.name for m in METRICS.registry.collect() for s in m.samples}
    for m in METRICS.registry.collect():  # a labelled metric has no sample before its first use
        names |= {m.name, f"{m.name}_total"} if m.type == "counter" else {m.name}
    missing = {n for n in REVIVE_METRICS if n not in names and f"{n}_bucket" not in names}
    assert not missing, missing
