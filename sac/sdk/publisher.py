"""Publishers that lose nothing: confirms always on, and every unconfirmed message sent again,
with the same id and in its original order, after a reconnect.

``AsyncPublisher`` is the asyncio face; ``Publisher`` is the blocking face over the same code.

Example::

    async with AsyncPublisher(PublisherSettings(conn, queue=QueueSettings("orders"))) as pub:
        message_id = await pub.publish(b"order 1")          # returns once confirmed
        futures = [await pub.send(b"...") for _ in range(10_000)]   # pipelined
        await asyncio.gather(*futures)

A message sent again after a lost confirm carries the header ``x-sac-retransmit`` (it arrives
with ``redelivered`` false, so the consumer's dedup must look it up).

Bodies are bytes by default; ``serializer=JSON`` (or any ``Serializer``) publishes other
values, encoded before they are handed over, with the serializer's content type::

    async with AsyncPublisher(settings, serializer=JSON) as pub:
        await pub.publish({"order": 1, "lines": [{"sku": "A-1", "qty": 2}]})

A message over the broker's ``max_message_size`` fails alone with ``MessageTooLarge``: the
broker closes the channel over it, the outbox reads the size and the limit from that reply,
fails every message it holds over the limit, keeps the limit to refuse later ones before
they are sent, and sends the rest again.

A nack (a quorum queue electing a leader, a full ``reject-publish`` queue) narrows how many
messages are in flight, down to one probe at a time, paced by ``nack_backoff``; acks widen it
again (``sac.sdk._core.congestion``, ``PublisherSettings.throttle_on_nack``). So an election costs
a few nacks, not one per message of the window on every retry.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Self, TypedDict, assert_never, cast, overload

import attrs
from pika.spec import Basic, BasicProperties

from sac.history import Confirm, Nack, Publish, Retransmit, Return
from ._core.codecs import BYTES, Serializer, checked, encode_body
from ._core.ids import id_key, new_message_id
from ._core.lifecycle import Lifecycle, Phase
from ._core.outbox import (
    Action,
    Closed,
    Confirmed,
    Failed,
    HandOver,
    Held,
    Nacked,
    Outbox,
    Recycle,
    Returned,
    Send,
    SetTimer,
)
from ._delivery import RETRANSMIT_HEADER
from ._errors import (
    ConfigurationError,
    MessageTooLarge,
    SacError,
    Unconfirmed,
)
from ._history import HistoryRecorder
from ._loop_thread import LoopThread, to_concurrent
from ._recovery import Recovering
from ._settings import PublisherSettings
from ._transport import Link, LinkLost, broker_close
from ._wire.frames import encode_header, encode_id, encode_publish

if TYPE_CHECKING:
    # A default for the body's type (PEP 696): a publisher made without a serializer, and the
    # bare annotation ``Publisher``, take bytes, the SDK's default body. The checker reads it
    # from typing_extensions; at run time a plain TypeVar does (no dependency).
    from typing_extensions import TypeVar

    Body = TypeVar("Body", default=bytes)
else:
    from typing import TypeVar

    Body = TypeVar("Body")

_Extra = tuple[dict[str, Any] | None, str | None, str | None]
"""headers, content type, correlation id: kept to encode a retransmission's properties."""
_Frames = tuple[bytes, bytes, bytes, _Extra | None]
"""What the outbox carries for each message: the Basic.Publish and content-header payloads,
encoded once when it is handed over, the body, and the options a retransmission's header
needs again."""
_METHOD_CACHE = 1024  # encoded Basic.Publish methods kept, one per exchange and routing key


class PublishOptions(TypedDict, total=False):
    """What ``publish``, ``send`` and ``publish_many`` take besides the body, on both faces
    (a dict of them passes as ``**options``, checked by a type checker): ``routing_key``
    (default: the settings' queue), ``exchange`` (default: the default exchange),
    ``message_id`` (default: a new one; the inbox's key), ``headers``, ``content_type`` (a
    publisher with a serializer sets its own: one given too must name the same media type,
    and may add parameters), ``correlation_id``."""

    routing_key: str | None
    exchange: str
    message_id: str | None
    headers: Mapping[str, Any] | None
    content_type: str | None
    correlation_id: str | None


