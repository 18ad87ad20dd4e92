"""Return-to-service rules: which drains are Revive's, the reason after a failed check, the
selection of nodes to check, the repeat-offender guard, and the policy section."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from revive.decide.rts import (
    DrainKind,
    failed_reason,
    parse_own_drain,
    repeat_offender,
    select,
    short_reason,
)
from revive.errors import ConfigError
from revive.models import NodeRecord
from revive.policy import CheckMethod, RecoveryPolicy, parse_policy

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
IID = "h200-a-4242-20261201T101500-a0-gpu"
POL = RecoveryPolicy()


def node(name: str, reason: str | None, state: str = "IDLE+DRAIN") -> NodeRecord:
    return NodeRecord(name=name, state=state, reason=reason, partitions=["gpu"])


def test_incident_drain_is_ours_with_its_incident_and_category():
    d = parse_own_drain(node("gpu7", f"revive:{IID} gpu_hardware"), POL)
    assert d is not None and d.kind == DrainKind.incident
    assert (d.incident_id, d.category, d.partition, d.blamed_hardware) == (IID, "gpu_hardware", "gpu", True)


@pytest.mark.parametrize("reason", ["cable swap", "revivex", "  ", None, "Revive: by hand", "maintenance revive:x y"])
def test_a_persons_drain_is_never_ours(reason):
    assert parse_own_drain(node("gpu7", reason), POL) is None


def test_a_node_that_is_not_drained_is_not_a_candidate():
    assert parse_own_drain(node("gpu7", f"revive:{IID} gpu_hardware", state="IDLE"), POL) is None


def test_failed_reason_reads_back_tied_to_the_incident():
    first = parse_own_drain(node("gpu7", f"revive:{IID} nvlink"), POL)
    assert first is not None
    text = failed_reason(POL, first, NOW, "dcgmi diag -r 2 exited 1: [Fail] PCIe (x16 → x8)\nmore")
    assert text.startswith("revive: health check failed 2026-12-01T12:00:00Z: dcgmi diag -r 2 exited 1:")
    assert "[" not in text and "\n" not in text and text.endswith(f"(incident {IID} nvlink)")
    again = parse_own_drain(node("gpu7", text), POL)
    assert again is not None and again.kind == DrainKind.check_failed
    assert (again.incident_id, again.category, again.failed_at) == (IID, "nvlink", NOW)


def test_short_reason_is_one_capped_line_and_never_empty():
    assert short_reason("\x1b[31mred\x1b[0m\r\nline2 (x)") == "31mred 0m line2 x"
    assert len(short_reason("x" * 1000)) == 120
    assert short_reason("") == "no output"


def test_select_skips_open_incidents_and_recent_failures_never_lists_a_persons_drain():
    recent = failed_reason(POL, parse_own_drain(node("n", f"revive:{IID} gpu_hardware"), POL), NOW - timedelta(minutes=5), "x")  # type: ignore[arg-type]
    old = failed_reason(POL, parse_own_drain(node("n", f"revive:{IID} gpu_hardware"), POL), NOW - timedelta(hours=2), "x")  # type: ignore[arg-type]
    nodes = [node("a", f"revive:{IID} gpu_hardware"), node("b", "reseating GPU 3"), node("c", recent),
             node("d", old), node("e", "revive:other-incident crash"), node("f", None, state="IDLE")]
    out = {c.drain.node: c for c in select(nodes, POL, NOW, open_incidents={"other-incident"})}
    assert sorted(out) == ["a", "c", "d", "e"]
    assert out["a"].check and out["d"].check
    assert not out["c"].check and "next in 55m00s" in out["c"].why
    assert not out["e"].check and "still open" in out["e"].why


def test_repeat_offender_guard():
    assert repeat_offender([NOW - timedelta(hours=h) for h in (1, 2)], POL, NOW) is None
    why = repeat_offender([NOW - timedelta(hours=h) for h in (1, 2, 3)], POL, NOW)
    assert why and "repeat offender" in why
    assert repeat_offender([NOW - timedelta(days=h) for h in (2, 3, 4)], POL, NOW) is None


def test_policy_section_defaults_and_validation():
    assert parse_policy({}).return_to_service.enabled is False  # old policies stay valid: off by default
    p = parse_policy({"return_to_service": {"enabled": True, "interval": "PT2M", "command": ["dcgmi", "diag", "-r", "2"],
                                            "method": "reservation", "max_concurrent": 3}})
    r = p.return_to_service
    assert (r.interval, r.method, r.max_concurrent) == (timedelta(minutes=2), CheckMethod.reservation, 3)
    for bad in ({"command": []}, {"method": "ssh"}, {"max_concurrent": 0}, {"interval": -5}, {"nope": 1}):
        with pytest.raises(ConfigError, match="return_to_service"):
            parse_policy({"return_to_service": bad})
