"""The workload ``sac sim`` runs: the SDK's real engines under random faults.

One publisher sends ``messages`` messages (window ``window``) to a quorum queue with a single
active consumer, a delivery limit and a parking queue, declared with the SDK's own
arguments; ``consumers`` consumer processes, each with an ``Inbox`` over the simulated store,
take turns on it. A few messages fail in the effect for a while (retried in place) and a few
for good (parked). Faults come from ``sim.faults``: resets at exact frames, silences, node
kills, elections with nacks, server cancels, alarms, a store down or slow, consumers stopped
(a handover) or killed.

After the faults (``horizon``) the run goes on until nothing is left to do, at most
``settle`` more seconds; then the invariants (``sim.invariants``) are checked.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs

from sac.sdk._core.backoff import Backoff
from sac.sdk._core.consuming import ConsumerMachine, Stage
from sac.sdk._core.outbox import Outbox
from sac.sdk._delivery import RETRANSMIT_HEADER, Delivery
from sac.sdk._errors import Poison
from sac.sdk._settings import (
    ConnectionSettings,
    ConsumerSettings,
    PublisherSettings,
    QueueSettings,
)
from sac.sdk.dedup import Inbox, LookupPolicy, Transaction
from .consumer import ConsumerClient, ProcessDies
from .faults import Space
from .invariants import (
    broker_violations,
    clean_handovers,
    copies_are_flagged,
    no_ack_before_commit,
    no_protocol_errors,
    nothing_confirmed_lost,
    one_consumer_per_epoch,
    one_effect_per_id,
    retransmitted_with_mark,
)
from .model import BrokerModel, model
from .publisher import PublisherClient
from .store import SimStore
from .world import World

NODES = 3
HEARTBEAT = 1


@attrs.frozen(kw_only=True)
class Engines:
    """The engines a run drives: the SDK's own, or a deliberately broken variant
    (``sim.variants``)."""

    outbox: type[Outbox[bytes, None]] = Outbox
    publisher: type[PublisherClient] = PublisherClient
    machine: type[ConsumerMachine[Delivery]] = ConsumerMachine
    inbox: type[Inbox] = Inbox
    store: type[SimStore] | None = None
    """Replaces the world's store (keeping its random stream)."""
    description: str = "the SDK's own engines"


REAL = Engines()


class Effects:
    """The application's effect: most messages succeed at once; some fail a few times (a
    flaky dependency), some always (parked), one is ``Poison`` (parked at once), and with
    ``lethal`` one kills the consumer process that runs it, every time (``ProcessDies``).
    Decided by the message id and the seed, counted per id."""

    def __init__(self, rng: random.Random, ids: list[str], *, lethal: bool = False) -> None:
        self.plan: dict[str, int] = {}
        for mid in ids:
            draw = rng.random()
            if draw < 0.06:
                self.plan[mid] = rng.randint(1, 2)
            elif draw < 0.09:
                self.plan[mid] = -1  # always
        if ids:
            self.plan[rng.choice(ids)] = -2  # poison
        self.lethal = rng.choice(ids) if lethal and ids else None
        if self.lethal is not None:
            self.plan[self.lethal] = -3
        self.runs: dict[str, int] = {}

    def __call__(self, delivery: Delivery, tx: Transaction) -> None:
        mid = str(delivery.message_id)
        runs = self.runs[mid] = self.runs.get(mid, 0) + 1
        plan = self.plan.get(mid, 0)
        if plan == -2:
            raise Poison(f"{mid} can never succeed")
        if plan == -3:
            raise ProcessDies(f"{mid} kills the process that runs it")
        if plan == -1 or runs <= plan:
            raise RuntimeError(f"the effect of {mid} failed (run {runs})")


