"""Who a quorum queue serves: its consumers, and with ``x-single-active-consumer`` which one
of them is active.

The rules are RabbitMQ 3.10's (``rabbit_fifo``), checked against a real cluster by
``tests/sim/test_model_honesty.py``:

- a consumer registered while another is active waits, in registration order;
- when the active consumer cancels, it stays attached to the messages it holds unacked
  (it may still ack or nack them) but gets no more, and the first waiting consumer becomes
  active at once;
- when the active consumer's channel goes away, its unacked messages go back to the queue
  (see ``queue``) and the first waiting consumer becomes active;
- a waiting consumer that cancels or loses its channel simply leaves the line.

Without single-active, every consumer with credit is served in turn (round robin).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import attrs

from .messages import Message

ConsumerKey = tuple[int, int, str]
"""(broker connection id, channel number, consumer tag)."""


class Status(enum.Enum):
    UP = "up"
    CANCELLED = "cancelled"


@attrs.define(eq=False)
class Consumer:
    key: ConsumerKey
    prefetch: int
    """At most this many unacked messages; 0 means no limit."""
    status: Status = Status.UP
    checked_out: dict[int, Message] = attrs.field(factory=dict)
    """Unacked messages by the queue's per-consumer message id, in delivery order."""
    next_msg_id: int = 0

    def has_credit(self) -> bool:
        if self.status is not Status.UP:
            return False
        return self.prefetch == 0 or len(self.checked_out) < self.prefetch


class Consumers:
    """The consumers of one queue and the single-active rule."""

    def __init__(self, single_active: bool) -> None:
        self.single_active = single_active
        self.attached: dict[ConsumerKey, Consumer] = {}
        """Consumers that may hold messages: the active one (or, competing, all), and
        cancelled ones still holding unacked messages."""
        self.waiting: list[Consumer] = []
        self._turn = 0

    def __iter__(self) -> Iterator[Consumer]:
        return iter([*self.attached.values(), *self.waiting])

    def get(self, key: ConsumerKey) -> Consumer | None:
        found = self.attached.get(key)
        if found is not None:
            return found
        return next((c for c in self.waiting if c.key == key), None)

    def active(self) -> Consumer | None:
        """The single active consumer (None when there is none or the queue is not SAC)."""
        if not self.single_active:
            return None
        return next((c for c in self.attached.values() if c.status is Status.UP), None)

    def add(self, consumer: Consumer) -> Consumer | None:
        """Register; returns the consumer that became active because of it, if any."""
        if self.single_active and self.active() is not None:
            self.waiting.append(consumer)
            return None
        self.attached[consumer.key] = consumer
        return consumer if self.single_active else None

    def cancel(self, key: ConsumerKey) -> Consumer | None:
        """A client's ``basic.cancel``; returns the consumer activated in its place."""
        consumer = self.attached.get(key)
        if consumer is None:
            self.waiting = [c for c in self.waiting if c.key != key]
            return None
        consumer.status = Status.CANCELLED
        self.forget_if_done(consumer)
        return self.activate_next()

    def remove(self, key: ConsumerKey) -> Consumer | None:
        """The consumer is gone (channel closed, server cancel): forget it, whatever it
        held (the queue returns that first); returns the consumer activated in its place."""
        self.attached.pop(key, None)
        self.waiting = [c for c in self.waiting if c.key != key]
        return self.activate_next()

    def forget_if_done(self, consumer: Consumer) -> None:
        """A cancelled consumer is forgotten once it holds nothing."""
        if consumer.status is Status.CANCELLED and not consumer.checked_out:
            self.attached.pop(consumer.key, None)

    def activate_next(self) -> Consumer | None:
        if not self.single_active or self.active() is not None or not self.waiting:
            return None
        nxt = self.waiting.pop(0)
        self.attached[nxt.key] = nxt
        return nxt

    def next_to_serve(self) -> Consumer | None:
        """Who gets the next ready message: the active consumer, or (competing) the next
        consumer in turn that has credit."""
        candidates = list(self.attached.values())
        if not candidates:
            return None
        for i in range(len(candidates)):
            consumer = candidates[(self._turn + i) % len(candidates)]
            if consumer.has_credit():
                if not self.single_active:
                    self._turn = (self._turn + i + 1) % len(candidates)
                return consumer
        return None
