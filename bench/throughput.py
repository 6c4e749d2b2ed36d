"""Message throughput on a local 3-node RabbitMQ cluster: the SDK's two faces against the raw
AMQP client libraries, all in the same run.

The raw variants do not import the SDK. Each one uses the plain library the way a competent user
of that library would. The SDK variants use the public API of ``sac.sdk`` as an application would.
So each SDK number can be read as "this much slower or more CPU-hungry than the raw client it sits
on", measured on the same machine in the same minutes.

Publisher variants (256-byte persistent messages, publisher confirms, at most ``--window``
unconfirmed messages in flight, the window kept full, to a durable quorum queue with single
active consumer whose leader is node 1, through a connection to node 1; timed from the first
publish to the last confirm):

``pika-select``
    pika's own ``SelectConnection`` and its callback API: the lowest-overhead way to use pika, and
    the best that pika-based synchronous code can reach.
``pika-asyncio``
    the same callback code on ``AsyncioConnection``. It separates the cost of asyncio's event loop
    from the cost of pika's protocol code (the SDK runs pika on an asyncio loop).
``aio-pika``
    ``aio_pika.connect`` with ``exchange.publish`` awaitables, one task per message, a semaphore
    for the window: the idiomatic asyncio client most applications use.
``aiormq``
    the protocol layer under aio-pika on its own (``basic_publish`` per message in a task). It
    shows how much of aio-pika's cost is aio-pika and how much is aiormq.
``sdk-async-publish``
    ``sac.sdk.AsyncPublisher`` with ``window=--window``: ``await send()`` for every message (it
    waits only for room in the window), then ``gather`` of the returned futures: the plain
    per-message API, a future per message.
``sdk-async-publish-many``
    ``sac.sdk.AsyncPublisher.publish_many`` of all the messages: the asyncio face's bulk API, what
    an application with many messages at hand would call (no future per message).
``sdk-blocking-publish``
    ``sac.sdk.Publisher.publish_many`` of all the messages: the blocking face, pipelined, on its
    private loop thread (the same bulk path as ``sdk-async-publish-many``).

Consumer variants (each drains a fresh quorum queue pre-filled with ``--messages`` messages by the
fastest *raw* publisher of the run, outside the timed part, so that every consumer reads the same
messages; prefetch 1000; timed from the first delivery until every ack is known to be processed):

``pika-blocking-consume``
    ``BlockingConnection`` acking every message on its own: the textbook consumer, and the worst
    case for the number of frames and syscalls.
``pika-blocking-consume-multi``
    the same, acking with ``multiple=True`` every 100 messages: what batching acks alone buys.
``aio-pika-consume``
    aio-pika's ``queue.consume`` callback, ``ack(multiple=True)`` every 100 messages.
``pika-asyncio-consume``
    pika's callback API on ``AsyncioConnection``, ``multiple=True`` every 100 messages.
``sdk-async-consume``
    ``sac.sdk.AsyncConsumer`` with an ``async def`` handler that counts; ``prefetch=1000``,
    ``ack_batch=100``.
``sdk-blocking-consume``
    ``sac.sdk.Consumer`` with a plain handler that counts, ``run()`` in a thread of its own;
    ``prefetch=1000``, ``ack_batch=100``.

The raw consumers end their timed part with a passive ``queue.declare`` after the last ack: one
round trip that proves the channel processed every ack before it. The SDK consumers end it with
``stop()``, after their stats show every message acked. ``stop()`` is a ``basic.cancel`` round trip
and a connection close, and the broker processes the channel's acks before it answers either. That
is one round trip more than the raw consumers, which is negligible over thousands of messages.

Differences that are the SDK's real behaviour, benched as they are:

- the SDK publishes with ``mandatory=True`` and a fresh ``message_id`` (a 36-character UUIDv7
  string) in every message's properties. The raw publishers use ``mandatory=False`` and no message
  id (aiormq adds its own message id), so their frames are a little smaller;
- the SDK declares its queue itself on connect, from ``QueueSettings`` (quorum,
  ``x-single-active-consumer: true``). The bench declares every queue, for raw and SDK variants
  alike, with exactly these arguments before the run, so the SDK's declaration is a no-op and the
  work on the broker's side is the same;
- the SDK consumer decodes its deliveries itself (``sac/sdk/_wire/deliveries.py``; pika decodes
  every other frame), builds a ``Delivery`` per message and hands it to the handler through a
  queue (the async face: one worker task; the blocking face: the caller's thread, with acks
  sent back to the loop thread in batches of ``ack_batch``).

Every variant runs in its own fresh process (``multiprocessing`` "spawn"), one after another. So
no variant shares an event loop, imported modules or GC state with another, and none competes with
another for the two cores the broker also runs on. Client CPU is ``time.process_time()`` of that
process over the timed interval (all its threads). The JSON report has a ``ratios`` section: each
SDK variant against the fastest raw variant of its kind and against the raw variants named in
``RATIO_BASELINES``, as throughput ratio (SDK / raw msg/s; the target is at least
``TARGET_THROUGHPUT_RATIO`` against the fastest) and CPU ratio (SDK / raw µs per message).

Run ``python -m bench.throughput --help``; results go to ``bench/results/throughput-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import importlib.metadata
import multiprocessing
import os
import platform
import statistics
import sys
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import pika
import pika.channel
import pika.connection
import pika.frame
import pika.spec
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.adapters.blocking_connection import BlockingChannel

from sac.server import LocalCluster
from ._report import (
    DEFAULT_SERIES,
    broker_cpu_s,
    broker_versions,
    positive_int,
    rabbitmq_series,
    save,
    sdk_revision,
)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection as Pipe

    from aio_pika.abc import AbstractIncomingMessage

    from sac.sdk import AsyncPublisher, ConnectionSettings, ConsumerSettings, Delivery
    from sac.sdk.dedup import Inbox

MESSAGE_SIZE = 256
PREFETCH = 1000
ACK_EVERY = 100
PERSISTENT = 2
DEFAULT_MESSAGES = 50_000
DEFAULT_WINDOW = 1000
DEFAULT_TIMEOUT = 300.0
# Seconds a child process may take on top of its job's own timeout (interpreter start, imports).
CHILD_GRACE = 60.0
RESULTS_PREFIX = "throughput"
LIBRARIES = ("pika", "aio-pika", "aiormq", "pamqp", "attrs")
# Each SDK variant of a kind is compared with the fastest raw variant of that kind and these.
RATIO_BASELINES: dict[str, tuple[str, ...]] = {
    "publish": ("pika-select", "pika-asyncio", "aio-pika"),
    "consume": ("aio-pika-consume",),
}
# The target: every SDK face at least this fraction of the fastest raw client's msg/s.
TARGET_THROUGHPUT_RATIO = 0.9

Kind = Literal["publish", "consume"]


# --------------------------------------------------------------------------- jobs and results


@dataclass(frozen=True)
class Job:
    """What one child process does: one variant against one queue."""

    variant: str
    url: str = field(repr=False)  # node 1; carries the password: never printed
    queue: str
    messages: int
    window: int
    prefetch: int
    ack_every: int
    timeout: float
    # Every node's URL, node 1 first: the SDK's ConnectionSettings (it connects to the first).
    urls: tuple[str, ...] = field(default=(), repr=False)
    # The SDK consumers' Inbox store: "" (none: a plain handler), "memory", "sqlite:PATH" or
    # "postgres:DSN" (a DSN carries a password: never printed).
    store: str = field(default="", repr=False)

    @property
    def body(self) -> bytes:
        return b"x" * MESSAGE_SIZE

    def deadline_left(self, started: float) -> float:
        """Seconds of this job's timeout left, ``started`` being a ``time.monotonic()``."""
        left = started + self.timeout - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.variant}: no result after {self.timeout:g} s")
        return left


