"""sac.sdk.Mover on the session cluster: a classic queue's messages into a quorum
queue, in order, each confirmed before it is acked, properties kept."""

from __future__ import annotations

import asyncio
import contextlib

import pika
import pytest

from sac.sdk import (
    AsyncMover,
    ConfigurationError,
    ConnectionSettings,
    Moved,
    MoveError,
    Mover,
    Publisher,
    PublisherSettings,
    QueueNotFound,
    QueueSettings,
)
from sac.server import LocalCluster


def test_a_classic_queue_moved_into_a_quorum_queue(
    cluster: LocalCluster, conn: ConnectionSettings, queue_name: str
) -> None:
    source = QueueSettings(queue_name, type="classic", single_active_consumer=False,
                           parking_queue=None)
    target = QueueSettings(f"{queue_name}-quorum")
    with Publisher(PublisherSettings(conn, queue=source)) as publisher:
        ids = [publisher.publish(f"m{i}".encode(), headers={"n": i}, correlation_id=f"c{i}")
               for i in range(30)]
    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(cluster.urls()[1]))) as raw:
        channel = raw.channel()
        channel.queue_declare(target.name, durable=True, arguments=target.arguments())
        # Confirmed: "raw" is in the source queue before the move counts it (unconfirmed, a
        # full run once saw the move count 30).
        channel.confirm_delivery()
        channel.basic_publish("", source.name, b"raw", pika.BasicProperties(
            message_id="raw-1", priority=3, reply_to="replies", type="order", app_id="shop",
            timestamp=1_700_000_000, content_encoding="gzip", delivery_mode=1))
        moved = Mover(conn).move(source.name, target.name)
        assert moved == Moved(source.name, target.name, 31, 31, 0, 0, 31)
        got = []  # a quorum queue with single active consumer refuses basic.get: consume
        for method, props, body in channel.consume(target.name, auto_ack=True,
                                                   inactivity_timeout=5):
            assert method is not None, f"only {len(got)} of 31 came"
            got.append((props, body))
            if len(got) == 31:
                break
        channel.cancel()
        assert [p.message_id for p, _ in got] == [*ids, "raw-1"]  # in order
        assert [b for _, b in got[:3]] == [b"m0", b"m1", b"m2"]
        assert (got[5][0].headers["n"], got[5][0].correlation_id) == (5, "c5")
        raw_copy = got[-1][0]
        assert (raw_copy.priority, raw_copy.reply_to, raw_copy.type, raw_copy.app_id,
                raw_copy.timestamp, raw_copy.content_encoding, raw_copy.delivery_mode) == (
            3, "replies", "order", "shop", 1_700_000_000, "gzip", 2)  # now persistent
        channel.basic_publish("", target.name, b"stays")  # confirmed: there before the move
        with pytest.raises(MoveError, match=r"basic\.get operations are not supported"):
            Mover(conn).move(target.name, source.name)  # out of it, no
        channel.queue_delete(target.name)
        channel.queue_delete(f"{target.name}.parked")
        channel.queue_delete(source.name)


def test_a_limit_and_the_asyncio_face(cluster: LocalCluster, conn: ConnectionSettings,
                                      queue_name: str) -> None:
    target = f"{queue_name}-to"
    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(cluster.urls()[0]))) as raw:
        channel = raw.channel()
        for name in (queue_name, target):
            channel.queue_declare(name, durable=True)
        for i in range(5):
            channel.basic_publish("", queue_name, f"{i}".encode())
        moved = asyncio.run(AsyncMover(conn).move(queue_name, target, limit=2))
        assert (moved.moved, moved.source_after, moved.target_after) == (2, 3, 2)
        with pytest.raises(QueueNotFound, match=f"{target}-missing"):
            Mover(conn).move(queue_name, f"{target}-missing")
        with pytest.raises(ConfigurationError, match="the same queue"):
            Mover(conn).move(queue_name, queue_name)
        for name in (queue_name, target):
            channel.queue_delete(name)
