import pytest
from hypothesis import given
from hypothesis import strategies as st

from revive.scheduler.hostlist import compress_hostlist, expand_hostlist


@pytest.mark.parametrize(
    "expr, hosts",
    [
        ("node[1-3,5]", ["node1", "node2", "node3", "node5"]),
        ("gpu-node-[001-003]", ["gpu-node-001", "gpu-node-002", "gpu-node-003"]),
        ("gpu-node-[098-101]", ["gpu-node-098", "gpu-node-099", "gpu-node-100", "gpu-node-101"]),
        ("node1", ["node1"]),
        ("node[9-11]", ["node9", "node10", "node11"]),
        ("node[1-2],login,gpu[3]", ["node1", "node2", "login", "gpu3"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("", []),
        ("(null)", []),
        (None, []),
        ("node[1-2],node2", ["node1", "node2"]),
    ],
)
def test_expand(expr, hosts):
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize(
    "hosts, expr",
    [
        (["node1", "node2", "node3", "node5"], "node[1-3,5]"),
        (["gpu-node-001", "gpu-node-002", "gpu-node-003"], "gpu-node-[001-003]"),
        (["node2"], "node2"),
        (["node9", "node10", "node11"], "node[9-11]"),
        (["node3", "node1", "login"], "node[1,3],login"),
        ([], ""),
    ],
)
def test_compress(hosts, expr):
    assert compress_hostlist(hosts) == expr


@pytest.mark.parametrize("bad", ["node[1-", "node]1", "node[a-b]", "node[3-1]", "node[1,,2]"])
def test_malformed(bad):
    with pytest.raises(ValueError):
        expand_hostlist(bad)


@given(st.sets(st.integers(min_value=0, max_value=300), min_size=1, max_size=40),
       st.sampled_from(["node", "gpu-node-", "n"]), st.booleans())
def test_roundtrip(nums, prefix, padded):
    hosts = sorted(f"{prefix}{n:03d}" if padded else f"{prefix}{n}" for n in nums)
    hosts.sort(key=lambda h: int(h[len(prefix):]))
    assert expand_hostlist(compress_hostlist(hosts)) == hosts