@attrs.define(kw_only=True)
class EnginesWorkload:
    messages: int = 40
    burst_count: int = 4
    window: int = 10
    consumers: int = 3
    horizon: float = 4.0
    settle: float = 120.0
    max_faults: int = 5
    engines: Engines = REAL
    max_events: int = 100_000
    broker: BrokerModel = attrs.field(factory=model)
    """The RabbitMQ the simulated broker follows (``sim.model``; ``sac sim --broker``)."""
    consumer_timeout: float | None = None
    """Declare the queue with this ``x-consumer-timeout`` (seconds; None: the broker's own,
    30 minutes, which no run reaches)."""
    priorities: bool = False
    """The last consumer subscribes with a higher ``x-priority`` than the others: on 4.0
    and later it takes the queue over whenever it (re)subscribes, once the active one holds
    nothing unacked."""
    lethal: bool = False
    """One message kills every consumer process that runs it: only the broker's delivery
    limit ends that loop (the SDK keeps no memory across its process's death)."""
    lookup: LookupPolicy = LookupPolicy.DEFAULT
    """The inboxes' lookup policy. With ``FLAGGED``, also check what that policy relies on:
    every copy a consumer gets is flagged (``copies_are_flagged``); it does not always hold
    (a publish held in a frozen network path reaches the broker after its marked
    retransmission; ``tests/sim/test_findings.py``), which is why ``ALWAYS`` is the
    default."""
    space: Space = attrs.field(init=False)
    queue: QueueSettings = attrs.field(init=False)
    """The queue under test: a single active consumer, a delivery limit of 3, a parking
    queue."""

    def __attrs_post_init__(self) -> None:
        extra = ({} if self.consumer_timeout is None
                 else {"x-consumer-timeout": round(self.consumer_timeout * 1000)})
        self.queue = QueueSettings("q", delivery_limit=3, extra_arguments=extra)
        names = tuple(f"c{i + 1}" for i in range(self.consumers))
        self.space = Space(links=("pub", *names), queues=(self.queue.name,), nodes=NODES,
                           horizon=self.horizon, max_faults=self.max_faults, store=True,
                           heartbeat=float(HEARTBEAT), clients=names)

    def bursts(self, rng: random.Random) -> list[float]:
        """When the application has each message: in a few bursts over the horizon, so
        that faults meet both a busy and an idle queue."""
        starts = [rng.uniform(0.0, self.horizon) for _ in range(self.burst_count)]
        return [round(rng.choice(starts) + rng.uniform(0.0, 0.02), 4)
                for _ in range(self.messages)]

    def build(self, world: World) -> Callable[[], list[str]]:
        engines = self.engines
        if engines.store is not None:
            old = world.store
            world.store = engines.store(world.events, old.rng, world.trace)
        streams = random.Random(world.seed ^ 0xC11E)
        conn = ConnectionSettings(
            tuple(f"amqp://node{n}" for n in range(NODES)), heartbeat=HEARTBEAT,
            reconnect=Backoff(initial=0.05, maximum=0.5, max_attempts=None, max_elapsed=30.0))
        publisher = engines.publisher(
            "pub", PublisherSettings(conn, window=self.window, queue=self.queue,
                                     close_timeout=60.0),
            self.bursts(random.Random(streams.getrandbits(64))),
            random.Random(streams.getrandbits(64)), outbox=engines.outbox)
        effects = Effects(random.Random(streams.getrandbits(64)), publisher.ids,
                          lethal=self.lethal)
        settings = ConsumerSettings(
            conn, self.queue, prefetch=10, ack_batch=4, stop_timeout=5.0,
            retry=Backoff(initial=0.05, maximum=0.4, max_attempts=3, max_elapsed=5.0))
        store_retry = Backoff(initial=0.05, maximum=0.5, max_attempts=None, max_elapsed=3.0)
        favoured = self.space.clients[-1] if self.priorities else None
        consumers = [
            ConsumerClient(name, attrs.evolve(settings, priority=5) if name == favoured
                           else settings, world.store, effects,
                           random.Random(streams.getrandbits(64)), restart_after=0.5,
                           store_retry=store_retry, machine=engines.machine,
                           inbox=engines.inbox, lookup=self.lookup)
            for name in self.space.clients]
        world.add(publisher)
        for consumer in consumers:
            world.add(consumer)

        def check() -> list[str]:
            parking = self.queue.parking_queue
            assert parking is not None
            outcomes = publisher.outcomes
            told = [mid for mid in outcomes.failed if mid not in outcomes.confirmed]
            problems = [
                *nothing_confirmed_lost(world, outcomes.confirmed, self.queue.name, parking),
                *[f"{mid} was confirmed {n} times" for mid, n in outcomes.confirmed.items()
                  if n > 1],
                *retransmitted_with_mark(publisher.wire, publisher.heard, told),
                *no_ack_before_commit(world, self.queue.name, parking),
                *one_effect_per_id(world),
                *one_consumer_per_epoch(world),
                *broker_violations(world),
                *no_protocol_errors(world),
                *(copies_are_flagged(world, self.queue.name, RETRANSMIT_HEADER)
                  if self.lookup is LookupPolicy.FLAGGED else ()),
            ]
            for c in consumers:
                became = [(r.process, r.t) for r in c.roles if r.new == "active"]
                problems += clean_handovers(world, c.name, c.graceful_stops, c.spans,
                                            c.taken_away, became)
            return problems + at_rest(world, self.queue.name, publisher, consumers)

        return check


def at_rest(world: World, name: str, publisher: PublisherClient,
            consumers: list[ConsumerClient]) -> list[str]:
    """Every wait was bounded: the run came to rest before its deadline, the publisher
    finished, the queue drained, every consumer is up with nothing in hand."""
    problems = []
    if world.events.busy():
        problems.append(f"the run did not come to rest by t={world.events.now:.1f}")
    queue = world.broker.queues.get(name)
    if queue is not None and queue.holding():
        ids = sorted(str(m.properties.message_id) for m in queue.holding())
        problems.append(f"{name} still holds {queue.ready()} ready and "
                        f"{queue.unacked()} unacked message(s) at the end: {', '.join(ids)}")
    if not publisher.finished:
        problems.append(f"the publisher did not finish: {publisher.box.outstanding} "
                        f"outstanding, phase {publisher.box.lifecycle.phase.value}")
    for c in consumers:
        m = c.machine
        if not c.alive or m.stage is not Stage.RUNNING or not c.up:
            problems.append(f"consumer {c.process} is not running at the end (alive "
                            f"{c.alive}, stage {m.stage.value}, link up {c.up})")
        elif m.busy or m.waiting or m.unacked_done:
            problems.append(f"consumer {c.process} ended with work in hand (busy {m.busy}, "
                            f"waiting {m.waiting}, done but unacked {m.unacked_done})")
    return problems
