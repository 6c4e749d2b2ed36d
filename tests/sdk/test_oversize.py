"""A message over the broker's ``max_message_size`` fails alone, and no link that dies at once
sets off a reconnect storm, whatever kills it.

RabbitMQ closes the channel (406 PRECONDITION_FAILED, "message size S is larger than
configured max size M") over a message past its limit: 16 MiB by default on 4.0, 128 MiB on
3.10. A publisher that only reconnected and sent it again met the same close on every new
channel, at once and for ever (2 074 reconnects in 60 s on 4.0), and every other message on
it waited. Here the session's 3.10 cluster runs with a lowered limit (set on every node for
the test's duration), and each face must fail that one message with ``MessageTooLarge``, log
it once, and confirm every other message, sent before it or after.

The second half kills each new link for another reason: a fault proxy cuts every connection
once it has carried a few kilobytes, so each reconnect "succeeds" (the handshake and the
setup pass) and the next publish (or, for a consumer, the next delivery of a large message)
kills it. The reconnects must then slow down under the reconnect backoff instead of coming
at once, on both faces of both clients.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import time
from collections.abc import Callable, Iterator

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.proxy import Proxy

from sac.chaos.proxy import ProxyThread
from sac.sdk import (
    Backoff,
    ConnectionSettings,
    ConsumerSettings,
    MessageTooLarge,
    Publisher,
    PublisherSettings,
    QueueSettings,
)
from sac.sdk._delivery import RETRANSMIT_HEADER
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.conftest import drained
from tests.sdk.faces import ConsumerFace, PublisherFace

MakePublisher = Callable[..., PublisherFace]
LIMIT = 1024 * 1024  # the broker's max_message_size during these tests
Outcome = str | BaseException | None
"""A send's outcome: the confirmed id, the error, or None while it is still pending."""


def _set_limit(cluster: LocalCluster, value: str) -> None:
    for node in cluster.nodes:
        cluster.ctl(node, "eval", f"application:set_env(rabbit, max_message_size, {value}).")


@pytest.fixture
def broker_limit(cluster: LocalCluster) -> Iterator[int]:
    """The cluster's ``max_message_size``: on 3.10 lowered to ``LIMIT`` on every node (new
    channels read it), the value before put back after the test (the session shares the
    cluster); on 4.0 its default (16 MiB), which a changed application environment does not
    reach (4.0.5 went on taking 2 MiB after it was set to 1 MiB, new connections too)."""
    answer = cluster.ctl(cluster.nodes[0], "eval",
                         "application:get_env(rabbit, max_message_size).")
    before = re.search(r"\{ok,(\d+)\}", answer)
    assert before is not None, f"cannot read max_message_size: {answer!r}"
    if cluster.spec.rabbitmq != "3.10":
        yield int(before[1])
        return
    _set_limit(cluster, str(LIMIT))
    yield LIMIT
    _set_limit(cluster, before[1])


def send_all(face: str, pub: PublisherFace, bodies: list[bytes], wait: float) -> list[Outcome]:
    """Send every body pipelined (``send``), then wait up to ``wait`` s for them all to
    settle; each one's outcome, in order."""
    if face == "blocking":
        assert isinstance(pub, Publisher)
        futures = [pub.send(body) for body in bodies]
        concurrent.futures.wait(futures, timeout=wait)
        return [None if not f.done() else (f.exception() or f.result()) for f in futures]

    async def many() -> list[Outcome]:
        inner = pub.inner  # type: ignore[attr-defined]
        sent = [await inner.send(body) for body in bodies]
        await asyncio.wait(sent, timeout=wait)
        return [None if not f.done() else (f.exception() or f.result()) for f in sent]

    return pub._run(many())  # type: ignore[attr-defined, no-any-return]


def copies(url: str, queue: str, expected: int, timeout: float = 30) -> list[tuple[str, bool]]:
    """Every message in ``queue`` (acked away) as (id, marked as a retransmission)."""
    return [(str(props.message_id), RETRANSMIT_HEADER in (props.headers or {}))
            for props in drained(url, queue, expected, timeout)]


@pytest.mark.rabbitmq("4.0", "3.10")
def test_an_oversized_message_fails_alone_without_a_reconnect_storm(
    face: str, publishers: MakePublisher, cluster: LocalCluster, conn: ConnectionSettings,
    queue: QueueSettings, broker_limit: int, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="sac")
    # The publisher's own limit (128 MiB) is above the broker's, as 3.10's default is above
    # 4.0's: only the broker can say no.
    pub = publishers(face, PublisherSettings(conn, queue=queue))
    pub.start()
    big = b"x" * (broker_limit + LIMIT)
    bodies = [f"before {i}".encode() for i in range(5)] + [big] + [
        f"after {i}".encode() for i in range(5)]

    outcomes = send_all(face, pub, bodies, wait=30)

    refused = outcomes[5]
    assert isinstance(refused, MessageTooLarge), (
        f"the big message: {refused!r}, after {pub.stats.reconnects} reconnects")
    assert f"{len(big)} bytes is over the broker's maximum message size of {broker_limit}" \
        in str(refused)
    others = outcomes[:5] + outcomes[6:]
    assert all(isinstance(o, str) for o in others), f"the others: {others!r}"
    assert pub.stats.reconnects <= 1, f"{pub.stats.reconnects} reconnects"
    said = [r.getMessage() for r in caplog.records if refused.message_id in r.getMessage()]
    assert len(said) == 1, said
    assert str(len(big)) in said[0]
    assert str(broker_limit) in said[0]

    # The limit is learnt: the next one that large fails at once, before it is sent.
    with pytest.raises(MessageTooLarge, match=f"maximum message size of {broker_limit}"):
        pub.publish(big)
    later = pub.publish(b"later")
    assert pub.stats.reconnects <= 1
    pub.close()

    confirmed = {str(o) for o in others} | {later}
    found = copies(cluster.urls()[1], queue.name, len(confirmed))
    assert {mid for mid, _ in found} == confirmed  # nothing lost, nothing foreign
    for mid in confirmed:  # a copy beyond the first only as a marked retransmission
        assert [marked for m, marked in found if m == mid].count(False) <= 1, mid