@dataclass(frozen=True)
class Measurement:
    """One timed run: wall and client CPU seconds for ``messages`` messages."""

    messages: int
    wall_s: float
    cpu_s: float
    nacks: int = 0
    broker_cpu_s: float | None = None
    """The cluster's Erlang VMs' CPU over the child process's whole life (its connect and
    close too, and the broker's own background work meanwhile), read by the parent."""

    @property
    def msg_per_s(self) -> float:
        return self.messages / self.wall_s

    @property
    def cpu_us_per_msg(self) -> float:
        return self.cpu_s / self.messages * 1e6

    @property
    def broker_cpu_us_per_msg(self) -> float | None:
        return None if self.broker_cpu_s is None else self.broker_cpu_s / self.messages * 1e6


class Stopwatch:
    """Wall clock and this process's CPU time between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self._wall0 = 0.0
        self._cpu0 = 0.0
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.started = False

    def start(self) -> None:
        self.started = True
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()

    def stop(self) -> None:
        self.wall_s = time.perf_counter() - self._wall0
        self.cpu_s = time.process_time() - self._cpu0

    def measurement(self, messages: int, nacks: int = 0) -> Measurement:
        return Measurement(messages=messages, wall_s=self.wall_s, cpu_s=self.cpu_s, nacks=nacks)


class ConfirmTracker:
    """Counts delivery tags settled by Basic.Ack/Basic.Nack, single or ``multiple=True``."""

    def __init__(self) -> None:
        self.settled = 0
        self._floor = 0  # every tag <= floor is settled
        self._above: set[int] = set()  # settled tags above the floor (single, out of order)

    def settle(self, tag: int, multiple: bool) -> int:
        """Record one confirm frame; return how many tags it settled."""
        before = self.settled
        if multiple:
            if tag > self._floor:
                below = {t for t in self._above if t <= tag} if self._above else set()
                self.settled += tag - self._floor - len(below)
                self._above -= below
                self._floor = tag
        elif tag > self._floor and tag not in self._above:
            self._above.add(tag)
            self.settled += 1
        while self._floor + 1 in self._above:
            self._floor += 1
            self._above.remove(self._floor)
        return self.settled - before


# --------------------------------------------------------------------------- pika callback API


class _PikaCallbackClient:
    """Connection and channel lifecycle shared by the pika callback-API variants.

    The adapter (SelectConnection or AsyncioConnection) is chosen by the runner, which also sets
    ``finished`` to whatever stops its loop.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        self.watch = Stopwatch()
        self.error: str | None = None
        self.nacks = 0
        self.finished: Callable[[], None] = _noop
        self._connection: pika.connection.Connection | None = None
        self._closing = False

    # connection callbacks, passed to the adapter's constructor
    def on_open(self, connection: pika.connection.Connection) -> None:
        self._connection = connection
        connection.channel(on_open_callback=self._on_channel_open)

    def on_open_error(self, _connection: pika.connection.Connection, error: BaseException) -> None:
        self.error = f"connection failed: {error!r}"
        self.finished()

    def on_closed(self, _connection: pika.connection.Connection, reason: BaseException) -> None:
        if not self._closing and self.error is None:
            self.error = f"connection closed unexpectedly: {reason!r}"
        self.finished()

    def on_timeout(self) -> None:
        self.error = f"{self.job.variant}: no result after {self.job.timeout:g} s"
        self.close()

    def close(self) -> None:
        self._closing = True
        if self._connection is not None and self._connection.is_open:
            self._connection.close()
        elif self._connection is None or self._connection.is_closed:
            self.finished()

    def result(self, messages: int) -> Measurement:
        if self.error is not None:
            raise RuntimeError(self.error)
        return self.watch.measurement(messages, self.nacks)

    def _on_channel_open(self, channel: pika.channel.Channel) -> None:
        channel.add_on_close_callback(self._on_channel_closed)
        self.start(channel)

    def _on_channel_closed(self, _channel: pika.channel.Channel, reason: BaseException) -> None:
        if not self._closing:
            self.error = f"channel closed: {reason!r}"
            self.close()

    def start(self, channel: pika.channel.Channel) -> None:
        raise NotImplementedError


