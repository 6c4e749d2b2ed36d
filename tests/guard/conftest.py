"""The guard's tests: consumers of both faces against the session's RabbitMQ cluster and a
ZooKeeper with a short tick (leases of a second), each test in a ZooKeeper group of its own;
a consumer's ZooKeeper traffic can go through the fault proxy, to cut it off."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.proxy import Proxy

from sac.chaos.proxy import ProxyThread
from sac.server import LocalZooKeeper
from tests.sdk.conftest import conn, consumers, face, publishers, queue  # noqa: F401 - fixtures


@pytest.fixture
def group(queue_name: str) -> str:
    """A ZooKeeper group (election path) of the test's own."""
    return f"/sac-tests/{queue_name}"


@pytest.fixture
def zk_link(
    fault_proxy: ProxyThread, zookeeper_short_tick: LocalZooKeeper
) -> Iterator[Callable[[], Proxy]]:
    """Makes proxies to the short-tick ZooKeeper (``proxy.listen`` is the address to give a
    guard; ``disable()`` cuts every connection through it and refuses new ones)."""
    client = Toxiproxy()
    client.update_api_consumer("127.0.0.1", fault_proxy.port)
    made: list[Proxy] = []

    def make() -> Proxy:
        proxy = client.create(upstream=zookeeper_short_tick.hosts,
                              name=f"zk-{len(made)}-{os.urandom(3).hex()}")
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.destroy()
