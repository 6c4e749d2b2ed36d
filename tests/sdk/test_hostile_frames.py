"""What a publisher writes into a message's headers cannot stop a consumer (both faces).

A header table nested thousands deep makes pika's decoder raise ``RecursionError`` inside its
frame reader: before, the connection was lost, and the broker handed the same message back
first in line, forever. Now the SDK's own decoder (``sac/sdk/_wire/tables.py``) refuses it, and
the consumer parks it at once, unrun, with the reason; the messages around it are handled
once each, in order, on one connection.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, cast

import attrs
import pika
import pytest

from sac.sdk import ConnectionSettings, ConsumerSettings, Parking, QueueSettings, Role
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace
from tests.sdk.test_poison import declare

DEPTH = 3000


def nested_headers(depth: int) -> bytes:
    """A headers table ``depth`` levels deep, encoded by hand: pika's encoder recurses too."""
    table = struct.pack(">I", 0)
    for _ in range(depth - 1):
        inner = b"\x01kF" + table
        table = struct.pack(">I", len(inner)) + inner
    return table


class RawProperties:
    """Stands in for ``pika.BasicProperties`` where pika marshals a content header (it asks
    only for ``INDEX`` and ``encode()``): properties whose bytes are given, ``headers`` raw,
    delivery mode 2, a message id, and a priority when ``rare`` (a property the SDK's fast
    path leaves to pika)."""

    INDEX = pika.BasicProperties.INDEX

    def __init__(self, headers: bytes, message_id: str, rare: bool) -> None:
        self._raw = (headers, message_id.encode(), rare)

    def encode(self) -> list[bytes]:
        headers, message_id, rare = self._raw
        flags = (1 << 13) | (1 << 12) | (1 << 7) | ((1 << 11) if rare else 0)
        return [struct.pack(">H", flags), headers, b"\x02", b"\x01" if rare else b"",
                bytes([len(message_id)]), message_id]


def publish_raw(cluster: LocalCluster, queue: str, messages: list[tuple[str, Any]]) -> None:
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        channel.confirm_delivery()
        for message_id, props in messages:
            channel.basic_publish("", queue, f"body of {message_id}".encode(),
                                  cast(Any, props), mandatory=True)


@pytest.mark.parametrize("rare", [False, True], ids=["common-properties", "with-priority"])
def test_a_message_with_headers_nested_thousands_deep_is_parked_and_the_rest_handled(
    face: str, rare: bool, cluster: LocalCluster, conn: ConnectionSettings,
    queue: QueueSettings, consumers: Callable[..., ConsumerFace],
) -> None:
    declare(cluster, conn, queue)
    good = ["good-1", "good-2", "good-3", "good-4"]
    publish_raw(cluster, queue.name, [
        (good[0], pika.BasicProperties(delivery_mode=2, message_id=good[0])),
        ("bad", RawProperties(nested_headers(DEPTH), "bad", rare)),
        (good[1], pika.BasicProperties(delivery_mode=2, message_id=good[1],
                                       headers={"fine": {"nested": [1, 2]}})),
        (good[2], pika.BasicProperties(delivery_mode=2, message_id=good[2])),
        (good[3], pika.BasicProperties(delivery_mode=2, message_id=good[3], priority=1)),
    ])
    consumer = consumers(face, ConsumerSettings(
        attrs.evolve(conn, name=f"{queue.name}-c"), queue)).start()
    handled_and_parked(consumer, len(good), 1)
    assert consumer.handled == good, "the good ones, once each, in order"
    assert consumer.stats.reconnects == 0, "a hostile header cost the connection"
    assert consumer.stats.handler_errors == 0, "the handler saw the hostile message"
    [parked] = Parking(conn).messages(queue)
    assert parked.message_id == "bad"
    assert parked.body == b"body of bad"
    assert parked.error == "UnfitMessage"
    assert "headers cannot be decoded" in parked.reason
    assert "nested deeper than 64 levels" in parked.reason
    assert parked.attempts == 0
    assert consumer.role is Role.ACTIVE, "the consumer stopped"


def handled_and_parked(consumer: ConsumerFace, handled: int, parked: int) -> None:
    """Wait until ``handled`` messages were handled and ``parked`` parked; a timeout says
    what happened instead (a hostile header that cost the connection shows as reconnects)."""
    try:
        wait_until(lambda: consumer.count() >= handled and consumer.stats.parked >= parked, 30,
                   f"{handled} message(s) handled and {parked} parked")
    except AssertionError as exc:
        stats = consumer.stats
        raise AssertionError(f"{exc}: handled {consumer.handled}, {stats.reconnects} "
                             f"reconnects, {stats.parked} parked") from None
