"""Poison messages on the real 3-node cluster, both faces: never a hot loop, never dropped,
always in a parking queue a person can look at, and back exactly once after a fix."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import attrs
import pika
import pytest

from sac.chaos._process import ActorProcess
from sac.chaos.actors.consumer import CRASHED
from sac.sdk import (
    Backoff,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    MessageIdFrom,
    Parking,
    ParkingFailed,
    Poison,
    Publisher,
    PublisherSettings,
    QueueMismatch,
    QueueSettings,
)
from sac.sdk.dedup import Inbox, LookupPolicy, SQLiteStore
from sac.server import LocalCluster
from tests.dedup.ledger import Ledger
from tests.helpers import wait_until
from tests.sdk.conftest import consumer_actor, handled
from tests.sdk.faces import ConsumerFace, PublisherFace
from tests.sdk.test_inbox import named, publish, ready_messages

MakePublisher = Callable[..., PublisherFace]
QUICK = Backoff(initial=0.05, maximum=0.2, max_attempts=3, max_elapsed=10.0)
"""Three retries: a message that always fails runs four times, then is parked."""


def raw_publish(cluster: LocalCluster, queue: str, bodies: list[bytes],
                headers: list[dict[str, object]] | None = None) -> None:
    """As another client would: no message id, no confirms of ours."""
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        channel.confirm_delivery()
        for i, body in enumerate(bodies):
            props = pika.BasicProperties(delivery_mode=2,
                                         headers=headers[i] if headers else None)
            channel.basic_publish("", queue, body, props, mandatory=True)


def declare(cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings) -> None:
    """The queue as the SDK declares it, before anything is published to it."""
    with Publisher(PublisherSettings(named(conn, queue, "declare"), queue=queue)):
        pass


def parked_ids(conn: ConnectionSettings, queue: QueueSettings) -> list[str | None]:
    return [m.message_id for m in Parking(conn).messages(queue, limit=1000)]


def test_foreign_messages_without_ids_are_parked_at_once_not_looped(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    consumers: Callable[..., ConsumerFace], tmp_path: Path,
) -> None:
    """The issue's case: ten messages without ids, an inbox on SQLite. Before, 27 937
    rejects in 8 s; now each is delivered once, parked with the reason, and the main queue
    is empty."""
    declare(cluster, conn, queue)
    raw_publish(cluster, queue.name, [f"foreign {i}".encode() for i in range(10)])
    store = SQLiteStore(str(tmp_path / "dedup.db"))
    ledger = Ledger(SQLiteStore(str(tmp_path / "dedup.db")))
    c = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue),
                  inbox=Inbox(store, ledger.effect("a"))).start()
    wait_until(lambda: c.stats.parked == 10, 30, "the ten messages parked")
    assert c.stats.delivered == 10, "a message was delivered more than once: a loop"
    assert c.stats.retried == 0, "no retry can give a message an id"
    parked = Parking(conn).messages(queue, limit=100)
    assert sorted(m.body for m in parked) == sorted(f"foreign {i}".encode() for i in range(10))
    assert {m.error for m in parked} == {"MissingMessageId"}
    assert all("no message_id" in m.reason and m.origin == queue.name for m in parked)
    assert ledger.counts() == {}
    assert ready_messages(cluster, queue.name) == 0


def test_foreign_messages_are_deduplicated_by_the_chosen_header(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    consumers: Callable[..., ConsumerFace], tmp_path: Path,
) -> None:
    """``MessageIdFrom.header``: the id comes from the publisher's own header, so the same
    order sent twice has one effect, and nothing is parked."""
    declare(cluster, conn, queue)
    orders = [f"order-{i}" for i in range(10)] + ["order-3", "order-7"]
    raw_publish(cluster, queue.name, [o.encode() for o in orders],
                [{"x-order-id": o} for o in orders])
    ledger = Ledger(SQLiteStore(str(tmp_path / "dedup.db")))
    settings = ConsumerSettings(named(conn, queue, "a"), queue,
                                message_id_from=MessageIdFrom.header("x-order-id"))
    inbox = Inbox(SQLiteStore(str(tmp_path / "dedup.db")), ledger.effect("a"))
    c = consumers(face, settings, inbox=inbox).start()
    wait_until(lambda: c.stats.acked == 12, 30, "every message acked")
    assert ledger.counts() == {f"order-{i}": 1 for i in range(10)}
    assert c.stats.parked == 0
    assert c.stats.delivered == 12


def test_foreign_messages_are_deduplicated_by_content(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    consumers: Callable[..., ConsumerFace], tmp_path: Path,
) -> None:
    """``MessageIdFrom.content``: equal bodies are one message (the documented trade-off)."""
    declare(cluster, conn, queue)
    raw_publish(cluster, queue.name, [b"a", b"b", b"a", b"c", b"b"])
    ledger = Ledger(SQLiteStore(str(tmp_path / "dedup.db")))
    settings = ConsumerSettings(named(conn, queue, "a"), queue,
                                message_id_from=MessageIdFrom.content())
    inbox = Inbox(SQLiteStore(str(tmp_path / "dedup.db")), ledger.effect("a"),
                  policy=LookupPolicy.ALWAYS)
    c = consumers(face, settings, inbox=inbox).start()
    wait_until(lambda: c.stats.acked == 5, 30, "every message acked")
    assert sorted(ledger.counts().values()) == [1, 1, 1]
    assert all(m.startswith("sha256:") for m in ledger.counts())


def test_an_always_failing_handler_parks_its_message_and_the_next_is_handled(
    face: str, conn: ConnectionSettings, queue: QueueSettings, publishers: MakePublisher,
    consumers: Callable[..., ConsumerFace], caplog: pytest.LogCaptureFixture,
) -> None:
    runs: Counter[bytes] = Counter()
    order: list[bytes] = []

    def work(delivery: Delivery) -> None:
        runs[delivery.body] += 1
        if delivery.body == b"m2":
            raise ValueError("cannot handle m2")
        order.append(delivery.body)

    caplog.set_level(logging.INFO, logger="sac.consumer")
    c = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue, retry=QUICK),
                  work).start()
    ids = publish(publishers, face, conn, queue, 6)
    wait_until(lambda: len(order) == 5, 30, "the five good messages")
    assert order == [b"m0", b"m1", b"m3", b"m4", b"m5"], "the order of the queue changed"
    assert runs[b"m2"] == 4, "one run and three retries"
    assert c.stats.delivered == 6, "the failing message was redelivered: not retried in place"
    assert c.stats.parked == 1
    [parked] = Parking(conn).messages(queue)
    assert parked.message_id == ids[2]
    assert parked.body == b"m2"
    assert parked.reason == "ValueError: cannot handle m2"
    assert parked.attempts == 4
    assert parked.origin == queue.name
    wait_until(lambda: c.stats.acked == 6, 10, "every message acked")
    lines = [r for r in caplog.records if ids[2] in r.getMessage()]
    assert len(lines) == 4, "one line per failed attempt"
    assert sum(1 for r in lines if r.exc_info) == 1, "the traceback once per message"


def test_a_transient_failure_is_retried_in_place_and_handled_once(
    face: str, conn: ConnectionSettings, queue: QueueSettings, publishers: MakePublisher,
    consumers: Callable[..., ConsumerFace],
) -> None:
    runs: Counter[bytes] = Counter()

    def work(delivery: Delivery) -> None:
        runs[delivery.body] += 1
        if delivery.body == b"m1" and runs[b"m1"] <= 2:
            raise ConnectionError("the downstream service blinked")

    c = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue, retry=QUICK),
                  work).start()
    ids = publish(publishers, face, conn, queue, 3)
    wait_until(lambda: len(c.handled) == 3, 30, "every message handled")
    assert c.handled == ids
    assert runs[b"m1"] == 3
    assert c.stats.retried == 2
    assert c.stats.parked == 0
    assert c.stats.delivered == 3


def test_poison_is_parked_at_once(
    face: str, conn: ConnectionSettings, queue: QueueSettings, publishers: MakePublisher,
    consumers: Callable[..., ConsumerFace],
) -> None:
    def work(delivery: Delivery) -> None:
        if delivery.body == b"m0":
            try:
                int(delivery.body)
            except ValueError as exc:
                raise Poison("the body is not a number") from exc

    c = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue), work).start()
    publish(publishers, face, conn, queue, 2)
    wait_until(lambda: c.stats.acked == 2, 30, "both messages acked")
    assert c.stats.retried == 0
    [parked] = Parking(conn).messages(queue)
    assert parked.reason == "Poison: the body is not a number"


def test_without_any_dead_letter_target_the_consumer_stops_and_the_message_stays(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue_name: str,
    publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
) -> None:
    """A queue that must not get a parking queue: the consumer stops naming the message and
    the queue, and the message is still in the queue (neither dropped nor looped)."""
    queue = QueueSettings(queue_name, parking_queue=None)

    def work(delivery: Delivery) -> None:
        if delivery.body == b"m1":
            raise ValueError("never")

    c = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue, retry=QUICK),
                  work).start()
    ids = publish(publishers, face, conn, queue, 3)
    error = c.ended(30)
    assert isinstance(error, ParkingFailed)
    assert ids[1] in str(error)
    assert queue_name in str(error)
    assert c.handled == ids[:1]
    assert ready_messages(cluster, queue_name) == 2  # m1 and m2, back in the queue


@pytest.mark.parametrize("face", ["blocking", "asyncio"])
def test_a_crash_loop_is_bounded_by_the_delivery_limit(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue_name: str,
    publishers: MakePublisher, tmp_path: Path,
) -> None:
    """A handler that kills its process: each restart gets the message again, until the
    broker's delivery limit dead-letters it into the parking queue (at least once)."""
    queue = QueueSettings(queue_name, delivery_limit=2)
    publish(publishers, face, conn, queue, 3)
    # The first message kills the process: handlers run one at a time, so nothing is ever
    # acked and each message is in the queue or parked once a crash settled. (A crash on a
    # later message would race the idle flush of the acks before it.)
    spec = consumer_actor(tmp_path, "crashing", face, queue_name, cluster.urls(), heartbeat=5,
                          crash_on_body="m0", delivery_limit=2)

    def settled() -> tuple[set[bytes]] | None:
        """Once each message is back in the queue or parked (dead-lettering at least once
        is asynchronous): the parked bodies."""
        parked = {m.body for m in Parking(conn).messages(queue)}
        return (parked,) if len(parked) + ready_messages(cluster, queue_name) == 3 else None

    crashes = 0
    while b"m0" not in wait_until(settled, 30, "the crashed consumer's messages settled")[0]:
        assert crashes < 6, "the delivery limit did not end the crash loop"
        with ActorProcess.start(spec) as proc:
            assert proc.wait(60) == CRASHED, proc.log_tail()
        crashes += 1
    assert crashes == 3, "first delivery and two redeliveries, then dead-lettered"
    parked = {m.body: m for m in Parking(conn).messages(queue)}
    assert "delivery limit" in parked[b"m0"].reason
    assert parked[b"m0"].origin == queue_name
    # RabbitMQ 3.10 counts a delivery for every unacked message a crash returns: m1 and m2
    # (prefetched behind m0) were returned with it each time, so they reach the limit with
    # it. Parked, not lost: a replay brings them back.
    assert ready_messages(cluster, queue_name) + len(parked) == 3
    assert handled(spec) == [], "a crashing handler never completes"


