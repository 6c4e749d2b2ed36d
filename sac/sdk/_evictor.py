"""The eviction's I/O: a new leader asks the management API to close its predecessor's
connection (what and whether: ``_core/eviction.py``).

It reads this consumer's queue (its consumers) and the connections (reads: tried on every
node, again under the settings' bounded, jittered retry), keeps of those bearing the
record's name only a consumer of this queue, in this vhost, under this consumer's user
(``eviction.targets``), and deletes those (a write: never repeated once it may have been
applied). The whole is bounded by ``EVICT_DEADLINE``. Whatever fails is the caller's to log:
the takeover then waits for the broker's heartbeats, as without eviction; it never holds up
the leadership, which subscribes meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse

from ._core.eviction import Evict, targets
from ._errors import ManagementNotFound
from ._settings import ConsumerSettings
from .management import ConnectionsClosed, Management

log = logging.getLogger("sac.guard")

EVICT_DEADLINE = 30.0
"""Seconds an eviction may take in all before the leader stops waiting for it."""


class Evictor:
    """One consumer's management client for evictions (made when first needed)."""

    def __init__(self, settings: ConsumerSettings) -> None:
        assert settings.management is not None
        self.client = Management(settings.management)
        self.queue = settings.queue.name
        self.vhost = settings.connection.vhost
        self.users = frozenset(
            urllib.parse.unquote(urllib.parse.urlsplit(url).username or "guest")
            for url in settings.connection.urls)
        """Who this consumer connects as (AMQP's default user when a URL names none)."""

    async def evict(self, decision: Evict) -> ConnectionsClosed:
        """Close ``decision.connection``, if it is a consumer of this queue (see the module
        docstring): ``ManagementError`` or ``TimeoutError`` if the API would not."""
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(None, self._evict, decision),
                                      EVICT_DEADLINE)

    def _evict(self, decision: Evict) -> ConnectionsClosed:
        try:
            queue = self.client.queue(self.queue, self.vhost)
            consumers = {c.connection for c in queue.consumers if c.connection is not None}
        except ManagementNotFound:
            consumers = set()  # no queue, no consumer of it to close
        named = [c for c in self.client.connections() if c.client_name == decision.connection]
        close, spared = targets(named, consumers, self.queue, self.vhost, self.users)
        for one in spared:
            log.warning("the leader record of token %d names connection %r (%s), which is not "
                        "closed: %s", decision.previous.token, decision.connection,
                        one.connection.name, one.why)
        closed = tuple(c for c in close if self.client.close_connection(c.name, decision.reason))
        gone = tuple(c for c in close if c not in closed)
        return ConnectionsClosed(decision.connection, closed, gone, spared=tuple(
            s.connection for s in spared))