def _noop() -> None:
    pass


class PikaCallbackPublisher(_PikaCallbackClient):
    """Publishes while fewer than ``window`` are unconfirmed; tops the window up on each confirm."""

    def __init__(self, job: Job) -> None:
        super().__init__(job)
        self._tracker = ConfirmTracker()
        self._published = 0
        self._properties = pika.BasicProperties(delivery_mode=PERSISTENT)
        self._body = job.body
        self._channel: pika.channel.Channel | None = None

    def start(self, channel: pika.channel.Channel) -> None:
        self._channel = channel
        channel.confirm_delivery(self._on_confirm, callback=self._on_confirm_mode)

    def _on_confirm_mode(self, _frame: pika.frame.Method) -> None:
        self.watch.start()
        self._pump()

    def _pump(self) -> None:
        assert self._channel is not None
        publish = self._channel.basic_publish
        queue, body, properties = self.job.queue, self._body, self._properties
        limit = min(self.job.messages, self._tracker.settled + self.job.window)
        while self._published < limit:
            publish("", queue, body, properties)
            self._published += 1

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        count = self._tracker.settle(method.delivery_tag, method.multiple)
        if isinstance(method, pika.spec.Basic.Nack):
            self.nacks += count
        if self._tracker.settled >= self.job.messages:
            self.watch.stop()
            self.close()
        else:
            self._pump()


class PikaCallbackConsumer(_PikaCallbackClient):
    """Consumes with a prefetch, acks ``multiple=True`` every ``ack_every`` messages."""

    def __init__(self, job: Job) -> None:
        super().__init__(job)
        self._received = 0

    def start(self, channel: pika.channel.Channel) -> None:
        channel.basic_qos(
            prefetch_count=self.job.prefetch, callback=lambda _f: self._consume(channel)
        )

    def _consume(self, channel: pika.channel.Channel) -> None:
        channel.basic_consume(self.job.queue, self._on_message, auto_ack=False)

    def _on_message(
        self,
        channel: pika.channel.Channel,
        method: pika.spec.Basic.Deliver,
        _properties: pika.spec.BasicProperties,
        _body: bytes,
    ) -> None:
        if not self.watch.started:
            self.watch.start()
        self._received += 1
        last = self._received == self.job.messages
        if last or self._received % self.job.ack_every == 0:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if last:
            channel.queue_declare(self.job.queue, passive=True, callback=self._on_acks_processed)

    def _on_acks_processed(self, _frame: pika.frame.Method) -> None:
        self.watch.stop()
        self.close()


def _run_pika_select(client: _PikaCallbackClient) -> Measurement:
    connection = pika.SelectConnection(
        pika.URLParameters(client.job.url),
        on_open_callback=client.on_open,
        on_open_error_callback=client.on_open_error,
        on_close_callback=client.on_closed,
    )
    ioloop = connection.ioloop
    client.finished = ioloop.stop
    timer = ioloop.call_later(client.job.timeout, client.on_timeout)
    ioloop.start()
    ioloop.remove_timeout(timer)
    return client.result(client.job.messages)


def _run_pika_asyncio(client: _PikaCallbackClient) -> Measurement:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        client.finished = finished
        AsyncioConnection(
            pika.URLParameters(client.job.url),
            on_open_callback=client.on_open,
            on_open_error_callback=client.on_open_error,
            on_close_callback=client.on_closed,
            custom_ioloop=loop,
        )
        timer = loop.call_later(client.job.timeout, client.on_timeout)
        try:
            # The timer closes the connection, which resolves ``done``; the margin is a backstop.
            await asyncio.wait_for(done, client.job.timeout + 30.0)
        finally:
            timer.cancel()

    asyncio.run(main())
    return client.result(client.job.messages)


def pika_select(job: Job) -> Measurement:
    return _run_pika_select(PikaCallbackPublisher(job))


def pika_asyncio(job: Job) -> Measurement:
    return _run_pika_asyncio(PikaCallbackPublisher(job))


def pika_asyncio_consume(job: Job) -> Measurement:
    return _run_pika_asyncio(PikaCallbackConsumer(job))


# --------------------------------------------------------------------------- pika blocking


