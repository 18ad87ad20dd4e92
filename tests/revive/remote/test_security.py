"""Shell metacharacters in node names, paths, job names and arguments never execute on the real
login node: each string tries to create a canary file, and the canary must not exist after."""

from __future__ import annotations

import pytest

from revive.remote.follow import RemoteFollower
from revive.remote.kernel import KernelLogReader


def evil_strings(canary) -> list[str]:
    c = str(canary)
    return [
        f"; touch {c}",
        f"x; touch {c}; #",
        f"$(touch {c})",
        f"`touch {c}`",
        f"a\ntouch {c}\n",
        f"' ; touch {c} ; '",
        f'" ; touch {c} ; "',
        f"| touch {c}",
        f"&& touch {c}",
        f"$(touch${{IFS}}{c})",
        f"; rm -rf {c}.nonexistent; touch {c}",
    ]


@pytest.fixture
def canary(login_node, tmp_path):
    d = tmp_path / "canary-dir"
    d.mkdir()
    c = d / "CANARY"
    yield c
    assert not c.exists(), "a shell metacharacter was executed on the login node"
    assert list(d.iterdir()) == []


async def test_follower_paths_and_job_names_are_literal(login_node, tmp_path, canary):
    logs = tmp_path / "evil-logs"
    logs.mkdir()
    async with RemoteFollower(login_node.connector()) as f:
        for i, s in enumerate(evil_strings(canary)):
            # a job name with metacharacters in its StdOut path (%x), as Slurm would make it
            name = f"slurm-{i}-{s.replace('/', '_')}.out"
            p = logs / name
            p.write_text(f"line of {i}\n")
            assert await f.read_new(str(p)) == [(1, f"line of {i}")]
            # and the raw string as a (nonexistent) path
            assert await f.read_new(s) == []
            assert await f.read_new(str(logs) + "/" + s) == []
    assert not canary.exists()


async def test_node_names_with_metacharacters_are_not_contacted(login_node, canary):
    async with KernelLogReader(login_node.connector(), login_node.endpoint, nodes=None,
                               command=["echo", "{node}"]) as r:
        for s in evil_strings(canary) + ["node1 ", "-oProxyCommand=touch", "node1/../x", ""]:
            k = await r.read(s)
            assert not k.available and "invalid node name" in k.why
            assert r._node_conns == {}
    async with KernelLogReader(login_node.connector(), login_node.endpoint, nodes=login_node.nodes,
                               path_template=str(login_node.dir / "nodes" / "{node}" / "kern.log")) as r:
        for s in evil_strings(canary):
            assert not (await r.read(s)).available


async def test_command_arguments_and_since_are_quoted(login_node, canary):
    evil = evil_strings(canary)
    async with KernelLogReader(login_node.connector(), login_node.endpoint, nodes=login_node.nodes,
                               command=["printf", "[%s]\\n", *evil, "{since}"]) as r:
        k = await r.read("node1", since=f"$(touch {canary})")
    assert k.available, k.why
    # printf received every string as ONE argument, unchanged
    out = "\n".join(k.lines)
    expected = "\n".join(f"[{s}]" for s in [*evil, f"$(touch {canary})"])
    assert out == "\n".join(x for x in expected.split("\n") if x)


async def test_path_template_with_metacharacters_is_literal(login_node, tmp_path, canary):
    base = tmp_path / "kern-evil"
    base.mkdir()
    for i, s in enumerate(evil_strings(canary)):
        d = base / f"{i}{s.replace('/', '_')}"
        d.mkdir()
        (d / "node1.log").write_text(f"kernel {i}\n")
        async with KernelLogReader(login_node.connector(), login_node.endpoint, nodes=login_node.nodes,
                                   path_template=str(d / "{node}.log")) as r:
            k = await r.read("node1")
        assert (k.available, k.lines) == (True, [f"kernel {i}"])
