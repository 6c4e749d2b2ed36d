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

A nack (a quorum queue electing a leader, a full ``reject-publish`` queue) narrows how many
messages are in flight, down to one probe at a time, paced by ``nack_backoff``; acks widen it
again (``sac.sdk._core.congestion``, ``PublisherSettings.throttle_on_nack``). So an election costs
a few nacks, not one per message of the window on every retry.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import concurrent.futures
import contextlib
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self

import attrs
from pika.spec import Basic, BasicProperties

from ._core.confirms import ConfirmWindow, InFlight
from ._core.congestion import SendLimit
from ._core.ids import new_message_id
from ._delivery import RETRANSMIT_HEADER
from ._errors import (
    BlockedTimeout,
    ClosedError,
    ConfigurationError,
    ConfirmTimeout,
    MessageNacked,
    MessageReturned,
    MessageTooLarge,
    PublishError,
    SacError,
    Unconfirmed,
)
from ._history import HistoryRecorder
from ._loop_thread import LoopThread, to_concurrent
from ._recovery import Recovering
from ._settings import PublisherSettings
from ._transport import (
    Link,
    LinkLost,
    encode_header,
    encode_id,
    encode_publish,
    refused_exchange,
)

_Extra = tuple[dict[str, Any] | None, str | None, str | None]
"""headers, content type, correlation id: kept to encode a retransmission's properties."""
_METHOD_CACHE = 1024  # encoded Basic.Publish methods kept, one per exchange and routing key


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


@attrs.define(slots=True)
class _Outgoing:
    """One accepted message, its frames' payloads encoded once (``method``: Basic.Publish,
    ``header``: its properties) and who waits for it: a ``future`` (``send``) or a ``batch``
    (``publish_many``)."""

    exchange: str
    routing_key: str
    body: bytes
    method: bytes
    header: bytes
    extra: _Extra | None
    future: asyncio.Future[str] | None
    batch: _Batch | None
    submitted: float
    first_nack: float | None = None
    settled: bool = False  # batch members only: futures know it themselves


def _pending(item: InFlight[_Outgoing]) -> bool:
    """Nobody has been told the outcome of this message yet."""
    out = item.message
    fut = out.future
    return not fut.done() if fut is not None else not out.settled


def _resolve(item: InFlight[_Outgoing]) -> None:
    out = item.message
    fut = out.future
    if fut is not None:
        if not fut.done():
            fut.set_result(item.message_id)
    elif not out.settled and out.batch is not None:
        out.settled = True
        out.batch.settle(item.seq, None)


def _reject(item: InFlight[_Outgoing], error: BaseException) -> None:
    out = item.message
    fut = out.future
    if fut is not None:
        if not fut.done():
            fut.set_exception(error)
    elif not out.settled and out.batch is not None:
        out.settled = True
        out.batch.settle(item.seq, error)


def _too_large(message_id: str, size: int, limit: int) -> MessageTooLarge:
    return MessageTooLarge(
        message_id, f"{size} bytes is over the maximum message size of {limit} bytes"
    )


def _body_bytes(body: Any) -> bytes:
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    raise ConfigurationError(f"message body must be bytes, got {type(body).__name__}")


@attrs.frozen
class PublisherStats:
    published: int
    confirmed: int
    retransmitted: int
    nacked: int
    returned: int
    reconnects: int


