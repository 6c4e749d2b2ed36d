"""The consumer, both faces, against the real 3-node cluster: single active consumption,
recovery from every fault the issue names, poison messages and a graceful handover."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pika
import pytest

from sac.chaos._process import ActorProcess
from sac.chaos.actors import ConsumerActor
from sac.sdk import (
    AsyncConsumer,
    ClosedError,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    HistoryRecorder,
    LifecycleError,
    PublisherSettings,
    QueueMismatch,
    QueueSettings,
    Role,
)
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.conftest import close_connection_by_name, consumer_actor, handled
from tests.sdk.faces import ConsumerFace, PublisherFace

MakePublisher = Callable[..., PublisherFace]


def on_node(conn: ConnectionSettings, index: int, name: str) -> ConnectionSettings:
    """The same cluster, with node ``index`` (0-based) tried first."""
    urls = conn.urls[index:] + conn.urls[:index]
    return ConnectionSettings(urls=urls, heartbeat=conn.heartbeat, name=name)


def publish(publishers: MakePublisher, face: str, conn: ConnectionSettings,
            queue: QueueSettings, count: int, start: int = 0) -> list[str]:
    pub = publishers(face, PublisherSettings(on_node(conn, 0, "test-publisher"), queue=queue))
    pub.start()
    try:
        return pub.publish_many([f"m{i}".encode() for i in range(start, start + count)])
    finally:
        pub.close()


def test_single_active_consumer_receives_everything(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings, tmp_path: Path,
) -> None:
    history = HistoryRecorder(tmp_path / "consumer-a.jsonl", actor="consumer-a")
    a = consumers(face, ConsumerSettings(on_node(conn, 1, "consumer-a"), queue),
                  recorder=history).start()
    b = consumers(face, ConsumerSettings(on_node(conn, 2, "consumer-b"), queue)).start()
    assert a.role is Role.WAITING
    assert b.role is Role.WAITING
    ids = publish(publishers, face, conn, queue, 1000)
    wait_until(lambda: a.count() + b.count() >= 1000, 30, "1000 handled")
    counts = sorted([a.count(), b.count()])
    assert counts == [0, 1000]
    active, waiting = (a, b) if a.count() else (b, a)
    assert active.role is Role.ACTIVE
    assert waiting.role is Role.WAITING
    assert active.handled == ids  # in publish order
    a.stop()
    history.close()
    events = [json.loads(x) for x in (tmp_path / "consumer-a.jsonl").read_text().splitlines()]
    kinds = Counter(e["type"] for e in events)
    assert kinds["subscribed"] == 1
    assert kinds["connected"] == 1
    if active is a:
        assert kinds["active"] == 1
        assert kinds["deliver"] == kinds["ack"] == 1000
    else:
        assert kinds["deliver"] == 0


def test_graceful_handover_processes_every_message_once(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    # The active consumer holds its 1000th message until its stop has begun, so that the
    # handover happens with most of the queue still to do, however fast the machine is.
    held, release = threading.Event(), threading.Event()
    seen = Counter[str]()

    def hold_at_1000(delivery: Delivery) -> None:
        seen["all"] += 1
        if seen["all"] == 1000:
            held.set()
            release.wait(30)

    a = consumers(face, ConsumerSettings(on_node(conn, 1, "consumer-a"), queue),
                  hold_at_1000).start()
    b = consumers(face, ConsumerSettings(on_node(conn, 2, "consumer-b"), queue),
                  hold_at_1000).start()
    ids = publish(publishers, face, conn, queue, 3000)
    assert held.wait(30), "a third was not handled"
    first, second = (a, b) if a.count() else (b, a)
    stopping = threading.Thread(target=first.stop)
    stopping.start()
    wait_until(lambda: first.role is Role.STOPPING, 10, "the stop to begin")
    release.set()
    stopping.join(60)
    assert first.role is Role.STOPPED
    assert first.count() < 3000 - 100, "the handover came too late to show anything"
    wait_until(lambda: first.count() + second.count() >= 3000, 30, "the rest handled")
    handled = first.handled + second.handled
    assert sorted(handled) == sorted(ids)  # every message, each exactly once
    assert second.role is Role.ACTIVE
    assert first.stats.acked == first.count()


def test_reconsumes_after_the_broker_closes_its_connection(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    name = f"closed-consumer-{queue.name}"
    c = consumers(face, ConsumerSettings(on_node(conn, 1, name), queue)).start()
    first = publish(publishers, face, conn, queue, 200)
    wait_until(lambda: c.count() >= 200, 30, "the first batch handled")
    assert close_connection_by_name(cluster, name) == 1
    wait_until(lambda: c.stats.reconnects >= 1 and c.role is not Role.CONNECTING, 30,
               "a reconnect")
    second = publish(publishers, face, conn, queue, 200, start=200)
    wait_until(lambda: set(first + second) <= set(c.handled), 30, "the second batch handled")
    assert c.role is Role.ACTIVE


def test_reconsumes_after_its_node_is_killed(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    healed: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    c = consumers(face, ConsumerSettings(on_node(conn, 2, "killed-node-consumer"), queue))
    c.start()
    first = publish(publishers, face, conn, queue, 200)
    wait_until(lambda: c.count() >= 200, 30, "the first batch handled")
    healed.kill(3)
    wait_until(lambda: c.stats.reconnects >= 1, 30, "the consumer to notice")
    second = publish(publishers, face, conn, queue, 200, start=200)
    wait_until(lambda: set(first + second) <= set(c.handled), 60, "the second batch handled")


@pytest.mark.rabbitmq("3.10")  # 4.0 has no mirrored queues
def test_reconsumes_after_mirrored_queue_master_dies(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    healed: LocalCluster, conn: ConnectionSettings, queue_name: str,
) -> None:
    cluster = healed
    api = cluster.management()
    api.put_policy(f"ha-{queue_name}", f"^{queue_name}$", {"ha-mode": "all"})
    queue = QueueSettings(queue_name, type="classic")
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        # Declared on node 1, so the master lives there and the consumer (node 2) survives.
        raw.channel().queue_declare(queue_name, durable=True, arguments=queue.arguments())
    try:
        c = consumers(face, ConsumerSettings(on_node(conn, 1, "mirror-consumer"), queue))
        c.start()
        first = publish(publishers, face, conn, queue, 100)
        wait_until(lambda: c.count() >= 100, 30, "the first batch handled")
        master = api.queue(queue_name).node
        assert master is not None
        master_index = cluster.node(master).index
        assert master_index != 2  # the consumer is on node 2; its connection survives
        wait_until(lambda: len(api.queue(queue_name).synchronised_mirrors or ()) == 2, 30,
                   "both mirrors in sync")
        cluster.kill(master_index)
        wait_until(lambda: c.stats.resubscribes >= 1, 30, "the server cancel and reconsume")
        assert c.stats.reconnects == 0
        second = publish(publishers, face, on_node(conn, 1, "p2"), queue, 100, start=100)
        wait_until(lambda: set(first + second) <= set(c.handled), 30, "the second batch")
    finally:
        api.delete_policy(f"ha-{queue_name}")


def test_a_long_handler_keeps_its_connection(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    settings = ConsumerSettings(
        ConnectionSettings(urls=conn.urls, heartbeat=1, name="long-handler"), queue)
    release = threading.Event()

    def work(delivery: Delivery) -> None:
        release.wait(5)  # five heartbeat timeouts of real work

    c = consumers(face, settings, work).start()
    ids = publish(publishers, face, conn, queue, 1)
    wait_until(lambda: c.count() >= 1, 30, "the long handler to finish")
    assert c.handled == ids
    assert c.stats.reconnects == 0
    assert c.stats.acked == 1


def test_mismatched_queue_arguments_are_named(
    face: str, consumers: Callable[..., ConsumerFace], cluster: LocalCluster,
    conn: ConnectionSettings, queue_name: str,
) -> None:
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        raw.channel().queue_declare(queue_name, durable=True,
                                    arguments={"x-queue-type": "quorum"})
    c = consumers(face, ConsumerSettings(conn, QueueSettings(queue_name, parking_queue=None)))
    with pytest.raises(QueueMismatch, match="x-single-active-consumer"):
        c.start()


def test_a_frozen_consumer_is_replaced_after_the_heartbeat_timeout(
    face: str, consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings, tmp_path: Path,
    actors: Callable[[ConsumerActor], ActorProcess],
) -> None:
    spec = consumer_actor(tmp_path, "frozen", face, queue.name, conn.urls[1:])
    proc = actors(spec)
    proc.expect("role", 60, role=Role.WAITING.value)
    standby = consumers(face, ConsumerSettings(on_node(conn, 2, "standby"), queue)).start()
    first = publish(publishers, face, conn, queue, 100)
    wait_until(lambda: len(handled(spec)) >= 100, 30, "the process to handle")
    assert standby.count() == 0

    proc.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    second = publish(publishers, face, conn, queue, 100, start=100)
    wait_until(lambda: set(second) <= set(standby.handled), 30, "the standby to take over")
    takeover = time.monotonic() - frozen_at
    assert standby.role is Role.ACTIVE
    assert handled(spec) == first
    assert takeover < 3 * 2 + 2  # the broker's heartbeat timeout, not a fixed long wait


def _held_child(
    conn: ConnectionSettings, queue: QueueSettings, tmp_path: Path, publishers: MakePublisher,
    consumers: Callable[..., ConsumerFace], actors: Callable[[ConsumerActor], ActorProcess],
    **options: Any,
) -> tuple[ActorProcess, ConsumerActor, ConsumerFace, list[str]]:
    """A blocking consumer actor in a process of its own on nodes 2, 3, 1, active, paused
    inside its handler for the first of 20 messages (the other 19 prefetched), and an
    in-process standby waiting for its turn."""
    spec = consumer_actor(tmp_path, "child", "blocking", queue.name,
                          conn.urls[1:] + conn.urls[:1], pause_in_effect="*", **options)
    child = actors(spec)
    child.expect("role", 60, role=Role.WAITING.value)
    standby = consumers("blocking", ConsumerSettings(on_node(conn, 2, "standby"), queue))
    standby.start()
    ids = publish(publishers, "blocking", conn, queue, 20)
    child.expect("paused", 60, at="effect", msg=ids[0])
    return child, spec, standby, ids


def test_sigterm_stops_a_blocking_consumer_gracefully(
    consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings, tmp_path: Path,
    actors: Callable[[ConsumerActor], ActorProcess],
) -> None:
    """A service manager's stop: the running handler finishes and its message is acked once,
    the prefetched ones go to the standby, and the process exits 0."""
    child, spec, standby, ids = _held_child(
        conn, queue, tmp_path, publishers, consumers, actors)
    child.signal(signal.SIGTERM)
    child.expect("role", 60, role=Role.STOPPING.value)  # taken while the handler still runs
    child.tell("continue")
    child.expect("done", 60, code=0)  # run() returned
    assert child.wait(60) == 0
    assert handled(spec) == [ids[0]]
    wait_until(lambda: standby.count() >= 19, 30, "the standby to handle the rest")
    assert standby.handled == ids[1:]  # the held message was acked: not delivered again


def test_a_second_sigint_interrupts_the_running_handler(
    consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings, tmp_path: Path,
    actors: Callable[[ConsumerActor], ActorProcess],
) -> None:
    """Ctrl-C twice: the first starts the graceful stop, the second raises KeyboardInterrupt
    as Python does; the interrupted message was not acked and is handled by the standby."""
    child, spec, standby, ids = _held_child(
        conn, queue, tmp_path, publishers, consumers, actors)
    child.signal(signal.SIGINT)
    child.expect("role", 60, role=Role.STOPPING.value)
    child.signal(signal.SIGINT)
    assert child.wait(60) == -signal.SIGINT  # an uncaught KeyboardInterrupt
    assert handled(spec) == []
    wait_until(lambda: standby.count() >= 20, 30, "the standby to handle all")
    assert sorted(standby.handled) == sorted(ids)


def test_with_handle_signals_false_sigterm_keeps_its_default(
    consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings, tmp_path: Path,
    actors: Callable[[ConsumerActor], ActorProcess],
) -> None:
    """Opted out: SIGTERM ends the process at once, as it would without the SDK; nothing is
    lost, the running message comes again to the standby."""
    child, _spec, standby, ids = _held_child(
        conn, queue, tmp_path, publishers, consumers, actors, handle_signals=False)
    child.signal(signal.SIGTERM)
    assert child.wait(60) == -signal.SIGTERM
    wait_until(lambda: standby.count() >= 20, 30, "the standby to handle all")
    assert sorted(standby.handled) == sorted(ids)


def test_run_touches_signal_handlers_only_in_the_main_thread_and_puts_them_back(
    publishers: MakePublisher, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    def app_handler(_signum: int, _frame: object) -> None:
        raise AssertionError("the application's handler should not run in this test")

    settings = ConsumerSettings(conn, queue)
    seen: list[object] = []

    def record(delivery: Delivery) -> None:
        seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.signal(signal.SIGTERM, app_handler)
    try:
        other = Consumer(settings, record)
        runner = threading.Thread(target=other.run)
        runner.start()
        try:
            publish(publishers, "blocking", conn, queue, 1)
            wait_until(lambda: seen, 30, "the message handled in the other thread")
        finally:
            other.stop()
            runner.join(30)
        assert seen == [app_handler]

        def record_then_stop(delivery: Delivery) -> None:
            record(delivery)
            threading.Thread(target=opted_out.stop).start()  # as another thread would

        opted_out = Consumer(settings, record_then_stop)
        publish(publishers, "blocking", conn, queue, 1, start=1)
        opted_out.run(handle_signals=False)
        assert seen == [app_handler, app_handler]

        def record_then_sigterm(delivery: Delivery) -> None:
            record(delivery)
            signal.raise_signal(signal.SIGTERM)  # a real signal, to this process

        default = Consumer(settings, record_then_sigterm)
        publish(publishers, "blocking", conn, queue, 3, start=2)
        default.run()  # returns: stopped by the signal
        assert len(seen) == 3
        assert seen[2] is not app_handler  # the consumer's own, during run()
        assert signal.getsignal(signal.SIGTERM) is app_handler  # and back after it
        assert default.stats.acked == 1  # the other two went back to the queue
    finally:
        signal.signal(signal.SIGTERM, before)


def test_misuse_of_either_consumer_face_is_a_precise_error(
    conn: ConnectionSettings, queue: QueueSettings
) -> None:
    consumer = Consumer(ConsumerSettings(conn, queue), print)
    consumer.start()
    try:
        with pytest.raises(LifecycleError, match="already started") as twice:
            consumer.start()
        assert not isinstance(twice.value, ClosedError)
    finally:
        consumer.stop()
    consumer.stop()  # a second stop does nothing
    with pytest.raises(ClosedError, match="cannot be started again"):
        consumer.start()

    async def scenario() -> None:
        twin = AsyncConsumer(ConsumerSettings(conn, queue), print)
        with pytest.raises(LifecycleError, match="not started"):
            await twin.wait()
        async with twin:
            with pytest.raises(LifecycleError, match="already started"):
                await twin.start()
        await twin.wait()  # stopped cleanly: returns
        with pytest.raises(ClosedError, match="cannot be started again"):
            await twin.start()

    asyncio.run(scenario())


def test_stop_from_inside_the_handler_returns_at_once_and_acks_what_ran(
    consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    """"Stop after the third order", written in the handler: stop() must not wait for the
    handler that calls it (it did, for stop_timeout + 10 s, and the stop then gave up on the
    handler: its message unacked and handled again by the next consumer)."""
    ids = publish(publishers, "blocking", conn, queue, 10)
    seen: list[str] = []
    returned = threading.Event()

    def handle(delivery: Delivery) -> None:
        seen.append(str(delivery.message_id))
        if len(seen) == 3:
            consumer.stop()
            returned.set()

    settings = attrs.evolve(ConsumerSettings(conn, queue), stop_timeout=20.0)
    consumer = Consumer(settings, handle)
    runner = threading.Thread(target=consumer.run, kwargs={"handle_signals": False})
    runner.start()
    assert returned.wait(10), "stop() in the handler did not return"
    runner.join(10)
    assert not runner.is_alive(), "run() did not return once the handler had"
    assert seen == ids[:3]
    rest = consumers("blocking", ConsumerSettings(conn, queue)).start()
    wait_until(lambda: rest.count() >= 7, 30, "the next consumer to handle the rest")
    assert rest.handled == ids[3:]  # the three were acked: none delivered again


def test_stop_awaited_inside_an_async_handler_returns_at_once_and_acks_what_ran(
    consumers: Callable[..., ConsumerFace], publishers: MakePublisher,
    conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    """The same on the asyncio face, where the handler runs on the loop: the awaited stop
    waited stop_timeout for the handler awaiting it (and, before that, the loop could spin on
    the runs the stop cut short without ever running the stop)."""
    ids = publish(publishers, "asyncio", conn, queue, 10)
    seen: list[str] = []

    async def main() -> None:
        async def handle(delivery: Delivery) -> None:
            seen.append(str(delivery.message_id))
            if len(seen) == 3:
                await asyncio.wait_for(consumer.stop(), 5)

        settings = attrs.evolve(ConsumerSettings(conn, queue), stop_timeout=20.0)
        consumer = AsyncConsumer(settings, handle)
        await consumer.start()
        await asyncio.wait_for(consumer.wait(), 10)

    asyncio.run(main())
    assert seen == ids[:3]
    rest = consumers("asyncio", ConsumerSettings(conn, queue)).start()
    wait_until(lambda: rest.count() >= 7, 30, "the next consumer to handle the rest")
    assert rest.handled == ids[3:]  # the three were acked: none delivered again
