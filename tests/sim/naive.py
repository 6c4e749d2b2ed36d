"""A deliberately naive workload for the replay and shrinking tests: a publisher that sends
each message once and a consumer that acks each delivery, neither of which reconnects. Any
fault that takes the consumer away leaves confirmed messages undelivered, which is the
failure the shrinker has to isolate. (The SDK's engines replace these in ``sac sim``.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from sac.sim.faults import Space
from sac.sim.harness import Action, Connect, ConnectionLost, Event, Received, Send
from sac.sim.invariants import broker_violations
from sac.sim.methods import (
    BasicAck,
    BasicConsume,
    BasicDeliver,
    BasicNack,
    BasicPublish,
    BasicQos,
    ChannelOpen,
    ConfirmSelect,
    ConnectionOpenOk,
    Properties,
    QueueDeclare,
    QueueDeclareOk,
)
from sac.sim.model import BrokerModel, model
from sac.sim.world import World

ARGS = {"x-queue-type": "quorum", "x-single-active-consumer": True, "x-delivery-limit": 5,
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q.dlq",
        "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


SPACE = Space(links=("pub", "con"), queues=("q",), horizon=3.0, max_faults=4, heartbeat=1.0)


def send(link: str, method: Any) -> Send:
    """``method`` on ``link``'s one channel."""
    return Send(link=link, channel=1, method=method)


class NaivePublisher:
    name = "pub"

    def __init__(self, count: int, every: float) -> None:
        self.plan = [(0.05 + i * every, f"m{i}") for i in range(count)]
        self.ready = False
        self.dead = False
        self.outstanding: list[tuple[int, str]] = []
        self.sent = 0
        self.confirmed: list[str] = []

    def start(self, now: float) -> Sequence[Action]:
        return [Connect(link="pub", node=0, heartbeat=1.0)]

    def receive(self, now: float, event: Event) -> Sequence[Action]:
        if isinstance(event, ConnectionLost):
            self.dead = True
        if not isinstance(event, Received):
            return ()
        method = event.method
        if isinstance(method, ConnectionOpenOk):
            return [send("pub", ChannelOpen()), send("pub", ConfirmSelect()),
                    send("pub", QueueDeclare(queue="q.dlq", arguments={"x-queue-type": "quorum"})),
                    send("pub", QueueDeclare(queue="q", arguments=ARGS))]
        if isinstance(method, QueueDeclareOk) and method.queue == "q":
            self.ready = True
        elif isinstance(method, BasicAck | BasicNack):
            covered = [(t, b) for t, b in self.outstanding
                       if t == method.delivery_tag or (method.multiple
                                                       and t <= method.delivery_tag)]
            for item in covered:
                self.outstanding.remove(item)
                if isinstance(method, BasicAck):
                    self.confirmed.append(item[1])
        return ()

    def next_tick(self) -> float | None:
        if not self.ready or self.dead or self.sent >= len(self.plan):
            return None
        return self.plan[self.sent][0]

    def tick(self, now: float) -> Sequence[Action]:
        actions: list[Action] = []
        while self.sent < len(self.plan) and self.plan[self.sent][0] <= now and not self.dead:
            body = self.plan[self.sent][1]
            self.sent += 1
            self.outstanding.append((self.sent, body))
            actions.append(send("pub", BasicPublish(
                exchange="", routing_key="q", body=body.encode(),
                properties=Properties(message_id=body), mandatory=True)))
        return actions


class NaiveConsumer:
    name = "con"

    def __init__(self) -> None:
        self.delivered: list[str] = []

    def start(self, now: float) -> Sequence[Action]:
        return [Connect(link="con", node=1, heartbeat=1.0)]

    def receive(self, now: float, event: Event) -> Sequence[Action]:
        if not isinstance(event, Received):
            return ()
        method = event.method
        if isinstance(method, ConnectionOpenOk):
            return [send("con", ChannelOpen()),
                    send("con", QueueDeclare(queue="q.dlq", arguments={"x-queue-type": "quorum"})),
                    send("con", QueueDeclare(queue="q", arguments=ARGS)),
                    send("con", BasicQos(prefetch_count=10)),
                    send("con", BasicConsume(queue="q", consumer_tag="C"))]
        if isinstance(method, BasicDeliver):
            self.delivered.append(method.body.decode())
            return [send("con", BasicAck(delivery_tag=method.delivery_tag))]
        return ()

    def tick(self, now: float) -> Sequence[Action]:
        return ()

    def next_tick(self) -> float | None:
        return None


@attrs.define(kw_only=True)
class NaiveWorkload:
    messages: int = 20
    horizon: float = 3.0
    settle: float = 10.0
    space: Space = SPACE
    broker: BrokerModel = attrs.field(factory=model)

    def build(self, world: World) -> Callable[[], list[str]]:
        publisher = NaivePublisher(self.messages, self.horizon / (self.messages + 1))
        consumer = NaiveConsumer()
        world.add(publisher)
        world.add(consumer)

        def check() -> list[str]:
            lost = [b for b in publisher.confirmed if b not in consumer.delivered]
            problems = [f"{b} was confirmed but never delivered" for b in lost]
            return problems + broker_violations(world)

        return check


def digest_of(seed: int, **workload: Any) -> str:
    from sac.sim.run import run

    return run(seed, NaiveWorkload(**workload)).trace.digest()
