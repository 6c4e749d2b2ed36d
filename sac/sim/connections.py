"""The broker's side of connections and channels: delivery tags and what they stand for,
prefetch, consumers, confirm mode, and the ``connection.blocked`` rule.

Blocking, as RabbitMQ 3.10 did it on a real cluster (``tests/sim/test_model_honesty.py``):
while a resource alarm is on, a connection that publishes is blocked at that publish. It is
told (``connection.blocked``) and no longer read, so that publish and everything after it
(acks included) wait until the alarm clears (``connection.unblocked``). A connection that
does not publish during the alarm is neither blocked nor told, even if it published
before; one that only consumes goes on consuming.
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


@attrs.frozen(kw_only=True)
class Unacked:
    queue: str
    consumer: ConsumerKey
    msg_id: int
    uid: int


@attrs.define(eq=False, kw_only=True)
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
    reclaimed: set[int] = attrs.field(factory=set)
    """Tags the queue took back from a timed-out consumer (RabbitMQ 4.3): a later ack or
    nack of one is ignored, not an unknown tag."""
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
        elif tag in self.reclaimed and not multiple:
            return []
        elif tag not in self.unacked and tag not in self.reclaimed:
            raise UnknownDeliveryTag(tag)
        elif multiple:
            tags = [t for t in self.unacked if t <= tag]
        else:
            tags = [tag]
        return [self.unacked.pop(t) for t in tags]

    def reclaim(self, consumer: ConsumerKey) -> None:
        """The queue took back what ``consumer`` held (a consumer timeout, 4.3)."""
        for tag in [t for t, e in self.unacked.items() if e.consumer == consumer]:
            del self.unacked[tag]
            self.reclaimed.add(tag)


@attrs.define(eq=False, kw_only=True)
class BrokerConnection:
    id: int
    node: int
    name: str
    channels: dict[int, BrokerChannel] = attrs.field(factory=dict)
    blocked: bool = False
    held: list[tuple[int, Any]] = attrs.field(factory=list)
    """Frames not read while blocked: (channel, method)."""
    open: bool = True

    def unblock(self) -> list[tuple[int, Any]]:
        self.blocked = False
        held, self.held = self.held, []
        return held
