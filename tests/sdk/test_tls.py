"""amqps:// end to end: both faces publish and consume over TLS, verified against the
cluster's own CA; a certificate the client cannot verify is a clear connect error."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sac.sdk import (
    ConnectError,
    ConnectionSettings,
    ConsumerSettings,
    PublisherSettings,
    QueueSettings,
)
from sac.sdk.management import ConnectionInfo
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace, PublisherFace

MakePublisher = Callable[..., PublisherFace]


def test_publish_and_consume_over_tls(
    face: str, publishers: MakePublisher, cluster: LocalCluster, queue: QueueSettings,
) -> None:
    tls = ConnectionSettings(urls=cluster.tls_urls(), ca_file=str(cluster.ca_file),
                             name="tls-client")
    assert all(url.startswith("amqps://") for url in tls.urls)
    pub = publishers(face, PublisherSettings(tls, queue=queue))
    pub.start()
    ids = pub.publish_many([b"secret %d" % i for i in range(100)])
    pub.close()
    consumer = ConsumerFace(face, ConsumerSettings(tls, queue)).start()
    try:
        wait_until(lambda: consumer.count() >= 100, 30, "100 messages over TLS")
        assert consumer.handled == ids
        # The broker's own view, while the consumer is still connected: every connection
        # named ours came over TLS (the list is read until the consumer's shows up).
        management = cluster.management()

        def ours() -> list[ConnectionInfo]:
            return [c for c in management.connections() if c.client_name == "tls-client"]

        wait_until(lambda: ours(), 30, "the consumer's connection in the management API")
        assert all(c.ssl for c in ours())
    finally:
        consumer.stop()


def test_an_unverifiable_certificate_is_a_connect_error(
    face: str, publishers: MakePublisher, cluster: LocalCluster,
) -> None:
    # No ca_file: the system trust store does not know the cluster's own CA.
    tls = ConnectionSettings(urls=cluster.tls_urls()[:1], connect_timeout=3)
    pub = publishers(face, PublisherSettings(tls))
    with pytest.raises(ConnectError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
        pub.start()
