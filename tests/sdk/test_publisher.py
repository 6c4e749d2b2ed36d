"""The publisher, both faces, against the real 3-node cluster: confirms survive faults, and
bad input gets a specific error."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import pika
import pytest

from sac.sdk import (
    AsyncPublisher,
    AuthenticationError,
    Backoff,
    BlockedTimeout,
    ClosedError,
    ConfigurationError,
    ConnectError,
    ConnectionSettings,
    HistoryRecorder,
    LifecycleError,
    MessageNacked,
    MessageReturned,
    MessageTooLarge,
    Publisher,
    PublishError,
    PublisherSettings,
    QueueMismatch,
    QueueNotFound,
    QueueSettings,
)
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.conftest import close_connection_by_name, drain, queue_leader
from tests.sdk.faces import PublisherFace

BOTH = pytest.mark.rabbitmq("4.0", "3.10", narrow={"face": "asyncio"})
"""Confirms, retransmission, nacks, the broker's arguments and flow control: proven on both
series (on 3.10 with the asyncio face: both are proven on 4.0); input checks and misuse on
4.0 only."""

MakePublisher = Callable[..., PublisherFace]

BODY = b"x" * 256


@BOTH
def test_publish_returns_once_confirmed(
    face: str,
    publishers: MakePublisher,
    cluster: LocalCluster,
    conn: ConnectionSettings,
    queue: QueueSettings,
    tmp_path: Path,
) -> None:
    history = HistoryRecorder(tmp_path / "publisher.jsonl", actor="publisher-0")
    pub = publishers(face, PublisherSettings(conn, queue=queue), history)
    pub.start()
    try:
        first = pub.publish(b"hello", message_id="my-id-1")
        rest = pub.publish_many([BODY] * 500)
    finally:
        pub.close()
    history.close()
    assert first == "my-id-1"
    assert len(set(rest)) == 500
    assert rest == sorted(rest)  # generated ids are time-ordered
    assert pub.stats.confirmed == pub.stats.published == 501
    assert sorted(drain(cluster.urls()[1], queue.name, 501)) == sorted([first, *rest])

    events = [json.loads(line) for line in (tmp_path / "publisher.jsonl").read_text().splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds.count("publish") == kinds.count("confirm") == 501
    assert kinds[0] == "connected"
    publishes = [e for e in events if e["type"] == "publish"]
    assert [e["seq"] for e in publishes] == list(range(1, 502))
    assert all(e["actor"] == "publisher-0" and e["queue"] == queue.name for e in publishes)


def publish_during(pub: PublisherFace, total: int, fault: Callable[[], object]) -> list[str]:
    """``publish_many`` of ``total`` messages, with ``fault`` (which must return something
    true) run once a quarter of them is confirmed; their ids once all are confirmed."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        job = pool.submit(pub.publish_many, [BODY] * total)
        wait_until(lambda: pub.stats.confirmed >= total // 4, 60, "a quarter confirmed")
        assert fault()
        return job.result(timeout=120)


@BOTH
def test_confirms_survive_sigkill_of_the_queue_leader(
    face: str,
    publishers: MakePublisher,
    healed: LocalCluster,
    conn: ConnectionSettings,
    queue: QueueSettings,
) -> None:
    cluster = healed
    total = 6000
    pub = publishers(face, PublisherSettings(conn, queue=queue, window=200))
    pub.start()
    leader = queue_leader(cluster, queue.name)
    ids = publish_during(pub, total, lambda: cluster.kill(leader))
    pub.close()
    stats = pub.stats
    assert len(set(ids)) == total
    assert stats.confirmed == total
    survivor = next(
        u for n, u in zip(cluster.nodes, cluster.urls(), strict=True) if n.index != leader
    )
    received = drain(survivor, queue.name, total)
    assert set(ids) - set(received) == set()  # nothing confirmed is missing
    if leader == 1:  # the publisher's own node died: it had to reconnect and resend
        assert stats.reconnects >= 1


@BOTH
def test_a_leader_election_costs_a_few_nacks_not_one_per_message(
    face: str,
    publishers: MakePublisher,
    healed: LocalCluster,
    conn: ConnectionSettings,
    queue: QueueSettings,
) -> None:
    """The queue's leader and the publisher's node die together: the publisher reconnects and
    resends into the election. Without the nack throttle the window was refilled with every
    nack, 3 500-6 300 nacks for 3 000 messages in our runs (bench/nack_storm.py); with it, a probe
    at a time is nacked (about ten)."""
    cluster = healed
    total = 3000
    pub = publishers(face, PublisherSettings(conn, queue=queue))  # the default window: 1000
    pub.start()
    assert queue_leader(cluster, queue.name) == 1  # declared from node 1, so led by node 1
    ids = publish_during(pub, total, lambda: cluster.kill(1))
    pub.close()
    stats = pub.stats
    assert stats.confirmed == total
    assert stats.reconnects >= 1  # the election happened under this publisher
    assert stats.nacked < total // 20, stats
    received = drain(cluster.urls()[2], queue.name, total)
    assert set(ids) - set(received) == set()


@BOTH
def test_a_queue_that_refuses_everything_fails_the_publishes_within_the_nack_budget(
    face: str,
    publishers: MakePublisher,
    cluster: LocalCluster,
    conn: ConnectionSettings,
    queue_name: str,
) -> None:
    """A full queue with ``reject-publish`` nacks every publish. Each message is tried again
    only as long as ``nack_backoff`` allows, then fails with ``MessageNacked``, and the queue
    sees a probe at a time meanwhile, not the whole window again and again (the old code:
    thousands of nacks for these 200 messages)."""
    full = QueueSettings(queue_name, extra_arguments={"x-max-length": 5,
                                                      "x-overflow": "reject-publish"})
    budget = Backoff(initial=0.05, maximum=0.2, max_attempts=1000, max_elapsed=2.0)
    # the channel is fine, the queue is full: no channel recycling in this test
    settings = PublisherSettings(conn, queue=full, nack_backoff=budget, nack_stall_timeout=60)
    pub = publishers(face, settings)
    pub.start()
    # Quorum queues enforce the limit softly: what arrives together is taken, and refused
    # from the next publish on once the queue is over its limit. One at a time, then.
    first = []
    with contextlib.suppress(MessageNacked):
        for _ in range(6):
            first.append(pub.publish(BODY))
    assert len(first) >= 5
    started = time.monotonic()
    with pytest.raises(MessageNacked):
        pub.publish_many([BODY] * 200)
    took = time.monotonic() - started
    stats = pub.stats
    pub.close()
    assert stats.confirmed == len(first)
    assert 2.0 <= took < 10.0  # the budget, plus at most a few probe pauses
    assert stats.nacked < 200 + 100, stats  # the window once, then about one per probe
    assert drain(cluster.urls()[1], full.name, len(first)) == first


@BOTH
def test_confirms_survive_the_broker_closing_the_connection(
    face: str,
    publishers: MakePublisher,
    cluster: LocalCluster,
    conn: ConnectionSettings,
    queue: QueueSettings,
) -> None:
    total = 6000
    pub = publishers(face, PublisherSettings(conn, queue=queue, window=200))
    pub.start()
    ids = publish_during(
        pub, total, lambda: close_connection_by_name(cluster, conn.name or "") == 1)
    pub.close()
    assert pub.stats.reconnects >= 1
    assert pub.stats.confirmed == total
    received = drain(cluster.urls()[1], queue.name, total)
    assert set(ids) - set(received) == set()


def test_unroutable_message_fails_instead_of_vanishing(
    face: str, publishers: MakePublisher, conn: ConnectionSettings
) -> None:
    pub = publishers(face, PublisherSettings(conn))
    pub.start()
    try:
        with pytest.raises(MessageReturned, match="unroutable: 312 NO_ROUTE") as caught:
            pub.publish(b"lost?", routing_key="no-such-queue-anywhere", message_id="m-1")
        assert caught.value.message_id == "m-1"
    finally:
        pub.close()


def test_oversized_message_is_refused_before_sending(
    face: str, publishers: MakePublisher, conn: ConnectionSettings, queue: QueueSettings
) -> None:
    pub = publishers(face, PublisherSettings(conn, queue=queue, max_message_size=1024))
    pub.start()
    try:
        with pytest.raises(MessageTooLarge, match="2048 bytes is over the maximum"):
            pub.publish(b"x" * 2048)
        assert pub.publish(b"x" * 1024)
    finally:
        pub.close()


@BOTH
def test_mismatched_queue_arguments_are_named(
    face: str,
    publishers: MakePublisher,
    cluster: LocalCluster,
    conn: ConnectionSettings,
    queue_name: str,
) -> None:
    existing = QueueSettings(queue_name, delivery_limit=3).arguments()
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        raw.channel().queue_declare(queue_name, durable=True, arguments=existing)
    wanted = QueueSettings(queue_name, delivery_limit=5)
    pub = publishers(face, PublisherSettings(conn, queue=wanted))
    with pytest.raises(QueueMismatch) as caught:
        pub.start()
    assert caught.value.argument == "x-delivery-limit"
    assert "exists with x-delivery-limit='3'" in str(caught.value)
    assert "ask for x-delivery-limit='5'" in str(caught.value)


def test_missing_queue_checked_passively(
    face: str, publishers: MakePublisher, conn: ConnectionSettings
) -> None:
    settings = PublisherSettings(conn, queue=QueueSettings("never-declared-q", declare=False))
    pub = publishers(face, settings)
    with pytest.raises(QueueNotFound, match="queue 'never-declared-q' does not exist"):
        pub.start()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_nodes_fail_fast_naming_each(face: str, publishers: MakePublisher) -> None:
    ports = [_free_port(), _free_port()]
    conn = ConnectionSettings(
        urls=[f"amqp://u:p@127.0.0.1:{p}/" for p in ports],
        connect_timeout=2,
        reconnect=Backoff(initial=0.01, maximum=0.05, max_attempts=2),
    )
    pub = publishers(face, PublisherSettings(conn))
    with pytest.raises(ConnectError) as caught:
        pub.start()
    text = str(caught.value)
    assert all(f"127.0.0.1:{p}" in text for p in ports)
    assert "could not connect to any of 2 node(s)" in text
    assert ":p@" not in text


def test_wrong_credentials(face: str, publishers: MakePublisher, cluster: LocalCluster) -> None:
    url = f"amqp://{cluster.credentials.user}:not-the-password@{cluster.nodes[0].address}/"
    pub = publishers(face, PublisherSettings(ConnectionSettings(urls=[url])))
    with pytest.raises(
        AuthenticationError, match=f"refused user '{cluster.credentials.user}'"
    ) as caught:
        pub.start()
    assert "not-the-password" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://h:5672/", "must start with amqp:// or amqps://"),
        ("amqp://", "has no host"),
        ("amqp://u:secret@h:notaport/", "invalid port"),
        ("amqp://u:secret@h:5672/a/b", "vhost must be one path segment"),
    ],
)
def test_malformed_url(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as caught:
        ConnectionSettings(urls=[url])
    assert "secret" not in str(caught.value)


def test_settings_variants_keep_validation(conn: ConnectionSettings) -> None:
    with pytest.raises(ConfigurationError, match="window"):
        attrs.evolve(PublisherSettings(conn), window=0)


@BOTH
def test_blocked_connection_pauses_then_fails_and_close_reports_unconfirmed(
    face: str, publishers: MakePublisher, cluster: LocalCluster, conn: ConnectionSettings,
    queue: QueueSettings,
) -> None:
    blocked = attrs.evolve(conn, blocked_timeout=2.0)
    pub = publishers(face, PublisherSettings(blocked, queue=queue, close_timeout=1.0))
    pub.start()
    node = cluster.nodes[0]
    # A memory alarm on any node blocks every publishing connection of the cluster.
    cluster.ctl(node, "set_vm_memory_high_watermark", "0.000001")
    try:
        with pytest.raises(BlockedTimeout, match="blocked publishing") as caught:
            pub.publish(b"held back", message_id="blocked-1")
        assert caught.value.message_id == "blocked-1"
    finally:
        cluster.ctl(node, "set_vm_memory_high_watermark", "0.4")
    assert pub.publish(b"flows again")
    pub.close()


def test_publish_to_a_missing_exchange_fails_and_the_publisher_goes_on(
    face: str, publishers: MakePublisher, cluster: LocalCluster, conn: ConnectionSettings,
    queue: QueueSettings,
) -> None:
    pub = publishers(face, PublisherSettings(conn, queue=queue))
    pub.start()
    with pytest.raises(PublishError, match="404 NOT_FOUND - no exchange 'no-such-exchange'"):
        pub.publish(b"nowhere", exchange="no-such-exchange", routing_key="x")
    assert pub.publish(b"somewhere", message_id="after-the-error") == "after-the-error"
    pub.close()
    assert drain(cluster.urls()[0], queue.name, 1) == ["after-the-error"]


def test_misuse_of_the_blocking_publisher_is_a_precise_error(
    conn: ConnectionSettings, queue: QueueSettings
) -> None:
    pub = Publisher(PublisherSettings(conn, queue=queue))
    with pytest.raises(LifecycleError, match="not started"):
        pub.publish(b"too early")
    pub.start()
    try:
        with pytest.raises(LifecycleError, match="already started") as twice:
            pub.start()
        assert not isinstance(twice.value, ClosedError)
        assert pub.publish(b"fine", message_id="m-1") == "m-1"
    finally:
        pub.close()
    pub.close()  # a second close does nothing
    with pytest.raises(ClosedError, match="cannot publish: this publisher is closed"):
        pub.publish(b"too late")
    with pytest.raises(ClosedError, match="cannot be started again"):
        pub.start()


def test_misuse_of_the_async_publisher_is_a_precise_error(
    conn: ConnectionSettings, queue: QueueSettings
) -> None:
    async def scenario() -> None:
        pub = AsyncPublisher(PublisherSettings(conn, queue=queue))
        with pytest.raises(LifecycleError, match="not started"):
            await pub.send(b"too early")
        async with pub:
            with pytest.raises(LifecycleError, match="already started"):
                await pub.start()
            assert await pub.publish(b"fine", message_id="m-1") == "m-1"
        with pytest.raises(ClosedError, match="cannot publish: this publisher is closed"):
            await pub.publish_many([b"too late"])
        with pytest.raises(ClosedError, match="cannot be started again"):
            await pub.start()

    asyncio.run(scenario())


def _nowhere() -> ConnectionSettings:
    return ConnectionSettings(urls=[f"amqp://u:p@127.0.0.1:{_free_port()}/"], connect_timeout=2)


def test_a_blocking_publisher_that_could_not_start_raises_why_when_used() -> None:
    pub = Publisher(PublisherSettings(_nowhere()))
    with pytest.raises(ConnectError) as failed:
        pub.start()
    with pytest.raises(ConnectError) as later:
        pub.publish(b"x", routing_key="q")
    assert later.value is failed.value
    pub.close()


def test_an_async_publisher_that_could_not_start_raises_why_when_used() -> None:
    async def scenario() -> None:
        pub = AsyncPublisher(PublisherSettings(_nowhere()))
        with pytest.raises(ConnectError) as failed:
            await pub.start()
        with pytest.raises(ConnectError) as later:
            await pub.send(b"x", routing_key="q")
        assert later.value is failed.value
        await pub.close()

    asyncio.run(scenario())
