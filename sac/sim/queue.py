"""A quorum queue's state machine, as RabbitMQ applies each committed command
(``rabbit_fifo``): enqueue, consume, cancel, settle, return, discard, a channel gone, a
consumer timed out. Where the versions differ the queue asks its ``sim.model.BrokerModel``.

Each command returns the effects the broker must carry out (deliveries, dead letters,
cancellations, a change of the reject-publish state). No timing here: the broker decides
when a command is committed.

What was checked against RabbitMQ 3.10.8 (``tests/sim/test_model_honesty.py``) and, each
rule again, against 4.0.5 (``tests/sim/test_model_honesty4.py``):

- returned messages are kept in a *returns* line served before the other ready messages,
  in the order they came back; the unacked messages of a channel that closes come back
  sorted by delivery order;
- a ``basic.nack``/``basic.reject`` with requeue goes to that returns line only when the
  queue has a delivery limit; without one it goes to the *back* of the queue (4.0 gives
  every queue declared without one a limit of 20);
- every return counts (up to 4.2): ``x-delivery-count`` is absent on a first delivery,
  then 1, 2, ..., and ``redelivered`` is set from the second delivery on;
- with ``x-delivery-limit`` L a message is delivered L + 1 times: the return that makes its
  count exceed L dead-letters it (reason ``delivery_limit``); a reject without requeue
  dead-letters it with reason ``rejected`` (on 4.0 counted: the dead letter carries the
  count);
- ``x-overflow: reject-publish`` refuses publishes once more than ``x-max-length`` messages
  are ready, and accepts them again when at most 80 % are.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .messages import Message
from .model import MODELS, BrokerModel, model
from .sac import Consumer, ConsumerKey, Consumers, Status

SOFT_LIMIT = 0.8
"""rabbit_fifo's ``?LOW_LIMIT``: below this share of ``x-max-length`` publishing resumes."""

EQUIVALENCE_KEYS = (
    "x-queue-type", "x-single-active-consumer", "x-delivery-limit", "x-dead-letter-exchange",
    "x-dead-letter-routing-key", "x-dead-letter-strategy", "x-overflow", "x-max-length",
    "x-message-ttl", "x-expires",
)
"""Arguments a second declare must repeat exactly (a subset of RabbitMQ's list, in a fixed
order: when several differ the model names the first of these)."""


class UnsupportedQueue(ValueError):
    """The model only has quorum queues."""


@attrs.frozen(kw_only=True)
class QueueArgs:
    single_active: bool = False
    delivery_limit: int | None = None
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    at_least_once: bool = False
    """``x-dead-letter-strategy: at-least-once``, which needs ``x-overflow:
    reject-publish`` (else RabbitMQ falls back to at-most-once)."""
    max_length: int | None = None
    reject_publish: bool = False
    consumer_timeout: float | None = None
    """``x-consumer-timeout`` in seconds: a consumer holding a delivery unacked this long
    times out (``sim.model.Timeout`` says how)."""

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any],
                       broker: BrokerModel = MODELS["3.10"]) -> QueueArgs:
        if arguments.get("x-queue-type") != "quorum":
            raise UnsupportedQueue(
                f"only quorum queues are modelled, got x-queue-type "
                f"{arguments.get('x-queue-type')!r}")
        reject_publish = arguments.get("x-overflow") == "reject-publish"
        limit = arguments.get("x-delivery-limit", broker.default_delivery_limit)
        if limit is not None and int(limit) < 0 and broker.negative_limit_is_none:
            limit = None
        max_length = arguments.get("x-max-length")
        timeout = arguments.get("x-consumer-timeout")
        return cls(
            single_active=bool(arguments.get("x-single-active-consumer", False)),
            delivery_limit=None if limit is None else int(limit),
            consumer_timeout=None if timeout is None else int(timeout) / 1000.0,
            dead_letter_exchange=arguments.get("x-dead-letter-exchange"),
            dead_letter_routing_key=arguments.get("x-dead-letter-routing-key"),
            at_least_once=(arguments.get("x-dead-letter-strategy") == "at-least-once"
                           and reject_publish),
            max_length=None if max_length is None else int(max_length),
            reject_publish=reject_publish,
        )


def _describe(value: Any) -> str:
    if value is None:
        return "none"
    kind = {bool: "bool", int: "signedint", str: "longstr"}.get(type(value), "table")
    return f"the value '{value}' of type '{kind}'"


def inequivalent(queue: str, current: Mapping[str, Any],
                 received: Mapping[str, Any]) -> str | None:
    """The PRECONDITION_FAILED text for a declare that differs from the queue, or None.
    Worded as RabbitMQ words it (``sdk._core.queues.parse_inequivalent`` reads it)."""
    for key in EQUIVALENCE_KEYS:
        mine, theirs = current.get(key), received.get(key)
        if mine == theirs:
            continue
        if mine is not None and theirs is not None and type(mine) is type(theirs):
            said = f"received '{theirs}' but current is '{mine}'"
        else:
            said = f"received {_describe(theirs)} but current is {_describe(mine)}"
        return (f"PRECONDITION_FAILED - inequivalent arg '{key}' for queue '{queue}' in "
                f"vhost '/': {said}")
    return None


