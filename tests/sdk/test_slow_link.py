"""A link that keeps bytes flowing is alive: a message that takes many heartbeats to arrive
is handled, with the messages behind it, in order, on one connection (both faces).

The consumer reads through the fault proxy (``sac.chaos.proxy``) with a ``bandwidth`` toxic
on what the broker sends. Before, the SDK counted a delivery's bytes only once the whole
delivery had arrived, so a delivery longer than two heartbeats looked like silence: the link
was dropped, the broker redelivered the message from its first byte, and nothing was handled.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator

import attrs
import pytest
from toxiproxy import Toxiproxy
from toxiproxy.proxy import Proxy

from sac.chaos.proxy import ProxyThread
from sac.sdk import (
    ConnectionSettings,
    ConsumerSettings,
    Delivery,
    PublisherSettings,
    QueueSettings,
    Role,
)
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace, PublisherFace

MakePublisher = Callable[..., PublisherFace]
MiB = 1024 * 1024
HEARTBEAT = 1
"""Seconds: the SDK drops a link after two of them without a byte."""


@pytest.fixture
def slow_link(
    fault_proxy: ProxyThread, cluster: LocalCluster
) -> Iterator[Callable[[int], tuple[Proxy, str]]]:
    """Makes a proxy to node 0 that carries ``rate`` KB/s from the broker; its AMQP URL."""
    client = Toxiproxy()
    client.update_api_consumer("127.0.0.1", fault_proxy.port)
    made: list[Proxy] = []

    def make(rate_kb: int) -> tuple[Proxy, str]:
        node = cluster.nodes[0]
        proxy = client.create(upstream=node.address, name=f"slow-{os.urandom(3).hex()}")
        made.append(proxy)
        proxy.add_toxic(type="bandwidth", stream="downstream", attributes={"rate": rate_kb})
        url = cluster.urls()[0].replace(f"@{node.address}/", f"@{proxy.listen}/", 1)
        return proxy, url

    yield make
    for proxy in made:
        proxy.destroy()


BROKER_MAXIMUM = {"3.10": (128 * MiB, 20_000), "4.0": (16 * MiB, 2_500)}
"""Each series' default ``max_message_size``, and a rate that needs about 7 s to carry it."""


@pytest.mark.rabbitmq("4.0", "3.10", narrow={"face": "asyncio"})  # both faces on 4.0
@pytest.mark.parametrize("case", ["4MiB-at-600KBps", "broker-maximum"])
def test_a_message_that_takes_many_heartbeats_to_arrive_is_handled_on_one_connection(
    face: str, case: str, cluster: LocalCluster, conn: ConnectionSettings,
    queue: QueueSettings, publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
    slow_link: Callable[[int], tuple[Proxy, str]],
) -> None:
    """The issue's case, scaled to a test's time: a message of ``size`` bytes (up to the
    broker's maximum: 128 MiB on 3.10, 16 MiB on 4.0) over a link that needs several times
    two heartbeats to carry it, three small messages behind it."""
    size, rate_kb = (4 * MiB, 600) if case == "4MiB-at-600KBps" else BROKER_MAXIMUM[
        cluster.spec.rabbitmq]
    transfer = size / (rate_kb * 1000)
    assert transfer >= 3 * 2 * HEARTBEAT, "the link must be slower than the dead-peer window"
    big = os.urandom(1024) * (size // 1024)
    pub = publishers(face, PublisherSettings(attrs.evolve(conn, name=f"{queue.name}-pub"),
                                             queue=queue))
    pub.start()
    ids = [pub.publish(big), *pub.publish_many([b"small 1", b"small 2", b"small 3"])]
    pub.close()

    digests: dict[str, str] = {}

    def work(delivery: Delivery) -> None:
        digests[str(delivery.message_id)] = hashlib.sha256(delivery.body).hexdigest()

    _proxy, url = slow_link(rate_kb)
    link = ConnectionSettings(urls=[url], heartbeat=HEARTBEAT, name=f"{queue.name}-slow")
    started = time.monotonic()
    consumer = consumers(face, ConsumerSettings(link, queue, prefetch=10), work).start()
    try:
        wait_until(lambda: consumer.count() >= len(ids), transfer * 2 + 30,
                   f"the {size} byte message and the three behind it")
    except AssertionError as exc:
        stats = consumer.stats
        raise AssertionError(f"{exc}: {stats.delivered} deliveries, {stats.reconnects} "
                             f"reconnects, {consumer.count()} handled") from None
    took = time.monotonic() - started
    assert consumer.handled == ids, "not each message once, in order"
    assert digests[ids[0]] == hashlib.sha256(big).hexdigest(), "the large body changed"
    assert consumer.stats.reconnects == 0, "the link was dropped while bytes kept flowing"
    assert took >= transfer, "the toxic did not slow the link: the test proves nothing"


def test_a_link_that_goes_silent_in_the_middle_of_a_large_message_is_dropped(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
    slow_link: Callable[[int], tuple[Proxy, str]],
) -> None:
    """The other half of the rule: bytes of a delivery still arriving keep the link alive
    only while they arrive. Cut off (a ``timeout`` toxic: data dropped, the connection left
    open) while a 4 MiB message is on its way, the link is given up within about two heartbeats,
    and once the link is back the message is handled after all."""
    size, rate_kb = 4 * MiB, 600
    pub = publishers(face, PublisherSettings(attrs.evolve(conn, name=f"{queue.name}-pub"),
                                             queue=queue))
    pub.start()
    ids = [pub.publish(os.urandom(size)), pub.publish(b"small")]
    pub.close()
    proxy, url = slow_link(rate_kb)
    link = ConnectionSettings(urls=[url], heartbeat=HEARTBEAT, name=f"{queue.name}-slow")
    consumer = consumers(face, ConsumerSettings(link, queue), None).start()
    # The broker sends the message right after consume-ok: the chunks of it the proxy has
    # read already go on at the link's pace; everything after them is dropped.
    wait_until(lambda: Role.WAITING in consumer.roles, 30, "the subscription")
    proxy.add_toxic(type="timeout", stream="downstream", attributes={"timeout": 0})
    cut = time.monotonic()
    wait_until(lambda: Role.CONNECTING in consumer.roles[1:], 2 * HEARTBEAT + 5,
               "the silent link given up")
    lost = next(t for t, role in consumer.role_times[1:] if role is Role.CONNECTING)
    assert lost - cut <= 2 * HEARTBEAT + 2, f"given up only after {lost - cut:.1f} s"
    assert consumer.count() == 0
    proxy.destroy_toxic("timeout_downstream")
    wait_until(lambda: consumer.count() >= len(ids), size / (rate_kb * 1000) * 2 + 30,
               "the message handled once the link is back")
    assert consumer.handled == ids
