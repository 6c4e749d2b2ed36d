"""Network partitions as grudges, and the nftables rules that hold them: pure, no I/O.

A grudge (as in Jepsen) says, for each node, the set of nodes whose packets it drops. A
symmetric cut drops both ways; a one-way cut drops only at one end, so that ``src``'s packets
never reach ``dst`` while ``dst``'s reach ``src``. Nodes are the cluster's 1-based indices.

The rules drop in the input hook of the receiving node's namespace, by source address, and
only addresses of *nodes* ever appear in them: a client on the host (the bridge's address,
.254) is never cut, so a client connected to a cut-off node keeps its connection, which is
where single-active consumption gets interesting.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

TABLE = "sac_partition"
FAMILY = "inet"


def _frozen_drops(value: Mapping[int, Iterable[int]]) -> dict[int, frozenset[int]]:
    # Nodes that drop nothing are left out, so that equal cuts compare equal.
    return {int(dst): frozenset(srcs) for dst, srcs in sorted(value.items()) if srcs}


def _valid_drops(_inst: object, _attr: attrs.Attribute[dict[int, frozenset[int]]],
                 value: dict[int, frozenset[int]]) -> None:
    for dst, srcs in value.items():
        if dst < 1 or any(src < 1 for src in srcs):
            raise ValueError(f"nodes are 1-based indices; got {dst} <- {sorted(srcs)}")
        if dst in srcs:
            raise ValueError(f"node {dst} cannot drop its own packets")


@attrs.frozen
class Grudge:
    """For each node, the nodes whose packets it drops. ``label`` names it in logs."""

    drops: dict[int, frozenset[int]] = attrs.field(
        factory=dict, converter=_frozen_drops, validator=_valid_drops)
    label: str = attrs.field(default="", eq=False)

    def __bool__(self) -> bool:
        return bool(self.drops)

    def dropped_by(self, node: int) -> frozenset[int]:
        return self.drops.get(node, frozenset())

    def reaches(self, src: int, dst: int) -> bool:
        """True if ``src``'s packets reach ``dst``."""
        return src not in self.dropped_by(dst)

    def view(self, node: int, nodes: Iterable[int]) -> frozenset[int]:
        """The nodes (itself included) whose packets ``node`` receives."""
        return frozenset(n for n in nodes if n not in self.dropped_by(node))

    def pairs(self) -> list[tuple[int, int]]:
        """Every cut link as ``(src, dst)``: packets from src do not reach dst."""
        return sorted((src, dst) for dst, srcs in self.drops.items() for src in srcs)

    @property
    def target(self) -> str:
        """A stable text for logs (``fault_start``/``fault_end`` ``target``): the label, or
        ``dst<-srcs`` per node."""
        if self.label:
            return self.label
        cuts = " ".join(f"n{dst}<-{','.join(f'n{s}' for s in sorted(srcs))}"
                        for dst, srcs in self.drops.items())
        return cuts or "none"

    def as_json(self) -> dict[str, list[int]]:
        return {str(dst): sorted(srcs) for dst, srcs in self.drops.items()}

    def __or__(self, other: Grudge) -> Grudge:
        """Both grudges at once."""
        keys = set(self.drops) | set(other.drops)
        label = " + ".join(g.target for g in (self, other) if g)
        return Grudge({k: self.dropped_by(k) | other.dropped_by(k) for k in keys}, label)


def _distinct(nodes: Iterable[int]) -> list[int]:
    listed = list(nodes)
    if len(set(listed)) != len(listed):
        raise ValueError(f"nodes must be distinct, got {listed}")
    return listed


def complete(components: Sequence[Collection[int]], label: str = "") -> Grudge:
    """Every node drops the packets of every node outside its own component (Jepsen's
    ``complete-grudge``): components cut from each other, both ways."""
    everyone = _distinct(n for c in components for n in c)
    drops = {}
    for component in components:
        others = frozenset(everyone) - frozenset(component)
        drops.update({node: others for node in component})
    return Grudge(drops, label)


