"""Shared pieces: line normalisation, quoting, Retry-After, config factory, error tree."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from revive.errors import ConfigError, ReviveError
from revive.logsources import (
    LINE_CAP,
    LogLine,
    LogSourceConfig,
    LogSourceError,
    LogSourceUnavailable,
    StreamSelector,
    clean_text,
    from_config,
    quote_string,
)
from revive.logsources.base import Entry, StreamCursor, parse_retry_after
from revive.logsources.loki import LokiLogSource
from revive.logsources.victorialogs import VictoriaLogsSource


def go_unquote(s: str) -> str:
    """Go's strconv.Unquote for the escapes quote_string emits (what LogQL/LogsQL lexers do)."""
    assert s[0] == s[-1] == '"'
    out, i = [], 1
    while i < len(s) - 1:
        c = s[i]
        assert c != '"', "unescaped quote inside the literal"
        if c == "\\":
            n = s[i + 1]
            if n == "x":
                out.append(chr(int(s[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append({"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}[n])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


@given(st.text(alphabet=st.characters(exclude_categories=("Cs",))))
def test_quote_string_round_trips(value):
    assert go_unquote(quote_string(value)) == value


def test_clean_text():
    long = "h" * 5000 + "T" * 5000 + "END"
    c = clean_text(long)
    assert len(c) == LINE_CAP and c.startswith("h" * 2040) and c.endswith("END")
    assert clean_text(c) == c  # idempotent
    assert clean_text(b"a\x00b\xff\r\n") == "ab\ufffd"
    assert clean_text("x\ud800y") == "x\ufffdy"


def test_logline_normalises():
    ln = LogLine(seq=1, text="a\x00b", ts=datetime(2024, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))))
    assert ln.text == "ab" and ln.ts == datetime(2024, 1, 1, tzinfo=UTC)
    assert LogLine(seq=2, text="x", ts=datetime(2024, 1, 1)).ts.tzinfo is UTC


def test_retry_after():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("-3") == 0.0


def test_error_tree():
    assert issubclass(LogSourceUnavailable, LogSourceError) and issubclass(LogSourceError, ReviveError)
    assert LogSourceUnavailable("x", retry_after=3).retry_after == 3


def test_selector_key_ignores_since_and_host_order():
    a = StreamSelector(job_id="1", hosts=("b", "a"), since=datetime(2024, 1, 1, tzinfo=UTC))
    b = StreamSelector(job_id="1", hosts=("a", "b"))
    assert a.key() == b.key()
    assert a.key() != StreamSelector(job_id="2").key()


def test_cursor_dedup_and_window():
    c = StreamCursor()
    e = [Entry(10, "a", {"h": "1"}), Entry(10, "a", {"h": "2"}), Entry(10, "a", {"h": "1"}), Entry(5, "z", {})]
    assert [ln.text for ln in c.accept(e, 0)] == ["z", "a", "a"]  # same line, two streams: both kept
    c.advance(10, 0)
    assert c.accept([Entry(10, "a", {"h": "1"}), Entry(9, "late", {})], 0) == []
    assert c.late_dropped == 1
    # an entry a tail reported dropped, fetched again later, is let through below the window
    back = Entry(3, "dropped by the tail", {"h": "1"})
    assert [ln.text for ln in c.accept([back, Entry(4, "other", {})], 0, older_ok={(back.stream_key, 3)})] == \
        ["dropped by the tail"]
    assert c.late_dropped == 2
    c2 = StreamCursor.from_json(json.loads(json.dumps(c.to_json())))
    assert c2.seq == 4 and c2.pos_ns == 10 and c2.seen == c.seen


def test_from_config_builds_each_backend(tmp_path):
    loki = from_config({"backend": "loki", "url": "http://loki:3100", "labels": {"slurm_job_id": "{job_id}"},
                        "tenant": "t1", "token_file": str(tmp_path / "tok")})
    assert isinstance(loki, LokiLogSource) and loki.tenant == "t1"
    vl = from_config({"backend": "victorialogs", "url": "http://vl:9428", "labels": {"slurm_job_id": "{job_id}"},
                      "tenant": "12:34"})
    assert isinstance(vl, VictoriaLogsSource) and (vl.account_id, vl.project_id) == ("12", "34")
    with pytest.raises(ConfigError):
        from_config({"backend": "loki", "labels": {"a": "b"}})  # no url
    with pytest.raises(ConfigError):
        from_config({"backend": "loki", "url": "http://x"})  # no labels
    with pytest.raises(ConfigError):
        from_config({"backend": "loki", "url": "http://x", "labels": {"bad-name": "x"}})
    with pytest.raises(ConfigError):
        from_config({"backend": "elastic"})
    assert LogSourceConfig().backend == "file"
    # today's logs block (revive.config.LogSource) validates unchanged and means the file backend
    old = LogSourceConfig.model_validate({"poll_interval_s": 0.25, "over_ssh": False, "offsets_file": "/tmp/o.json"})
    assert old.backend == "file" and old.offsets_file == "/tmp/o.json"
