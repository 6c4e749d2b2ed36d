"""Where RabbitMQ 4.0 differs, the SDK adapts (issue 21), proven on a real 4.0.5 cluster
and, where 3.10's behaviour must stay, on the 3.10.8 one:

- ``QueueSettings(delivery_limit=-1)``: no limit on either series (-1 on 4.0, whose quorum
  queues default to 20; no argument on 3.10, which reads -1 as a limit below one delivery);
- ``x-cancel-on-ha-failover`` goes only to 3.x (4.0 has no mirrored queues, and ignores it);
  ``ConsumerSettings.priority`` goes to both as ``x-priority``;
- a consumer of higher priority takes a single-active quorum queue over on 4.0 once the
  active one has acked what it holds: nothing lost or done twice, the order kept, and the
  old one told by the role poll that it waits again, although the management API keeps
  listing it as ``single_active``.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pika
import pytest

from sac.sdk import (
    ConnectionSettings,
    ConsumerSettings,
    Delivery,
    ManagementSettings,
    Publisher,
    PublisherSettings,
    QueueSettings,
    Role,
)
from sac.sdk.dedup import Inbox, SQLiteStore, Transaction
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace


def _conn(cluster: LocalCluster, name: str) -> ConnectionSettings:
    return ConnectionSettings(urls=cluster.urls(), heartbeat=2, name=name)


def _rejected_until_taken(cluster: LocalCluster, queue: str, rejects: int) -> int:
    """Consume ``queue``'s one message, rejecting it (requeued) ``rejects`` times and acking
    it after; how many times it came (fewer when the broker took it away)."""
    seen = 0
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1)
        for method, _properties, _body in channel.consume(queue, inactivity_timeout=3):
            if method is None:
                break  # nothing came for 3 s: the broker dead-lettered or dropped it
            seen += 1
            if seen > rejects:
                channel.basic_ack(method.delivery_tag)
                break
            channel.basic_reject(method.delivery_tag, requeue=True)
        channel.cancel()
    return seen


def _counts(cluster: LocalCluster, *queues: str) -> list[int]:
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as conn:
        channel = conn.channel()
        return [channel.queue_declare(q, passive=True).method.message_count for q in queues]


@pytest.mark.rabbitmq("4.0", "3.10")
def test_no_delivery_limit_keeps_redelivering_a_message_rejected_25_times(
    cluster: LocalCluster, queue_name: str
) -> None:
    """``delivery_limit=-1``: a message rejected 25 times is still delivered, not parked nor
    dropped, on 4.0 (declared -1) and 3.10 (declared without a limit). The default limit
    (20) beside it shows that the rejects count."""
    conn = _conn(cluster, "no-delivery-limit")
    unlimited = QueueSettings(queue_name, delivery_limit=-1)
    limited = QueueSettings(f"{queue_name}.limited")
    for queue in (unlimited, limited):
        with Publisher(PublisherSettings(conn, queue=queue)) as pub:
            pub.publish(b"rejected again and again")
    declared = cluster.management().queue(queue_name).arguments
    four = cluster.spec.rabbitmq == "4.0"
    assert declared.get("x-delivery-limit") == (-1 if four else None)

    assert _rejected_until_taken(cluster, unlimited.name, 25) == 26
    assert _counts(cluster, unlimited.name, f"{unlimited.name}.parked") == [0, 0]
    assert _rejected_until_taken(cluster, limited.name, 25) == 21  # then parked
    wait_until(lambda: _counts(cluster, f"{limited.name}.parked") == [1], 10,
               "the limited queue's message dead-lettered into its parking queue")


@pytest.mark.rabbitmq("4.0", "3.10")
def test_a_parked_message_given_back_25_times_stays_parked(
    cluster: LocalCluster, queue_name: str
) -> None:
    """Listing parked messages gives each back (``sac dlq list``: a quorum queue cannot be
    read in place), which counts as a delivery. The parking queue has no delivery limit on
    either version: on 4.0 its default of 20 would drop a parked message (no dead-letter
    target) at about the 20th listing."""
    queue = QueueSettings(queue_name)
    with Publisher(PublisherSettings(_conn(cluster, "parking-limit"), queue=queue)):
        pass  # declares the queue and its parking queue
    parking = f"{queue_name}.parked"
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.basic_publish("", parking, b"parked", pika.BasicProperties(delivery_mode=2))
    assert _rejected_until_taken(cluster, parking, 25) == 26


def _consumer_arguments(cluster: LocalCluster, queue: str) -> dict[str, object]:
    def listed() -> list[dict[str, object]]:
        return [dict(c.arguments) for c in cluster.management().queue(queue).consumers]

    return wait_until(listed, 15, "the consumer listed by the management API")[0]


@pytest.mark.rabbitmq("4.0", "3.10")
def test_ha_failover_cancel_is_asked_only_of_3_x_and_the_priority_of_both(
    cluster: LocalCluster, queue_name: str
) -> None:
    """A classic single-active queue's consumer: 3.10 (where it may be mirrored) gets
    ``x-cancel-on-ha-failover``, 4.0 (no mirroring; it would ignore it) does not."""
    queue = QueueSettings(queue_name, type="classic")
    settings = ConsumerSettings(_conn(cluster, "ha-cancel"), queue, priority=5)
    consumer = ConsumerFace("blocking", settings).start()
    try:
        wait_until(lambda: consumer.role is Role.WAITING, 15, "the subscription")
        arguments = _consumer_arguments(cluster, queue_name)
    finally:
        consumer.stop()
    expected: dict[str, object] = {"x-priority": 5}
    if cluster.spec.rabbitmq == "3.10":
        expected["x-cancel-on-ha-failover"] = True
    assert arguments == expected


# ---------------------------------------------------------------------------- priorities

BACKLOG = 3000
EFFECT_S = 0.002
B_AFTER = 400
"""B subscribes once A has done this many: the switch comes with most of the queue to do."""
GAPS: list[float] = []


class Effects:
    """Every committed effect: which consumer, which message, when (monotonic)."""

    def __init__(self) -> None:
        self.done: list[tuple[str, str, float]] = []
        self._lock = threading.Lock()

    def effect(self, actor: str) -> Callable[[Delivery, Transaction], None]:
        def run(delivery: Delivery, tx: Transaction) -> None:
            time.sleep(EFFECT_S)
            msg = str(delivery.message_id)
            tx.on_commit(lambda: self._record(actor, msg))
        return run

    def _record(self, actor: str, msg: str) -> None:
        with self._lock:
            self.done.append((actor, msg, time.monotonic()))

    def count(self) -> int:
        with self._lock:
            return len(self.done)


def test_a_higher_priority_consumer_takes_over_on_4_0_in_order_once_each(
    face: str, cluster4: LocalCluster, queue_name: str, tmp_path: Path,
    consumers: Callable[..., ConsumerFace],
) -> None:
    """A rolling deploy: A (priority 0) is active with a backlog; B starts with priority 10
    and takes over as soon as A has acked what it holds, A never stopped. Every message is
    handled once, A's effects then B's in publish order (an inbox on SQLite), and A's role
    poll tells it that it waits again."""
    conn = _conn(cluster4, "priority")
    queue = QueueSettings(queue_name)
    api = ManagementSettings(cluster4.management_urls(),
                             statistics_interval=cluster4.spec.statistics_interval_ms / 1000)
    with Publisher(PublisherSettings(conn, queue=queue)) as pub:
        ids = pub.publish_many([b"m%d" % i for i in range(BACKLOG)])
    effects = Effects()
    store = tmp_path / "inbox.db"

    def start(actor: str, priority: int) -> ConsumerFace:
        settings = ConsumerSettings(conn, queue, consumer_name=actor, priority=priority,
                                    management=api)
        return consumers(face, settings, inbox=Inbox(SQLiteStore(store),
                                                     effects.effect(actor))).start()

    a = start("a", 0)
    wait_until(lambda: effects.count() >= B_AFTER, 60, f"A's first {B_AFTER} effects")
    assert a.role is Role.ACTIVE
    b = start("b", 10)
    wait_until(lambda: effects.count() >= BACKLOG, 120, "every message handled")
    wait_until(lambda: a.role is Role.WAITING, 30, "A told by its role poll that it waits")
    assert b.role is Role.ACTIVE
    demoted = next(t for t, r in reversed(a.role_times) if r is Role.WAITING)

    done = list(effects.done)
    assert [msg for _, msg, _ in done] == ids  # once each, in publish order
    actors = [actor for actor, _, _ in done]
    switches = [(x, y) for x, y in itertools.pairwise(actors) if x != y]
    assert switches == [("a", "b")]  # A's effects, then only B's
    last_a = max(t for actor, _, t in done if actor == "a")
    first_b = min(t for actor, _, t in done if actor == "b")
    GAPS.append(first_b - last_a)
    print(f"{face}: A handled {actors.count('a')}, B {actors.count('b')}; switch gap "
          f"{1000 * (first_b - last_a):.0f} ms (last A effect to first B effect); A knew "
          f"it waits {demoted - first_b:.1f} s after B's first effect; gaps so far (ms): "
          f"p50 {1000 * statistics.median(GAPS):.0f}, max {1000 * max(GAPS):.0f}")
    assert a.stats.delivered == actors.count("a")  # nothing came to A after the switch


@pytest.mark.rabbitmq("4.0", "3.10")
def test_a_foreign_publishers_high_priority_overtakes_on_4_0_and_not_on_3_10(
    face: str, cluster: LocalCluster, queue_name: str,
    consumers: Callable[..., ConsumerFace],
) -> None:
    """A single-active quorum queue delivers in publish order only while no message carries
    a priority of 5 or more: 4.0's quorum queues deliver those first (about two of them for
    one other), 3.10's ignore priorities. The SDK's publishers set none; a foreign publisher
    that does reorders the queue before any consumer sees it."""
    conn = _conn(cluster, "message-priority")
    queue = QueueSettings(queue_name)
    priorities = [None, None, 5, None, 9, 1, None, 4, 255, None, None, None]
    ids = [f"m{i}" for i in range(len(priorities))]
    with Publisher(PublisherSettings(conn, queue=queue)):
        pass  # the SDK declares the queue, as it does for its own publishers
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        channel.confirm_delivery()
        for msg, priority in zip(ids, priorities, strict=True):
            channel.basic_publish("", queue_name, msg.encode(), pika.BasicProperties(
                message_id=msg, delivery_mode=2, priority=priority))
    c = consumers(face, ConsumerSettings(conn, queue)).start()
    wait_until(lambda: c.count() >= len(ids), 30, "every message handled")
    high = [m for m, p in zip(ids, priorities, strict=True) if p is not None and p >= 5]
    if cluster.spec.rabbitmq == "3.10":
        assert c.handled == ids
        return
    assert sorted(c.handled) == sorted(ids)  # once each...
    assert c.handled[0] == high[0]  # ...but not in publish order
    assert c.handled != ids
    others = [m for m in ids if m not in high]
    assert [m for m in c.handled if m in high] == high  # each class keeps its own order
    assert [m for m in c.handled if m not in high] == others
