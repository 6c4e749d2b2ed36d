"""What a publisher writes into a message's headers cannot stop the tools that read queues
with ``basic.get`` (``sac dlq list|replay``, ``Parking.messages``, ``Parking.replay``,
``Mover.move``), on the real 3-node cluster.

pika decodes the content header of every message those tools take, and a header table nested
thousands deep (or a NaN float) made its decoder raise inside its frame reader: the
connection was lost, and listing, replay and move failed for every message behind it, every
time. Now such a header never reaches pika's decoder (``sac/sdk/_wire/pika_hooks.py``): the
message is listed with its headers named invalid, and a replay or a move leaves it where it
is, intact, and carries the rest over, in order.
"""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import attrs
import pika
import pytest

from sac.sdk import (
    ConnectionSettings,
    ConsumerSettings,
    MoveError,
    Mover,
    Parking,
    Publisher,
    PublisherSettings,
    QueueSettings,
    ReplayError,
)
from sac.server import LocalCluster
from tests.sdk.faces import ConsumerFace
from tests.sdk.test_hostile_frames import (
    DEPTH,
    RawProperties,
    handled_and_parked,
    nested_headers,
    publish_raw,
)
from tests.sdk.test_poison import declare

FAR = 2**63
"""Seconds since 1970: far past the year 9999, which is as far as pika's dates go. (A NaN
float cannot be used here: RabbitMQ itself cannot decode one, and closes the publisher's
connection.)"""


def far_headers() -> bytes:
    """A headers table holding one timestamp past the year 9999."""
    field = b"\x01tT" + struct.pack(">Q", FAR)
    return struct.pack(">I", len(field)) + field


DEEP_REASON = "its headers cannot be decoded: tables nested deeper than 64 levels"
FAR_REASON = f"its headers cannot be decoded: a timestamp ({FAR}) past year 9999"


def hostile_mix() -> list[tuple[str, Any]]:
    """Good messages around two whose headers pika cannot decode."""
    return [
        ("good-1", pika.BasicProperties(delivery_mode=2, message_id="good-1")),
        ("deep", RawProperties(nested_headers(DEPTH), "deep", rare=False)),
        ("good-2", pika.BasicProperties(delivery_mode=2, message_id="good-2",
                                        headers={"fine": {"nested": [1, 2]}})),
        ("far", RawProperties(far_headers(), "far", rare=True)),
        ("good-3", pika.BasicProperties(delivery_mode=2, message_id="good-3", priority=1)),
    ]


