"""Policy validation: errors name the field and the allowed values; per-partition mode."""

from __future__ import annotations

from datetime import timedelta

import pytest

from revive.errors import ConfigError
from revive.policy import Mode, RecoveryPolicy, load_policy, parse_policy


def test_defaults_are_observe() -> None:
    p = parse_policy(None)
    assert p.mode == Mode.observe and p.mode_for("gpu") == Mode.observe


def test_bad_mode_names_field_and_allowed_values() -> None:
    with pytest.raises(ConfigError) as e:
        parse_policy({"mode": "yolo"}, "p.yaml")
    msg = str(e.value)
    assert "p.yaml" in msg and "mode" in msg and "'observe'" in msg and "'auto'" in msg


def test_bad_partition_mode_names_the_partition() -> None:
    with pytest.raises(ConfigError) as e:
        parse_policy({"partition_modes": {"canary": "fast"}})
    assert "partition_modes.canary" in str(e.value) and "'auto'" in str(e.value)


def test_unknown_key_and_bounds_are_named() -> None:
    with pytest.raises(ConfigError) as e:
        parse_policy({"breaker": {"max_fraction": 1.5, "bogus": 1}})
    msg = str(e.value)
    assert "breaker.max_fraction" in msg and "1" in msg and "breaker.bogus" in msg
    with pytest.raises(ConfigError) as e:
        parse_policy({"approval": {"on_expiry": "later"}})
    assert "approval.on_expiry" in str(e.value) and "'expire'" in str(e.value) and "'proceed'" in str(e.value)
    with pytest.raises(ConfigError):
        parse_policy(["not", "a", "mapping"])
    with pytest.raises(ConfigError) as e:
        parse_policy({"drain_reason_prefix": "  "})
    assert "drain_reason_prefix" in str(e.value)


def test_per_partition_mode_canary() -> None:
    p = parse_policy({"mode": "observe", "partition_modes": {"canary": "auto"}})
    assert p.mode_for("canary") == Mode.auto
    assert p.mode_for("prod") == Mode.observe
    assert p.mode_for(None) == Mode.observe


def test_yaml_durations(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "p.yaml"
    f.write_text("approval:\n  timeout: PT45M\nbreaker:\n  window: 7200\n  max_fraction: 0.1\n")
    p = load_policy(f)
    assert p.approval.timeout == timedelta(minutes=45)
    assert p.breaker.window == timedelta(hours=2)
    with pytest.raises(ConfigError):
        load_policy(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("mode: [\n")
    with pytest.raises(ConfigError):
        load_policy(tmp_path / "bad.yaml")


def test_roundtrip_through_json() -> None:
    p = RecoveryPolicy(partition_modes={"canary": Mode.auto})
    assert RecoveryPolicy.model_validate_json(p.model_dump_json()) == p


def test_save_signal_policy_takes_names_and_refuses_kill() -> None:
    p = parse_policy({"save_before_requeue": {"signal": "SIGUSR1", "scope": "full", "timeout": "PT1M"}})
    assert (p.save_before_requeue.signal, p.save_before_requeue.scope.value) == ("USR1", "full")
    assert p.save_before_requeue.timeout == timedelta(minutes=1) and not p.save_before_requeue.on_hang
    for bad, field in (({"signal": "KILL"}, "save_before_requeue.signal"), ({"signal": "9"}, "save_before_requeue.signal"),
                       ({"scope": "all"}, "save_before_requeue.scope"), ({"timeout": 0}, "save_before_requeue")):
        with pytest.raises(ConfigError) as ei:
            parse_policy({"save_before_requeue": bad})
        assert field in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        parse_policy({"bad_checkpoint": {"within_iterations": -1}})
    assert "bad_checkpoint.within_iterations" in str(ei.value)
