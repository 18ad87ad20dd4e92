"""Framework progress extraction on junk lines: no crash (robustness pass of 2026-12-02)."""

from __future__ import annotations

from revive.profiles import summarize
from revive.profiles.extract import default_extractor, split_line_prefix
from revive.progress import parse_attempt, parse_checkpoint, parse_progress

BIG = "9" * 5000
DEMO = "[rank 0 host node1] iteration {it}/1000 | loss 6.9 | compute_ms 500.4 | step_time_ms 505.2"


def test_an_epoch_too_big_for_a_float_is_no_crash():
    # was: OverflowError "cannot convert float infinity to integer" (Lightning's step_from_epoch)
    line = f"Epoch {BIG}:  10%|█         | 100/1000 [00:50<07:30,  2.00it/s, v_num=3, train_loss=2.100]"
    list(default_extractor().events(line))
    summarize([line]).model_dump_json()


def test_a_5000_digit_rank_prefix_is_no_crash():
    # was: ValueError (int of more than 4300 digits) in split_line_prefix
    body, rank, _host, _ts = split_line_prefix(f"[rank{BIG}]: hello")
    assert rank is None
    summarize([f"[rank{BIG}]: " + DEMO.format(it=1)])


def test_stamps_at_the_edge_of_the_calendar_are_no_crash():
    # was: OverflowError "date value out of range" converting 9999-12-31T23:59:59-12:00 to UTC
    lines = ["=== attempt restart=0 9999-12-31T23:59:59-12:00",
             "9999-12-31T23:59:59-12:00 " + DEMO.format(it=1),
             "9999-12-31T23:59:59-12:00 " + DEMO.format(it=2),
             "0001-01-01T00:00:00+14:00 " + DEMO.format(it=3)]
    s = summarize(lines)
    assert s.last_iteration == 3
    s.model_dump_json()


def test_revive_progress_parsers_refuse_a_5000_digit_number():
    # was: ValueError out of parse_attempt / parse_checkpoint / parse_progress (verify and the
    # evidence gatherer call them on every line)
    assert parse_attempt(f"=== attempt restart={BIG} 2026-01-01T00:00:00Z") is None
    assert parse_checkpoint(f"saved checkpoint at iteration {BIG}") is None
    assert parse_progress(f"2026-01-01T00:00:00Z [rank 0 host a] iteration {BIG}/10") is None
    assert parse_progress(f"iteration {BIG}/10") is None
    assert parse_progress("2026-01-01T00:00:00Z [rank 0 host a] iteration 3/10").iteration == 3


def test_verify_reads_past_a_garbled_progress_line():
    # was: ValueError "could not convert string to float: '1.2.3'" out of ResumeTracker.feed, i.e.
    # out of the verify activity on every retry: a recovered job could never be verified
    from revive.progress import find_resume

    res = find_resume(["=== attempt restart=1 2026-01-01T00:00:00Z",
                       "2026-01-01T00:00:01Z [rank 0 host a] resumed from checkpoint at iteration 10",
                       "2026-01-01T00:00:02Z [rank 0 host a] iteration 11/100 | compute_ms 1.2.3 | step_time_ms 5",
                       "2026-01-01T00:00:03Z [rank 0 host a] iteration 12/100 | compute_ms 1 | step_time_ms 5"], 0)
    assert (res.resumed_from, res.first_after) == (10, 12)
