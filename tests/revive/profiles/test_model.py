"""Profile validation: RE2-only regexes, named groups, size caps, the untrusted-input gate."""

from __future__ import annotations

import json

import pytest

from revive.errors import ConfigError
from revive.profiles import PROFILES_FILE, load_builtin_profiles, parse_profiles


def prof(**over):
    p = {"id": "custom", "framework": "Custom", "version": "1.0", "source": "me/repo train.py log()",
         "literals": ["step "], "patterns": {"iteration": r"step (?P<iter>\d+)"}}
    p.update(over)
    return p


def refused(data, trusted=False, source="job 42 --comment") -> str:
    with pytest.raises(ConfigError) as ei:
        parse_profiles(data, source, trusted=trusted)
    return str(ei.value)


def test_builtin_file_is_valid():
    ps = load_builtin_profiles()
    assert len(ps.profiles) >= 12
    # the shipped profiles also fit the untrusted caps: a job may send a copy of one
    assert parse_profiles(PROFILES_FILE.read_text(encoding="utf-8"), "copy", trusted=False).ids() == ps.ids()


def test_valid_untrusted_profile_json_and_yaml():
    ps = parse_profiles(json.dumps({"profiles": [prof()]}), "job 1 --comment", trusted=False)
    assert ps.ids() == ["custom"]
    ps = parse_profiles("profiles:\n  - id: y\n    framework: Y\n    version: '2'\n    source: s\n"
                        "    literals: ['it=']\n    patterns:\n      iteration: ['it=(?P<iter>\\d+)']\n",
                        "policy.yaml", trusted=False)
    assert ps.get("y").patterns["iteration"][0].regex == r"it=(?P<iter>\d+)"
    assert parse_profiles([prof()], "list", trusted=False).ids() == ["custom"]
    assert parse_profiles(prof(), "single", trusted=False).ids() == ["custom"]


@pytest.mark.parametrize("regex,needle", [
    (r"(?P<iter>\d+) (\w+) \2", "not RE2 syntax"),                  # backreference
    (r"step (?P<iter>\d+)(?= done)", "not RE2 syntax"),             # lookahead
    (r"(?<!validate )step (?P<iter>\d+)", "not RE2 syntax"),        # lookbehind
    (r"step (?P<iter>\d+", "not RE2 syntax"),                       # unbalanced
    (r"step (?P<iter>\d+)(?P=iter)", "not RE2 syntax"),             # named backreference
    (r"step \d+", "missing required named group(s) ['iter']"),
    (r"step (?P<iter>\d+) (?P<bogus>\w+)", "unknown named group(s) ['bogus']"),
    (r"(?:step (?P<iter>\d+))?", "matches the empty string"),
    ("step (?P<iter>\\d+)" + "x" * 600, "over the 512-byte cap"),
    (r"(?P<iter>\d+)" + "(?:a{1,100}){1,100}" * 3, "not RE2 syntax"),  # repetition bomb refused by RE2 itself
])
def test_bad_regex_refused_with_clear_error(regex, needle):
    msg = refused({"profiles": [prof(patterns={"iteration": [r"ok (?P<iter>\d+)", regex]})]})
    assert "job 42 --comment" in msg and "profile 'custom'" in msg
    assert "patterns.iteration[1]" in msg
    assert needle in msg


def test_program_size_cap():
    big = r"(?P<iter>\d+)(?:[a-z]{1,90}){1,10}"  # 34 bytes, RE2 program of ~1800 instructions
    msg = refused({"profiles": [prof(patterns={"iteration": big})]})
    assert "RE2 program size" in msg and "over the cap 1500" in msg
    parse_profiles({"profiles": [prof(patterns={"iteration": big})]}, "trusted", trusted=True)  # trusted cap 4000


def test_oversize_and_malformed_inputs():
    assert "bytes, over the 65536-byte cap" in refused("x" * 70000)
    assert "over the cap 16" in refused({"profiles": [prof(id=f"p{n}") for n in range(17)]})
    assert "not UTF-8" in refused(b"\xff\xfe\x00profiles")
    assert "neither JSON nor YAML" in refused("profiles: [\n  - {id: x")
    assert "expected a mapping" in refused("just a string")
    assert "duplicate profile id(s) ['custom']" in refused({"profiles": [prof(), prof()]})
    assert "unknown top-level key(s) ['extra']" in refused({"profiles": [prof()], "extra": 1})
    assert "schema_version" in refused({"schema_version": 2, "profiles": [prof()]})
    assert "extra_forbidden" in refused({"profiles": [prof(surprise=True)]}) or "Extra inputs" in refused(
        {"profiles": [prof(surprise=True)]})
    assert "literals" in refused({"profiles": [prof(literals=[])]})
    assert "blank literal" in refused({"profiles": [prof(literals=[" "])]})
    assert "id" in refused({"profiles": [prof(id="Bad Id!")]})
    assert "longer than 512 bytes" in refused({"profiles": [prof(framework="f" * 600)]})
    assert "over the cap 8" in refused({"profiles": [prof(patterns={"iteration": [r"s (?P<iter>\d+)"] * 9})]})


def test_deep_nesting_and_alias_bomb_refused():
    deep: object = "x"
    for _ in range(20):
        deep = [deep]
    assert "nested deeper" in refused({"profiles": [prof(notes=deep)]})
    bomb = "a: &a [" + ",".join(["x"] * 30) + "]\n" + "b: &b [" + ",".join(["*a"] * 30) + "]\n" + \
        "c: &c [" + ",".join(["*b"] * 30) + "]\n"  # 27,000 values from a 300-byte document
    assert "more than 4000 values" in refused(bomb + "profiles: [*c]\n")


def test_non_data_objects_refused():
    assert "not JSON/YAML data" in refused({"profiles": [prof(notes=object())]})
    assert "non-string key" in refused({"profiles": [{1: "x"}]})


def test_layout_patterns_validated():
    msg = refused({"profiles": [prof(checkpoint_layout={"description": "d", "dir_pattern": r"(a)\1"})]})
    assert "checkpoint_layout" in msg and "not RE2 syntax" in msg


def test_errors_are_config_errors_not_validation_errors():
    from revive.errors import ReviveError

    with pytest.raises(ReviveError):
        parse_profiles({"profiles": [prof(patterns={"iteration": "(?=x)"})]}, "s", trusted=True)


def test_save_signal_of_a_profile_is_a_save_signal():
    ok = parse_profiles([prof(save_signal={"signal": "SIGUSR1", "scope": "batch", "requeues_itself": True})],
                        "job 1 --comment", trusted=False)
    ss = ok.get("custom").save_signal
    assert (ss.signal, ss.scope.value, ss.requeues_itself) == ("SIGUSR1", "batch", True)
    assert "not a save signal" in refused([prof(save_signal={"signal": "SIGKILL"})])
    assert "scope" in refused([prof(save_signal={"signal": "USR1", "scope": "everything"})])
    lightning = load_builtin_profiles().get("lightning").save_signal
    assert (lightning.signal, lightning.scope.value, lightning.requeues_itself) == ("SIGUSR1", "steps", True)