class AsyncPublisher(Recovering):
    """Publishes with confirms, at most ``settings.window`` messages unconfirmed."""

    _role = "publisher"

    def __init__(
        self,
        settings: PublisherSettings,
        *,
        recorder: HistoryRecorder | None = None,
    ) -> None:
        super().__init__(settings.connection, recorder)
        self.settings = settings
        self._window: ConfirmWindow[_Outgoing] = ConfirmWindow(settings.window)
        self._limit = SendLimit(settings.window, settings.nack_backoff)
        self._resume_timer: asyncio.TimerHandle | None = None
        self._backlog: collections.deque[InFlight[_Outgoing]] = collections.deque()
        self._parked: dict[int, InFlight[_Outgoing]] = {}  # nacked, waiting for a retry
        self._methods: dict[tuple[str, str], bytes] = {}
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._drained: asyncio.Event | None = None
        self._seq = 0
        self._pump_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._blocked = False
        self._blocked_timer: asyncio.TimerHandle | None = None
        self._blocked_since = 0.0
        self._failure: SacError | None = None
        self._closed = False
        self._started = False
        self._published = self._confirmed = self._retransmitted = 0
        self._nacked = self._returned = 0
        self._last_ack = 0.0  # loop time of the last ack, or of the last (re)connect

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Self:
        """Connect to the first node that answers (fail fast if none does)."""
        if self._started:
            raise ClosedError("this publisher was already started")
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._drained = asyncio.Event()
        self._drained.set()
        await self._open(retry=False)
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
        return PublisherStats(
            self._published, self._confirmed, self._retransmitted,
            self._nacked, self._returned, self._reconnects,
        )

    @property
    def outstanding(self) -> int:
        """Accepted but not yet confirmed (in flight, waiting to be sent, or parked)."""
        return len(self._window) + len(self._backlog) + len(self._parked)

    async def close(self, timeout: float | None = None) -> None:
        """Wait (bounded) for every outstanding confirm, then close.

        Raises ``Unconfirmed`` naming what stayed unconfirmed; those messages may or may
        not have reached the queue.
        """
        if self._closed:
            return
        self._closed = True
        wait = self.settings.close_timeout if timeout is None else timeout
        if self._drained is not None and self.outstanding:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), wait)
        leftovers = [
            item.message_id
            for item in [*self._window, *self._backlog, *self._parked.values()]
        ]
        await self._stop_recovery()
        if self._resume_timer is not None:
            self._resume_timer.cancel()
        link, self._link = self._link, None
        if link is not None:
            await link.close()
        error = Unconfirmed(leftovers)
        for item in [*self._window.channel_lost(), *self._backlog, *self._parked.values()]:
            _reject(item, error)
        self._backlog.clear()
        self._parked.clear()
        self._wake_room(error)
        if self._recorder is not None:
            self._recorder.flush()
        if leftovers:
            raise error

    # ------------------------------------------------------------------ publishing

    async def publish(
        self,
        body: bytes,
        *,
        routing_key: str | None = None,
        exchange: str = "",
        message_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        correlation_id: str | None = None,
    ) -> str:
        """Publish one message and return its id once the broker confirmed it."""
        mid = message_id or new_message_id()
        fut = await self.send(
            body,
            routing_key=routing_key,
            exchange=exchange,
            message_id=mid,
            headers=headers,
            content_type=content_type,
            correlation_id=correlation_id,
        )
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.settings.confirm_timeout)
        except TimeoutError:
            raise ConfirmTimeout(
                mid, f"no confirm within {self.settings.confirm_timeout:g} s"
            ) from None

    async def send(
        self,
        body: bytes,
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
        if self._failure is not None or self._closed or not self._started:
            self._check_usable()
        key = routing_key if routing_key is not None else self._routing_key(None)
        if type(body) is not bytes:
            body = _body_bytes(body)
        mid = message_id or new_message_id()
        extra = self._extra(headers, content_type, correlation_id)
        out = self._outgoing(body, exchange, key, mid, extra)
        loop = self._loop
        assert loop is not None
        while self.outstanding >= self.settings.window:
            await self._room(loop)
        fut: asyncio.Future[str] = loop.create_future()
        out.future = fut
        out.submitted = loop.time()
        self._seq += 1
        self._backlog.append(InFlight(self._seq, mid, out))
        self._handed_over(loop)
        return fut

    async def publish_many(
        self,
        bodies: Iterable[bytes],
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
        if self._failure is not None or self._closed or not self._started:
            self._check_usable()
        loop = self._loop
        assert loop is not None
        key = routing_key if routing_key is not None else self._routing_key(None)
        extra = self._extra(headers, content_type, correlation_id)
        method = self._method(exchange, key)
        max_size = self.settings.max_message_size
        items = bodies if isinstance(bodies, list | tuple) else list(bodies)
        total = len(items)
        batch = _Batch(loop.create_future(), total)
        ids: list[str] = []
        window = self.settings.window
        done = 0
        while done < total:
            while self.outstanding >= window:
                await self._room(loop)
            if self._failure is not None or self._closed:
                self._check_usable()
            # As many as the window has room for, in one go: no await from here to the
            # hand-over, so nothing else touches the backlog meanwhile.
            end = min(total, done + window - self.outstanding)
            chunk = new_message_id.many(end - done) if message_id is None else (
                [message_id] * (end - done))
            now = loop.time()
            backlog = self._backlog
            seq = self._seq
            try:
                for body, mid in zip(items[done:end], chunk, strict=True):
                    if type(body) is not bytes:
                        body = _body_bytes(body)
                    size = len(body)
                    if size > max_size:
                        raise _too_large(mid, size, max_size)
                    header = encode_header(size, encode_id(mid), *extra) if extra else (
                        encode_header(size, encode_id(mid)))
                    seq += 1
                    backlog.append(InFlight(seq, mid, _Outgoing(
                        exchange, key, body, method, header, extra, None, batch, now)))
                    ids.append(mid)
                    done += 1
            finally:
                if seq != self._seq:
                    self._seq = seq
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

    def _outgoing(
        self, body: bytes, exchange: str, key: str, mid: str, extra: _Extra | None
    ) -> _Outgoing:
        """Check one message and encode what goes on the wire (``ConfigurationError`` for
        what AMQP cannot carry, before anything is sent)."""
        size = len(body)
        if size > self.settings.max_message_size:
            raise _too_large(mid, size, self.settings.max_message_size)
        method = self._method(exchange, key)
        if extra is None:
            header = encode_header(size, encode_id(mid))
        else:
            header = encode_header(size, encode_id(mid), *extra)
        return _Outgoing(exchange, key, body, method, header, extra, None, None, 0.0)

    def _method(self, exchange: str, key: str) -> bytes:
        method = self._methods.get((exchange, key))
        if method is None:
            method = encode_publish(exchange, key, self.settings.mandatory)
            if len(self._methods) >= _METHOD_CACHE:
                self._methods.clear()
            self._methods[exchange, key] = method
        return method

    async def _room(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until the window may have room (or the publisher failed or closed)."""
        waiter = loop.create_future()
        self._room_waiters.append(waiter)
        await waiter
        self._check_usable()

    def _handed_over(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._drained is not None:
            self._drained.clear()
        if not self._pump_scheduled:
            # One pump per loop iteration sends everything handed over in it, in one go.
            self._pump_scheduled = True
            loop.call_soon(self._pump)

    def _routing_key(self, routing_key: str | None) -> str:
        if routing_key is not None:
            return routing_key
        if self.settings.queue is not None:
            return self.settings.queue.name
        raise ConfigurationError("routing_key is required when the settings name no queue")

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise ClosedError("publisher is closed")
        if not self._started:
            raise ClosedError("publisher is not started: call start() or use `async with`")

    def _pump(self) -> None:
        self._pump_scheduled = False
        link = self._link
        if link is None or not link.usable or self._blocked:
            return
        frames = link.frames
        if frames is None or not frames.ready:
            return  # the channel is going down: what is left goes out on the next one
        window = self._window
        backlog = self._backlog
        count = min(self._limit.allowed - len(window), len(backlog))
        if count <= 0:
            return
        write = frames.write
        sent = window.sent
        rec = self._recorder
        published = 0
        for _ in range(count):
            item = backlog.popleft()
            out = item.message
            if item.sends:
                write(out.method, self._retransmit_header(item), out.body)
                sent(item)
                self._retransmitted += 1
                if rec is not None:
                    rec.record("retransmit", msg=item.message_id, seq=item.seq)
            else:
                write(out.method, out.header, out.body)
                sent(item)
                published += 1
                if rec is not None:
                    rec.record("publish", msg=item.message_id, seq=item.seq,
                               queue=out.routing_key)
        self._published += published

    @staticmethod
    def _retransmit_header(item: InFlight[_Outgoing]) -> bytes:
        """The properties of a message going out again: the header ``x-sac-retransmit``
        says how many times it went out before."""
        out = item.message
        headers, content_type, correlation_id = out.extra or (None, None, None)
        return encode_header(
            len(out.body),
            encode_id(item.message_id),
            {**(headers or {}), RETRANSMIT_HEADER: item.sends},
            content_type,
            correlation_id,
        )

    # ------------------------------------------------------------------ broker events

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        rec = self._recorder
        now = asyncio.get_running_loop().time()
        if isinstance(method, Basic.Ack):
            self._last_ack = now
            confirmed = 0
            settled = self._window.acked(method.delivery_tag, method.multiple)
            for item in settled:
                if item.returned is not None:
                    self._returned += 1
                    _reject(item, MessageReturned(item.message_id, item.returned))
                    continue
                confirmed += 1
                if rec is not None:
                    rec.record("confirm", msg=item.message_id)
                _resolve(item)
            self._confirmed += confirmed
            limit = self._limit
            if limit.allowed < limit.window:  # recovering from nacks: widen, end a pause
                limit.acked(len(settled))
        else:
            for item in self._window.nacked(method.delivery_tag, method.multiple):
                self._nacked += 1
                if rec is not None:
                    rec.record("nack", msg=item.message_id)
                self._retry_nacked(item)
            if self.settings.throttle_on_nack:
                self._throttle()
            if now - self._last_ack > self.settings.nack_stall_timeout:
                self._recycle_link("only nacks for "
                                   f"{now - self._last_ack:.1f} s: replacing the channel")
        self._after_settle()

    def _throttle(self) -> None:
        """After a nack: fewer messages in flight (see ``sac.sdk._core.congestion``); when a
        lone probe was nacked, nothing more goes out until the pause it returns is over."""
        pause = self._limit.nacked(len(self._window))
        if pause is not None:
            if self._resume_timer is not None:
                self._resume_timer.cancel()
            self._resume_timer = asyncio.get_running_loop().call_later(pause, self._resume)
            self._expire_refused()

    def _resume(self) -> None:
        self._resume_timer = None
        self._limit.resume()
        self._pump()

    def _recycle_link(self, why: str) -> None:
        link = self._link
        if link is None:
            return
        self._last_ack = asyncio.get_running_loop().time()
        link.abandon(why)  # reported as lost like any other loss: reconnect, resend

    def _retry_nacked(self, item: InFlight[_Outgoing]) -> None:
        loop = asyncio.get_running_loop()
        out = item.message
        if out.first_nack is None:
            out.first_nack = loop.time()
        delay = self.settings.nack_backoff.delay(item.nacks, loop.time() - out.first_nack)
        if delay is None:
            why = f"nacked by the broker {item.nacks} times"
            _reject(item, MessageNacked(item.message_id, why))
            return
        if self.settings.throttle_on_nack:
            # Back in its place at once: the throttle's pause between probes is the backoff,
            # and the probe is always the oldest message waiting, so order holds.
            self._requeue(item)
            return
        self._parked[item.seq] = item
        loop.call_later(delay, self._unpark, item)

    def _unpark(self, item: InFlight[_Outgoing]) -> None:
        if self._parked.pop(item.seq, None) is None:
            return  # failed meanwhile (closed, or the reconnect policy gave up)
        self._requeue(item)
        self._pump()

    def _requeue(self, item: InFlight[_Outgoing]) -> None:
        """Back into the backlog in publish order."""
        backlog = self._backlog
        if not backlog or item.seq < backlog[0].seq:
            backlog.appendleft(item)
            return
        keys = [i.seq for i in backlog]
        backlog.insert(bisect.bisect(keys, item.seq), item)

    def _expire_refused(self) -> None:
        """A probe was nacked again: the queue refuses, and the messages waiting behind the
        probe would have been refused too had they been sent. Their nack budget runs from
        now (or from their own first nack), so that ``nack_backoff.max_elapsed`` bounds how
        long a refusing queue holds them, as it did when each was sent and nacked itself."""
        now = asyncio.get_running_loop().time()
        policy = self.settings.nack_backoff
        keep: collections.deque[InFlight[_Outgoing]] = collections.deque()
        for item in self._backlog:
            out = item.message
            if out.first_nack is None:
                out.first_nack = now
            elapsed = now - out.first_nack
            if policy.exhausted(max(item.nacks, 1), elapsed):
                why = (f"the broker nacked every message for {elapsed:.1f} s "
                       f"(nacked {item.nacks} times itself)")
                _reject(item, MessageNacked(item.message_id, why))
            else:
                keep.append(item)
        if len(keep) != len(self._backlog):
            self._backlog = keep

    def _on_return(self, _channel: Any, method: Any, props: BasicProperties, _body: bytes) -> None:
        mid = props.message_id
        reason = f"unroutable: {method.reply_code} {method.reply_text} (exchange " \
                 f"{method.exchange!r}, routing key {method.routing_key!r})"
        known = mid is not None and self._window.returned(mid, reason)
        if known and self._recorder is not None:
            self._recorder.record("return", msg=mid)

    def _after_settle(self) -> None:
        self._pump()
        self._wake_room()
        if not self.outstanding and self._drained is not None:
            self._drained.set()

    def _wake_room(self, error: BaseException | None = None) -> None:
        while self._room_waiters and (error or self.outstanding < self.settings.window):
            waiter = self._room_waiters.popleft()
            if not waiter.done():
                if error is not None:
                    waiter.set_exception(error)
                else:
                    waiter.set_result(None)

    def _on_blocked(self, blocked: bool) -> None:
        loop = asyncio.get_running_loop()
        self._blocked = blocked
        self._blocked_since = loop.time()
        if self._blocked_timer is not None:
            self._blocked_timer.cancel()
            self._blocked_timer = None
        if blocked:
            self._blocked_timer = loop.call_later(
                self.settings.connection.blocked_timeout, self._blocked_expired)
        else:
            self._pump()

    def _blocked_expired(self) -> None:
        """Every publish waiting longer than ``blocked_timeout`` under ``connection.blocked``
        fails. One never sent is dropped from the backlog; one already sent stays tracked,
        since the broker may still take it once it unblocks (a retry is then a duplicate the
        consumer's dedup catches)."""
        self._blocked_timer = None
        if not self._blocked:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        limit = self.settings.connection.blocked_timeout
        since = self._blocked_since

        def expired(item: InFlight[_Outgoing]) -> bool:
            return now - max(item.message.submitted, since) >= limit

        def fail(item: InFlight[_Outgoing], what: str) -> None:
            if _pending(item):
                _reject(item, BlockedTimeout(
                    item.message_id,
                    f"the broker blocked publishing (connection.blocked, a resource alarm) "
                    f"for over {limit:g} s; {what}",
                ))

        for item in self._window:
            if expired(item):
                fail(item, "it was sent and may still reach the queue once unblocked")
        keep: collections.deque[InFlight[_Outgoing]] = collections.deque()
        for item in self._backlog:
            if not item.sends and expired(item):
                fail(item, "it was not sent")
            else:
                keep.append(item)
        self._backlog = keep
        self._after_settle()
        pending = [max(i.message.submitted, since) for i in [*self._window, *self._backlog]
                   if _pending(i)]
        next_check = (min(pending) if pending else now) + limit
        self._blocked_timer = loop.call_at(max(next_check, now + 0.05), self._blocked_expired)

    # ------------------------------------------------------------------ connection

    @property
    def _shutting_down(self) -> bool:
        return self._closed

    async def _setup(self, link: Link, retry: bool) -> None:
        channel = link.channel
        assert channel is not None
        # Confirms and returns count only from the current link: an abandoned one (see
        # ``_recycle_link``) may still deliver some while it closes, and its delivery tags
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
        self._blocked = False
        self._last_ack = asyncio.get_running_loop().time()
        self._pump()

    def _dropped(self, link: Link, reason: LinkLost) -> None:
        if self.settings.throttle_on_nack:
            self._limit.restart()
        unconfirmed = self._window.channel_lost()
        if unconfirmed:
            merged = sorted([*unconfirmed, *self._backlog], key=lambda i: i.seq)
            self._backlog = collections.deque(merged)
        refused = refused_exchange(reason)
        if refused is not None:
            self._fail_exchange(*refused)

    def _fail_exchange(self, exchange: str, why: str) -> None:
        """The broker closed the channel over a publish to ``exchange`` (missing, or no write
        permission): sending those messages again would only close the next channel too."""
        keep: collections.deque[InFlight[_Outgoing]] = collections.deque()
        for item in self._backlog:
            if item.message.exchange == exchange:
                _reject(item, PublishError(item.message_id, why))
            else:
                keep.append(item)
        self._backlog = keep
        self._after_settle()

    def _give_up(self, exc: SacError) -> None:
        """The reconnect policy is exhausted (``ConnectError`` naming every attempt), or a
        reconnect met something that will not get better (wrong credentials, the queue gone
        or redeclared with other arguments): every outstanding publish fails with it."""
        self._failure = exc
        for item in [*self._window.channel_lost(), *self._backlog, *self._parked.values()]:
            _reject(item, self._failure)
        self._backlog.clear()
        self._parked.clear()
        self._wake_room(self._failure)
        if self._drained is not None:
            self._drained.set()


class Publisher:
    """The blocking face: the same publisher, run on a private event loop thread.

    Example::

        with Publisher(PublisherSettings(conn, queue=QueueSettings("orders"))) as pub:
            pub.publish(b"order 1")                  # returns the id once confirmed
            ids = pub.publish_many([b"a", b"b"])     # pipelined, all confirmed
    """

    def __init__(
        self, settings: PublisherSettings, *, recorder: HistoryRecorder | None = None
    ) -> None:
        self.settings = settings
        self._thread = LoopThread(name="sac-publisher")
        self._inner = AsyncPublisher(settings, recorder=recorder)

    def start(self) -> Self:
        self._thread.launch(self._inner.start())
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

    def publish(self, body: bytes, **options: Any) -> str:
        """Publish one message; its id once confirmed. Options as ``AsyncPublisher.publish``."""
        return self._thread.run(self._inner.publish(body, **options))

    def send(self, body: bytes, **options: Any) -> concurrent.futures.Future[str]:
        """Pipelined: returns once there is room in the window; the future gives the id."""
        return self._thread.run(self._send(body, options))

    async def _send(
        self, body: bytes, options: dict[str, Any]
    ) -> concurrent.futures.Future[str]:
        return to_concurrent(await self._inner.send(body, **options))

    def publish_many(self, bodies: Iterable[bytes], **options: Any) -> list[str]:
        """Publish all, keeping the window full; their ids once every one is confirmed.
        The first failure is raised after all have settled."""
        return self._thread.run(self._publish_many(list(bodies), options))

    async def _publish_many(self, bodies: list[bytes], options: dict[str, Any]) -> list[str]:
        return await self._inner.publish_many(bodies, **options)

    def close(self, timeout: float | None = None) -> None:
        if not self._thread.running:
            return
        try:
            self._thread.run(self._inner.close(timeout))
        finally:
            self._thread.stop()


__all__ = ["AsyncPublisher", "Publisher", "PublisherStats"]
