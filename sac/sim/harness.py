"""What a client under test implements to be driven by the simulated world, and what the
world tells it.

A client is a state machine in virtual time: the world calls ``start`` once, ``receive``
for each event (a frame from the broker, a lost connection, a store call finished) and
``tick`` whenever the time the client asked for with ``next_tick`` comes. Each call returns
the actions to carry out: open a connection, send a method, close a socket, call the dedup
store. Heartbeats are the transport's business, not the client's: the world sends them for
every open link unless a fault silences it.

The SDK's engines (``sac/sdk/_core``) plug in through adapters implementing ``Client``
(``sim.publisher``, ``sim.consumer``, over the transport twin ``sim.shell``); the scripted
client of the model's own tests is ``sim.script``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs

# ------------------------------------------------------------------ actions (client -> world)


@attrs.frozen(kw_only=True)
class Connect:
    """Open a connection called ``link`` to ``node`` (TCP, handshake). Answered by a
    ``ConnectionOpenOk`` frame or a ``ConnectionRefused`` event. ``heartbeat`` 0 means
    none (a silent link is then never noticed by the broker)."""

    link: str
    node: int = 0
    heartbeat: float = 2.0


@attrs.frozen(kw_only=True)
class Send:
    link: str
    channel: int
    method: Any


@attrs.frozen(kw_only=True)
class Disconnect:
    """Close the socket (no AMQP close): what a crashing process does."""

    link: str


@attrs.frozen(kw_only=True)
class Commit:
    """Commit the effects of ``message_ids`` under ``epoch`` in the dedup store. Answered
    by ``CommitDone`` once the store is done, which may be much later in virtual time."""

    token: Any
    queue: str
    epoch: int
    consumer: str
    message_ids: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ClaimEpoch:
    token: Any
    queue: str


Action = Connect | Send | Disconnect | Commit | ClaimEpoch

# ------------------------------------------------------------------ events (world -> client)


@attrs.frozen(kw_only=True)
class Received:
    link: str
    channel: int
    method: Any


@attrs.frozen(kw_only=True)
class ConnectionLost:
    link: str
    reason: str


@attrs.frozen(kw_only=True)
class ConnectionRefused:
    link: str


@attrs.frozen(kw_only=True)
class CommitDone:
    token: Any
    committed: tuple[str, ...] = ()
    duplicates: tuple[str, ...] = ()
    error: Exception | None = None
    """``StaleEpoch`` (nothing committed) or ``StoreUnavailable`` (maybe committed after
    all: an ambiguous failure; the next attempt finds the records)."""


@attrs.frozen(kw_only=True)
class EpochClaimed:
    token: Any
    epoch: int | None = None
    error: Exception | None = None


@attrs.frozen(kw_only=True)
class Stop:
    """The client's process is told to stop (SIGTERM: a graceful stop, a handover) or, with
    ``kill``, dies at once (SIGKILL)."""

    kill: bool = False


@attrs.frozen(kw_only=True)
class Restart:
    """The client's process is started again after a ``Stop``."""


Event = (Received | ConnectionLost | ConnectionRefused | CommitDone | EpochClaimed | Stop
         | Restart)


class Client(Protocol):
    """A client under test, driven by ``sim.world.World``.

    A client may also define ``idle() -> bool``: while it says True, its next tick is
    housekeeping (a heartbeat check) that does not keep the world busy, so that
    ``run_until_idle`` can end while the client still watches its link."""

    name: str

    def start(self, now: float) -> Sequence[Action]: ...

    def receive(self, now: float, event: Event) -> Sequence[Action]: ...

    def tick(self, now: float) -> Sequence[Action]: ...

    def next_tick(self) -> float | None:
        """When ``tick`` should run next (virtual time), or None."""
        ...
