"""Real network partitions between the nodes of a netns cluster, with nftables.

A TCP proxy sits between clients and nodes; it cannot cut the Erlang distribution links
between nodes. Here every node runs in a network namespace of its own
(``LocalCluster(network="netns")``), and a table of ours (``inet sac_partition``) in each
namespace drops what a grudge says (``sac.chaos._grudge``): symmetric cuts, one-way cuts, rings.
Clients on the host (the bridge's .254 address) are never cut.

Example::

    with LocalCluster(network="netns") as cluster, Partitions(cluster) as parts:
        start = parts.apply(isolate(3, parts.nodes))   # log start.fields() as fault_start
        ...
        end = parts.heal()                             # log end.fields() as fault_end
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, Self

import attrs

from sac.server import CommandError, LocalCluster, NetnsPlan, require_tool, run_in_namespace
from ._grudge import (
    TABLE,
    Grudge,
    bridge,
    complete,
    halves,
    heal_script,
    isolate,
    majorities_ring,
    one_way,
    scripts,
)

__all__ = [
    "Grudge",
    "PartitionEvent",
    "Partitions",
    "bridge",
    "complete",
    "halves",
    "isolate",
    "majorities_ring",
    "one_way",
]


@attrs.frozen
class PartitionEvent:
    """What was applied (``fault_start``) or healed (``fault_end``), and when (epoch s)."""

    kind: str
    grudge: Grudge
    at: float

    def fields(self) -> dict[str, Any]:
        """The nemesis event's fields: ``fault``/``target`` match a start with its end."""
        return {"fault": "partition", "target": self.grudge.target,
                "grudge": self.grudge.as_json()}


class Partitions:
    """Applies grudges to a netns cluster's namespaces; heals on ``heal()`` and on exit."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.plan: NetnsPlan = cluster.netns
        self._nft = require_tool("nft", "nftables")
        self.current = Grudge()

    @property
    def nodes(self) -> list[int]:
        return list(self.plan.indices)

    def addresses(self) -> dict[int, str]:
        return {i: self.plan.address(i) for i in self.plan.indices}

    def _load(self, node: int, script: str) -> None:
        run_in_namespace(self.plan.namespace(node), [self._nft, "-f", "-"], stdin=script)

    def apply(self, grudge: Grudge) -> PartitionEvent:
        """Replace whatever cut holds now by ``grudge`` (in every namespace: a node the grudge
        spares is healed). A failure heals everything before it is raised."""
        texts = scripts(grudge, self.addresses(), spared=self.plan.host_address)
        try:
            for node, text in texts.items():
                self._load(node, text)
        except BaseException:
            self.heal()
            raise
        self.current = grudge
        return PartitionEvent("fault_start", grudge, time.time())

    def heal(self) -> PartitionEvent:
        """Remove our table from every namespace (other rules, if any, stay)."""
        errors = []
        for node in self.plan.indices:
            try:
                self._load(node, heal_script())
            except CommandError as exc:
                errors.append(str(exc))
        healed, self.current = self.current, Grudge()
        if errors:
            raise CommandError("healing failed: " + "; ".join(errors))
        return PartitionEvent("fault_end", healed, time.time())

    def rules(self, node: int) -> str:
        """Our table in ``node``'s namespace as nft lists it ('' when there is none)."""
        try:
            return run_in_namespace(self.plan.namespace(node),
                                    [self._nft, "list", "table", "inet", TABLE])
        except CommandError:
            return ""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.heal()
