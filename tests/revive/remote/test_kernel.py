"""KernelLogReader through the real login node used as a jump host; host-key checks."""

from __future__ import annotations

import stat
from dataclasses import replace
from datetime import UTC, datetime

import asyncssh
import pytest

from revive.errors import ConfigError
from revive.remote import HostKeyRejected, RemoteUnavailable, connect
from revive.remote.kernel import KernelLogReader, build_command

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."


@pytest.fixture
def standin(login_node):
    """Put an executable script on the remote user's PATH for one test."""
    made = []

    def make(name: str, body: str):
        p = login_node.bin / name
        p.write_text("#!/bin/sh\n" + body)
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        made.append(p)
        return p

    yield make
    for p in made:
        p.unlink(missing_ok=True)


def reader(login_node, **kw) -> KernelLogReader:
    return KernelLogReader(login_node.connector(), login_node.endpoint, nodes=login_node.nodes, **kw)


async def test_nodes_map_from_sshd_up(login_node):
    assert login_node.nodes == {f"node{i}": ("127.0.0.1", login_node.port) for i in range(1, 5)}


async def test_path_template_through_the_jump_host(login_node):
    for n in ("node1", "node2"):
        (login_node.dir / "nodes" / n).mkdir(parents=True, exist_ok=True)
    (login_node.dir / "nodes" / "node1" / "kern.log").write_text("boot ok\n")
    (login_node.dir / "nodes" / "node2" / "kern.log").write_text(
        "".join(f"line {i}\n" for i in range(1000)) + XID + "\n")
    async with reader(login_node, path_template=str(login_node.dir / "nodes" / "{node}" / "kern.log"),
                      tail_bytes=200) as r:
        k1 = await r.read("node1")
        k2 = await r.read("node2")
        assert (k1.available, k1.lines, k1.why) == (True, ["boot ok"], None)
        assert k2.available and k2.lines[-1] == XID and "line 0" not in k2.lines
        assert all(x.startswith("line ") for x in k2.lines[:-1]) and "last 200 bytes" in k2.why
        # the node connections are channels of the ONE login connection (no TCP peer of their own)
        assert r._login_conn.get_extra_info("peername")[:2] == ("127.0.0.1", login_node.port)
        assert len(r._node_conns) == 2
        for conn in r._node_conns.values():
            assert conn.get_extra_info("peername")[0] == ""
        assert (await r.read("node3")).why.endswith("no such file on node3")
        assert not (await r.read("node3")).available


async def test_command_with_since_through_the_jump_host(login_node, standin):
    standin("fake-dmesg", 'for a in "$@"; do printf "arg=%s\\n" "$a"; done\n'
                          f'echo "[Tue Dec  1 09:00:00 2026] {XID}"\n')
    since = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    async with reader(login_node, command=["fake-dmesg", "--node", "{node}", "--since", "{since}"]) as r:
        k = await r.read("node4", since=since)
        assert k.available and k.why is None
        assert k.lines == ["arg=--node", "arg=node4", "arg=--since", "arg=2026-12-01 09:30:00 UTC",
                           f"[Tue Dec  1 09:00:00 2026] {XID}"]
        k = await r.read("node4")  # no since: the option and its value are left out
        assert k.lines[:2] == ["arg=--node", "arg=node4"] and "arg=--since" not in k.lines
    async with reader(login_node, command=["dmesg", "-T"]) as r:  # the real one (root here)
        k = await r.read("node1")
        assert k.available or "dmesg" in k.why


async def test_no_journal_files_is_unavailable_not_empty(login_node, standin):
    # journalctl on a node without a journal: the message, exit status 0
    standin("journalctl", 'echo "-- No entries --"\necho "No journal files were found." >&2\nexit 0\n')
    async with reader(login_node, command=["journalctl", "-k", "-o", "short-iso", "--no-pager",
                                           "--since", "{since}"]) as r:
        k = await r.read("node2", since=datetime.now(UTC))
    assert k.available is False and k.lines == []
    assert "kernel log unavailable" in k.why and "No journal files were found" in k.why
    # a journal with nothing in the window: available, no lines (the marker is not a line)
    standin("journalctl", 'echo "-- No entries --"\nexit 0\n')
    async with reader(login_node, command=["journalctl", "-k", "--no-pager"]) as r:
        k = await r.read("node2")
    assert (k.available, k.lines) == (True, [])
    with pytest.raises(ConfigError, match="quiet"):
        reader(login_node, command=["journalctl", "-k", "-q"])


async def test_failed_or_missing_command_is_unavailable(login_node, standin):
    standin("kfail", 'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2\nexit 1\n')
    async with reader(login_node, command=["kfail"]) as r:
        k = await r.read("node1")
    assert not k.available and "exited 1" in k.why and "Operation not permitted" in k.why
    async with reader(login_node, command=["no-such-command-revive"]) as r:
        k = await r.read("node1")
    assert not k.available and "command not found" in k.why


async def test_unreachable_node_is_unavailable(login_node):
    nodes = {**login_node.nodes, "node9": ("127.0.0.1", 1)}
    async with KernelLogReader(login_node.connector(), login_node.endpoint, nodes=nodes,
                               path_template="/var/log/kern.log") as r:
        k = await r.read("node9")
        assert not k.available and "tunnel" in k.why
        assert not (await r.read("node77")).available  # not in the map: not contacted


