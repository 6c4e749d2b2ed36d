"""A message as a queue stores it."""

from __future__ import annotations

import attrs

from .methods import Properties


@attrs.frozen
class Message:
    uid: int
    """Which published message this is, for traces and invariants; never on the wire. A
    dead-lettered message keeps its uid: it moved, it was not published again."""
    exchange: str
    routing_key: str
    body: bytes
    properties: Properties
    delivery_count: int = 0
    """How many times a consumer gave it back (``x-delivery-count``)."""
