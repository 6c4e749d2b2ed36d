"""A message as a queue stores it."""

from __future__ import annotations

import attrs

from .methods import Properties


@attrs.frozen(kw_only=True)
class Message:
    uid: int
    """Which published message this is, for traces and invariants; never on the wire. A
    dead-lettered message keeps its uid: it moved, it was not published again."""
    exchange: str
    routing_key: str
    body: bytes
    properties: Properties
    delivery_count: int = 0
    """How many times it came back in a way the broker counts (``x-delivery-count``, and
    what the delivery limit is checked against): every return up to 4.2, only a
    ``basic.reject`` on 4.3 (``sim.model``)."""
    acquired: int = 0
    """How many times it came back at all (``redelivered`` when above 0)."""
