"""The attempts of one (re)connect, as one decision: which node to try next, how long to wait
before it, when to give up, and what to say then.

An attempt is the whole way to a working link (TCP connect, AMQP handshake, ``channel.open``,
and whatever the owner sets up on the channel: confirm mode, queue declare, qos, consume). A
loss at any of those steps is one failed attempt under the same backoff, never the end of the
client: giving up is the backoff's decision alone, and the error then names every attempt.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import attrs

from .backoff import Backoff


@attrs.frozen
class OncePerNode:
    """A first connect's plan: the next node at once, until each was tried once."""

    nodes: int

    def delay(
        self, attempt: int, elapsed: float, rng: Callable[[], float] = random.random
    ) -> float | None:
        return 0.0 if attempt < self.nodes else None


@attrs.define
class Attempts:
    """``retry=False`` (a first connect) tries each node once, without waiting, and fails
    fast; ``retry=True`` (after a loss) goes round the nodes under ``policy``."""

    nodes: Sequence[str]
    start: int
    policy: Backoff
    retry: bool
    failures: list[tuple[str, str]] = attrs.field(factory=list)
    """(node, cause) of every failed attempt, in order."""

    def __attrs_post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("at least one node is needed")

    @property
    def index(self) -> int:
        """The node the next attempt goes to."""
        return (self.start + len(self.failures)) % len(self.nodes)

    @property
    def delays(self) -> Backoff | OncePerNode:
        """When to try again (a ``Retry``'s plan)."""
        return self.policy if self.retry else OncePerNode(len(self.nodes))

    def record(self, cause: str) -> None:
        """The attempt at ``index`` failed because of ``cause``."""
        self.failures.append((self.nodes[self.index], cause))

    def failed(
        self, cause: str, elapsed: float, rng: Callable[[], float] = random.random
    ) -> float | None:
        """Record that the attempt at ``index`` failed; the seconds to wait before the next
        one, or None: give up (``elapsed`` is the time since the first attempt began)."""
        self.record(cause)
        return self.delays.delay(len(self.failures), elapsed, rng)

    def causes(self) -> list[str]:
        """Every attempt's cause, one line each: ``attempt 3, 10.0.0.2:5672: ...``."""
        return [f"attempt {n}, {node}: {cause}"
                for n, (node, cause) in enumerate(self.failures, 1)]

    def summary(self, elapsed: float) -> str:
        """Why the client gives up: every attempt's cause, runs of the same cause on the same
        node told once (``attempts 4-9``), so twenty refusals stay readable."""
        runs: list[tuple[int, int, str, str]] = []
        for n, (node, cause) in enumerate(self.failures, 1):
            if runs and runs[-1][2:] == (node, cause):
                runs[-1] = (runs[-1][0], n, node, cause)
            else:
                runs.append((n, n, node, cause))
        told = "; ".join(
            f"attempt{'s' if first != last else ''} "
            f"{first if first == last else f'{first}-{last}'}, {node}: {cause}"
            for first, last, node, cause in runs
        )
        count = len(self.failures)
        return (f"could not connect to any of {len(self.nodes)} node(s) after {count} "
                f"attempt(s) in {elapsed:.1f} s: {told}")


@attrs.define
class Flaps:
    """Links that come up and die at once, one after another: a reconnect that "succeeds"
    each time (the link opens, the setup answers) while something kills each new link
    within moments (the broker closing the channel over a message sent again, a proxy
    cutting every connection past a few bytes). Each such reconnect resets the ``Attempts``
    of the next one, so without this the client would reconnect at once, for ever: a storm.

    A link counts as working once it outlived ``steady`` seconds (the client passes two
    heartbeat intervals: by then a dead peer would have been noticed, so the link proved
    itself). The n-th loss in a row of links that did not is followed by a wait of
    ``uniform(0, policy.cap(n))`` (the reconnect backoff's caps, full jitter) before the
    reconnect begins; a loss after a working link is reconnected at once.
    Flapping alone never gives up: each link did come up, and what waits on it (a publish's
    ``confirm_timeout``, a close) has its own bound."""

    policy: Backoff
    steady: float
    streak: int = 0
    """Links lost in a row before they became steady."""

    def lost(self, lived: float, rng: Callable[[], float] = random.random) -> float:
        """A link that was up for ``lived`` seconds is lost: the seconds to wait before the
        reconnect begins."""
        if lived >= self.steady:
            self.streak = 0
            return 0.0
        self.streak += 1
        return self.policy.cap(self.streak) * rng()
