"""RemoteFollower against the real sshd of ``login_node`` (SFTP on one multiplexed connection)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from revive.remote import RemoteUnavailable, SSHEndpoint, connector
from revive.remote.follow import LINE_CAP, RemoteFollower


@pytest.fixture
def logdir(login_node, tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d


def append(path, data: bytes | str) -> None:
    with open(path, "ab") as f:
        f.write(data.encode() if isinstance(data, str) else data)


async def test_growing_file_partial_lines_and_caps(login_node, logdir):
    p = logdir / "job.out"
    async with RemoteFollower(login_node.connector()) as f:
        assert await f.read_new(str(p)) == []  # missing file: nothing, no error
        append(p, "step 1\nstep 2\nhalf")
        assert await f.read_new(str(p)) == [(1, "step 1"), (2, "step 2")]
        assert await f.read_new(str(p)) == []
        append(p, " a line\r\n")
        assert await f.read_new(str(p)) == [(3, "half a line")]
        long = b"x" * 10000 + b"NCCL error: unhandled system error"
        append(p, b"bad \xff\xfe utf8\x00 nul\n" + long + b"\n")
        (n1, t1), (n2, t2) = await f.read_new(str(p))
        assert (n1, t1) == (4, "bad \ufffd\ufffd utf8 nul")
        assert n2 == 5 and len(t2) == LINE_CAP and t2.endswith("NCCL error: unhandled system error")  # revive.logline: head + mark + tail
        assert t2.startswith("x" * 100)
        assert f.connects == 1


async def test_truncate_and_rotate_reread_from_start(login_node, logdir):
    p = logdir / "train.log"
    append(p, "".join(f"old {i}\n" for i in range(50)))
    async with RemoteFollower(login_node.connector()) as f:
        assert len(await f.read_new(str(p))) == 50
        # truncated (copytruncate / --open-mode=truncate) to below the offset
        with open(p, "wb") as fh:
            fh.write(b"new 0\n")
        assert await f.read_new(str(p)) == [(1, "new 0")]
        # rotated: renamed away, a new file of the same name, already LONGER than the offset
        os.rename(p, logdir / "train.log.1")
        append(p, "".join(f"rotated {i}\n" for i in range(5)))
        assert await f.read_new(str(p)) == [(i + 1, f"rotated {i}") for i in range(5)]
        # truncated and rewritten past the offset between two polls (same inode): caught too
        with open(p, "wb") as fh:
            fh.write(b"".join(f"again {i}\n".encode() for i in range(20)))
        got = await f.read_new(str(p))
        assert got == [(i + 1, f"again {i}") for i in range(20)]
        assert f.states[str(p)].resets == 3
        # same size, new content, then growth: re-read from the start when it grows
        with open(p, "wb") as fh:
            fh.write(b"".join(f"AGAIN {i}\n".encode() for i in range(20)))
        append(p, "more\n")
        got = await f.read_new(str(p))
        assert got[0] == (1, "AGAIN 0") and got[-1] == (21, "more")
        assert f.connects == 1


async def test_many_files_one_connection(login_node, logdir):
    paths = [logdir / f"rank{i}.out" for i in range(40)]
    for i, p in enumerate(paths):
        append(p, f"rank {i} line 1\nrank {i} line 2\n")
    def logins() -> int:
        return (login_node.ssh_dir / "sshd.log").read_text().count("Accepted publickey")

    before = logins()
    async with RemoteFollower(login_node.connector()) as f:
        batch = await f.read_many([str(p) for p in paths])
        assert batch.error is None
        assert all(batch.lines[str(p)] == [(1, f"rank {i} line 1"), (2, f"rank {i} line 2")]
                   for i, p in enumerate(paths))
        for p in paths:
            append(p, "more\n")
        batch = await f.read_many([str(p) for p in paths])
        assert all(batch.lines[str(p)] == [(3, "more")] for p in paths)
        # one SSH login for all 40 files and both polls
        assert f.connects == 1
        assert logins() == before + 1


async def test_connection_killed_mid_follow_no_loss_no_duplicates(login_node, logdir):
    p = logdir / "live.log"
    got: list[tuple[int, str]] = []
    stop = asyncio.Event()

    async def writer():
        i = 0
        while not stop.is_set():
            # lines arrive in pieces: a partial line is often pending when the link drops
            append(p, f"iter {i} loss=")
            await asyncio.sleep(0.002)
            append(p, f"{i * 0.5}\n")
            i += 1
            await asyncio.sleep(0.003)
        return i

    async with RemoteFollower(login_node.connector(), backoff_initial_s=0.05, backoff_max_s=0.2) as f:
        w = asyncio.create_task(writer())
        kills = 0
        t_end = time.monotonic() + 4
        while time.monotonic() < t_end:
            try:
                got += await f.read_new(str(p))
            except RemoteUnavailable:
                await asyncio.sleep(0.05)
            if len(got) > 20 * (kills + 1) and kills < 4:
                assert login_node.kill_sessions(), "no sshd session process to kill"
                kills += 1
            await asyncio.sleep(0.02)
        stop.set()
        n = await w
        for _ in range(50):
            try:
                got += await f.read_new(str(p))
            except RemoteUnavailable:
                await asyncio.sleep(0.1)
                continue
            if len(got) == n:
                break
        assert kills == 4 and f.connects >= 5
    assert [no for no, _ in got] == list(range(1, n + 1))
    assert [t for _, t in got] == [f"iter {i} loss={i * 0.5}" for i in range(n)]


async def test_sshd_restart_unavailable_then_resumes(login_node, logdir):
    p = logdir / "restart.log"
    append(p, "a\nb\n")
    f = RemoteFollower(login_node.connector(), backoff_initial_s=0.1, backoff_max_s=0.5)
    try:
        assert [t for _, t in await f.read_new(str(p))] == ["a", "b"]
        assert login_node.down().returncode == 0
        append(p, "c\nd")
        with pytest.raises(RemoteUnavailable) as e:
            await f.read_new(str(p))
        assert "127.0.0.1" in str(e.value)
        t0 = time.monotonic()
        with pytest.raises(RemoteUnavailable) as e2:  # inside the backoff window: fails fast
            await f.read_new(str(p))
        assert time.monotonic() - t0 < 0.05 and 0 < e2.value.retry_after_s <= 0.55
        append(p, "\ne\n")
    finally:
        login_node.up()
    try:
        got = []
        for _ in range(40):
            try:
                got += await f.read_new(str(p))
                break
            except RemoteUnavailable as e:
                await asyncio.sleep(max(e.retry_after_s, 0.05))
        assert got == [(3, "c"), (4, "d"), (5, "e")]
    finally:
        await f.close()


async def test_dead_host_is_a_clear_bounded_error(login_node, tmp_path):
    from socket import socket

    with socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ep = SSHEndpoint("127.0.0.1", port, user="root", known_hosts=str(login_node.ssh_dir / "known_hosts"),
                     key_file=str(login_node.ssh_dir / "id_ed25519"), connect_timeout_s=3)
    f = RemoteFollower(connector(ep), backoff_initial_s=0.05, backoff_max_s=0.3)
    delays = []
    for _ in range(8):
        with pytest.raises(RemoteUnavailable) as e:
            await f.read_new("/var/log/whatever.log")
        assert f"127.0.0.1:{port}" in str(e.value)
        delays.append(e.value.retry_after_s)
        await asyncio.sleep(e.value.retry_after_s)
    assert delays[1] > delays[0] and max(delays) <= 0.3  # exponential, capped
    f._failures = 5000  # hours of outage: still a bounded delay, no overflow
    await asyncio.sleep(0.31)
    with pytest.raises(RemoteUnavailable) as e:
        await f.read_new("/x")
    assert e.value.retry_after_s <= 0.3
    assert f.connects == 0
    await f.close()


async def test_offsets_survive_a_restart_of_the_follower(login_node, logdir, tmp_path):
    p = logdir / "resume.log"
    off = tmp_path / "offsets.json"
    append(p, "1\n2\nthree-")
    async with RemoteFollower(login_node.connector(), offsets_file=off, cluster="c1") as f:
        assert [t for _, t in await f.read_new(str(p))] == ["1", "2"]
        f.save()
    append(p, "part\n4\n")
    async with RemoteFollower(login_node.connector(), offsets_file=off, cluster="c1") as f:
        assert await f.read_new(str(p)) == [(3, "three-part"), (4, "4")]
        f.save()
    # replaced while nobody followed: the anchor no longer matches, read from the start
    with open(p, "wb") as fh:
        fh.write(b"".join(f"fresh {i}\n".encode() for i in range(10)))
    async with RemoteFollower(login_node.connector(), offsets_file=off, cluster="c1") as f:
        got = await f.read_new(str(p))
        assert got[0] == (1, "fresh 0") and len(got) == 10


async def test_read_tail_and_checked_at(login_node, logdir):
    p = logdir / "evidence.log"
    append(p, "".join(f"l{i}\n" for i in range(1000)))
    async with RemoteFollower(login_node.connector()) as f:
        data, size = await f.read_tail(str(p), 30)
        assert size == p.stat().st_size and data == p.read_bytes()[-30:]
        assert (await f.read_tail(str(p)))[0] == p.read_bytes()
        with pytest.raises(FileNotFoundError):
            await f.read_tail(str(logdir / "nope"))
        t0 = time.monotonic()
        await f.read_new(str(p))
        assert f.states[str(p)].checked_at >= t0