def pika_blocking_consume(job: Job) -> Measurement:
    """``ack_every == 1``: one Basic.Ack per message; otherwise ``multiple=True`` batches."""
    watch = Stopwatch()
    received = 0

    def on_message(
        channel: BlockingChannel,
        method: pika.spec.Basic.Deliver,
        _properties: pika.spec.BasicProperties,
        _body: bytes,
    ) -> None:
        nonlocal received
        if received == 0:
            watch.start()
        received += 1
        if job.ack_every == 1:
            channel.basic_ack(method.delivery_tag)
        elif received == job.messages or received % job.ack_every == 0:
            channel.basic_ack(method.delivery_tag, multiple=True)

    connection = pika.BlockingConnection(pika.URLParameters(job.url))
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=job.prefetch)
        channel.basic_consume(job.queue, on_message, auto_ack=False)
        deadline = time.monotonic() + job.timeout
        while received < job.messages:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{job.variant}: {received} of {job.messages} messages")
            # Returns as soon as deliveries were dispatched, or after ``left`` seconds.
            connection.process_data_events(time_limit=left)
        channel.queue_declare(job.queue, passive=True)  # the round trip after the last ack
        watch.stop()
    finally:
        connection.close()
    return watch.measurement(job.messages)


# --------------------------------------------------------------------------- aio-pika, aiormq


def aio_pika_publish(job: Job) -> Measurement:
    import aio_pika
    from aio_pika.exceptions import DeliveryError

    async def main() -> Measurement:
        watch = Stopwatch()
        nacks = 0
        async with asyncio.timeout(job.timeout):
            connection = await aio_pika.connect(job.url)
            async with connection:
                channel = await connection.channel(publisher_confirms=True)
                exchange = channel.default_exchange
                window = asyncio.Semaphore(job.window)

                async def publish_one() -> None:
                    nonlocal nacks
                    try:
                        message = aio_pika.Message(
                            job.body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                        )
                        await exchange.publish(message, routing_key=job.queue, mandatory=False)
                    except DeliveryError:
                        nacks += 1
                    finally:
                        window.release()

                watch.start()
                async with asyncio.TaskGroup() as tasks:
                    for _ in range(job.messages):
                        await window.acquire()
                        tasks.create_task(publish_one())
                watch.stop()
        return watch.measurement(job.messages, nacks)

    return asyncio.run(main())


def aiormq_publish(job: Job) -> Measurement:
    import aiormq
    from aiormq.exceptions import DeliveryError
    from pamqp.commands import Basic

    async def main() -> Measurement:
        watch = Stopwatch()
        nacks = 0
        async with asyncio.timeout(job.timeout):
            connection = await aiormq.connect(job.url)
            try:
                channel = await connection.channel(publisher_confirms=True)
                window = asyncio.Semaphore(job.window)
                body = job.body

                async def publish_one() -> None:
                    nonlocal nacks
                    try:
                        # A fresh Properties each time: aiormq writes a message_id into it.
                        await channel.basic_publish(
                            body,
                            routing_key=job.queue,
                            properties=Basic.Properties(delivery_mode=PERSISTENT),
                        )
                    except DeliveryError:  # what aiormq raises for a Basic.Nack
                        nacks += 1
                    finally:
                        window.release()

                watch.start()
                async with asyncio.TaskGroup() as tasks:
                    for _ in range(job.messages):
                        await window.acquire()
                        tasks.create_task(publish_one())
                watch.stop()
            finally:
                await connection.close()
        return watch.measurement(job.messages, nacks)

    return asyncio.run(main())


def aio_pika_consume(job: Job) -> Measurement:
    import aio_pika

    async def main() -> Measurement:
        watch = Stopwatch()
        received = 0
        async with asyncio.timeout(job.timeout):
            connection = await aio_pika.connect(job.url)
            async with connection:
                channel = await connection.channel()
                await channel.set_qos(prefetch_count=job.prefetch)
                queue = await channel.get_queue(job.queue)  # passive declare
                all_acked = asyncio.Event()

                async def on_message(message: AbstractIncomingMessage) -> None:
                    nonlocal received
                    if received == 0:
                        watch.start()
                    received += 1
                    last = received == job.messages
                    if last or received % job.ack_every == 0:
                        await message.ack(multiple=True)
                    if last:
                        all_acked.set()

                await queue.consume(on_message, no_ack=False)
                await all_acked.wait()
                await channel.get_queue(job.queue)  # the round trip after the last ack
                watch.stop()
        return watch.measurement(job.messages)

    return asyncio.run(main())


# --------------------------------------------------------------------------- the SDK
# Imported inside the functions, so that the raw variants' processes never load it.


def _sdk_connection(job: Job) -> ConnectionSettings:
    from sac.sdk import ConnectionSettings

    return ConnectionSettings(urls=job.urls or (job.url,))


def _check_no_recovery(variant: str, reconnects: int, other: int, what: str) -> None:
    """A run with a reconnect or a redo measured something else: refuse to report it."""
    if reconnects or other:
        raise RuntimeError(f"{variant}: {reconnects} reconnects, {other} {what} during the run")


def _sdk_async_publishing(
    job: Job, publish: Callable[[AsyncPublisher], Awaitable[object]]
) -> Measurement:
    """Times ``publish(publisher)`` on a started ``AsyncPublisher``: the two asyncio
    variants differ only in that call."""
    from sac.sdk import AsyncPublisher, PublisherSettings, QueueSettings

    settings = PublisherSettings(
        _sdk_connection(job), window=job.window, queue=QueueSettings(job.queue)
    )

    async def main() -> Measurement:
        watch = Stopwatch()
        async with asyncio.timeout(job.timeout):
            publisher = AsyncPublisher(settings)
            await publisher.start()
            try:
                watch.start()
                await publish(publisher)
                watch.stop()
            finally:
                await publisher.close()
        stats = publisher.stats
        _check_no_recovery(job.variant, stats.reconnects, stats.retransmitted, "retransmits")
        return watch.measurement(job.messages, stats.nacked)

    return asyncio.run(main())


