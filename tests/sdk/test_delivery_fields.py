"""What a handler receives is what was published, whoever published it: the consumer decodes
deliveries itself (``sac/sdk/_wire/deliveries.py``), so every property it exposes, the headers,
empty and multi-frame bodies, and strings that are not UTF-8 are checked end to end, on both
faces."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pika
import pytest

from sac.sdk import ConnectionSettings, ConsumerSettings, Delivery, QueueSettings
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace

LARGE = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and a bit: eight body frames and more

CASES: list[tuple[bytes, pika.BasicProperties]] = [
    (b"plain", pika.BasicProperties(delivery_mode=2, message_id="m-plain")),
    (b"", pika.BasicProperties(delivery_mode=2, message_id="m-empty")),
    (LARGE, pika.BasicProperties(delivery_mode=2, message_id="m-large")),
    (
        b'{"order": 7}',
        pika.BasicProperties(
            content_type="application/json",
            content_encoding="identity",
            headers={"tenant": "acme", "n": 3, "flag": True,
                     "nested": {"a": [1, "two"]}, "x-sac-retransmit": 1},
            delivery_mode=2,
            priority=3,
            correlation_id="corr-1",
            reply_to="replies",
            expiration="600000",
            message_id="m-full",
            timestamp=1_790_000_000,
            type="order.created",
            app_id="shop",
        ),
    ),
    (b"latin", pika.BasicProperties(message_id="m-\u00e9t\u00e9", correlation_id="caf\u00e9")),
]


def test_a_handler_gets_every_property_as_published(
    face: str, consumers: Callable[..., ConsumerFace], conn: ConnectionSettings,
    queue: QueueSettings,
) -> None:
    seen: list[Delivery] = []
    lock = threading.Lock()

    def keep(delivery: Delivery) -> None:
        with lock:
            seen.append(delivery)

    consumer = consumers(face, ConsumerSettings(conn, queue), keep).start()
    with pika.BlockingConnection(pika.URLParameters(conn.urls[0])) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for body, props in CASES:
            channel.basic_publish("", queue.name, body, props, mandatory=True)
    wait_until(lambda: consumer.count() >= len(CASES), 30, "every message handled")
    assert len(seen) == len(CASES)
    for delivery, (body, props) in zip(seen, CASES, strict=True):
        assert delivery.body == body
        assert delivery.message_id == props.message_id
        assert dict(delivery.headers) == (props.headers or {})
        assert delivery.content_type == props.content_type
        assert delivery.correlation_id == props.correlation_id
        assert delivery.timestamp == props.timestamp
        assert delivery.redelivered is False
        assert delivery.delivery_count is None
        assert delivery.queue == queue.name
        assert delivery.routing_key == queue.name
        assert delivery.exchange == ""
    assert seen[3].retransmitted
    # Acked after each handler returned: wait for the acks, not only the handlers.
    wait_until(lambda: consumer.stats.acked == len(CASES), 30, "every message acked")


@pytest.mark.parametrize("raw_id", [b"\xff\xfe-not-utf8"])
def test_an_id_that_is_not_utf8_arrives_as_the_bytes_sent(
    face: str, consumers: Callable[..., ConsumerFace], conn: ConnectionSettings,
    queue: QueueSettings, raw_id: bytes,
) -> None:
    """AMQP short strings are bytes; pika hands over what does not decode as it is, and so
    do we, rather than failing the delivery or altering the id."""
    seen: list[Delivery] = []
    consumer = consumers(face, ConsumerSettings(conn, queue), seen.append).start()
    with pika.BlockingConnection(pika.URLParameters(conn.urls[0])) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("", queue.name, b"x", pika.BasicProperties(message_id=raw_id))
    wait_until(lambda: consumer.count() >= 1, 30, "the message handled")
    assert seen[0].message_id == raw_id
    assert seen[0].body == b"x"
