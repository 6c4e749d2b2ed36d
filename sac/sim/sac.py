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

Where the versions differ (``sim.model``): on 4.0 the line is ordered by ``x-priority``
(highest first, then by registration), and a consumer registered with a higher priority
than the active one makes it *quiesce*: the active one gets nothing more, and once it holds
nothing unacked it goes back to the line and the newcomer becomes active (checked against
4.0.5). On 4.3 a consumer the queue timed out stays registered and is never served nor
made active again, so a line of timed-out consumers serves nobody (rabbitmq-server#17317).

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
    TIMED_OUT = "timed-out"


@attrs.define(eq=False, kw_only=True)
class Consumer:
    key: ConsumerKey
    prefetch: int
    """At most this many unacked messages; 0 means no limit."""
    status: Status = Status.UP
    checked_out: dict[int, Message] = attrs.field(factory=dict)
    """Unacked messages by the queue's per-consumer message id, in delivery order."""
    next_msg_id: int = 0
    priority: int = 0
    quiescing: bool = False
    """Active, but a consumer of higher priority waits for it to hold nothing (4.0)."""

    def has_credit(self) -> bool:
        if self.status is not Status.UP or self.quiescing:
            return False
        return self.prefetch == 0 or len(self.checked_out) < self.prefetch


class Consumers:
    """The consumers of one queue and the single-active rule."""

    def __init__(self, single_active: bool, priorities: bool = False) -> None:
        self.single_active = single_active
        self.priorities = priorities
        self.attached: dict[ConsumerKey, Consumer] = {}
        """Consumers that may hold messages: the active one (or, competing, all), and
        cancelled ones still holding unacked messages."""
        self.waiting: list[Consumer] = []
        self.takeovers = 0
        """How many times a consumer of higher priority took over (4.0)."""
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
        active = self.active()
        if self.single_active and active is not None:
            self.waiting.append(consumer)
            if self.priorities and consumer.priority > active.priority:
                active.quiescing = True
                return self.switch_if_quiet()
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

    def time_out(self, consumer: Consumer) -> Consumer | None:
        """The queue timed ``consumer`` out (4.3): it stays registered, never served again;
        returns the consumer activated in its place."""
        consumer.status = Status.TIMED_OUT
        consumer.quiescing = False
        if self.single_active and self.attached.pop(consumer.key, None) is not None:
            self.waiting.append(consumer)
        return self.activate_next()

    def switch_if_quiet(self) -> Consumer | None:
        """A quiescing active consumer that holds nothing goes back to the line, and the
        first in it (the highest priority) becomes active; returns that one."""
        active = self.active()
        if active is None or not active.quiescing or active.checked_out:
            return None
        active.quiescing = False
        del self.attached[active.key]
        self.waiting.append(active)
        self.takeovers += 1
        return self.activate_next()

    def forget_if_done(self, consumer: Consumer) -> None:
        """A cancelled consumer is forgotten once it holds nothing."""
        if consumer.status is Status.CANCELLED and not consumer.checked_out:
            self.attached.pop(consumer.key, None)

    def activate_next(self) -> Consumer | None:
        """The first consumer in line that may be served becomes active (by priority first,
        where the broker orders the line so)."""
        if not self.single_active or self.active() is not None:
            return None
        able = [c for c in self.waiting if c.status is Status.UP]
        if not able:
            return None
        nxt = max(able, key=lambda c: c.priority) if self.priorities else able[0]
        self.waiting.remove(nxt)
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
