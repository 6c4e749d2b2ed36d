"""The eviction's I/O: a new leader asks the management API to close its predecessor's
connection (what and whether: ``_core/eviction.py``).

``Management.close_connections`` lists the connections (a read: tried on every node, again
under the settings' bounded, jittered retry) and deletes those of the one name (a write:
never repeated once it may have been applied). The whole is bounded by ``EVICT_DEADLINE``.
Whatever fails is the caller's to log: the takeover then waits for the broker's heartbeats,
as without eviction; it never holds up the leadership, which subscribes meanwhile.
"""

from __future__ import annotations

import asyncio

from ._core.eviction import Evict
from ._settings import ManagementSettings
from .management import ConnectionsClosed, Management

EVICT_DEADLINE = 30.0
"""Seconds an eviction may take in all before the leader stops waiting for it."""


class Evictor:
    """One consumer's management client for evictions (made when first needed)."""

    def __init__(self, settings: ManagementSettings) -> None:
        self.client = Management(settings)

    async def evict(self, decision: Evict) -> ConnectionsClosed:
        """Close ``decision.connection``: ``ManagementError`` or ``TimeoutError`` if the
        API would not."""
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(loop.run_in_executor(
            None, self.client.close_connections, decision.connection, decision.reason),
            EVICT_DEADLINE)
