"""Where a client's next link goes and when, after the working one is lost: pure.

The SDK's recovery (``sac/sdk/_recovery.py``) and the simulator's clients
(``sac/sim/shell.py``) both keep one link up; the decisions they share are made here once, so
that the simulator tests the decisions the SDK makes rather than a copy of them. Time is
passed in, never read.

- The first attempt of every connect goes to the node of the last working link, and after a
  loss to the node after it: a node that just dropped the link is tried last.
- Each attempt of one connect is an ``attempts.Attempts`` (which node next, how long to wait,
  when to give up); a first connect tries each node once and fails fast.
- A link lost before it proved itself (``Flaps``) is followed by a wait before the reconnect,
  so links that die at once do not become a reconnect storm.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import attrs

from .attempts import Attempts, Flaps
from .backoff import Backoff


@attrs.frozen(kw_only=True)
class Reconnect:
    """Reconnect, after ``wait`` seconds, starting at the node after the lost link's."""

    wait: float
    lived: float
    """How long the lost link had been working."""
    streak: int
    """Links lost in a row before they proved themselves (0: this one had)."""


class Reconnects:
    """The link decisions of one client, under the reconnect ``policy`` and ``heartbeat``
    interval of its ``ConnectionSettings``."""

    __slots__ = ("_flaps", "_up_since", "node", "policy", "reconnects")

    def __init__(self, policy: Backoff, heartbeat: float) -> None:
        self.policy = policy
        self.node = 0
        """Where the next connect's first attempt goes (an index, taken modulo the nodes)."""
        self.reconnects = 0
        """Working links lost and reconnected from (the clients' ``stats.reconnects``)."""
        self._flaps = Flaps(policy, steady=2.0 * heartbeat)
        """Two heartbeat intervals: by then a dead peer would have been noticed."""
        self._up_since = 0.0

    def attempts(self, nodes: Sequence[str], *, retry: bool) -> Attempts:
        """The plan of one connect: from ``node``, each node once (``retry`` false: a first
        connect, which fails fast) or round the nodes under ``policy`` (after a loss)."""
        return Attempts(nodes=nodes, start=self.node, policy=self.policy, retry=retry)

    def up(self, node: int, now: float) -> None:
        """A link to ``node`` is set up and working since ``now``."""
        self.node = node
        self._up_since = now

    def lost(self, now: float, rng: Callable[[], float] = random.random) -> Reconnect:
        """The working link is lost at ``now`` and the client reconnects (it is not stopping,
        and no connect is under way, which counts the loss as one of its failed attempts)."""
        self.node += 1
        self.reconnects += 1
        lived = now - self._up_since
        wait = self._flaps.lost(lived, rng)
        return Reconnect(wait=wait, lived=lived, streak=self._flaps.streak)