log = logging.getLogger("sac.publisher")


class _Batch:
    """The outcome of a ``publish_many``: one counter instead of a future per message."""

    __slots__ = ("done", "error", "error_seq", "left")

    def __init__(self, done: asyncio.Future[None], count: int) -> None:
        self.done = done
        self.left = count
        self.error: BaseException | None = None
        self.error_seq = 0

    def settle(self, seq: int, error: BaseException | None) -> None:
        if error is not None and (self.error is None or seq < self.error_seq):
            self.error, self.error_seq = error, seq  # the first failure in the caller's order
        self.left -= 1
        if self.left <= 0 and not self.done.done():
            self.done.set_result(None)


_Waiter = asyncio.Future[str] | _Batch
_HandOver = HandOver[_Frames, _Waiter]
_Held = Held[_Frames, _Waiter]


def _tell(held: _Held, error: BaseException) -> None:
    """Give the caller of ``held`` its failure."""
    waiter = held.handover.waiter
    if isinstance(waiter, _Batch):
        waiter.settle(held.seq, error)
    elif waiter is not None and not waiter.done():
        waiter.set_exception(error)


def _body_bytes(body: Any) -> bytes:
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    raise ConfigurationError(f"message body must be bytes, got {type(body).__name__}")


def _where(face: str, method: str, exchange: str, routing_key: str) -> str:
    """Who failed, for an error: the face, its method and where the message was going."""
    to = f"exchange {exchange!r}, routing key {routing_key!r}" if exchange else repr(routing_key)
    return f"{face}.{method}() to {to}"


def _encode_all(
    serializer: Serializer[Any], bodies: Sequence[Any], content_type: str | None, where: str
) -> tuple[list[bytes], str | None]:
    """Every body encoded, and the content type they go with, or the first one's error."""
    encoded: list[bytes] = []
    sent_as = content_type
    for body in bodies:
        data, sent_as = encode_body(serializer, body, content_type, where)
        encoded.append(data)
    return encoded, sent_as if encoded else content_type


def _retransmit_header(held: _Held) -> bytes:
    """The properties of a message going out again: the header ``x-sac-retransmit`` says how
    many times it went out before."""
    _method, _header, body, extra = held.message
    headers, content_type, correlation_id = extra or (None, None, None)
    return encode_header(
        len(body),
        encode_id(held.message_id),
        {**(headers or {}), RETRANSMIT_HEADER: held.sends - 1},
        content_type,
        correlation_id,
    )


@attrs.frozen(kw_only=True)
class PublisherStats:
    """What a publisher did so far (``stats``): messages published (first sends), confirmed,
    sent again after a loss or a nack, nacked and returned by the broker, and reconnects."""

    published: int
    confirmed: int
    retransmitted: int
    nacked: int
    returned: int
    reconnects: int