CUT_AFTER = 8 * 1024
"""Bytes a connection through the proxy carries one way (the toxic's stream) before it is
cut: more than a client's whole setup either way (handshake, confirm.select or qos and
consume, two queue declares), less than one of the test's messages."""
RECONNECT = Backoff(initial=0.2, maximum=1.0, max_attempts=None, max_elapsed=120.0)


@pytest.fixture
def cut_links(
    cluster: LocalCluster, fault_proxy: ProxyThread, queue_name: str
) -> Iterator[Callable[[str], tuple[Proxy, ConnectionSettings]]]:
    """Makes a proxy to node 1 and settings that reach the cluster only through it (one node,
    heartbeat 2 s: a link is steady after 4 s); every proxy is destroyed after the test."""
    client = Toxiproxy()
    client.update_api_consumer("127.0.0.1", fault_proxy.port)
    node = cluster.nodes[0]
    made: list[Proxy] = []

    def make(actor: str) -> tuple[Proxy, ConnectionSettings]:
        proxy = client.create(upstream=node.address, name=f"cut-{os.urandom(3).hex()}")
        made.append(proxy)
        url = cluster.urls()[0].replace(node.address, proxy.listen)
        return proxy, ConnectionSettings(urls=[url], heartbeat=2, reconnect=RECONNECT,
                                         name=f"{queue_name}-{actor}")

    yield make
    for proxy in made:
        proxy.destroy()



def reconnect_rate(reconnects: Callable[[], int], seconds: float = 8.0) -> float:
    """Reconnects a second over ``seconds`` (the link keeps dying meanwhile, whatever the
    code does: a window to count in, not a wait for an event)."""
    wait_until(lambda: reconnects() >= 1, 30, "the first cut")
    began, first = time.monotonic(), reconnects()
    time.sleep(seconds)
    return (reconnects() - first) / (time.monotonic() - began)


def flapped(caplog: pytest.LogCaptureFixture) -> bool:
    """The SDK said why it waits before reconnecting."""
    return any("after it came up" in r.getMessage() for r in caplog.records)


def test_a_publisher_whose_links_die_at_once_reconnects_under_the_backoff(
    face: str, publishers: MakePublisher, cluster: LocalCluster, queue: QueueSettings,
    cut_links: Callable[[str], tuple[Proxy, ConnectionSettings]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="sac")
    proxy, conn = cut_links("pub")
    pub = publishers(face, PublisherSettings(conn, queue=queue))
    pub.start()
    proxy.add_toxic(type="limit_data", stream="upstream", name="cut",
                    attributes={"bytes": CUT_AFTER})
    assert send_all(face, pub, [b"m" * (4 * CUT_AFTER)], wait=0.1) == [None]  # it cuts
    rate = reconnect_rate(lambda: pub.stats.reconnects)
    # Each link dies within milliseconds: reconnecting at once made over a hundred a second
    # here; under the backoff (caps 0.2, 0.4, 0.8, then 1.0 s, jittered) about two.
    assert rate < 5, f"{rate:.1f} reconnects a second: a storm"
    assert flapped(caplog)
    proxy.destroy_toxic("cut")
    # Once links live again the message goes through, on the next reconnect.
    wait_until(lambda: pub.stats.confirmed == 1, 30, "the message confirmed")
    pub.close()
    assert len({mid for mid, _ in copies(cluster.urls()[1], queue.name, 1)}) == 1


def test_a_consumer_whose_links_die_at_once_reconnects_under_the_backoff(
    face: str, publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
    conn: ConnectionSettings, queue_name: str,
    cut_links: Callable[[str], tuple[Proxy, ConnectionSettings]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each delivery of a large message cuts the consumer's link: the broker delivers it
    again on the next one, at once."""
    caplog.set_level(logging.WARNING, logger="sac")
    # No delivery limit (-1): each cut link returns the message, and RabbitMQ 4.0 counts
    # every such return against a quorum queue's limit, 20 by default (None, no argument,
    # keeps that default): at about two reconnects a second the message would be parked
    # before the cuts stop, and never handled here.
    queue = QueueSettings(queue_name, delivery_limit=-1)
    pub = publishers(face, PublisherSettings(conn, queue=queue))
    pub.start()
    [mid] = pub.publish_many([b"m" * (4 * CUT_AFTER)])
    proxy, through = cut_links("c")
    proxy.add_toxic(type="limit_data", stream="downstream", name="cut",
                    attributes={"bytes": CUT_AFTER})
    c = consumers(face, ConsumerSettings(through, queue)).start()
    rate = reconnect_rate(lambda: c.stats.reconnects)
    assert rate < 5, f"{rate:.1f} reconnects a second: a storm"
    assert flapped(caplog)
    proxy.destroy_toxic("cut")
    wait_until(lambda: mid in c.handled, 30, "the message handled")
    c.stop()
    assert c.handled == [mid]