async def test_unknown_host_key_is_refused(login_node, tmp_path):
    other = tmp_path / "known_hosts"
    other.write_text(f"[127.0.0.1]:{login_node.port} "
                     f"{asyncssh.generate_private_key('ssh-ed25519').export_public_key().decode()}")
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyRejected, match="does not match the key pinned"):
        await connect(replace(login_node.endpoint, known_hosts=str(other)))
    with pytest.raises(HostKeyRejected, match=r"SHA256:.* is not in"):
        await connect(replace(login_node.endpoint, known_hosts=str(empty)))
    with pytest.raises(HostKeyRejected, match="does not exist"):
        await connect(replace(login_node.endpoint, known_hosts=str(tmp_path / "missing")))
    assert issubclass(HostKeyRejected, RemoteUnavailable)
    # the follower: the same refusal, as an error to back off on (not a crash, not "no lines")
    from revive.remote.follow import RemoteFollower

    async with RemoteFollower(login_node.connector(known_hosts=str(other)), backoff_initial_s=0.01) as f:
        with pytest.raises(HostKeyRejected):
            await f.read_new("/etc/hostname")
        assert f.connects == 0
    # a node behind the login node whose key is not pinned: refused too (the login one is fine)
    login = await connect(login_node.endpoint)
    try:
        with pytest.raises(HostKeyRejected):
            await connect(replace(login_node.endpoint, known_hosts=str(empty)), tunnel=login)
    finally:
        login.close()
    # the reader reports it as an unavailable kernel log, never as "no Xid"
    async with KernelLogReader(login_node.connector(), replace(login_node.endpoint, known_hosts=str(empty)),
                               nodes=login_node.nodes, path_template="/var/log/kern.log") as r:
        k = await r.read("node1")
    assert not k.available and "host key" in k.why


async def test_pin_on_first_use_only_when_asked(login_node, tmp_path):
    kh = tmp_path / "tofu_known_hosts"
    ep = replace(login_node.endpoint, known_hosts=str(kh), pin_unknown_host=True)
    conn = await connect(ep)
    conn.close()
    pinned = kh.read_text()
    host_pub = (login_node.ssh_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    assert pinned.split() == [f"[127.0.0.1]:{login_node.port}", *host_pub]
    conn = await connect(replace(ep, pin_unknown_host=False))  # now known
    conn.close()
    # a CHANGED key is never pinned over
    wrong = tmp_path / "wrong"
    wrong.write_text(f"[127.0.0.1]:{login_node.port} "
                     f"{asyncssh.generate_private_key('ssh-ed25519').export_public_key().decode()}")
    with pytest.raises(HostKeyRejected, match="does not match"):
        await connect(replace(ep, known_hosts=str(wrong)))
    assert len(wrong.read_text().splitlines()) == 1


def test_build_command():
    assert build_command(["journalctl", "-k", "--since", "{since}"], "n1") == ["journalctl", "-k"]
    assert build_command(["x", "--since={since}", "{node}"], "n1") == ["x", "n1"]
    assert build_command(["x", "--since", "{since}"], "n1", "2026-01-01 00:00:00") == \
        ["x", "--since", "2026-01-01 00:00:00"]
    with pytest.raises(ValueError):
        build_command(["x", "a\x00b"], "n1")


async def test_many_channels_on_one_connection(login_node, standin):
    import asyncio

    # MaxSessions ≥ 20: 30 concurrent commands multiplexed on ONE login connection
    conn = await connect(login_node.endpoint)
    try:
        res = await asyncio.gather(*(conn.run(f"sleep 0.3; echo {i}", check=False) for i in range(30)))
        assert [r.stdout for r in res] == [f"{i}\n" for i in range(30)]
    finally:
        conn.close()
    # all four nodes at once through the jump host
    standin("kdump", 'echo "kernel line of $1"\n')
    async with reader(login_node, command=["kdump", "{node}"]) as r:
        ks = await asyncio.gather(*(r.read(f"node{i}") for i in range(1, 5)))
    assert [k.lines for k in ks] == [[f"kernel line of node{i}"] for i in range(1, 5)]


async def test_reader_reconnects_after_the_login_connection_drops(login_node):
    (login_node.dir / "nodes" / "node3").mkdir(parents=True, exist_ok=True)
    (login_node.dir / "nodes" / "node3" / "kern.log").write_text("first\n")
    async with reader(login_node, path_template=str(login_node.dir / "nodes" / "{node}" / "kern.log")) as r:
        assert (await r.read("node3")).lines == ["first"]
        assert login_node.kill_sessions()
        with open(login_node.dir / "nodes" / "node3" / "kern.log", "a") as f:
            f.write(XID + "\n")
        k = await r.read("node3")
        assert (k.available, k.lines) == (True, ["first", XID]), k.why


async def test_hung_command_times_out_as_unavailable(login_node, standin):
    standin("khang", "sleep 5\n")
    async with reader(login_node, command=["khang"], timeout_s=1.5) as r:
        k = await r.read("node1")
    assert not k.available and "no answer in 1.5s" in k.why
