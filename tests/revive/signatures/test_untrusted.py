"""compile_untrusted: RE2 only, size-capped, clear errors."""

from __future__ import annotations

import pytest

from revive.signatures import matcher
from revive.signatures.matcher import UntrustedPatternError, compile_untrusted


def test_accepts_a_plain_re2_pattern():
    rx = compile_untrusted(r"NCCL WARN (?P<what>\w+)")
    assert rx.search("x NCCL WARN socketConnect").group("what") == "socketConnect"


@pytest.mark.parametrize("pattern, why", [
    (r"(a)\1", "not a valid RE2 pattern"),
    (r"foo(?=bar)", "not a valid RE2 pattern"),
    ("a" * (matcher.MAX_UNTRUSTED_PATTERN + 1), "characters; the limit is"),
    ("", "empty"),
    ("(?:abcdefgh){500}", "RE2 instructions; the limit is"),
])
def test_refuses_with_a_clear_message(pattern, why):
    with pytest.raises(UntrustedPatternError, match=why.replace("(", r"\(")):
        compile_untrusted(pattern)


def test_refuses_non_strings():
    with pytest.raises(UntrustedPatternError, match="must be a string"):
        compile_untrusted(b"abc")  # type: ignore[arg-type]


def test_never_falls_back_to_stdlib_re(monkeypatch):
    monkeypatch.setattr(matcher, "HAVE_RE2", False)
    with pytest.raises(UntrustedPatternError, match="google-re2"):
        compile_untrusted("abc")