def sdk_async_publish(job: Job) -> Measurement:
    async def one_by_one(publisher: AsyncPublisher) -> None:
        send, body = publisher.send, job.body
        futures = [await send(body) for _ in range(job.messages)]
        await asyncio.gather(*futures)

    return _sdk_async_publishing(job, one_by_one)


def sdk_async_publish_many(job: Job) -> Measurement:
    bodies = [job.body] * job.messages
    return _sdk_async_publishing(job, lambda publisher: publisher.publish_many(bodies))


def sdk_blocking_publish(job: Job) -> Measurement:
    from sac.sdk import Publisher, PublisherSettings, QueueSettings

    settings = PublisherSettings(
        _sdk_connection(job), window=job.window, queue=QueueSettings(job.queue)
    )
    watch = Stopwatch()
    bodies = [job.body] * job.messages
    publisher = Publisher(settings)
    publisher.start()
    try:
        # No timeout of its own: the parent gives up on this process after job.timeout.
        watch.start()
        publisher.publish_many(bodies)
        watch.stop()
    finally:
        publisher.close()
    stats = publisher.stats
    _check_no_recovery(job.variant, stats.reconnects, stats.retransmitted, "retransmits")
    return watch.measurement(job.messages, stats.nacked)


def _sdk_consumer_settings(job: Job) -> ConsumerSettings:
    from sac.sdk import ConsumerSettings, QueueSettings

    return ConsumerSettings(
        _sdk_connection(job),
        QueueSettings(job.queue),
        prefetch=job.prefetch,
        ack_batch=job.ack_every,
    )


def _inbox(job: Job, handled: Callable[[], None]) -> Inbox | None:
    """The ``Inbox`` over ``job.store`` whose effect calls ``handled`` (None without a
    store): what exactly-once costs a consumer whose effect is nothing but counting. Its
    lookup policy is the default (``always``: one lookup for each batch)."""
    from sac.sdk.dedup import Inbox, MemoryStore, PostgresStore, SQLiteStore, Store

    if not job.store:
        return None
    kind, _, where = job.store.partition(":")
    store: Store
    if kind == "memory":
        store = MemoryStore(max_records=10 * job.messages)
    elif kind == "sqlite":
        store = SQLiteStore(where)
    elif kind == "postgres":
        store = PostgresStore(where)
    else:
        raise ValueError(f"{job.variant}: unknown store {kind!r}")
    return Inbox(store, lambda _delivery, _tx: handled())


def sdk_async_consume(job: Job) -> Measurement:
    from sac.sdk import AsyncConsumer

    async def main() -> Measurement:
        watch = Stopwatch()
        received = 0
        all_handled = asyncio.Event()

        def count() -> None:
            nonlocal received
            if received == 0:
                watch.start()
            received += 1
            if received == job.messages:
                all_handled.set()

        async def handle(_delivery: Delivery) -> None:
            count()

        inbox = _inbox(job, count)
        consumer = AsyncConsumer(_sdk_consumer_settings(job), handle if inbox is None else inbox)
        async with asyncio.timeout(job.timeout):
            await consumer.start()
            try:
                await all_handled.wait()
                # The worker settles right after the handler returns; normally no wait at all.
                while consumer.stats.acked < job.messages:
                    await asyncio.sleep(0.0005)
                await consumer.stop()  # cancel + close: the broker has processed the acks
                watch.stop()
            finally:
                await consumer.stop()  # a no-op after the one above
        stats = consumer.stats
        _check_no_recovery(
            job.variant,
            stats.reconnects,
            stats.resubscribes + stats.handler_errors,
            "resubscribes or handler errors",
        )
        return watch.measurement(job.messages)

    return asyncio.run(main())


def sdk_blocking_consume(job: Job) -> Measurement:
    from sac.sdk import Consumer

    watch = Stopwatch()
    received = 0
    all_handled: concurrent.futures.Future[None] = concurrent.futures.Future()

    def count() -> None:
        nonlocal received
        if received == 0:
            watch.start()
        received += 1
        if received == job.messages:
            all_handled.set_result(None)

    def handle(_delivery: Delivery) -> None:
        count()

    inbox = _inbox(job, count)
    consumer = Consumer(_sdk_consumer_settings(job), handle if inbox is None else inbox)
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1, "bench-consumer-run") as pool:
        # Starts the consumer, then handles its deliveries in that thread until stop().
        running = pool.submit(consumer.run)
        try:
            concurrent.futures.wait(
                (all_handled, running),
                job.deadline_left(began),
                return_when=concurrent.futures.FIRST_COMPLETED,
            )
            if running.done():
                running.result()  # raises what stopped it
                raise RuntimeError(f"{job.variant}: run() returned after {received} messages")
            if not all_handled.done():
                raise TimeoutError(f"{job.variant}: {received} of {job.messages} messages")
            while consumer.stats.acked < job.messages:  # the loop thread sends the last batch
                job.deadline_left(began)
                time.sleep(0.0005)
            consumer.stop()  # returns once run() has finished the stop: cancel, close
            running.result(job.deadline_left(began))
            watch.stop()
        finally:
            consumer.stop()  # a no-op after the one above
    stats = consumer.stats
    _check_no_recovery(
        job.variant,
        stats.reconnects,
        stats.resubscribes + stats.handler_errors,
        "resubscribes or handler errors",
    )
    return watch.measurement(job.messages)


