"""The pure side of netns clusters: names, addresses, commands, settings (no namespace made)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from sac.server import ClusterSpec, LocalCluster, NetnsPlan, PortLayout
from sac.server._netns import (
    RANGE,
    choose_subnet,
    missing_capabilities,
    namespace_pattern,
    setup_commands,
    subnet_of,
)

LONGEST = "a" * 24  # the longest cluster name validate_name allows


def test_interface_names_fit_the_kernel_limit_for_any_name() -> None:
    for name in (LONGEST, "x", "sac-test-123456"):
        plan = NetnsPlan(name, 9, "198.18.3.0/24")
        assert len(plan.bridge) <= 15
        assert all(len(plan.veth(i)) <= 15 for i in plan.indices)
        assert plan.namespace(9) == f"sac-{name}-9"
    assert NetnsPlan("a", 3, "198.18.3.0/24").bridge != NetnsPlan("b", 3, "198.18.3.0/24").bridge


def test_addresses_are_nodes_then_the_host_at_254() -> None:
    plan = NetnsPlan("demo", 3, "198.19.4.0/24")
    assert [plan.address(i) for i in plan.indices] == ["198.19.4.1", "198.19.4.2", "198.19.4.3"]
    assert plan.host_address == "198.19.4.254"
    with pytest.raises(ValueError, match=r"outside 1\.\.3"):
        plan.address(4)
    with pytest.raises(ValueError, match=r"/24 inside 198\.18\.0\.0/15"):
        NetnsPlan("demo", 3, "10.0.0.0/24")


def test_subnet_is_stable_and_skips_what_the_host_routes() -> None:
    first = choose_subnet("demo", [])
    assert first.subnet_of(RANGE)
    assert first.prefixlen == 24
    assert choose_subnet("demo", [ipaddress.IPv4Network("192.0.2.0/24")]) == first
    second = choose_subnet("demo", [first])
    assert second != first
    # A wider route over the whole range leaves nothing.
    with pytest.raises(Exception, match="none left"):
        choose_subnet("demo", [RANGE])
    assert subnet_of(0) == ipaddress.IPv4Network("198.18.0.0/24")
    assert subnet_of(511) == ipaddress.IPv4Network("198.19.255.0/24")


def test_setup_routes_nothing_beyond_the_bridge() -> None:
    plan = NetnsPlan("demo", 3, "198.18.9.0/24")
    cmds = setup_commands(plan)
    flat = [" ".join(c) for c in cmds]
    assert not [c for c in flat if "route" in c or "forward" in c or "nat" in c]
    assert ["link", "add", plan.bridge, "type", "bridge"] == cmds[0]
    for i in plan.indices:
        assert f"netns add {plan.namespace(i)}" in flat
        assert f"-n {plan.namespace(i)} link set dev lo up" in flat
        assert f"-n {plan.namespace(i)} addr add {plan.address(i)}/24 dev eth0" in flat
        assert f"link set dev {plan.veth(i)} master {plan.bridge}" in flat
    assert f"addr add {plan.host_address}/24 dev {plan.bridge}" in flat


def test_cleanup_pattern_matches_this_cluster_only() -> None:
    pattern = namespace_pattern("a")
    assert pattern.match("sac-a-1")
    assert pattern.match("sac-a-9")
    assert not pattern.match("sac-a-1-1")  # node 1 of cluster "a-1"
    assert not pattern.match("sac-ab-1")
    assert not pattern.match("sac-a-10")


def test_capabilities_needed() -> None:
    assert missing_capabilities(0) == ["CAP_NET_ADMIN", "CAP_SYS_ADMIN"]
    assert missing_capabilities((1 << 12) | (1 << 21)) == []
    assert missing_capabilities(1 << 21) == ["CAP_NET_ADMIN"]


def test_network_settings_and_their_defaults() -> None:
    loop = ClusterSpec()
    assert (loop.network, loop.net_ticktime, loop.cluster_partition_handling) == (
        "loopback", 60, "ignore")
    ns = ClusterSpec(network="netns")
    assert (ns.net_ticktime, ns.cluster_partition_handling) == (5, "pause_minority")
    assert ClusterSpec(network="netns", net_ticktime=2,
                       cluster_partition_handling="autoheal").net_ticktime == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"network": "docker"}, "network must be one of loopback, netns; got 'docker'"),
        ({"net_ticktime": 0}, "net_ticktime must be a whole number of seconds from 1 to 3600"),
        ({"net_ticktime": True}, "net_ticktime must be a whole number"),
        ({"net_ticktime": 2.5}, "net_ticktime must be a whole number"),
        ({"cluster_partition_handling": "pause_if_all_down"},
         "cluster_partition_handling must be one of ignore, pause_minority, autoheal"),
    ],
)
def test_bad_network_settings_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LocalCluster(**kwargs)  # type: ignore[arg-type]


def test_netns_nodes_have_long_names_with_their_address(tmp_path: Path) -> None:
    local = LocalCluster(name="ns", nodes=3, home=tmp_path, network="netns")
    local._layout = PortLayout(21000)
    local._plan = NetnsPlan("ns", 3, "198.18.200.0/24")
    node = local.node(2)
    assert node.name == "sac-ns-2@198.18.200.2"
    assert node.address == "198.18.200.2:21001"
    assert node.namespace == "sac-ns-2"
    assert local.node("sac-ns-3@198.18.200.3").index == 3
    assert "network='netns'" in repr(local)
    with pytest.raises(Exception, match="runs on loopback"):
        _ = LocalCluster(name="lo", home=tmp_path).netns
