"""The local kernel-log reader keeps only the lines of the attempt: an Xid written before the job
started (an earlier job's fault on the node, already handled) is not this incident's evidence."""

from __future__ import annotations

from datetime import UTC, datetime

from revive.site import LocalKernelLogs, line_time, lines_since

XID = "node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


async def test_an_xid_from_before_the_job_started_is_not_read(tmp_path):
    kern = tmp_path / "kern.log"
    kern.write_text(f"Dec  1 14:46:47 {XID}\n"                 # an earlier job's fault
                    "    continuation without a stamp\n"
                    f"Dec  1 14:48:10 {XID}\n"                 # this attempt's
                    f"2026-12-01T14:48:11+00:00 {XID}\n")
    reader = LocalKernelLogs(str(tmp_path / "kern.log"), utc_offset_s=0)
    started = datetime(2026, 12, 1, 14, 47, 56, tzinfo=UTC)
    got = await reader.read("node2", since=started)
    assert got.lines == ["    continuation without a stamp", f"Dec  1 14:48:10 {XID}", f"2026-12-01T14:48:11+00:00 {XID}"]
    assert len((await reader.read("node2")).lines) == 4  # no since: everything


def test_syslog_stamps_are_read_in_the_nodes_zone_and_year():
    ref = datetime(2027, 1, 1, 0, 5, tzinfo=UTC)
    assert line_time("Dec 31 23:59:00 n kernel: x", ref, 0) == datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert line_time("Jan  1 02:00:00 n kernel: x", ref, 7200) == datetime(2027, 1, 1, 0, 0, tzinfo=UTC)
    assert line_time("no stamp here", ref, 0) is None and line_time("Foo 99 99:99:99 x", ref, 0) is None
    # within the clock-skew allowance a line just before the start is kept
    assert lines_since(["Jan  1 00:04:59 n kernel: x"], ref, 0) == ["Jan  1 00:04:59 n kernel: x"]