def isolate(node: int, nodes: Iterable[int]) -> Grudge:
    """``node`` cut from all the others, both ways."""
    listed = _distinct(nodes)
    if node not in listed:
        raise ValueError(f"node {node} is not among {listed}")
    return complete([[node], [n for n in listed if n != node]], f"isolate n{node}")


def halves(nodes: Sequence[int]) -> Grudge:
    """The first ``len // 2`` nodes cut from the rest, both ways (a minority and a majority
    for an odd count)."""
    listed = _distinct(nodes)
    if len(listed) < 2:
        raise ValueError("halves need at least two nodes")
    cut = len(listed) // 2
    first, second = listed[:cut], listed[cut:]
    label = "halves " + "|".join(",".join(f"n{n}" for n in half) for half in (first, second))
    return complete([first, second], label)


def one_way(src: int, dst: int) -> Grudge:
    """Packets from ``src`` to ``dst`` are dropped; ``dst`` to ``src`` flows."""
    if src == dst:
        raise ValueError("a one-way cut needs two different nodes")
    return Grudge({dst: {src}}, f"one-way n{src}->n{dst}")


def majorities_ring(nodes: Sequence[int]) -> Grudge:
    """Every node sees a majority (itself included), but no two nodes see the same majority
    (Jepsen's ``majorities-ring``): node k of the ring sees the window of ``n // 2 + 1``
    consecutive nodes centred on it. For 3 nodes that is a ring of one-way cuts; for 5 and
    more, each node sees its neighbours. Reorder ``nodes`` (e.g. shuffle) for another ring."""
    listed = _distinct(nodes)
    n = len(listed)
    if n < 3:
        raise ValueError("a majorities ring needs at least three nodes")
    size = n // 2 + 1
    before = (size - 1) // 2
    drops = {}
    for k, node in enumerate(listed):
        window = {listed[(k - before + j) % n] for j in range(size)}
        drops[node] = frozenset(listed) - window
    return Grudge(drops, "majorities-ring " + ",".join(f"n{x}" for x in listed))


def bridge(nodes: Sequence[int]) -> Grudge:
    """Two halves cut from each other except one node in the middle (the first of the second
    half) that still talks to both (Jepsen's ``bridge``)."""
    listed = _distinct(nodes)
    if len(listed) < 3:
        raise ValueError("a bridge needs at least three nodes")
    cut = len(listed) // 2
    first, second = listed[:cut], listed[cut:]
    middle = second[0]
    cuts = complete([first, second[1:]])
    return Grudge(cuts.drops, f"bridge n{middle}")


# ---------------------------------------------------------------------- nftables text


def _reset() -> str:
    # Creating the table first makes the delete valid when it does not exist yet: one
    # transaction that replaces whatever we had, atomically (``nft -f``).
    return f"add table {FAMILY} {TABLE}\ndelete table {FAMILY} {TABLE}\n"


def heal_script() -> str:
    """nft input that removes our table (and nothing else) whether it exists or not."""
    return _reset()


def nft_script(dropped: Collection[str]) -> str:
    """nft input for one namespace: drop every packet arriving from ``dropped`` addresses."""
    if not dropped:
        return heal_script()
    sources = ", ".join(sorted(dropped, key=lambda a: tuple(int(p) for p in a.split("."))))
    return _reset() + (
        f"table {FAMILY} {TABLE} {{\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy accept;\n"
        f"    ip saddr {{ {sources} }} drop\n"
        "  }\n"
        "}\n"
    )


def scripts(grudge: Grudge, addresses: Mapping[int, str], spared: str) -> dict[int, str]:
    """The nft input for every node in ``addresses`` (node index -> its address): nodes the
    grudge spares get a heal script. ``spared`` (the host's bridge address, where clients come
    from) must never be dropped; a grudge naming a node without an address is an error."""
    unknown = sorted({*grudge.drops, *(s for srcs in grudge.drops.values() for s in srcs)}
                     - set(addresses))
    if unknown:
        raise ValueError(f"the grudge names nodes {unknown}; the cluster has {sorted(addresses)}")
    if spared in addresses.values():
        raise ValueError(f"{spared} is a node's address and the clients' address at once")
    return {node: nft_script({addresses[src] for src in grudge.dropped_by(node)})
            for node in sorted(addresses)}