def taken(cluster: LocalCluster, queue: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The first ``count`` messages of ``queue``, taken: each id and its headers; and
    nothing after them."""
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        seen: list[tuple[str, dict[str, Any]]] = []
        for method, props, _body in channel.consume(queue, inactivity_timeout=10) if count else ():
            assert method is not None, f"only {len(seen)} of {count} messages in {queue!r}"
            seen.append((props.message_id, props.headers or {}))
            channel.basic_ack(method.delivery_tag)
            if len(seen) == count:
                break
        channel.cancel()
        assert ready(channel, queue) == 0, f"more than {count} messages in {queue!r}"
        return seen


def ready(channel: Any, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def test_a_listing_shows_every_message_and_names_headers_that_cannot_be_decoded(
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    declare(cluster, conn, queue)
    assert queue.parking_queue is not None
    publish_raw(cluster, queue.parking_queue, hostile_mix())
    url = ",".join(cluster.urls())
    sac = [sys.executable, "-m", "sac", "dlq", "list", queue.name, "--url", url]
    listed = subprocess.run(sac, capture_output=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr.decode(errors="replace")
    lines = listed.stdout.decode().splitlines()
    assert lines[-1] == f"5 parked message(s) shown for '{queue.name}'"
    assert [line.split("  ")[0] for line in lines[:-1:2]] == [
        "good-1", "deep", "good-2", "far", "good-3"]
    assert lines[2] == (f"deep  -  -  unknown ({DEEP_REASON})  "
                        "[invalid header: headers]")
    assert lines[6] == f"far  -  -  unknown ({FAR_REASON})  [invalid header: headers]"
    assert "[invalid" not in lines[0] + lines[4] + lines[8]
    as_json = subprocess.run([*sac, "--json"], capture_output=True, timeout=60, check=False)
    assert as_json.returncode == 0, as_json.stderr.decode(errors="replace")
    rows = [json.loads(line) for line in as_json.stdout.decode().splitlines()]
    assert [(row["message_id"], row["undecodable"], row["invalid"]) for row in rows] == [
        ("good-1", None, []), ("deep", DEEP_REASON, ["headers"]), ("good-2", None, []),
        ("far", FAR_REASON, ["headers"]), ("good-3", None, [])]

    messages = Parking(conn).messages(queue)
    assert [m.message_id for m in messages] == ["good-1", "deep", "good-2", "far", "good-3"]
    deep, far = messages[1], messages[3]
    assert (deep.undecodable, deep.invalid, deep.headers) == (DEEP_REASON, ("headers",), {})
    assert deep.body == b"body of deep"
    assert (far.undecodable, far.properties) == (FAR_REASON, {"priority": 1})
    assert messages[2].headers["fine"] == {"nested": [1, 2]}
    assert messages[2].undecodable is None


def test_a_replay_moves_the_rest_and_leaves_what_cannot_be_decoded_parked(
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    declare(cluster, conn, queue)
    assert queue.parking_queue is not None
    publish_raw(cluster, queue.parking_queue, hostile_mix())
    with pytest.raises(ReplayError) as raised:
        Parking(conn).replay(queue)
    assert str(raised.value) == (
        f"replayed 3 message(s) to {queue.name!r}; 2 cannot be copied and stay in "
        f"{queue.parking_queue!r}: 'deep': {DEEP_REASON}; 'far': {FAR_REASON}")
    replayed = taken(cluster, queue.name, 3)
    assert [message_id for message_id, _ in replayed] == ["good-1", "good-2", "good-3"]
    assert replayed[1][1]["fine"] == {"nested": [1, 2]}
    kept = Parking(conn).messages(queue)
    assert [(m.message_id, m.undecodable, m.body) for m in kept] == [
        ("deep", DEEP_REASON, b"body of deep"), ("far", FAR_REASON, b"body of far")]

    # The command line: the same, one line, exit 1; they stay parked for good.
    url = ",".join(cluster.urls())
    sac = [sys.executable, "-m", "sac", "dlq", "replay", queue.name, "--url", url]
    again = subprocess.run(sac, capture_output=True, timeout=60, check=False)
    assert again.returncode == 1, again.stdout.decode(errors="replace")
    assert again.stderr.decode() == (
        f"sac dlq: replayed 0 message(s) to {queue.name!r}; 2 cannot be copied and stay in "
        f"{queue.parking_queue!r}: 'deep': {DEEP_REASON}; 'far': {FAR_REASON}\n")
    assert [m.message_id for m in Parking(conn).messages(queue)] == ["deep", "far"]
    assert taken(cluster, queue.name, 0) == []


def test_a_move_moves_the_rest_and_leaves_what_cannot_be_decoded_in_the_source(
    cluster: LocalCluster, conn: ConnectionSettings, queue_name: str,
) -> None:
    source, target = (QueueSettings(f"{queue_name}-{side}", single_active_consumer=False,
                                    parking_queue=None) for side in ("source", "target"))
    for settings in (source, target):
        with Publisher(PublisherSettings(conn, queue=settings)):
            pass
    publish_raw(cluster, source.name, hostile_mix())
    with pytest.raises(MoveError) as raised:
        Mover(conn).move(source.name, target.name)
    assert str(raised.value) == (
        f"moved 3 message(s) to {target.name!r}; 2 cannot be copied and stay in "
        f"{source.name!r}: 'deep': {DEEP_REASON}; 'far': {FAR_REASON}")
    moved = taken(cluster, target.name, 3)
    assert [message_id for message_id, _ in moved] == ["good-1", "good-2", "good-3"]
    assert moved[1][1]["fine"] == {"nested": [1, 2]}
    # Still in the source, in their order, headers and all: listed as a parking queue (of
    # a queue that is never used), their headers still do not decode.
    left = Parking(conn).messages(QueueSettings("unused", parking_queue=source.name))
    assert [(m.message_id, m.undecodable) for m in left] == [
        ("deep", DEEP_REASON), ("far", FAR_REASON)]


def test_a_delivery_that_pika_decodes_is_parked_when_its_headers_cannot_be(
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    consumers: Callable[..., ConsumerFace],
) -> None:
    """A consumer's deliveries go to pika when the fast path does not take them (frames not
    back to back; a consumer tag already cancelled): here the fast path is switched off for
    the consumer's tag. Before, pika's decoder raised and the connection was lost; now the
    message is parked unrun, as the fast path parks it, on the same connection."""
    declare(cluster, conn, queue)
    consumer = consumers("async", ConsumerSettings(
        attrs.evolve(conn, name=f"{queue.name}-c"), queue)).start()
    room = consumer.inner._engine.link  # type: ignore[union-attr]
    link = room.link

    async def to_pika() -> None:
        link.release_deliveries(room.consumer_tag)

    # On the consumer's loop, which owns the link (its futures are bound to it).
    asyncio.run_coroutine_threadsafe(to_pika(), link.closed.get_loop()).result(10)
    publish_raw(cluster, queue.name, hostile_mix())
    good = ["good-1", "good-2", "good-3"]
    handled_and_parked(consumer, len(good), 2)
    assert consumer.handled == good
    assert consumer.stats.reconnects == 0, "a hostile header cost the connection"
    parked = Parking(conn).messages(queue)
    assert [(m.message_id, m.error, m.attempts) for m in parked] == [
        ("deep", "UnfitMessage", 0), ("far", "UnfitMessage", 0)]
    assert parked[0].reason.endswith(f"is parked unhandled: {DEEP_REASON}")
    assert parked[1].reason.endswith(f"is parked unhandled: {FAR_REASON}")
