"""Grudges and their nftables text, without namespaces (sac/chaos/_grudge.py)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sac.chaos._grudge import (
    TABLE,
    Grudge,
    bridge,
    complete,
    halves,
    heal_script,
    isolate,
    majorities_ring,
    nft_script,
    one_way,
    scripts,
)

HOST = "198.18.7.254"
CHECK = settings(deadline=None, database=None)


def addresses(n: int) -> dict[int, str]:
    return {i: f"198.18.7.{i}" for i in range(1, n + 1)}


def test_isolate_cuts_one_node_both_ways() -> None:
    grudge = isolate(3, [1, 2, 3])
    assert grudge.drops == {1: {3}, 2: {3}, 3: {1, 2}}
    assert not grudge.reaches(3, 1)
    assert not grudge.reaches(1, 3)
    assert grudge.reaches(1, 2)
    assert grudge.reaches(2, 1)
    assert grudge.target == "isolate n3"
    with pytest.raises(ValueError, match="not among"):
        isolate(4, [1, 2, 3])


def test_halves_put_the_smaller_half_first() -> None:
    grudge = halves([1, 2, 3, 4, 5])
    assert grudge.view(1, range(1, 6)) == {1, 2}
    assert grudge.view(5, range(1, 6)) == {3, 4, 5}
    assert grudge.target == "halves n1,n2|n3,n4,n5"
    assert grudge == complete([[1, 2], [3, 4, 5]])


def test_one_way_drops_only_at_the_receiver() -> None:
    grudge = one_way(3, 1)
    assert not grudge.reaches(3, 1)
    assert grudge.reaches(1, 3)
    assert grudge.pairs() == [(3, 1)]
    assert grudge.drops == {1: {3}}  # node 3 drops nothing: it has no table entry
    rules = scripts(grudge, addresses(3), spared=HOST)
    assert "198.18.7.3" in rules[1]
    assert "drop" not in rules[3]
    assert "drop" not in rules[2]
    with pytest.raises(ValueError, match="two different nodes"):
        one_way(2, 2)


@CHECK
@given(st.integers(min_value=3, max_value=9), st.randoms(use_true_random=False))
def test_majorities_ring_every_node_sees_a_distinct_majority(n: int, rnd: object) -> None:
    nodes = list(range(1, n + 1))
    rnd.shuffle(nodes)  # type: ignore[attr-defined]
    grudge = majorities_ring(nodes)
    views = [grudge.view(node, nodes) for node in nodes]
    assert all(node in view for node, view in zip(nodes, views, strict=True))
    assert all(len(view) > n // 2 for view in views)
    assert len(set(views)) == n  # no two nodes see the same majority


def test_majorities_ring_of_three_is_a_ring_of_one_way_cuts() -> None:
    grudge = majorities_ring([1, 2, 3])
    assert grudge.pairs() == [(1, 2), (2, 3), (3, 1)]  # 1 sees {1, 2}, 2 sees {2, 3}...
    assert all(grudge.reaches(dst, src) for src, dst in grudge.pairs())


def test_bridge_keeps_the_middle_node_talking_to_both_sides() -> None:
    grudge = bridge([1, 2, 3, 4, 5])
    assert grudge.view(3, range(1, 6)) == {1, 2, 3, 4, 5}
    assert grudge.view(1, range(1, 6)) == {1, 2, 3}
    assert grudge.view(5, range(1, 6)) == {3, 4, 5}


def test_grudges_compare_by_cuts_and_combine() -> None:
    assert Grudge({1: set(), 2: {3}}) == Grudge({2: [3]})
    assert not Grudge()
    assert Grudge().target == "none"
    both = one_way(3, 1) | one_way(1, 2)
    assert both.pairs() == [(1, 2), (3, 1)]
    assert Grudge({2: {3}}).target == "n2<-n3"
    assert Grudge({2: {3}}).as_json() == {"2": [3]}
    with pytest.raises(ValueError, match="own packets"):
        Grudge({1: {1}})
    with pytest.raises(ValueError, match="1-based"):
        Grudge({0: {1}})
    with pytest.raises(ValueError, match="distinct"):
        halves([1, 1, 2])


def test_rule_text_drops_node_sources_in_input_of_our_table() -> None:
    text = nft_script({"198.18.7.10", "198.18.7.2"})
    assert text.startswith(f"add table inet {TABLE}\ndelete table inet {TABLE}\n")
    assert "hook input" in text
    assert "ip saddr { 198.18.7.2, 198.18.7.10 } drop" in text
    assert nft_script(set()) == heal_script()
    assert "drop" not in heal_script()


@CHECK
@given(st.integers(min_value=2, max_value=9), st.data())
def test_rule_text_never_mentions_the_host_address(n: int, data: st.DataObject) -> None:
    nodes = list(range(1, n + 1))
    node = data.draw(st.sampled_from(nodes))
    builders = [isolate(node, nodes), halves(nodes)]
    if n >= 3:
        builders += [majorities_ring(nodes), bridge(nodes)]
    for grudge in builders:
        for text in scripts(grudge, addresses(n), spared=HOST).values():
            assert HOST not in text
            mentioned = {tok.strip("{},") for tok in text.split() if tok.count(".") == 3}
            assert all(ipaddress.ip_address(a) in ipaddress.ip_network("198.18.7.0/24")
                       and a != HOST for a in mentioned)


def test_scripts_refuse_unknown_nodes_and_a_spared_node_address() -> None:
    with pytest.raises(ValueError, match=r"names nodes \[4\]"):
        scripts(one_way(4, 1), addresses(3), spared=HOST)
    with pytest.raises(ValueError, match="clients' address"):
        scripts(Grudge(), addresses(3), spared="198.18.7.2")
    healed = scripts(Grudge(), addresses(3), spared=HOST)
    assert healed == {i: heal_script() for i in (1, 2, 3)}
