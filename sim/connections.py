"""The broker's side of connections and channels: delivery tags and what they stand for,
prefetch, consumers, confirm mode, and the ``connection.blocked`` rule.

Blocking, as ``rabbit_reader`` does it (3.10): a connection that published since it was
last unblocked is blocked as soon as a resource alarm goes off; any other connection is
blocked right after its next publish. A blocked connection is told (``connection.blocked``)
and is no longer read, so everything it sends waits, acks included, until the alarm
clears (``connection.unblocked``). Connections that only consume are never blocked.
"""

from __future__ import annotations

from typing import Any

import attrs

from .confirms import ConfirmChannel
from .sac import ConsumerKey


class UnknownDeliveryTag(Exception):
    """``basic.ack``/``nack``/``reject`` of a tag this channel never gave or already
    settled: RabbitMQ closes the channel with PRECONDITION_FAILED."""

    def __init__(self, tag: int) -> None:
        super().__init__(f"PRECONDITION_FAILED - unknown delivery tag {tag}")
        self.tag = tag


@attrs.frozen
class Unacked:
    queue: str
    consumer: ConsumerKey
    msg_id: int
    uid: int


@attrs.define(eq=False)
class BrokerChannel:
    number: int
    confirms: ConfirmChannel | None = None
    prefetch: int = 0
    consumers: dict[str, str] = attrs.field(factory=dict)
    """consumer tag -> queue."""
    consumed: dict[str, None] = attrs.field(factory=dict)
    """Every queue this channel consumed from (ordered set): told when the channel goes."""
    unacked: dict[int, Unacked] = attrs.field(factory=dict)
    next_tag: int = 1
    closing: bool = False
    """The broker sent ``channel.close`` and waits for ``close-ok``; anything else the
    client sends on this channel meanwhile is dropped, as the protocol says."""

    def delivered(self, entry: Unacked) -> int:
        tag = self.next_tag
        self.next_tag += 1
        self.unacked[tag] = entry
        return tag

    def settle(self, tag: int, multiple: bool) -> list[Unacked]:
        """What a client's ack/nack/reject of ``tag`` covers, in delivery order; tag 0
        with ``multiple`` is everything."""
        if multiple and tag == 0:
            tags = list(self.unacked)
        elif tag not in self.unacked:
            raise UnknownDeliveryTag(tag)
        elif multiple:
            tags = [t for t in self.unacked if t <= tag]
        else:
            tags = [tag]
        return [self.unacked.pop(t) for t in tags]


@attrs.define(eq=False)
class BrokerConnection:
    id: int
    node: int
    name: str
    channels: dict[int, BrokerChannel] = attrs.field(factory=dict)
    published_since_unblock: bool = False
    blocked: bool = False
    held: list[tuple[int, Any]] = attrs.field(factory=list)
    """Frames not read while blocked: (channel, method)."""
    open: bool = True

    def block(self) -> bool:
        """Block it (alarm on and it publishes); True if that is news."""
        if self.blocked:
            return False
        self.blocked = True
        return True

    def unblock(self) -> list[tuple[int, Any]]:
        self.blocked = False
        self.published_since_unblock = False
        held, self.held = self.held, []
        return held
