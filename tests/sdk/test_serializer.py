"""Bodies other than bytes on the real 3-node cluster, both faces: a JSON (or any) serializer
on the publisher sets the content type and encodes; the consumer's serializers decode into
``Delivery.value``; a body that does not decode is parked at once with why, and the next
message is handled; a value that cannot be encoded fails before anything is sent."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import pika
import pytest

from sac.sdk import (
    BYTES,
    JSON,
    AsyncConsumer,
    AsyncPublisher,
    ConfigurationError,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    Inbox,
    MemoryStore,
    Parking,
    Publisher,
    PublisherSettings,
    QueueSettings,
    Serializer,
    Transaction,
)
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.test_inbox import named, ready_messages
from tests.sdk.test_poison import declare

T = TypeVar("T")

ORDER = {"id": 7, "customer": "Zoë Ærøskøbing", "city": "東京", "note": "emoji 🚚",
         "lines": [{"sku": "A-1", "qty": 2, "price": 9.5}, {"sku": "B-2", "qty": 1,
                                                             "tags": ["x", None, True]}]}
ORDER_JSON = ('{"id":7,"customer":"Zoë Ærøskøbing","city":"東京","note":"emoji 🚚",'
              '"lines":[{"sku":"A-1","qty":2,"price":9.5},{"sku":"B-2","qty":1,'
              '"tags":["x",null,true]}]}').encode()


def reversed_text() -> Serializer[str]:
    """A codec of this test's own (no library): text stored back to front."""
    return Serializer("text/x-reversed", lambda s: s[::-1].encode("utf-8"),
                      lambda data: data.decode("utf-8")[::-1])


# ---------------------------------------------------------------------- harness


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def publish_all(face: str, settings: PublisherSettings, serializer: Serializer[Any],
                bodies: Sequence[Any], **options: Any) -> list[str]:
    """The first body with ``publish``, the rest with ``publish_many``, on ``face``."""
    if face == "blocking":
        with Publisher(settings, serializer=serializer) as pub:
            ids = [pub.publish(bodies[0], **options)]
            return ids + (pub.publish_many(bodies[1:], **options) if bodies[1:] else [])

    async def go() -> list[str]:
        async with AsyncPublisher(settings, serializer=serializer) as pub:
            ids = [await pub.publish(bodies[0], **options)]
            return ids + (await pub.publish_many(bodies[1:], **options) if bodies[1:] else [])

    return run(go())


