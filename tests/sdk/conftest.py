from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pika
import pytest

from sac.chaos._process import ActorProcess
from sac.chaos.actors import ConsumerActor
from sac.sdk import ConnectionSettings, ConsumerSettings, PublisherSettings, QueueSettings
from sac.server import LocalCluster
from tests.dedup.conftest import make_store, store_kind  # noqa: F401 - fixtures for test_inbox
from tests.sdk.faces import FACES, ConsumerFace, PublisherFace, make_publisher


@pytest.fixture(params=FACES)
def face(request: pytest.FixtureRequest) -> str:
    """Each SDK test runs once per face: blocking (pika thread) and asyncio."""
    return str(request.param)


@pytest.fixture
def conn(cluster: LocalCluster, request: pytest.FixtureRequest) -> ConnectionSettings:
    """Settings for the session cluster, connections named after the test."""
    return ConnectionSettings(urls=cluster.urls(), heartbeat=2, name=request.node.nodeid[-120:])


@pytest.fixture
def queue(queue_name: str) -> QueueSettings:
    return QueueSettings(queue_name)


@pytest.fixture
def publishers() -> Iterator[Callable[..., PublisherFace]]:
    """Makes publishers of the test's face and closes whatever a failing test left open."""
    made: list[PublisherFace] = []

    def make(face: str, settings: PublisherSettings, *args: Any) -> PublisherFace:
        pub = make_publisher(face, settings, *args)
        made.append(pub)
        return pub

    yield make
    for pub in made:
        with contextlib.suppress(Exception):
            pub.close(timeout=1)


@pytest.fixture
def consumers() -> Iterator[Callable[..., ConsumerFace]]:
    """Makes consumers of either face and stops every one after the test."""
    made: list[ConsumerFace] = []

    def make(*args: object, **kwargs: object) -> ConsumerFace:
        consumer = ConsumerFace(*args, **kwargs)  # type: ignore[arg-type]
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.stop()


SDK_PREFETCH: int = attrs.fields(ConsumerSettings).prefetch.default


def consumer_actor(tmp_path: Path, actor: str, face: str, queue: str, urls: Sequence[str],
                   **options: Any) -> ConsumerActor:
    """The chaos suite's consumer actor (``sac/chaos/actors/consumer.py``) as these tests run it
    in a process of its own: the SDK's default prefetch, no simulated work, and unless
    ``options`` say otherwise no inbox, each handled id appended to a file (``handled``)."""
    settings: dict[str, Any] = {
        "actor": actor, "run_dir": str(tmp_path), "queue": queue, "urls": tuple(urls),
        "face": face, "prefetch": SDK_PREFETCH, "effect_ms": 0, "dedup": "off",
        "sink": f"file:{tmp_path / f'{actor}.effects.jsonl'}", **options}
    return ConsumerActor(**settings)


def handled(spec: ConsumerActor) -> list[str]:
    """The ids the actor of ``spec`` handled, in order (its effects in its sink)."""
    return spec.open_sink().handled(spec.actor)


@pytest.fixture
def actors() -> Iterator[Callable[[ConsumerActor], ActorProcess]]:
    """Starts actor processes (``ActorProcess``) and ends every one after the test."""
    started: list[ActorProcess] = []

    def start(spec: ConsumerActor) -> ActorProcess:
        process = ActorProcess.start(spec)
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


@pytest.fixture
def healed(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The cluster, with every node running again after the test (the session shares it)."""
    yield cluster
    for node in cluster.nodes:
        if not cluster.is_running(node):
            cluster.start(node.index)
    cluster.wait_members(cluster.nodes, timeout=90)


def drained(url: str, queue: str, expected: int, timeout: float = 60
            ) -> list[pika.BasicProperties]:
    """The properties of every message in ``queue`` (acked away): until ``expected``
    distinct ids arrived and the queue stayed quiet for a second, so that duplicates are
    counted too."""
    found: list[pika.BasicProperties] = []
    ids: set[str] = set()
    deadline = time.monotonic() + timeout
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1000)
        for method, props, _body in channel.consume(queue, inactivity_timeout=1.0):
            if method is None:
                if len(ids) >= expected or time.monotonic() > deadline:
                    break
                continue
            found.append(props)
            ids.add(str(props.message_id))
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
    return found


def drain(url: str, queue: str, expected: int, timeout: float = 60) -> list[str]:
    """Every message id in ``queue`` (acked away), duplicates included (``drained``)."""
    return [str(props.message_id) for props in drained(url, queue, expected, timeout)]


def queue_leader(cluster: LocalCluster, queue: str) -> int:
    """The index of the node leading a quorum queue."""
    return cluster.node(str(cluster.management().queue(queue).node)).index


def close_connection_by_name(cluster: LocalCluster, name: str) -> int:
    """``rabbitmqctl close_connection`` for every connection named ``name``; how many."""
    node = next(n for n in cluster.nodes if cluster.is_running(n))
    out = cluster.ctl(
        node, "list_connections", "pid", "client_properties", "--no-table-headers", "--quiet"
    )
    closed = 0
    for line in out.splitlines():
        pid, _, props = line.partition("\t")
        if f'"{name}"' in props or f'<<"{name}">>' in props or name in props:
            cluster.ctl(node, "close_connection", pid.strip(), "closed by test")
            closed += 1
    return closed