# --------------------------------------------------------------------------- variants


@dataclass(frozen=True)
class Variant:
    name: str
    kind: Kind
    run: Callable[[Job], Measurement]
    ack_every: int = 0
    sdk: bool = False  # False: a raw client library, a baseline


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("pika-select", "publish", pika_select),
        Variant("pika-asyncio", "publish", pika_asyncio),
        Variant("aio-pika", "publish", aio_pika_publish),
        Variant("aiormq", "publish", aiormq_publish),
        Variant("sdk-async-publish", "publish", sdk_async_publish, sdk=True),
        Variant("sdk-async-publish-many", "publish", sdk_async_publish_many, sdk=True),
        Variant("sdk-blocking-publish", "publish", sdk_blocking_publish, sdk=True),
        Variant("pika-blocking-consume", "consume", pika_blocking_consume, ack_every=1),
        Variant(
            "pika-blocking-consume-multi", "consume", pika_blocking_consume, ack_every=ACK_EVERY
        ),
        Variant("aio-pika-consume", "consume", aio_pika_consume, ack_every=ACK_EVERY),
        Variant("pika-asyncio-consume", "consume", pika_asyncio_consume, ack_every=ACK_EVERY),
        Variant("sdk-async-consume", "consume", sdk_async_consume, ack_every=ACK_EVERY, sdk=True),
        Variant(
            "sdk-blocking-consume", "consume", sdk_blocking_consume, ack_every=ACK_EVERY, sdk=True
        ),
    )
}
# Fills the consumers' queues when no raw publisher has been measured yet in this run.
DEFAULT_FILLER = "pika-select"


# --------------------------------------------------------------------------- child processes


def _child(job: Job, pipe: Pipe, run: Callable[[Job], Measurement] | None) -> None:
    """Entry point of a spawned process: run one job, send back its measurement or error."""
    try:
        measurement = (VARIANTS[job.variant].run if run is None else run)(job)
    except BaseException:
        pipe.send(("error", traceback.format_exc()))
        raise
    else:
        pipe.send(("ok", asdict(measurement)))
    finally:
        pipe.close()


def run_isolated(job: Job, run: Callable[[Job], Measurement] | None = None) -> Measurement:
    """Run ``job`` in a fresh spawned interpreter and wait for it (bounded by its timeout):
    ``run`` (a module-level function), or else the variant's own."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(job, sender, run), name=f"bench-{job.variant}")
    proc.start()
    sender.close()  # so that a dead child shows up as EOF here
    try:
        if not receiver.poll(job.timeout + CHILD_GRACE):
            raise TimeoutError(f"{job.variant}: no answer from its process")
        try:
            status, payload = receiver.recv()
        except EOFError:
            raise RuntimeError(f"{job.variant}: process died without a result") from None
    finally:
        receiver.close()
        proc.join(timeout=CHILD_GRACE)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=CHILD_GRACE)
    if status != "ok":
        raise RuntimeError(f"{job.variant} failed:\n{payload}")
    return Measurement(**payload)


# --------------------------------------------------------------------------- queue admin


@contextlib.contextmanager
def _admin(url: str) -> Iterator[BlockingChannel]:
    """A short-lived channel for declaring, counting and deleting (never timed)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        yield connection.channel()
    finally:
        connection.close()


def declare_queue(url: str, queue: str) -> None:
    """As the SDK declares it from a default ``QueueSettings``, its parking queue too: by an
    SDK publisher that connects and closes, publishing nothing. Why not by hand: the
    arguments depend on the broker the connection reaches (the parking queue's delivery
    limit is -1 on 4.x and no argument on 3.x), and an SDK variant refuses a queue declared
    otherwise (``QueueMismatch``)."""
    from sac.sdk import ConnectionSettings, Publisher, PublisherSettings, QueueSettings

    settings = PublisherSettings(ConnectionSettings(urls=[url], name="bench-declare"),
                                 queue=QueueSettings(queue))
    with Publisher(settings):
        pass


def queue_depth(url: str, queue: str) -> int:
    with _admin(url) as channel:
        ok = channel.queue_declare(queue, passive=True)
        return int(ok.method.message_count)


def delete_queue(url: str, queue: str) -> None:
    with _admin(url) as channel:
        channel.queue_delete(queue)
        channel.queue_delete(f"{queue}.parked")


# --------------------------------------------------------------------------- orchestration