# ------------------------------------------------------------------ effects


@attrs.frozen(kw_only=True)
class Deliver:
    consumer: ConsumerKey
    msg_id: int
    message: Message


@attrs.frozen(kw_only=True)
class DeadLetter:
    message: Message
    reason: str
    """``delivery_limit``, ``rejected`` or ``maxlen``."""


@attrs.frozen(kw_only=True)
class Cancelled:
    """The broker cancels this consumer (queue deleted, leader moved, timed out on 4.3)."""

    consumer: ConsumerKey


@attrs.frozen(kw_only=True)
class Activated:
    """This consumer became the single active one (RabbitMQ 3.10 tells nobody; traced)."""

    consumer: ConsumerKey
    takeover: bool = False
    """By priority: it took over from an active consumer that quiesced (4.0)."""


@attrs.frozen(kw_only=True)
class PublishStatus:
    rejecting: bool


Effect = Deliver | DeadLetter | Cancelled | Activated | PublishStatus


class QuorumQueue:
    def __init__(self, name: str, arguments: Mapping[str, Any],
                 broker: BrokerModel | None = None) -> None:
        self.name = name
        self.broker = broker or model()
        self.arguments = dict(arguments)
        self.args = QueueArgs.from_arguments(arguments, self.broker)
        self.messages: deque[Message] = deque()
        self.returns: deque[Message] = deque()
        self.consumers = Consumers(self.args.single_active, self.broker.priorities)
        self.rejecting = False

    # ------------------------------------------------------------------ counts

    def ready(self) -> int:
        return len(self.messages) + len(self.returns)

    def unacked(self) -> int:
        return sum(len(c.checked_out) for c in self.consumers)

    def consumer_count(self) -> int:
        """What ``queue.declare-ok`` says: RabbitMQ 3.10 counts the consumers attached to
        messages (the active one, and a cancelled one still holding unacked messages),
        not the waiting ones."""
        return len(self.consumers.attached)

    def holding(self) -> list[Message]:
        """Every message the queue holds, ready or unacked (for invariants)."""
        held = [*self.returns, *self.messages]
        for consumer in self.consumers:
            held.extend(consumer.checked_out.values())
        return held

    # ------------------------------------------------------------------ commands

    def enqueue(self, message: Message) -> list[Effect]:
        self.messages.append(message)
        effects: list[Effect] = []
        if (self.args.max_length is not None and not self.args.reject_publish
                and self.ready() > self.args.max_length):
            dropped = (self.returns or self.messages).popleft()
            effects.append(DeadLetter(message=dropped, reason="maxlen"))
        return effects + self._checkout()

    def consume(self, key: ConsumerKey, prefetch: int, priority: int = 0) -> list[Effect]:
        before = self.consumers.takeovers
        activated = self.consumers.add(Consumer(key=key, prefetch=prefetch, priority=priority))
        effects: list[Effect] = [] if activated is None else [
            Activated(consumer=activated.key, takeover=self.consumers.takeovers > before)]
        return effects + self._checkout()

    def cancel(self, key: ConsumerKey) -> list[Effect]:
        activated = self.consumers.cancel(key)
        effects: list[Effect] = [] if activated is None else [Activated(consumer=activated.key)]
        return effects + self._checkout()

    def settle(self, key: ConsumerKey, msg_ids: Iterable[int]) -> list[Effect]:
        consumer = self.consumers.get(key)
        if consumer is None:
            return []
        for msg_id in msg_ids:
            consumer.checked_out.pop(msg_id, None)
        return self._done_with(consumer) + self._checkout()

    def return_(self, key: ConsumerKey, msg_ids: Iterable[int], *,
                rejected: bool = True) -> list[Effect]:
        """``basic.reject`` (``rejected``) or ``basic.nack`` with requeue: 4.3 does not count
        the nack."""
        consumer = self.consumers.get(key)
        if consumer is None:
            return []
        to_returns = self.args.delivery_limit is not None
        effects: list[Effect] = []
        for msg_id in msg_ids:
            if msg_id in consumer.checked_out:
                effects += self._return_one(consumer, msg_id, to_returns=to_returns,
                                            failed=rejected or self.broker.nack_counts)
        return effects + self._done_with(consumer) + self._checkout()

    def discard(self, key: ConsumerKey, msg_ids: Iterable[int]) -> list[Effect]:
        """``basic.nack``/``basic.reject`` without requeue: dead-letter."""
        consumer = self.consumers.get(key)
        if consumer is None:
            return []
        effects: list[Effect] = []
        for msg_id in msg_ids:
            message = consumer.checked_out.pop(msg_id, None)
            if message is not None:
                if self.broker.reject_counts_into_dead_letter:
                    message = _counted(message, failed=True)
                effects.append(DeadLetter(message=message, reason="rejected"))
        return effects + self._done_with(consumer) + self._checkout()

    def channel_down(self, connection: int, channel: int) -> list[Effect]:
        """The channel (or its connection) is gone: what its consumers held comes back,
        sorted by delivery order, at the head of the queue."""
        effects: list[Effect] = []
        for consumer in [c for c in self.consumers if c.key[:2] == (connection, channel)]:
            effects += self._return_all(consumer, failed=self.broker.lost_channel_counts)
            activated = self.consumers.remove(consumer.key)
            if activated is not None:
                effects.append(Activated(consumer=activated.key))
        return effects + self._checkout()

    def server_cancel(self) -> list[Effect]:
        """The leader moved and consumers are told (``basic.cancel`` from the broker, as a
        classic mirrored queue with ``x-cancel-on-ha-failover`` does): each consumer is
        dropped and what it held comes back, counted."""
        effects: list[Effect] = []
        for consumer in list(self.consumers):
            effects += self._return_all(consumer, failed=True)
            if consumer.status.value == "up":
                effects.append(Cancelled(consumer=consumer.key))
            self.consumers.remove(consumer.key)
        return effects + self._checkout()

    def time_out(self, key: ConsumerKey) -> list[Effect]:
        """RabbitMQ 4.3's consumer timeout: the consumer is told (``basic.cancel``), what it
        held comes back uncounted, and it stays registered but is never served again (it
        would have to settle what was taken back, which its channel no longer accepts);
        with a single active consumer the next one in line takes over."""
        consumer = self.consumers.get(key)
        if consumer is None or consumer.status is not Status.UP:
            return []
        effects: list[Effect] = [*self._return_all(consumer, failed=False), Cancelled(consumer=key)]
        activated = self.consumers.time_out(consumer)
        if activated is not None:
            effects.append(Activated(consumer=activated.key))
        return effects + self._checkout()

    def delete(self) -> tuple[list[Effect], int]:
        """Every consumer (active or waiting) is cancelled; the messages are gone. Returns
        the effects and how many messages were dropped."""
        effects: list[Effect] = [Cancelled(consumer=c.key) for c in self.consumers
                                 if c.status.value == "up"]
        dropped = len(self.holding())
        self.messages.clear()
        self.returns.clear()
        self.consumers = Consumers(self.args.single_active, self.broker.priorities)
        return effects, dropped

    # ------------------------------------------------------------------ internals

    def _return_one(self, consumer: Consumer, msg_id: int, *, to_returns: bool,
                    failed: bool) -> list[Effect]:
        message = _counted(consumer.checked_out.pop(msg_id), failed=failed)
        limit = self.args.delivery_limit
        if limit is not None and message.delivery_count > limit:
            return [DeadLetter(message=message, reason="delivery_limit")]
        (self.returns if to_returns else self.messages).append(message)
        return []

    def _return_all(self, consumer: Consumer, *, failed: bool) -> list[Effect]:
        """What ``consumer`` holds comes back, in delivery order: counted after a lost
        channel or a server cancel, not after a 4.3 consumer timeout (``failed`` False)."""
        effects: list[Effect] = []
        for msg_id in sorted(consumer.checked_out):
            effects += self._return_one(consumer, msg_id, to_returns=True, failed=failed)
        return effects

    def _done_with(self, consumer: Consumer) -> list[Effect]:
        """``consumer`` settled something: forgotten if cancelled and holding nothing, and
        a quiescing active one hands over (4.0's priorities)."""
        self.consumers.forget_if_done(consumer)
        activated = self.consumers.switch_if_quiet()
        return [] if activated is None else [Activated(consumer=activated.key, takeover=True)]

    def _checkout(self) -> list[Effect]:
        effects: list[Effect] = []
        while self.returns or self.messages:
            consumer = self.consumers.next_to_serve()
            if consumer is None:
                break
            message = (self.returns or self.messages).popleft()
            msg_id = consumer.next_msg_id
            consumer.next_msg_id += 1
            consumer.checked_out[msg_id] = message
            effects.append(Deliver(consumer=consumer.key, msg_id=msg_id, message=message))
        return effects + self._evaluate_limit()

    def _evaluate_limit(self) -> list[Effect]:
        limit = self.args.max_length
        if limit is None or not self.args.reject_publish:
            return []
        if not self.rejecting and self.ready() > limit:
            self.rejecting = True
            return [PublishStatus(rejecting=True)]
        if self.rejecting and self.ready() <= int(limit * SOFT_LIMIT):
            self.rejecting = False
            return [PublishStatus(rejecting=False)]
        return []


def _counted(message: Message, *, failed: bool) -> Message:
    """``message`` given back once more: always acquired again; counted when ``failed``."""
    return attrs.evolve(message, acquired=message.acquired + 1,
                        delivery_count=message.delivery_count + (1 if failed else 0))
