"""Raw AMQP client libraries on a local 3-node RabbitMQ cluster: the same-run baseline for the SDK.

Nothing here imports the SDK. Each variant is the plain library written the way a competent user
of that library would write it, so that a later SDK run on the same machine can be read as "this
much slower or more CPU-hungry than the raw client it sits on".

Publisher variants (256-byte persistent messages, publisher confirms, at most ``--window``
unconfirmed messages in flight, the window kept full, to a durable quorum queue whose leader is
node 1, through a connection to node 1; timed from the first publish to the last confirm):

``pika-select``
    pika's own ``SelectConnection`` and its callback API: the lowest-overhead way to use pika, and
    what pika-based synchronous code can at best hope to reach.
``pika-asyncio``
    the same callback code on ``AsyncioConnection``: separates the cost of asyncio's event loop
    from the cost of pika's protocol code (the SDK runs pika on an asyncio loop).
``aio-pika``
    ``aio_pika.connect`` with ``exchange.publish`` awaitables, one task per message, a semaphore
    for the window: the idiomatic asyncio client most applications use.
``aiormq``
    the protocol layer under aio-pika on its own (``basic_publish`` per message in a task): how
    much of aio-pika's cost is aio-pika and how much is aiormq.

Consumer variants (each drains a fresh quorum queue pre-filled with ``--messages`` messages by the
fastest publisher of the run, outside the timed part; prefetch 1000; timed from the first delivery
to the last ack plus one round trip, a passive ``queue.declare``, that proves the channel has
processed every ack before it):

``pika-blocking-consume``
    ``BlockingConnection`` acking every message on its own: the textbook consumer, and the worst
    case for the number of frames and syscalls.
``pika-blocking-consume-multi``
    the same acking with ``multiple=True`` every 100 messages: what batching acks alone buys.
``aio-pika-consume``
    aio-pika's ``queue.consume`` callback, ``ack(multiple=True)`` every 100 messages.
``pika-asyncio-consume``
    pika's callback API on ``AsyncioConnection``, ``multiple=True`` every 100 messages.

Every variant runs in its own fresh process (``multiprocessing`` "spawn"), one after another, so
that none shares an event loop, imported modules or GC state with another, and none competes with
another for the two cores the broker also runs on. Client CPU is ``time.process_time()`` of that
process over the timed interval. All variants publish with ``mandatory=False`` so that the AMQP
traffic is identical whatever the library's default.

Run ``python -m bench.raw_clients --help``; results go to ``bench/results/raw-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.metadata
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
import traceback
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pika
import pika.channel
import pika.connection
import pika.frame
import pika.spec
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.adapters.blocking_connection import BlockingChannel

from server import LocalCluster

if TYPE_CHECKING:
    from multiprocessing.connection import Connection as Pipe

    from aio_pika.abc import AbstractIncomingMessage

MESSAGE_SIZE = 256
PREFETCH = 1000
ACK_EVERY = 100
PERSISTENT = 2
DEFAULT_MESSAGES = 50_000
DEFAULT_WINDOW = 1000
DEFAULT_TIMEOUT = 300.0
# Seconds a child process may take on top of its job's own timeout (interpreter start, imports).
CHILD_GRACE = 60.0
QUORUM = {"x-queue-type": "quorum"}
RESULTS_DIR = Path(__file__).resolve().parent / "results"
LIBRARIES = ("pika", "aio-pika", "aiormq", "pamqp")

Kind = Literal["publish", "consume"]


# --------------------------------------------------------------------------- jobs and results


@dataclass(frozen=True)
class Job:
    """What one child process does: one variant against one queue."""

    variant: str
    url: str = field(repr=False)  # carries the password: never printed
    queue: str
    messages: int
    window: int
    prefetch: int
    ack_every: int
    timeout: float

    @property
    def body(self) -> bytes:
        return b"x" * MESSAGE_SIZE


@dataclass(frozen=True)
class Measurement:
    """One timed run: wall and client CPU seconds for ``messages`` messages."""

    messages: int
    wall_s: float
    cpu_s: float
    nacks: int = 0

    @property
    def msg_per_s(self) -> float:
        return self.messages / self.wall_s

    @property
    def cpu_us_per_msg(self) -> float:
        return self.cpu_s / self.messages * 1e6


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


# --------------------------------------------------------------------------- variants


@dataclass(frozen=True)
class Variant:
    name: str
    kind: Kind
    run: Callable[[Job], Measurement]
    ack_every: int = 0


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("pika-select", "publish", pika_select),
        Variant("pika-asyncio", "publish", pika_asyncio),
        Variant("aio-pika", "publish", aio_pika_publish),
        Variant("aiormq", "publish", aiormq_publish),
        Variant("pika-blocking-consume", "consume", pika_blocking_consume, ack_every=1),
        Variant(
            "pika-blocking-consume-multi", "consume", pika_blocking_consume, ack_every=ACK_EVERY
        ),
        Variant("aio-pika-consume", "consume", aio_pika_consume, ack_every=ACK_EVERY),
        Variant("pika-asyncio-consume", "consume", pika_asyncio_consume, ack_every=ACK_EVERY),
    )
}
# Fills the consumers' queues when no publisher variant has been measured yet in this run.
DEFAULT_FILLER = "pika-select"


# --------------------------------------------------------------------------- child processes


def _child(job: Job, pipe: Pipe) -> None:
    """Entry point of a spawned process: run one job, send back its measurement or error."""
    try:
        measurement = VARIANTS[job.variant].run(job)
    except BaseException:
        pipe.send(("error", traceback.format_exc()))
        raise
    else:
        pipe.send(("ok", asdict(measurement)))
    finally:
        pipe.close()


def run_isolated(job: Job) -> Measurement:
    """Run ``job`` in a fresh spawned interpreter and wait for it (bounded by its timeout)."""
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(job, sender), name=f"bench-{job.variant}")
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
    with _admin(url) as channel:
        channel.queue_declare(queue, durable=True, arguments=QUORUM)


def queue_depth(url: str, queue: str) -> int:
    with _admin(url) as channel:
        ok = channel.queue_declare(queue, passive=True)
        return int(ok.method.message_count)


def delete_queue(url: str, queue: str) -> None:
    with _admin(url) as channel:
        channel.queue_delete(queue)


# --------------------------------------------------------------------------- orchestration


@dataclass
class Outcome:
    """All runs of one variant, and what was noticed on the way."""

    kind: Kind
    runs: list[Measurement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(m, attr) for m in self.runs)

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "msg_per_s": round(self.median("msg_per_s"), 1),
            "client_cpu_us_per_msg": round(self.median("cpu_us_per_msg"), 2),
            "wall_s": round(self.median("wall_s"), 4),
            "nacks": sum(m.nacks for m in self.runs),
            "runs": [
                {
                    "msg_per_s": round(m.msg_per_s, 1),
                    "client_cpu_us_per_msg": round(m.cpu_us_per_msg, 2),
                    "wall_s": round(m.wall_s, 4),
                    "cpu_s": round(m.cpu_s, 4),
                    "nacks": m.nacks,
                }
                for m in self.runs
            ],
            "notes": self.notes,
        }


class Bench:
    def __init__(self, cluster: LocalCluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.url = cluster.urls()[0]
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
        )

    def filler(self) -> str:
        """The publisher with the best median msg/s measured so far in this run."""
        measured = [
            (o.median("msg_per_s"), name)
            for name, o in self.outcomes.items()
            if o.kind == "publish" and o.runs
        ]
        return max(measured)[1] if measured else DEFAULT_FILLER

    def leader(self, queue: str) -> str | None:
        info = self.cluster.management_api(f"queues/%2F/{urllib.parse.quote(queue, safe='')}")
        leader = info.get("leader") or info.get("node")
        return None if leader is None else str(leader)

    def run_once(self, variant: Variant, round_: int) -> None:
        outcome = self.outcomes.setdefault(variant.name, Outcome(variant.kind))
        queue = f"bench-raw-{variant.name}-{round_}-{uuid.uuid4().hex[:8]}"
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
            measurement = run_isolated(job)
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
        overview = self.cluster.management_api("overview")
        return {
            "nodes": len(self.cluster.nodes),
            "connected_to": self.node1,
            "rabbitmq_version": overview.get("rabbitmq_version"),
            "erlang_version": overview.get("erlang_version"),
        }


def _versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in LIBRARIES}


def _table(outcomes: dict[str, Outcome]) -> str:
    lines = [f"{'variant':<28} {'msg/s':>10} {'CPU us/msg':>11} {'wall s':>8}  notes"]
    for name, outcome in outcomes.items():
        s = outcome.summary()
        notes = "; ".join(outcome.notes) or ""
        lines.append(
            f"{name:<28} {s['msg_per_s']:>10.0f} {s['client_cpu_us_per_msg']:>11.1f} "
            f"{s['wall_s']:>8.2f}  {notes}"
        )
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


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.raw_clients",
        description="Raw AMQP client libraries (no SDK) on a fresh local 3-node RabbitMQ cluster.",
    )
    parser.add_argument("--messages", type=_positive_int, default=DEFAULT_MESSAGES)
    parser.add_argument(
        "--window", type=_positive_int, default=DEFAULT_WINDOW, help="max unconfirmed publishes"
    )
    parser.add_argument(
        "--variants",
        type=_variants,
        default=list(VARIANTS.values()),
        help=f"comma list of: {', '.join(VARIANTS)} (default: all)",
    )
    parser.add_argument(
        "--repeat", type=_positive_int, default=1, help="runs per variant; the median is reported"
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds allowed per run"
    )
    parser.add_argument("--cluster-name", default="bench", help="LocalCluster name")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    print(f"booting a 3-node cluster {args.cluster_name!r} ...", file=sys.stderr, flush=True)
    with LocalCluster(name=args.cluster_name, nodes=3) as cluster:
        bench = Bench(cluster, args)
        broker = bench.broker()
        bench.run(args.variants)
    report = {
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
        "broker": broker,
        "variants": {name: o.summary() for name, o in bench.outcomes.items()},
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"raw-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(_table(bench.outcomes))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