@dataclass
class Outcome:
    """All runs of one variant, and what was noticed on the way."""

    kind: Kind
    runs: list[Measurement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return float(statistics.median(getattr(m, attr) for m in self.runs))

    def broker_median(self) -> float | None:
        """Median broker CPU µs per message, None unless every run has it."""
        values = [m.broker_cpu_us_per_msg for m in self.runs]
        known = [v for v in values if v is not None]
        return float(statistics.median(known)) if known and len(known) == len(values) else None

    def summary(self) -> dict[str, Any]:
        broker = self.broker_median()
        return {
            "kind": self.kind,
            "msg_per_s": round(self.median("msg_per_s"), 1),
            "client_cpu_us_per_msg": round(self.median("cpu_us_per_msg"), 2),
            "broker_cpu_us_per_msg": None if broker is None else round(broker, 2),
            "wall_s": round(self.median("wall_s"), 4),
            "nacks": sum(m.nacks for m in self.runs),
            "runs": [
                {
                    "msg_per_s": round(m.msg_per_s, 1),
                    "client_cpu_us_per_msg": round(m.cpu_us_per_msg, 2),
                    "broker_cpu_s": None if m.broker_cpu_s is None else round(m.broker_cpu_s, 3),
                    "wall_s": round(m.wall_s, 4),
                    "cpu_s": round(m.cpu_s, 4),
                    "nacks": m.nacks,
                }
                for m in self.runs
            ],
            "notes": self.notes,
        }


@dataclass(frozen=True)
class Ratio:
    """One SDK variant against one raw variant of the same kind, medians over the runs."""

    sdk: str
    baseline: str
    fastest_raw: bool  # the baseline is the fastest raw variant of its kind in this run
    throughput: float  # SDK msg/s / raw msg/s: above 1 is the SDK faster
    cpu: float  # SDK CPU µs/msg / raw CPU µs/msg: above 1 is the SDK hungrier

    @property
    def meets_target(self) -> bool | None:
        """Only against the fastest raw client does the issue's target apply."""
        return self.throughput >= TARGET_THROUGHPUT_RATIO if self.fastest_raw else None

    def summary(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "fastest_raw": self.fastest_raw,
            "throughput_ratio": round(self.throughput, 3),
            "cpu_ratio": round(self.cpu, 3),
            "meets_target": self.meets_target,
        }


def ratios(outcomes: dict[str, Outcome]) -> list[Ratio]:
    """Each measured SDK variant against the fastest raw variant of its kind, then against the
    ``RATIO_BASELINES`` of its kind (those measured, and not already the fastest)."""
    found: list[Ratio] = []
    for kind in ("publish", "consume"):
        measured = {n: o for n, o in outcomes.items() if o.kind == kind and o.runs}
        raw = {n: o for n, o in measured.items() if not VARIANTS[n].sdk}
        if not raw:
            continue
        fastest = max(raw, key=lambda n: raw[n].median("msg_per_s"))
        baselines = [fastest, *(n for n in RATIO_BASELINES[kind] if n in raw and n != fastest)]
        for name, outcome in measured.items():
            if not VARIANTS[name].sdk:
                continue
            for base in baselines:
                found.append(
                    Ratio(
                        sdk=name,
                        baseline=base,
                        fastest_raw=base == fastest,
                        throughput=outcome.median("msg_per_s") / raw[base].median("msg_per_s"),
                        cpu=outcome.median("cpu_us_per_msg") / raw[base].median("cpu_us_per_msg"),
                    )
                )
    return found


def _ratios_report(found: Sequence[Ratio]) -> dict[str, Any]:
    report: dict[str, Any] = {
        "target_throughput_ratio_vs_fastest_raw": TARGET_THROUGHPUT_RATIO,
        "throughput_ratio": "SDK msg/s / raw msg/s (medians)",
        "cpu_ratio": "SDK client CPU us/msg / raw client CPU us/msg (medians)",
    }
    for ratio in found:
        report.setdefault(ratio.sdk, []).append(ratio.summary())
    return report


class Bench:
    def __init__(self, cluster: LocalCluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.urls = tuple(cluster.urls())
        self.url = self.urls[0]
        self.node1 = cluster.nodes[0].name
        self.args = args
        self.outcomes: dict[str, Outcome] = {}
        self.fillers: set[str] = set()

    def _job(self, variant: str, queue: str, ack_every: int = 0) -> Job:
        return Job(
            variant=variant,
            url=self.url,
            queue=queue,
            messages=self.args.messages,
            window=self.args.window,
            prefetch=PREFETCH,
            ack_every=ack_every,
            timeout=self.args.timeout,
            urls=self.urls,
        )

    def filler(self) -> str:
        """The raw publisher with the best median msg/s measured so far in this run (never an
        SDK one, whose messages carry a message id: every consumer reads the same messages)."""
        measured = [
            (o.median("msg_per_s"), name)
            for name, o in self.outcomes.items()
            if o.kind == "publish" and o.runs and not VARIANTS[name].sdk
        ]
        return max(measured)[1] if measured else DEFAULT_FILLER

    def leader(self, queue: str) -> str | None:
        leader = self.cluster.management().queue(queue).node
        return None if leader is None else str(leader)

    def run_once(self, variant: Variant, round_: int) -> None:
        outcome = self.outcomes.setdefault(variant.name, Outcome(variant.kind))
        queue = f"bench-{variant.name}-{round_}-{uuid.uuid4().hex[:8]}"
        n = self.args.messages
        declare_queue(self.url, queue)
        try:
            leader = self.leader(queue)
            if leader != self.node1:
                outcome.notes.append(f"run {round_}: queue leader {leader}, not {self.node1}")
            if variant.kind == "consume":
                filler = self.filler()
                self.fillers.add(filler)
                fill = run_isolated(self._job(filler, queue))
                depth = queue_depth(self.url, queue)
                if fill.nacks or depth != n:
                    raise RuntimeError(
                        f"filling {queue} with {filler}: {fill.nacks} nacks, depth {depth} != {n}"
                    )
            job = self._job(variant.name, queue, variant.ack_every)
            broker_before = broker_cpu_s(self.cluster)
            measurement = run_isolated(job)
            measurement = replace(
                measurement, broker_cpu_s=broker_cpu_s(self.cluster) - broker_before)
            outcome.runs.append(measurement)
            left = queue_depth(self.url, queue)
            expected = n if variant.kind == "publish" else 0
            if left != expected:
                outcome.notes.append(f"run {round_}: {left} messages in queue, expected {expected}")
            if measurement.nacks:
                outcome.notes.append(f"run {round_}: {measurement.nacks} nacks")
            print(
                f"  {variant.name:<28} run {round_ + 1}: {measurement.msg_per_s:>9.0f} msg/s "
                f"{measurement.cpu_us_per_msg:>8.1f} us/msg",
                file=sys.stderr,
                flush=True,
            )
        finally:
            delete_queue(self.url, queue)

    def run(self, variants: Sequence[Variant]) -> None:
        for round_ in range(self.args.repeat):
            for variant in variants:
                self.run_once(variant, round_)

    def broker(self) -> dict[str, Any]:
        return {
            "nodes": len(self.cluster.nodes),
            "connected_to": self.node1,
            **broker_versions(self.cluster.management().overview()),
        }


def _versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in LIBRARIES}


def _table(outcomes: dict[str, Outcome], found: Sequence[Ratio]) -> str:
    lines = [f"{'variant':<28} {'msg/s':>10} {'CPU us/msg':>11} {'broker us/msg':>14} "
             f"{'wall s':>8}  notes"]
    for name, outcome in outcomes.items():
        s = outcome.summary()
        notes = "; ".join(outcome.notes) or ""
        broker = s["broker_cpu_us_per_msg"]
        lines.append(
            f"{name:<28} {s['msg_per_s']:>10.0f} {s['client_cpu_us_per_msg']:>11.1f} "
            f"{'-' if broker is None else f'{broker:.1f}':>14} {s['wall_s']:>8.2f}  {notes}"
        )
    if found:
        lines += [
            "",
            f"{'SDK / raw':<28} {'baseline':<36} {'msg/s':>6} {'CPU':>6}  "
            f"target (msg/s >= {TARGET_THROUGHPUT_RATIO:.0%} of the fastest raw)",
        ]
        for r in found:
            base = f"{r.baseline} (fastest raw)" if r.fastest_raw else r.baseline
            target = {True: "met", False: "MISSED", None: ""}[r.meets_target]
            lines.append(f"{r.sdk:<28} {base:<36} {r.throughput:>5.2f}x {r.cpu:>5.2f}x  {target}")
    return "\n".join(lines)


def _variants(spec: str) -> list[Variant]:
    names = [v.strip() for v in spec.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}"
        )
    # Publishers first, so that the consumers' queues are filled by this run's fastest one.
    return sorted((VARIANTS[n] for n in dict.fromkeys(names)), key=lambda v: v.kind != "publish")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description="The SDK's publishers and consumers against the raw AMQP client libraries "
        "on a fresh local 3-node RabbitMQ cluster.",
    )
    parser.add_argument("--messages", type=positive_int, default=DEFAULT_MESSAGES)
    parser.add_argument(
        "--window", type=positive_int, default=DEFAULT_WINDOW, help="max unconfirmed publishes"
    )
    parser.add_argument(
        "--variants",
        type=_variants,
        default=list(VARIANTS.values()),
        help=f"comma list of: {', '.join(VARIANTS)} (default: all)",
    )
    parser.add_argument(
        "--repeat", type=positive_int, default=1, help="runs per variant; the median is reported"
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds allowed per run"
    )
    parser.add_argument("--cluster-name", default="bench", help="LocalCluster name")
    parser.add_argument("--rabbitmq", type=rabbitmq_series, default=DEFAULT_SERIES,
                        help=f"the RabbitMQ series to boot (default {DEFAULT_SERIES}); "
                        "python -m bench.versions compares two in one run")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    print(f"booting a 3-node RabbitMQ {args.rabbitmq} cluster {args.cluster_name!r} ...",
          file=sys.stderr, flush=True)
    with LocalCluster(name=args.cluster_name, nodes=3, rabbitmq=args.rabbitmq) as cluster:
        bench = Bench(cluster, args)
        broker = bench.broker()
        bench.run(args.variants)
    report = describe(args, started, load_before, bench, broker)
    save(RESULTS_PREFIX, started, report, _table(bench.outcomes, ratios(bench.outcomes)))
    return 0


def describe(args: argparse.Namespace, started: dt.datetime, load_before: Sequence[float],
             bench: Bench, broker: dict[str, Any]) -> dict[str, Any]:
    """The JSON report of a run (``bench.versions`` writes one per RabbitMQ series)."""
    found = ratios(bench.outcomes)
    return {
        "timestamp": started.isoformat(timespec="seconds"),
        "messages": args.messages,
        "window": args.window,
        "prefetch": PREFETCH,
        "ack_every": ACK_EVERY,
        "message_size": MESSAGE_SIZE,
        "delivery_mode": PERSISTENT,
        "queue_type": "quorum",
        "repeat": args.repeat,
        "statistic": "median",
        "filled_with": sorted(bench.fillers),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        # Other work on the machine skews everything: these show whether there was any.
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "libraries": _versions(),
        "sdk": sdk_revision(),
        "broker": broker,
        "variants": {name: o.summary() for name, o in bench.outcomes.items()},
        "ratios": _ratios_report(found),
    }


if __name__ == "__main__":
    sys.exit(main())