def test_replay_brings_parked_messages_back_exactly_once(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: MakePublisher, consumers: Callable[..., ConsumerFace], tmp_path: Path,
) -> None:
    """Three messages parked by a bug; the fix is deployed; the replay moves each back once,
    with its id, and the inbox commits each once, even the one whose effect was committed
    before it was parked a second time (a replay is looked up)."""
    broken = True

    def effect_for(ledger: Ledger) -> Callable[..., None]:
        inner = ledger.effect("a")

        def effect(delivery: Delivery, tx: object) -> None:
            if broken and delivery.body in (b"m1", b"m3", b"m4"):
                raise Poison("bug 42")
            inner(delivery, tx)

        return effect

    ledger = Ledger(SQLiteStore(str(tmp_path / "dedup.db")))
    inbox = Inbox(SQLiteStore(str(tmp_path / "dedup.db")), effect_for(ledger))
    c = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue), inbox=inbox).start()
    ids = publish(publishers, face, conn, queue, 6)
    wait_until(lambda: c.stats.acked == 6, 30, "every message acked or parked")
    assert sorted(parked_ids(conn, queue)) == sorted([ids[1], ids[3], ids[4]])  # type: ignore[type-var]
    broken = False
    assert Parking(conn).replay(queue) == 3
    wait_until(lambda: len(ledger.counts()) == 6, 30, "the replayed messages committed")
    assert ledger.counts() == dict.fromkeys(ids, 1)
    assert parked_ids(conn, queue) == []
    assert Parking(conn).replay(queue) == 0
    assert ready_messages(cluster, queue.name) == 0