class AsyncPublisher(Recovering, Generic[Body]):
    """Publishes with confirms, at most ``settings.window`` messages unconfirmed.

    ``serializer`` (default ``BYTES``: bodies are bytes, the content type the caller's)
    encodes every body and sets its content type: ``AsyncPublisher(settings,
    serializer=JSON)`` publishes any JSON value as ``application/json``. A body it cannot
    encode raises ``ConfigurationError`` (naming the publisher, the value's type and why)
    before anything is sent, and so does a ``content_type=`` of another media type than the
    serializer's.

    A shell around ``sac.sdk._core.outbox.Outbox``, which decides everything: this class turns
    pika's callbacks into the outbox's events and carries out the actions it returns (frames
    through the connection's batched output, the callers' futures, one loop timer).
    """

    _role = "publisher"

    @overload
    def __init__(
        self: AsyncPublisher[bytes], settings: PublisherSettings, *,
        recorder: HistoryRecorder | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self, settings: PublisherSettings, *, serializer: Serializer[Body],
        recorder: HistoryRecorder | None = None,
    ) -> None: ...

    def __init__(
        self,
        settings: PublisherSettings,
        *,
        serializer: Serializer[Any] = BYTES,
        recorder: HistoryRecorder | None = None,
    ) -> None:
        self.serializer: Serializer[Body] = checked(serializer, "AsyncPublisher")
        super().__init__(settings.connection, recorder)
        self.settings = settings
        self._box: Outbox[_Frames, _Waiter] = Outbox(settings.outbox_policy())
        self._life: Lifecycle = self._box.lifecycle
        self._methods: dict[tuple[str, str], bytes] = {}
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closing: asyncio.Future[list[str]] | None = None
        self._pump_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Self:
        """Connect to the first node that answers (fail fast if none does)."""
        self._box.start()
        self._loop = asyncio.get_running_loop()
        try:
            await self._open(retry=False)
        except SacError as exc:
            self._give_up(exc)
            raise
        return self

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def stats(self) -> PublisherStats:
        counts = self._box.stats()
        return PublisherStats(
            published=counts.published, confirmed=counts.confirmed,
            retransmitted=counts.retransmitted, nacked=counts.nacked,
            returned=counts.returned, reconnects=self._reconnecting.reconnects,
        )

    @property
    def outstanding(self) -> int:
        """Accepted but not yet confirmed (in flight, waiting to be sent, or parked)."""
        return self._box.outstanding

    async def close(self, timeout: float | None = None) -> None:
        """Wait (bounded) for every outstanding confirm, then close.

        Raises ``Unconfirmed`` naming what stayed unconfirmed; those messages may or may
        not have reached the queue.
        """
        loop = self._loop
        if loop is None or self._life.shutting_down:
            self._life.close()  # before start(): nothing to wait for
            return
        wait = self.settings.close_timeout if timeout is None else timeout
        closing = self._closing = loop.create_future()
        self._run(self._box.close(loop.time(), wait))
        leftovers = await closing
        await self._stop_recovery()
        link, self._link = self._link, None
        if link is not None:
            await link.close()
        if self._recorder is not None:
            self._recorder.flush()
        if leftovers:
            raise Unconfirmed(leftovers)

    # ------------------------------------------------------------------ publishing

    async def publish(
        self,
        body: Body,
        *,
        routing_key: str | None = None,
        exchange: str = "",
        message_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        correlation_id: str | None = None,
    ) -> str:
        """Publish one message and return its id once the broker confirmed it (or raise
        ``ConfirmTimeout`` after ``confirm_timeout``: the message stays tracked)."""
        handover, confirmed = self._prepare(
            "publish", body, routing_key, exchange, message_id, headers, content_type,
            correlation_id)
        if self._box.room <= 0:
            await self._room()
        self._hand_over(handover, timed=True)
        return await asyncio.shield(confirmed)

    async def send(
        self,
        body: Body,
        *,
        routing_key: str | None = None,
        exchange: str = "",
        message_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        correlation_id: str | None = None,
    ) -> asyncio.Future[str]:
        """Hand one message over, waiting only for room in the window; a future that
        resolves to its id when confirmed (pipelined publishing). ``publish_many`` does the
        same for many messages without a future each."""
        handover, confirmed = self._prepare(
            "send", body, routing_key, exchange, message_id, headers, content_type,
            correlation_id)
        if self._box.room <= 0:
            await self._room()
        self._hand_over(handover, timed=False)
        return confirmed

    def _prepare(
        self,
        method: str,
        body: Body,
        routing_key: str | None,
        exchange: str,
        message_id: str | None,
        headers: Mapping[str, Any] | None,
        content_type: str | None,
        correlation_id: str | None,
    ) -> tuple[_HandOver, asyncio.Future[str]]:
        """One message checked and encoded, or the error, before any wait for room; and the
        future its caller waits on."""
        if self._life.phase is not Phase.RUNNING:
            self._check_usable()
        loop = self._loop
        assert loop is not None
        key = routing_key if routing_key is not None else self._routing_key(None)
        serializer = self.serializer
        data: bytes
        if serializer is BYTES:
            data = cast(bytes, body) if type(body) is bytes else _body_bytes(body)
        else:
            data, content_type = encode_body(serializer, body, content_type,
                                             _where("AsyncPublisher", method, exchange, key))
        mid = message_id or new_message_id()
        confirmed: asyncio.Future[str] = loop.create_future()
        handover = self._one(data, exchange, key, mid,
                             self._extra(headers, content_type, correlation_id), confirmed)
        return handover, confirmed

    def _hand_over(self, handover: _HandOver, timed: bool) -> None:
        loop = self._loop
        assert loop is not None
        self._box.accept(handover, loop.time(), timed)
        self._handed_over(loop)

    async def publish_many(
        self,
        bodies: Iterable[Body],
        *,
        routing_key: str | None = None,
        exchange: str = "",
        message_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        correlation_id: str | None = None,
    ) -> list[str]:
        """Publish all, in order, keeping the window full; their ids once every one is
        confirmed. The first failure (in the order of ``bodies``) is raised after all have
        settled; a message that cannot be handed over at all (too large, publisher closed)
        raises at once, the ones before it still going out.

        The fast path for bulk publishing: no future per message. Options apply to every
        message, as they would to each ``send``.
        """
        box = self._box
        if self._life.phase is not Phase.RUNNING:
            self._check_usable()
        loop = self._loop
        assert loop is not None
        key = routing_key if routing_key is not None else self._routing_key(None)
        items: Sequence[Any] = bodies if isinstance(bodies, list | tuple) else list(bodies)
        if self.serializer is not BYTES:
            # All encoded first: a value that cannot be encoded fails the call before any
            # message of it is sent.
            items, content_type = _encode_all(
                self.serializer, items, content_type,
                _where("AsyncPublisher", "publish_many", exchange, key))
        extra = self._extra(headers, content_type, correlation_id)
        method = self._method(exchange, key)
        max_size = self.settings.max_message_size
        total = len(items)
        batch = _Batch(loop.create_future(), total)
        ids: list[str] = []
        done = 0
        while done < total:
            if box.room <= 0:
                await self._room()
            if self._life.phase is not Phase.RUNNING:
                self._check_usable()
            # As many as the window has room for, in one go: no await from here to the
            # hand-over, so nothing else touches the outbox meanwhile.
            end = min(total, done + box.room)
            chunk = new_message_id.many(end - done) if message_id is None else (
                [message_id] * (end - done))
            frames: list[_Frames] = []
            sizes: list[int] = []
            learnt = box.broker_max_size  # fixed while this chunk is built (no await)
            fits = max_size if learnt is None else min(max_size, learnt)
            try:
                for body, mid in zip(items[done:end], chunk, strict=True):
                    if type(body) is not bytes:
                        body = _body_bytes(body)
                    size = len(body)
                    if size > fits:  # rare: the outbox says why
                        too_large = box.oversized(mid, size, max_size)
                        assert too_large is not None
                        raise too_large
                    header = encode_header(size, encode_id(mid), *extra) if extra else (
                        encode_header(size, encode_id(mid)))
                    frames.append((method, header, body, extra))
                    sizes.append(size)
            finally:
                if frames:
                    # One hand-over for the chunk: the outbox builds the only per-message
                    # object (its record), so a message costs no value of its own here.
                    count = len(frames)
                    taken = chunk if count == len(chunk) else chunk[:count]
                    box.accept(HandOver(message_ids=taken, messages=frames, sizes=sizes,
                                        exchange=exchange, routing_key=key, waiter=batch),
                               loop.time())
                    ids.extend(taken)
                    done += count
                    self._handed_over(loop)
        if not ids:
            return ids
        await asyncio.shield(batch.done)
        if batch.error is not None:
            raise batch.error
        return ids

    def _extra(
        self,
        headers: Mapping[str, Any] | None,
        content_type: str | None,
        correlation_id: str | None,
    ) -> _Extra | None:
        if not headers and content_type is None and correlation_id is None:
            return None
        return (dict(headers) if headers else None), content_type, correlation_id

    def _one(
        self, body: bytes, exchange: str, key: str, mid: str, extra: _Extra | None,
        waiter: asyncio.Future[str],
    ) -> _HandOver:
        """Check one message and encode what goes on the wire (``ConfigurationError`` for
        what AMQP cannot carry, before anything is sent)."""
        size = len(body)
        too_large = self._box.oversized(mid, size, self.settings.max_message_size)
        if too_large is not None:
            raise too_large
        method = self._method(exchange, key)
        if extra is None:
            header = encode_header(size, encode_id(mid))
        else:
            header = encode_header(size, encode_id(mid), *extra)
        return HandOver(message_ids=(mid,), messages=((method, header, body, extra),),
                        sizes=(size,), exchange=exchange, routing_key=key, waiter=waiter)

    def _method(self, exchange: str, key: str) -> bytes:
        method = self._methods.get((exchange, key))
        if method is None:
            method = encode_publish(exchange, key, self.settings.mandatory)
            if len(self._methods) >= _METHOD_CACHE:
                self._methods.clear()
            self._methods[exchange, key] = method
        return method

    async def _room(self) -> None:
        """Wait until the window has room (or raise: the publisher failed or closed)."""
        loop = self._loop
        assert loop is not None
        while self._box.room <= 0:
            waiter = loop.create_future()
            self._room_waiters.append(waiter)
            await waiter
            if self._life.phase is not Phase.RUNNING:
                self._check_usable()

    def _handed_over(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._pump_scheduled:
            # One flush per loop iteration sends everything handed over in it, in one go.
            self._pump_scheduled = True
            loop.call_soon(self._pump)

    def _routing_key(self, routing_key: str | None) -> str:
        if routing_key is not None:
            return routing_key
        if self.settings.queue is not None:
            return self.settings.queue.name
        raise ConfigurationError("routing_key is required when the settings name no queue")

    def _check_usable(self) -> None:
        self._life.check_usable("publish")

    def _pump(self) -> None:
        self._pump_scheduled = False
        self._run(self._box.flush())

    # ------------------------------------------------------------------ carrying out actions

    def _run(self, actions: list[Action]) -> None:
        """Carry out what the outbox decided, in its order. Exhaustive: an action added to
        the outbox and not carried out here is a type error (``assert_never``)."""
        for action in actions:
            match action:
                case Send(held=held):
                    self._write(held)
                case Confirmed(held=held):
                    self._confirmed(held)
                case Failed(held=failed, error=error):
                    if type(error) is MessageTooLarge:
                        # The broker refused it (a check before sending raises to the
                        # caller): said once, here, since nothing else would show why a
                        # channel closed.
                        log.warning("publisher: %s", error)
                    _tell(failed, error)
                case Nacked(held=held):
                    if self._recorder is not None:
                        for record in held:
                            self._recorder.record(Nack(msg=id_key(record.message_id)))
                case Returned(message_id=message_id):
                    if self._recorder is not None:
                        self._recorder.record(Return(msg=id_key(message_id)))
                case SetTimer(at=at):
                    self._set_timer(at)
                case Recycle(why=why):
                    link = self._link
                    if link is not None:
                        link.abandon(why)  # reported as lost like any other loss
                case Closed(unconfirmed=unconfirmed):
                    closing = self._closing
                    if closing is not None and not closing.done():
                        closing.set_result(unconfirmed)
                case _:
                    assert_never(action)
        if self._room_waiters:
            self._wake_room()

    def _write(self, held: list[_Held]) -> None:
        link = self._link
        frames = link.frames if link is not None else None
        if frames is None:
            return  # gone meanwhile: counted as sent, they go out again after the loss
        write = frames.write
        rec = self._recorder
        for record in held:
            method, header, body, _extra = record.message
            if record.sends > 1:
                write(method, _retransmit_header(record), body)
                if rec is not None:
                    rec.record(Retransmit(msg=id_key(record.message_id), seq=record.seq))
            else:
                write(method, header, body)
                if rec is not None:
                    rec.record(Publish(msg=id_key(record.message_id), seq=record.seq,
                                       queue=record.handover.routing_key))

    def _confirmed(self, held: list[_Held]) -> None:
        rec = self._recorder
        for record in held:
            if rec is not None:
                rec.record(Confirm(msg=id_key(record.message_id)))
            if not record.told:
                waiter = record.handover.waiter
                if isinstance(waiter, _Batch):
                    waiter.settle(record.seq, None)
                elif waiter is not None and not waiter.done():
                    waiter.set_result(record.message_id)

    def _set_timer(self, at: float | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if at is not None and self._loop is not None:
            self._timer_at = at
            self._timer = self._loop.call_at(at, self._tick)

    def _tick(self) -> None:
        self._timer = None
        loop = self._loop
        assert loop is not None
        # asyncio may run a timer a clock tick early: it stands for its own time.
        self._run(self._box.tick(max(loop.time(), self._timer_at)))

    def _wake_room(self) -> None:
        """Room in the window, or the publisher can no longer take messages (the woken
        caller then raises the lifecycle's error)."""
        box = self._box
        phase = self._life.phase
        usable = phase is Phase.RUNNING or phase is Phase.STARTING
        waiters = self._room_waiters
        while waiters and (box.room > 0 or not usable):
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ broker events

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        loop = self._loop
        assert loop is not None
        if isinstance(method, Basic.Ack):
            self._run(self._box.acked(method.delivery_tag, method.multiple, loop.time()))
        else:
            self._run(self._box.nacked(method.delivery_tag, method.multiple, loop.time()))

    def _on_return(self, _channel: Any, method: Any, props: BasicProperties, _body: bytes) -> None:
        mid = props.message_id
        if mid is None:
            return
        reason = f"unroutable: {method.reply_code} {method.reply_text} (exchange " \
                 f"{method.exchange!r}, routing key {method.routing_key!r})"
        self._run(self._box.returned(mid, reason))

    def _on_blocked(self, blocked: bool) -> None:
        now = asyncio.get_running_loop().time()
        self._run(self._box.blocked(now) if blocked else self._box.unblocked(now))

    # ------------------------------------------------------------------ connection

    @property
    def _shutting_down(self) -> bool:
        return self._life.shutting_down

    async def _setup(self, link: Link, retry: bool) -> None:
        channel = link.channel
        assert channel is not None
        # Confirms and returns count only from the current link: an abandoned one (see
        # ``Recycle``) may still deliver some while it closes, and its delivery tags
        # would settle the wrong messages of the new channel. What it had in flight is
        # being sent again anyway.
        def on_confirm(frame: Any) -> None:
            if link is self._link:
                self._on_confirm(frame)

        def on_return(*args: Any) -> None:
            if link is self._link:
                self._on_return(*args)

        await link.rpc(lambda cb: channel.confirm_delivery(on_confirm, callback=cb),
                       "confirm.select")
        channel.add_on_return_callback(on_return)
        if self.settings.queue is not None:
            await link.declare_topology(self.settings.queue)
        if link.usable:  # lost just now: the attempt fails, nothing may go out on it
            self._run(self._box.link_up(asyncio.get_running_loop().time()))

    def _dropped(self, link: Link, reason: LinkLost) -> None:
        self._run(self._box.link_lost(broker_close(reason)))

    def _give_up(self, exc: SacError) -> None:
        """The reconnect policy is exhausted (``ConnectError`` naming every attempt), or a
        reconnect met something that will not get better (wrong credentials, the queue gone
        or redeclared with other arguments): every outstanding publish fails with it."""
        self._run(self._box.give_up(exc))


class Publisher(Generic[Body]):
    """The blocking face: the same publisher, run on a private event loop thread.

    ``serializer`` as for ``AsyncPublisher``; bodies are encoded in the calling thread.

    Example::

        with Publisher(PublisherSettings(conn, queue=QueueSettings("orders"))) as pub:
            pub.publish(b"order 1")                  # returns the id once confirmed
            ids = pub.publish_many([b"a", b"b"])     # pipelined, all confirmed

        with Publisher(settings, serializer=JSON) as pub:
            pub.publish({"order": 1, "items": ["Äpfel"]})   # application/json
    """

    @overload
    def __init__(
        self: Publisher[bytes], settings: PublisherSettings, *,
        recorder: HistoryRecorder | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self, settings: PublisherSettings, *, serializer: Serializer[Body],
        recorder: HistoryRecorder | None = None,
    ) -> None: ...

    def __init__(
        self,
        settings: PublisherSettings,
        *,
        serializer: Serializer[Any] = BYTES,
        recorder: HistoryRecorder | None = None,
    ) -> None:
        self.serializer: Serializer[Body] = checked(serializer, "Publisher")
        self.settings = settings
        self._life = Lifecycle("publisher")
        self._thread = LoopThread(name="sac-publisher")
        # Raw bytes inside: this face encodes, so an error names it and is raised here.
        self._inner: AsyncPublisher[bytes] = AsyncPublisher(settings, recorder=recorder)

    def start(self) -> Self:
        self._life.start()
        try:
            self._thread.launch(self._inner.start())
        except SacError as exc:
            self._life.fail(exc)
            raise
        self._life.started()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def stats(self) -> PublisherStats:
        return self._inner.stats

    @property
    def outstanding(self) -> int:
        """Accepted but not yet confirmed (in flight, waiting to be sent, or parked)."""
        return self._inner.outstanding

    def publish(
        self,
        body: Body,
        *,
        routing_key: str | None = None,
        exchange: str = "",
        message_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        correlation_id: str | None = None,
    ) -> str:
        """Publish one message; its id once confirmed (as ``AsyncPublisher.publish``)."""
        self._check_usable()
        [data], content_type = self._encoded("publish", [body], routing_key, exchange,
                                             content_type)
        return self._thread.run(self._inner.publish(
            data, routing_key=routing_key, exchange=exchange, message_id=message_id,
            headers=headers, content_type=content_type, correlation_id=correlation_id))

    def send(
        self,
        body: Body,
        *,
        routing_key: str | None = None,
        exchange: str = "",
        message_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        correlation_id: str | None = None,
    ) -> concurrent.futures.Future[str]:
        """Pipelined: returns once there is room in the window; the future gives the id."""
        self._check_usable()
        [data], content_type = self._encoded("send", [body], routing_key, exchange,
                                             content_type)
        return self._thread.run(self._send(data, PublishOptions(
            routing_key=routing_key, exchange=exchange, message_id=message_id,
            headers=headers, content_type=content_type, correlation_id=correlation_id)))

    async def _send(
        self, body: bytes, options: PublishOptions
    ) -> concurrent.futures.Future[str]:
        return to_concurrent(await self._inner.send(body, **options))

    def publish_many(
        self,
        bodies: Iterable[Body],
        *,
        routing_key: str | None = None,
        exchange: str = "",
        message_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        correlation_id: str | None = None,
    ) -> list[str]:
        """Publish all, keeping the window full; their ids once every one is confirmed.
        The first failure is raised after all have settled; a body that cannot be encoded
        fails the call before any is sent."""
        self._check_usable()
        data, content_type = self._encoded("publish_many", list(bodies), routing_key,
                                           exchange, content_type)
        return self._thread.run(self._inner.publish_many(
            data, routing_key=routing_key, exchange=exchange, message_id=message_id,
            headers=headers, content_type=content_type, correlation_id=correlation_id))

    def _encoded(
        self, method: str, bodies: list[Any], routing_key: str | None, exchange: str,
        content_type: str | None,
    ) -> tuple[list[bytes], str | None]:
        """The bodies as bytes and the content type they go with, encoded here, in the
        caller's thread; or the error naming this face."""
        serializer = self.serializer
        if serializer is BYTES:
            return bodies, content_type  # the inner publisher checks they are bytes
        key = self._inner._routing_key(routing_key)
        return _encode_all(serializer, bodies, content_type,
                           _where("Publisher", method, exchange, key))

    def _check_usable(self) -> None:
        if not self._life.running:
            self._life.check_usable("publish")  # the precise error, not the loop thread's

    def close(self, timeout: float | None = None) -> None:
        if not self._life.close():
            return
        try:
            if self._thread.running:
                self._thread.run(self._inner.close(timeout))
        finally:
            self._thread.stop()
            self._life.closed()


__all__ = ["AsyncPublisher", "Publisher", "PublisherStats"]
