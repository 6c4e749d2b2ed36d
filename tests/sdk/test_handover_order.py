"""A graceful handover keeps the queue's order (issue 20, item 3), both faces, without an
inbox and with one on SQLite and on PostgreSQL, against the real 3-node clusters of RabbitMQ
4.0.5 and 3.10.8.

Consumer A is active on a quorum queue with single active consumer and a backlog, B stands
by; A stops gracefully a third of the way through. Every effect, A's then B's, must follow
the publish order exactly: B's first effect is the first message A did not finish. Before
the fix A's ``basic.cancel`` made the broker activate B at once, with A's prefetched
messages still checked out to A: B handled a fresh prefetch-worth first, then A's.

A crash keeps it too, as far as the broker allows: the broker gives a dropped connection's
unacked messages back at the head of the queue in delivery order (RabbitMQ 4.0.5), the
ones whose effects committed but whose ack never went out first: an inbox skips those.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sac.chaos._process import ActorProcess
from sac.chaos.actors import ConsumerActor
from sac.chaos.actors.consumer import CRASHED
from sac.sdk import (
    ConnectionSettings,
    ConsumerSettings,
    Delivery,
    Handover,
    QueueSettings,
    Role,
)
from sac.sdk.dedup import Inbox, Store, Transaction
from tests.dedup.conftest import SQL_STORES, store_factory
from tests.dedup.ledger import Ledger, sink_location
from tests.helpers import wait_until
from tests.sdk.conftest import consumer_actor
from tests.sdk.faces import ConsumerFace, PublisherFace
from tests.sdk.test_consumer import on_node, publish

MakePublisher = Callable[..., PublisherFace]
BACKLOG = 1500
HOLD_AT = 500
"""A's effect of this message waits until A's stop has begun: the handover comes with most
of the queue still to do, a full prefetch in A's hands, however fast the machine is."""


class Effects:
    """Every effect of the test, in the order it became durable: a handler's return, or the
    inbox transaction's commit (``on_commit``)."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self._lock = threading.Lock()
        self.held = threading.Event()
        self.release = threading.Event()
        self._seen = 0

    def work(self, delivery: Delivery) -> None:
        with self._lock:
            self._seen += 1
            hold = self._seen == HOLD_AT
        if hold:
            self.held.set()
            self.release.wait(30)

    def record(self, msg: str) -> None:
        with self._lock:
            self.done.append(msg)

    def handler(self, delivery: Delivery) -> None:
        self.work(delivery)
        self.record(str(delivery.message_id))

    def effect(self, delivery: Delivery, tx: Transaction) -> None:
        self.work(delivery)
        msg = str(delivery.message_id)
        tx.on_commit(lambda: self.record(msg))

    def count(self) -> int:
        with self._lock:
            return len(self.done)


@pytest.fixture(params=["none", "sqlite", "postgres"])
def inbox_store(request: pytest.FixtureRequest, tmp_path: Path
                ) -> Callable[[], Store] | None:
    """None (a plain handler), or a factory of stores sharing one SQLite file or PostgreSQL
    database, one per consumer."""
    return None if request.param == "none" else store_factory(request.param, tmp_path, request)


def _handover(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings, stores: Callable[[], Store] | None,
    handover: Handover = Handover.CLOSE,
) -> tuple[list[str], list[str], int]:
    """A and B on one queue, a backlog, A stopped gracefully once it holds HOLD_AT: the ids
    published, every effect in order, and how many effects came before B's first one."""
    effects = Effects()
    faces = []
    for name, node in (("consumer-a", 1), ("consumer-b", 2)):
        settings = ConsumerSettings(on_node(conn, node, name), queue, consumer_name=name,
                                    handover=handover)
        inbox = None if stores is None else Inbox(stores(), effects.effect)
        faces.append(consumers(face, settings, effects.handler, inbox=inbox).start())
    a, b = faces
    ids = publish(publishers, face, conn, queue, BACKLOG)
    assert effects.held.wait(60), f"the {HOLD_AT}th message never came"
    first, second = (a, b) if a.role is Role.ACTIVE else (b, a)
    assert first.role is Role.ACTIVE
    assert second.role is Role.WAITING
    stopping = threading.Thread(target=first.stop)
    stopping.start()
    wait_until(lambda: first.role is Role.STOPPING, 10, "the stop to begin")
    before_b = effects.count() + 1  # the held one commits as part of A's stop
    effects.release.set()
    stopping.join(60)
    assert first.role is Role.STOPPED
    wait_until(lambda: effects.count() >= BACKLOG, 60, "every message handled")
    assert second.role is Role.ACTIVE
    second.stop()
    return ids, list(effects.done), before_b


@pytest.mark.rabbitmq("4.0", "3.10")
def test_a_graceful_handover_keeps_the_queue_order(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings,
    inbox_store: Callable[[], Store] | None,
) -> None:
    _in_order(*_handover(face, consumers, publishers, conn, queue, inbox_store))


def _in_order(ids: list[str], done: list[str], before_b: int) -> None:
    assert before_b < BACKLOG - 200, "the handover came too late to show anything"
    place = {msg: n for n, msg in enumerate(ids)}
    breaks = [(x, y) for x, y in itertools.pairwise(done) if place[y] < place[x]]
    assert not breaks, f"{len(breaks)} breaks of the publish order, the first {breaks[:3]}"
    assert done == ids  # every message once, in publish order, across the handover


@pytest.mark.rabbitmq("4.0", "3.10")
def test_the_old_stop_order_breaks_it(
    consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    """The weakened order the chaos suite runs (``Handover.CANCEL``: cancel, then close)
    does break it on both series (4.0.5 too activates the next consumer at the cancel):
    what the test above guards against is real."""
    ids, done, _ = _handover("blocking", consumers, publishers, conn, queue, None,
                             Handover.CANCEL)
    assert sorted(done) == sorted(ids)  # nothing lost or done twice...
    assert done != ids  # ...but B took a fresh prefetch-worth before A's returned ones


@pytest.mark.parametrize("store_kind", SQL_STORES)
def test_a_crash_keeps_the_order_of_effects_with_an_inbox(
    face: str, store_kind: str, consumers: Callable[..., ConsumerFace],
    publishers: MakePublisher, conn: ConnectionSettings, queue: QueueSettings,
    actors: Callable[[ConsumerActor], ActorProcess], tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """A (a process of its own, an inbox) crashes in the middle of a backlog, a full
    prefetch in hand and its last batch committed but maybe not acked; B takes over. The
    effects, A's then B's, follow the publish order, each once."""
    stores = store_factory(store_kind, tmp_path, request)
    ledger = Ledger(stores())
    crash_at = HOLD_AT
    a = actors(consumer_actor(tmp_path, "a", face, queue.name, conn.urls, dedup="inbox",
                              sink=sink_location(ledger.store), crash_on_body=f"m{crash_at}"))
    a.wait_for("its subscription", lambda p: p.role == "waiting", 60)
    b = consumers(face, ConsumerSettings(on_node(conn, 2, "consumer-b"), queue),
                  inbox=Inbox(stores(), ledger.effect("b"))).start()
    ids = publish(publishers, face, conn, queue, BACKLOG)
    assert a.wait(60) == CRASHED
    wait_until(lambda: len(ledger.rows()) >= BACKLOG, 60, "every message handled")
    rows = ledger.rows()
    assert {actor for _, actor in rows} == {"a", "b"}
    assert [msg for msg, _ in rows] == ids  # once each, in publish order, across the crash
    assert b.role is Role.ACTIVE
    b.stop()