class Seen:
    """What a handler got, in order."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.lock = threading.Lock()

    def add(self, delivery: Delivery) -> None:
        with self.lock:
            self.deliveries.append(delivery)

    @property
    def values(self) -> list[Any]:
        with self.lock:
            return [d.value for d in self.deliveries]


@contextlib.contextmanager
def consuming(face: str, settings: ConsumerSettings, handler: Callable[[Delivery], None] | Inbox,
              serializers: Any) -> Iterator[Consumer | AsyncConsumer]:
    """A consumer of ``face`` running in the background until the block ends."""
    if face == "blocking":
        consumer = Consumer(settings, handler, serializers=serializers)
        consumer.start()
        runner = threading.Thread(target=consumer.run, kwargs={"handle_signals": False},
                                  daemon=True)
        runner.start()
        try:
            yield consumer
        finally:
            consumer.stop()
            runner.join(30)
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    if isinstance(handler, Inbox):
        target: Any = handler
    else:
        plain = handler

        async def target(delivery: Delivery) -> None:
            plain(delivery)

    aconsumer = AsyncConsumer(settings, target, serializers=serializers)
    try:
        asyncio.run_coroutine_threadsafe(aconsumer.start(), loop).result(60)
        yield aconsumer
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(aconsumer.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def raw_get(cluster: LocalCluster, queue: str, count: int) -> list[tuple[Any, bytes]]:
    """The next ``count`` messages of ``queue`` (properties, body) as any AMQP client sees
    them, acked (a single-active-consumer quorum queue takes no ``basic.get``)."""
    got: list[tuple[Any, bytes]] = []
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        for method, props, body in channel.consume(queue, inactivity_timeout=30):
            assert method is not None, f"only {len(got)} of {count} messages in {queue!r}"
            channel.basic_ack(method.delivery_tag)
            got.append((props, body))
            if len(got) == count:
                break
        channel.cancel()
    return got


def raw_publish(cluster: LocalCluster, queue: str,
                messages: Sequence[tuple[str | None, bytes]]) -> None:
    """As another client would: (content type, body) each, a message id each."""
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        channel.confirm_delivery()
        for i, (content_type, body) in enumerate(messages):
            props = pika.BasicProperties(delivery_mode=2, content_type=content_type,
                                         message_id=f"raw-{i}")
            channel.basic_publish("", queue, body, props, mandatory=True)


# ---------------------------------------------------------------------- publishing


def test_a_json_publisher_sets_the_content_type_and_sends_compact_utf8(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    settings = PublisherSettings(named(conn, queue, "pub"), queue=queue)
    publish_all(face, settings, JSON, [ORDER, [1, "two"]],
                headers={"x-tenant": "t1"})
    (props, body), (props_many, body_many) = raw_get(cluster, queue.name, 2)
    assert (props.content_type, body) == ("application/json", ORDER_JSON)
    assert props.headers == {"x-tenant": "t1"}
    assert props.message_id
    assert (props_many.content_type, body_many) == ("application/json", b'[1,"two"]')


def test_bytes_stay_the_default_with_the_callers_content_type(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    settings = PublisherSettings(named(conn, queue, "pub"), queue=queue)
    publish_all(face, settings, BYTES, [b"\x00\xffraw"])
    publish_all(face, settings, BYTES, [b"plain"], content_type="text/plain")
    (props, body), (props_plain, body_plain) = raw_get(cluster, queue.name, 2)
    assert (props.content_type, body) == (None, b"\x00\xffraw")
    assert (props_plain.content_type, body_plain) == ("text/plain", b"plain")
    if face == "blocking":
        with Publisher(settings) as pub, pytest.raises(  # a default one: no serializer named
                ConfigurationError, match="message body must be bytes, got dict"):
            pub.publish({"a": 1})  # type: ignore[arg-type]


def test_an_unencodable_value_fails_before_anything_is_sent(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    """A set, NaN, a content type that says otherwise: a clear error naming the publisher,
    and not one message of the call reaches the queue (publish_many's good ones neither)."""
    settings = PublisherSettings(named(conn, queue, "pub"), queue=queue)
    name = "Publisher" if face == "blocking" else "AsyncPublisher"
    attempts: list[tuple[str, Any, dict[str, Any], str]] = [
        ("publish", {"ids": {1, 2}}, {},
         rf"{name}\.publish\(\) to '{queue.name}': the body \(a dict\) cannot be encoded as "
         r"'application/json': TypeError: Object of type set is not JSON serializable"),
        ("publish", float("nan"), {}, "ValueError: Out of range float values"),
        ("publish_many", [{"ok": 1}, {"ok": 2}, {b"bytes key"}], {},
         rf"{name}\.publish_many\(\) to .*Object of type set"),
        ("publish", {"ok": 1}, {"content_type": "text/plain"},
         r"content_type='text/plain' disagrees with the publisher's serializer"),
    ]

    async def attempt_async(pub: AsyncPublisher[object], method: str, body: Any,
                            options: dict[str, Any]) -> None:
        if method == "publish":
            await pub.publish(body, **options)
        else:
            await pub.publish_many(body, **options)

    for method, body, options, error in attempts:
        if face == "blocking":
            with Publisher(settings, serializer=JSON) as pub, \
                    pytest.raises(ConfigurationError, match=error):
                getattr(pub, method)(body, **options)
            assert pub.stats.published == 0
        else:
            async def go(method: str = method, body: Any = body,
                         options: dict[str, Any] = options, error: str = error) -> None:
                async with AsyncPublisher(settings, serializer=JSON) as pub:
                    with pytest.raises(ConfigurationError, match=error):
                        await attempt_async(pub, method, body, options)
                    assert pub.stats.published == 0
            run(go())
    assert ready_messages(cluster, queue.name) == 0


# ---------------------------------------------------------------------- consuming


def test_json_round_trips_to_the_handler_with_the_raw_body_kept(
    face: str, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    bodies: list[Any] = [ORDER, ["ünïcödé", {"nested": {"deeper": [1.5, -2, None]}}], "text",
                         42, None]
    seen = Seen()
    with consuming(face, ConsumerSettings(named(conn, queue, "a"), queue), seen.add, JSON):
        ids = publish_all(face, PublisherSettings(named(conn, queue, "pub"), queue=queue),
                          JSON, bodies)
        wait_until(lambda: len(seen.values) == 5, 30, "the five messages")
    assert seen.values == bodies
    first = seen.deliveries[0]
    assert first.body == ORDER_JSON
    assert first.content_type == "application/json"
    assert [d.message_id for d in seen.deliveries] == ids


def test_bytes_are_handed_over_undecoded_by_default(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    declare(cluster, conn, queue)
    raw_publish(cluster, queue.name, [("application/json", b"{not json"), (None, b"\xff")])
    seen = Seen()
    with consuming(face, ConsumerSettings(named(conn, queue, "a"), queue), seen.add, BYTES):
        wait_until(lambda: len(seen.values) == 2, 30, "the two messages")
    assert seen.values == [b"{not json", b"\xff"]
    assert [d.body for d in seen.deliveries] == seen.values


def test_a_body_that_does_not_decode_is_parked_at_once_and_the_next_is_handled(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    """Foreign messages under ``application/json`` that are not JSON, or not UTF-8, and a
    content type the consumer does not read: each parked in its turn with why, never run,
    never retried; the good ones around them handled in order."""
    declare(cluster, conn, queue)
    raw_publish(cluster, queue.name, [
        ("application/json", b'{"n":1}'),
        ("application/json", b"{not json"),
        ("application/json; charset=utf-8", b'"caf\xe9"'),
        ("application/json", b'{"n":2}'),
        ("text/plain", b"hello"),
        (None, b'{"n":3}'),
    ])
    seen = Seen()
    settings = ConsumerSettings(named(conn, queue, "a"), queue)
    with consuming(face, settings, seen.add, JSON) as consumer:
        wait_until(lambda: consumer.stats.parked == 3 and len(seen.values) == 3, 30,
                   "three handled, three parked")
        stats = consumer.stats
    assert seen.values == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert (stats.delivered, stats.retried, stats.handler_errors) == (6, 0, 0)
    parked = {m.message_id: m for m in Parking(conn).messages(queue, limit=10)}
    assert sorted(parked) == ["raw-1", "raw-2", "raw-4"]
    assert {m.error for m in parked.values()} == {"UnfitMessage"}
    assert ("its body does not decode as 'application/json' (content type "
            "'application/json'): JSONDecodeError: Expecting property name"
            ) in parked["raw-1"].reason
    assert ("(content type 'application/json; charset=utf-8'): UnicodeDecodeError: 'utf-8' "
            "codec can't decode byte 0xe9") in parked["raw-2"].reason
    assert ("its content type 'text/plain' is not one this consumer reads "
            "('application/json')") in parked["raw-4"].reason
    assert parked["raw-2"].body == b'"caf\xe9"'  # the bytes as they came, to look at
    assert parked["raw-2"].content_type == "application/json; charset=utf-8"
    assert ready_messages(cluster, queue.name) == 0


def test_json_and_bytes_together_hand_other_content_types_over_raw(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    declare(cluster, conn, queue)
    raw_publish(cluster, queue.name, [("application/json", b"[1]"), ("text/plain", b"hi"),
                                      (None, b'{"default":"json"}')])
    seen = Seen()
    with consuming(face, ConsumerSettings(named(conn, queue, "a"), queue), seen.add,
                   [JSON, BYTES]) as consumer:
        wait_until(lambda: len(seen.values) == 3, 30, "the three messages")
        assert consumer.stats.parked == 0
    assert seen.values == [[1], b"hi", {"default": "json"}]


def test_a_custom_codec_round_trips(
    face: str, conn: ConnectionSettings, queue: QueueSettings, cluster: LocalCluster,
) -> None:
    codec = reversed_text()
    seen = Seen()
    with consuming(face, ConsumerSettings(named(conn, queue, "a"), queue), seen.add,
                   [codec, JSON]):
        publish_all(face, PublisherSettings(named(conn, queue, "pub"), queue=queue), codec,
                    ["stressed", "Grüße"])
        publish_all(face, PublisherSettings(named(conn, queue, "pub"), queue=queue), JSON,
                    [{"also": "json"}])
        wait_until(lambda: len(seen.values) == 3, 30, "the three messages")
    assert seen.values == ["stressed", "Grüße", {"also": "json"}]
    assert seen.deliveries[0].body == b"desserts"
    assert seen.deliveries[0].content_type == "text/x-reversed"


def test_an_inbox_effect_gets_the_decoded_value(
    face: str, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    got: list[tuple[str, Any]] = []

    def effect(delivery: Delivery, tx: Transaction) -> None:
        got.append((tx.message_id, delivery.value))

    inbox = Inbox(MemoryStore(), effect)
    with consuming(face, ConsumerSettings(named(conn, queue, "a"), queue), inbox, JSON):
        ids = publish_all(face, PublisherSettings(named(conn, queue, "pub"), queue=queue),
                          JSON, [ORDER, {"second": True}])
        wait_until(lambda: len(got) == 2, 30, "both effects")
    assert got == [(ids[0], ORDER), (ids[1], {"second": True})]