def test_sac_dlq_lists_and_replays(
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
) -> None:
    def work(delivery: Delivery) -> None:
        if delivery.body == b"m0":
            raise Poison("no such customer")

    c = consumers("blocking", ConsumerSettings(named(conn, queue, "a"), queue), work).start()
    ids = publish(publishers, "blocking", conn, queue, 2)
    wait_until(lambda: c.stats.acked == 2, 30, "both settled")
    c.stop()
    url = ",".join(cluster.urls())
    sac = [sys.executable, "-m", "sac"]
    listed = subprocess.run([*sac, "dlq", "list", queue.name, "--url", url],
                            capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    assert ids[0] in listed.stdout
    assert "Poison: no such customer" in listed.stdout
    assert "1 parked message(s)" in listed.stdout
    assert parked_ids(conn, queue) == [ids[0]], "listing took the message away"
    replayed = subprocess.run([*sac, "dlq", "replay", queue.name, "--url", url],
                              capture_output=True, text=True, timeout=60, check=False)
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 1 message(s)" in replayed.stdout
    assert ready_messages(cluster, queue.name) == 1
    missing = subprocess.run([*sac, "dlq", "list", "no-such-queue", "--url", url],
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 1
    assert missing.stderr == (
        "sac dlq: queue 'no-such-queue' has no parking queue: 'no-such-queue.parked' does not "
        "exist in vhost '/' (nothing was parked for it yet, or 'no-such-queue' is not the "
        "queue's name)\n")


def test_ten_thousand_lines_never_happen(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    consumers: Callable[..., ConsumerFace], tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """300 messages without ids, parked as fast as the broker confirms: the log stays within
    its budget (a burst of 20, then 5 lines a second, the rest counted)."""
    declare(cluster, conn, queue)
    raw_publish(cluster, queue.name, [str(i).encode() for i in range(300)])
    caplog.set_level(logging.INFO, logger="sac.consumer")
    ledger = Ledger(SQLiteStore(str(tmp_path / "dedup.db")))
    inbox = Inbox(SQLiteStore(str(tmp_path / "dedup.db")), ledger.effect("a"))
    c = consumers(face, attrs.evolve(ConsumerSettings(named(conn, queue, "a"), queue)),
                  inbox=inbox).start()
    wait_until(lambda: c.stats.parked == 300, 60, "every message parked")
    lines = [r for r in caplog.records if r.name == "sac.consumer" and "parking" in r.getMessage()]
    span = max(r.created for r in lines) - min(r.created for r in lines)
    assert len(lines) <= 20 + 5 * span + 1
    assert any("similar lines held back" in r.getMessage() for r in lines) or len(lines) == 300


def test_a_queue_declared_before_parking_existed_is_named_not_changed(
    cluster: LocalCluster, conn: ConnectionSettings, queue_name: str,
) -> None:
    """A queue an older SDK declared (no dead-letter target): starting fails with the
    argument that differs, nothing is changed; the same queue kept with parking_queue=None
    works as before."""
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        raw.channel().queue_declare(queue_name, durable=True, arguments={
            "x-queue-type": "quorum", "x-single-active-consumer": True})
    with pytest.raises(QueueMismatch) as caught:
        Consumer(ConsumerSettings(conn, QueueSettings(queue_name)), print).start()
    assert caught.value.argument == "x-dead-letter-exchange"
    assert queue_name in str(caught.value)
    assert "QueueSettings(parking_queue=None)" in str(caught.value)
    kept = Consumer(ConsumerSettings(conn, QueueSettings(queue_name, parking_queue=None)), print)
    kept.start()
    kept.stop()


def test_a_parked_and_replayed_message_keeps_its_properties(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    consumers: Callable[..., ConsumerFace],
) -> None:
    """A foreign message with the properties a ``Delivery`` has no field for: the handler
    sees them, the parked copy and the replayed message keep them (a gzip body without its
    content_encoding would be garbage after a replay); only the expiration is not kept."""
    declare(cluster, conn, queue)
    sent = pika.BasicProperties(
        delivery_mode=2, content_type="application/json", content_encoding="gzip",
        reply_to="replies.shop", type="order.created", app_id="shop", priority=3,
        correlation_id="c-1", message_id="m-props", expiration="3600000",
        headers={"x-tenant": "acme"})
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        raw.channel().basic_publish("", queue.name, b"\x1f\x8b...", sent)
    seen: list[Delivery] = []

    def work(delivery: Delivery) -> None:
        seen.append(delivery)
        raise Poison("cannot read it yet")

    c = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue), work).start()
    wait_until(lambda: c.stats.parked == 1, 30, "the message parked")
    c.stop()
    wanted = {"content_encoding": "gzip", "reply_to": "replies.shop",
              "type": "order.created", "app_id": "shop", "priority": 3}
    assert seen[0].properties == {**wanted, "expiration": "3600000"}
    [parked] = Parking(conn).messages(queue)
    assert parked.properties == wanted
    assert (parked.content_type, parked.correlation_id, parked.message_id) == \
        ("application/json", "c-1", "m-props")
    assert parked.headers["x-tenant"] == "acme"
    assert Parking(conn).replay(queue) == 1
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()  # basic.get is refused on a single-active queue: consume
        method, props, body = next(channel.consume(queue.name, inactivity_timeout=30))
        assert method is not None, "the replayed message did not come"
        channel.basic_ack(method.delivery_tag)
        channel.cancel()
    assert body == b"\x1f\x8b..."
    assert {k: getattr(props, k) for k in wanted} == wanted
    assert props.message_id == "m-props"
    assert props.headers["x-tenant"] == "acme"
    assert props.headers["x-sac-replayed"] == 1
    assert not any(k.startswith("x-sac-parked") for k in props.headers)


def test_a_stop_during_retries_leaves_the_message_in_the_queue(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A graceful stop while a failed message waits for its retry: the wait ends at once
    (the handler is not waited for past ``stop_timeout``), the message is neither parked nor
    acked, and it is back in the queue for the next consumer."""
    runs: list[bytes] = []

    def work(delivery: Delivery) -> None:
        runs.append(delivery.body)
        raise ConnectionError("the database is down")

    slow = Backoff(initial=60.0, maximum=60.0, max_attempts=2, max_elapsed=120.0)
    settings = ConsumerSettings(named(conn, queue, "a"), queue, retry=slow, stop_timeout=2.0)
    c = consumers(face, settings, work).start()
    publish(publishers, face, conn, queue, 1)
    wait_until(lambda: c.stats.handler_errors == 1, 30, "the first failure")
    caplog.set_level(logging.WARNING, logger="sac.consumer")
    c.stop()
    assert not [r for r in caplog.records if "did not finish" in r.getMessage()]
    assert runs == [b"m0"]
    assert c.stats.parked == 0
    assert c.stats.acked == 0
    # The broker takes the message back when the channel closes, in the queue's own time:
    # a count read at once from another node can be a moment early.
    wait_until(lambda: ready_messages(cluster, queue.name) == 1, 10, "the message back")
