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
once it has carried a few kilobytes from the client, so each reconnect "succeeds" (the
handshake, ``confirm.select`` and the declares pass) and the next publish kills it. The
reconnects must then slow down under the reconnect backoff instead of coming at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import time
from collections.abc import Callable, Iterator

import pika
import pytest
from toxiproxy import Toxiproxy

from sac.chaos.proxy import ProxyThread
from sac.sdk import (
    Backoff,
    ConnectionSettings,
    MessageTooLarge,
    Publisher,
    PublisherSettings,
    QueueSettings,
)
from sac.sdk._delivery import RETRANSMIT_HEADER
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.faces import PublisherFace

MakePublisher = Callable[..., PublisherFace]
LIMIT = 1024 * 1024  # the broker's max_message_size during these tests
Outcome = str | BaseException | None
"""A send's outcome: the confirmed id, the error, or None while it is still pending."""


def _set_limit(cluster: LocalCluster, value: str) -> None:
    for node in cluster.nodes:
        cluster.ctl(node, "eval", f"application:set_env(rabbit, max_message_size, {value}).")


@pytest.fixture
def broker_limit(cluster: LocalCluster) -> Iterator[int]:
    """The cluster's ``max_message_size`` lowered to ``LIMIT`` on every node (new channels
    read it), the value before put back after the test (the session shares the cluster)."""
    answer = cluster.ctl(cluster.nodes[0], "eval",
                         "application:get_env(rabbit, max_message_size).")
    before = re.search(r"\{ok,(\d+)\}", answer)
    assert before is not None, f"cannot read max_message_size: {answer!r}"
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
    """Every message in ``queue`` (acked away) as (id, marked as a retransmission): until
    ``expected`` distinct ids arrived and the queue stayed quiet for a second."""
    found: list[tuple[str, bool]] = []
    deadline = time.monotonic() + timeout
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=100)
        for method, props, _body in channel.consume(queue, inactivity_timeout=1.0):
            if method is None:
                if len({mid for mid, _ in found}) >= expected or time.monotonic() > deadline:
                    break
                continue
            found.append((str(props.message_id), RETRANSMIT_HEADER in (props.headers or {})))
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
    return found


def test_an_oversized_message_fails_alone_without_a_reconnect_storm(
    face: str, publishers: MakePublisher, cluster: LocalCluster, conn: ConnectionSettings,
    queue: QueueSettings, broker_limit: int, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="sac")
    # The publisher's own limit (128 MiB) is above the broker's, as 3.10's default is above
    # 4.0's: only the broker can say no.
    pub = publishers(face, PublisherSettings(conn, queue=queue))
    pub.start()
    big = b"x" * (2 * broker_limit)
    bodies = [f"before {i}".encode() for i in range(5)] + [big] + [
        f"after {i}".encode() for i in range(5)]

    outcomes = send_all(face, pub, bodies, wait=30)

    refused = outcomes[5]
    assert isinstance(refused, MessageTooLarge), f"the big message: {refused!r}"
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


@pytest.fixture(scope="module")
def fault_proxy() -> Iterator[ProxyThread]:
    with ProxyThread() as running:
        yield running


CUT_AFTER = 8 * 1024
"""Bytes a connection through the proxy carries from the client before it is cut: more than
a publisher's whole setup (handshake, confirm.select, two queue declares), less than one of
the test's messages."""


def test_links_that_die_at_once_are_reconnected_under_the_backoff(
    face: str, publishers: MakePublisher, cluster: LocalCluster, queue: QueueSettings,
    fault_proxy: ProxyThread, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="sac")
    client = Toxiproxy()
    client.update_api_consumer("127.0.0.1", fault_proxy.port)
    node = cluster.nodes[0]
    proxy = client.create(upstream=node.address, name=f"flap-{os.urandom(3).hex()}")
    try:
        url = cluster.urls()[0].replace(node.address, proxy.listen)
        reconnect = Backoff(initial=0.2, maximum=1.0, max_attempts=None, max_elapsed=120.0)
        conn = ConnectionSettings(urls=[url], heartbeat=2, reconnect=reconnect,
                                  name=f"{queue.name}-pub")
        pub = publishers(face, PublisherSettings(conn, queue=queue))
        pub.start()
        proxy.add_toxic(type="limit_data", stream="upstream", name="cut",
                        attributes={"bytes": CUT_AFTER})
        body = b"m" * (4 * CUT_AFTER)
        pending = send_all(face, pub, [body], wait=0.1)
        assert pending == [None]  # the first link is cut by this very message
        wait_until(lambda: pub.stats.reconnects >= 1, 30, "the first cut")
        began, first = time.monotonic(), pub.stats.reconnects
        time.sleep(8.0)  # the window counted: the cuts go on meanwhile, whatever the code
        rate = (pub.stats.reconnects - first) / (time.monotonic() - began)
        # Each link dies within milliseconds: reconnecting at once made hundreds a second
        # here; under the backoff (caps 0.2, 0.4, 0.8, then 1.0 s, jittered) about two.
        assert rate < 5, f"{rate:.1f} reconnects a second: a storm"
        assert any("lost" in r.getMessage() and "after it came up" in r.getMessage()
                   for r in caplog.records)
        proxy.destroy_toxic("cut")
        # Once links live again the message goes through, on the next reconnect.
        wait_until(lambda: pub.stats.confirmed == 1, 30, "the message confirmed")
        pub.close()
    finally:
        proxy.destroy()
    assert len({mid for mid, _ in copies(cluster.urls()[1], queue.name, 1)}) == 1
