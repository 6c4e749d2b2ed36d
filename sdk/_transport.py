"""One AMQP connection with one channel on an asyncio loop, and the only place pika's errors
are translated into the SDK's.

Both faces run on pika's own asyncio adapter (``AsyncioConnection``): it spends about a tenth
of aio-pika's client CPU per published message (issue 3 measured 19 µs against 180 µs), and
the speed target (90% of raw pika) rules out anything slower on the hot path. The blocking face
runs the same code on a private loop in a background thread (``sdk/_loop_thread.py``), so both
faces share every decision, and heartbeats keep flowing while a blocking handler runs. On the
two hot paths pika's per-frame objects are bypassed: published frames are encoded here, and
deliveries to our consumers are decoded by ``sdk/_inbound.py``; pika keeps every other frame.

A ``Link`` lives and dies as a whole: when its connection or channel closes, every pending
operation fails with ``LinkLost`` and the owner (publisher or consumer) decides what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import struct
import urllib.parse
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.adapters.utils.connection_workflow import (
    AMQPConnectionWorkflowFailed,
    AMQPConnectorException,
)
from pika.adapters.utils.io_services_utils import (
    _AsyncPlaintextTransport as _PlaintextTransport,
)
from pika.channel import Channel
from pika.spec import Basic, BasicProperties

from ._core.queues import parse_inequivalent
from ._errors import (
    AuthenticationError,
    ConfigurationError,
    ConnectError,
    QueueMismatch,
    QueueNotFound,
    SacError,
)
from ._inbound import InboundDeliveries
from ._settings import ConnectionSettings, QueueSettings, mask_url


class LinkLost(SacError):
    """The connection or channel went away; the owner reconnects (internal)."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(node, reason)
        self.node = node
        self.reason = reason

    def __str__(self) -> str:
        return f"connection to {self.node} lost: {self.reason}"


def describe(exc: BaseException | None) -> str:
    """A short reason for a pika error, fit for a history's ``reason`` field."""
    if exc is None:
        return "closed"
    if isinstance(exc, pika.exceptions.ConnectionClosed | pika.exceptions.ChannelClosed):
        return f"{exc.reply_code} {exc.reply_text}"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text


_EXCHANGE_IN_REPLY = re.compile(r"exchange '(?P<name>(?:[^']|'(?! in vhost))*)' in vhost")


def refused_exchange(reason: LinkLost) -> tuple[str, str] | None:
    """``(exchange, why)`` when the broker closed the channel because of a publish to an
    exchange that does not exist (404) or may not be written to (403)."""
    cause = reason.__cause__
    if not isinstance(cause, pika.exceptions.ChannelClosedByBroker):
        return None
    if cause.reply_code not in (403, 404):
        return None
    match = _EXCHANGE_IN_REPLY.search(cause.reply_text)
    if match is None:
        return None
    return match["name"], f"the broker refused the publish: {cause.reply_code} {cause.reply_text}"


def node_of(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    return f"{parts.hostname}:{port}"


def build_parameters(url: str, settings: ConnectionSettings, role: str) -> pika.URLParameters:
    try:
        params = pika.URLParameters(url)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"AMQP URL {mask_url(url)!r} is invalid: {exc}") from None
    params.heartbeat = settings.heartbeat
    params.socket_timeout = settings.connect_timeout
    params.stack_timeout = settings.connect_timeout * 2
    params.connection_attempts = 1
    params.blocked_connection_timeout = None  # we bound blocked publishing ourselves
    params.client_properties = {
        "connection_name": settings.name or f"sac-{role}",
        "product": "sac",
    }
    if settings.ca_file is not None and url.startswith("amqps"):
        context = ssl.create_default_context(cafile=settings.ca_file)
        params.ssl_options = pika.SSLOptions(context, server_hostname=params.host)
    return params


def _translate_open_error(url: str, exc: BaseException) -> SacError:
    node = node_of(url)
    # pika says "probable" for any connection dropped during the handshake: a node that is
    # going down does that too, and must be retried. Only the broker's explicit refusal
    # (403 ACCESS_REFUSED, 530 NOT_ALLOWED) is an authentication failure.
    refused = "ACCESS_REFUSED" in str(exc) or "NOT_ALLOWED" in str(exc)
    if isinstance(exc, pika.exceptions.AuthenticationError) or (
        refused and isinstance(exc, pika.exceptions.ProbableAuthenticationError)
    ):
        user = urllib.parse.unquote(urllib.parse.urlsplit(url).username or "guest")
        return AuthenticationError(f"{node} refused user {user!r}: wrong user name or password")
    if refused and isinstance(exc, pika.exceptions.ProbableAccessDeniedError):
        vhost = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/")) or "/"
        return AuthenticationError(f"{node} refused access to vhost {vhost!r}")
    if isinstance(exc, AMQPConnectionWorkflowFailed):
        inner = exc.exceptions[-1] if exc.exceptions else exc
        return _translate_open_error(url, inner)
    if isinstance(exc, AMQPConnectorException):
        inner = getattr(exc, "args", (exc,))[0]
        if isinstance(inner, BaseException) and inner is not exc:
            return _translate_open_error(url, inner)
    return ConnectError(f"{node}: {describe(exc)}")


class BatchedAsyncioConnection(AsyncioConnection):  # type: ignore[misc]
    """pika's asyncio connection, writing all frames of one loop iteration at once.

    pika hands every frame to the socket on its own: three ``send`` calls per published
    message (method, header, body), which cost more client CPU than everything else on the
    hot path. Collecting what one event-loop iteration produces and writing it with one call
    keeps the frame order and delays nothing beyond the current iteration. ``PublishFrames``
    adds its frames to the same list, so they stay in order with pika's own.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._sac_pending: list[bytes] = []
        # Frames are never larger than pika's maximum, whatever is negotiated.
        self.sac_inbound = InboundDeliveries(self._sac_to_pika, pika.spec.FRAME_MAX_SIZE)
        super().__init__(*args, **kwargs)

    def _on_data_available(self, data_in: bytes) -> None:
        inbound = self.sac_inbound
        if not inbound.active:
            super()._on_data_available(data_in)
            return
        held: bytes = getattr(self, "_frame_buffer")  # noqa: B009 - pika leaves it untyped
        if held:
            # The first bytes since a consumer registered: pika may hold the start of a
            # frame, which is ours to complete now.
            data_in = held + data_in
            self._frame_buffer = b""
        inbound.feed(data_in)
        # What pika would have counted for the frames it did not see (heartbeat checks).
        self.bytes_received += inbound.bytes
        self.frames_received += inbound.frames
        inbound.bytes = inbound.frames = 0

    def _sac_to_pika(self, frames: bytes) -> None:
        super()._on_data_available(frames)

    def _adapter_emit_data(self, data: bytes) -> None:
        if not self._sac_pending:
            asyncio.get_running_loop().call_soon(self._sac_flush)
        self._sac_pending.append(data)

    def _sac_flush(self) -> None:
        if not self._sac_pending:
            return
        data = b"".join(self._sac_pending)
        self._sac_pending.clear()
        transport = self._transport
        if transport is None:
            return
        if (
            type(transport) is _PlaintextTransport
            and transport._state == transport._STATE_ACTIVE
            and not transport.get_write_buffer_size()
        ):
            # pika's transport only ever sends from a writability callback: two epoll_ctl
            # calls and one more loop iteration per write. A socket with nothing queued is
            # almost always writable: try at once, as asyncio's own transports do, and leave
            # whatever did not fit (or any error, which pika then meets itself and handles
            # its way) to pika's buffered path. Plain TCP only: TLS keeps pika's path.
            try:
                sent = transport._sock.send(data)
            except OSError:
                sent = 0
            if sent >= len(data):
                return
            data = data[sent:]
        super()._adapter_emit_data(data)

    def _adapter_disconnect_stream(self) -> None:
        self._sac_flush()
        super()._adapter_disconnect_stream()


# ---------------------------------------------------------------- publishing without pika's
# per-message frame objects. pika builds a Basic.Publish, a Method, a Header and a Body frame
# object and marshals each of them for every message: about 5 µs, a third of the client CPU
# of a confirmed publish. The same bytes come from a cached method frame and two struct packs.

_FRAME_END = b"\xce"
_FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size
_BODY_HEAD = struct.Struct(">BBHI")  # the header frame's end, then the body frame's head
_PUBLISH_INDEX = struct.pack(">I", Basic.Publish.INDEX)
_HEADER_HEAD = struct.Struct(">HxxQ")  # class id, weight, body size
# The properties of almost every message: delivery_mode=2 and a message id, nothing else.
_PERSISTENT_WITH_ID = struct.Struct(">HxxQHBB")  # ... flags, delivery mode, id length
_PERSISTENT_WITH_ID_FLAGS = BasicProperties.FLAG_DELIVERY_MODE | BasicProperties.FLAG_MESSAGE_ID
_PERSISTENT = 2
_METHOD_CACHE = 1024  # Basic.Publish frames kept per channel, one per exchange and routing key


def encode_publish(exchange: str, routing_key: str, mandatory: bool) -> bytes:
    """The payload of a Basic.Publish method frame (channel independent).

    Raises ``ConfigurationError`` for a name AMQP cannot carry (over 255 bytes).
    """
    try:
        pieces = Basic.Publish(
            exchange=exchange, routing_key=routing_key, mandatory=mandatory
        ).encode()
    except pika.exceptions.ShortStringTooLong:
        raise ConfigurationError(
            f"exchange {exchange[:64]!r} or routing key {routing_key[:64]!r} is over "
            "255 bytes (UTF-8), the most AMQP allows"
        ) from None
    return _PUBLISH_INDEX + b"".join(pieces)


def encode_id(message_id: str) -> bytes:
    """A message id as it goes on the wire; ``ConfigurationError`` if AMQP cannot carry it."""
    raw = message_id.encode()
    if len(raw) > 255:
        raise ConfigurationError(
            f"message id {message_id[:64]!r}... is {len(raw)} bytes (UTF-8): AMQP allows 255"
        )
    return raw


def encode_header(
    body_size: int,
    message_id: bytes,
    headers: dict[str, Any] | None = None,
    content_type: str | None = None,
    correlation_id: str | None = None,
) -> bytes:
    """The payload of a persistent message's content header frame.

    Without headers, content type or correlation id (the common case) this is one struct
    pack; otherwise pika's own encoder runs, here, so that what it refuses is refused to the
    caller (``ConfigurationError``) instead of failing later on the loop.
    """
    if headers is None and content_type is None and correlation_id is None:
        return (
            _PERSISTENT_WITH_ID.pack(
                BasicProperties.INDEX, body_size, _PERSISTENT_WITH_ID_FLAGS, _PERSISTENT,
                len(message_id),
            )
            + message_id
        )
    props = BasicProperties(
        delivery_mode=_PERSISTENT,
        message_id=message_id.decode(),
        headers=headers,
        content_type=content_type,
        correlation_id=correlation_id,
    )
    try:
        pieces = props.encode()
    except (pika.exceptions.AMQPError, AssertionError, TypeError, ValueError) as exc:
        raise ConfigurationError(f"message properties cannot be encoded: {exc!r}") from None
    return _HEADER_HEAD.pack(BasicProperties.INDEX, body_size) + b"".join(pieces)


class PublishFrames:
    """Writes Basic.Publish, content header and body frames for one channel straight into
    its connection's batched output, in the order of the calls (and of pika's own frames).

    The caller checks ``ready`` first: pika's ``basic_publish`` would refuse a channel that
    is not open, and so does this.
    """

    def __init__(self, conn: BatchedAsyncioConnection, channel: Channel) -> None:
        self._conn = conn
        self._channel = channel
        self._number: int = channel.channel_number
        self._pending = conn._sac_pending
        self._flush = conn._sac_flush
        self._body_max: int = conn._body_max_length
        self._methods: dict[bytes, bytes] = {}

    @property
    def ready(self) -> bool:
        return bool(self._channel.is_open) and not self._conn.is_closed

    def write(self, method: bytes, header: bytes, body: bytes) -> None:
        """One message: ``method`` from ``encode_publish``, ``header`` from ``encode_header``
        (whose body size must be ``len(body)``)."""
        number = self._number
        frame = self._methods.get(method)
        if frame is None:
            frame = _FRAME_HEAD.pack(1, number, len(method)) + method + _FRAME_END
            if len(self._methods) >= _METHOD_CACHE:  # routing keys may be unbounded
                self._methods.clear()
            self._methods[method] = frame
        pending = self._pending
        if not pending:
            asyncio.get_running_loop().call_soon(self._flush)
        size = len(body)
        conn = self._conn
        if 0 < size <= self._body_max:  # the hot path: one body frame
            pending += (frame, _FRAME_HEAD.pack(2, number, len(header)), header,
                        _BODY_HEAD.pack(0xCE, 3, number, size), body, _FRAME_END)
            conn.frames_sent += 3
            conn.bytes_sent += len(frame) + len(header) + size + 16
            return
        pending += (frame, _FRAME_HEAD.pack(2, number, len(header)), header, _FRAME_END)
        conn.frames_sent += 2
        conn.bytes_sent += len(frame) + len(header) + 8
        view = memoryview(body)
        for start in range(0, size, self._body_max):  # none for an empty body, as pika
            chunk = bytes(view[start:start + self._body_max])
            pending += (_FRAME_HEAD.pack(3, number, len(chunk)), chunk, _FRAME_END)
            conn.frames_sent += 1
            conn.bytes_sent += len(chunk) + 8


class Link:
    """One open connection and its one channel."""

    def __init__(
        self,
        conn: BatchedAsyncioConnection,
        url: str,
        on_lost: Callable[[Link, LinkLost], None],
    ) -> None:
        self.conn = conn
        self.url = url
        self.node = node_of(url)
        self.channel: Channel | None = None
        self.frames: PublishFrames | None = None
        self._on_lost = on_lost
        self._pending: set[asyncio.Future[Any]] = set()
        self.lost: LinkLost | None = None
        self.closing = False
        self.closed = asyncio.get_running_loop().create_future()
        self._watchdog: asyncio.TimerHandle | None = None

    def watch(self, heartbeat: float) -> None:
        """Declare the peer dead when nothing arrived for two heartbeat intervals.

        pika's own checker waits ``heartbeat + 5`` s per check and needs a silent interval
        to act, up to about 2 x (heartbeat + 5) s; the broker sends a heartbeat every
        ``heartbeat / 2`` s, so two intervals of silence mean a black hole, not a lull.
        """
        loop = asyncio.get_running_loop()
        period = heartbeat / 2
        state = {"bytes": self.conn.bytes_received, "since": loop.time()}

        def check() -> None:
            if self.lost is not None or self.closing:
                return
            now = loop.time()
            if self.conn.bytes_received != state["bytes"]:
                state["bytes"], state["since"] = self.conn.bytes_received, now
            elif now - state["since"] >= 2 * heartbeat:
                error = pika.exceptions.AMQPHeartbeatTimeout(
                    f"nothing received from {self.node} for {now - state['since']:.1f} s"
                )
                # The same private call pika's own heartbeat checker makes: drop the socket
                # at once, without a close handshake that a black hole would never answer.
                self.conn._terminate_stream(error)
                return
            self._watchdog = loop.call_later(period, check)

        self._watchdog = loop.call_later(period, check)

    @property
    def usable(self) -> bool:
        return self.lost is None and not self.closing and self.channel is not None

    def _fail(self, reason: LinkLost) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        for fut in list(self._pending):
            if not fut.done():
                fut.set_exception(reason)
        self._pending.clear()
        if not self.closing:
            self._on_lost(self, reason)

    def connection_closed(self, exc: BaseException | None) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._fail(LinkLost(self.node, describe(exc)))
        if not self.closed.done():
            self.closed.set_result(None)

    def abandon(self, why: str) -> None:
        """Give up on a link that still works but misbehaves: its owner sees it as lost
        (and recovers as from any loss) while the connection closes in the background."""
        self._fail(LinkLost(self.node, why))
        self.closing = True
        if self.conn.is_open:
            self.conn.close()

    def _channel_closed(self, channel: Channel, exc: BaseException) -> None:
        self.conn.sac_inbound.forget_channel(channel.channel_number)
        reason = LinkLost(self.node, f"channel closed: {describe(exc)}")
        reason.__cause__ = exc
        self._fail(reason)
        # A channel closed by the broker leaves the connection useless to us: close it too.
        if self.conn.is_open and not self.closing:
            self.conn.close()

    def future(self) -> asyncio.Future[Any]:
        """A future that fails with ``LinkLost`` if the link dies first."""
        fut = asyncio.get_running_loop().create_future()
        if self.lost is not None:
            fut.set_exception(self.lost)
            return fut
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        return fut

    async def rpc(self, start: Callable[[Callable[[Any], None]], None], step: str) -> Any:
        """Run a pika call that reports through a callback; its result. ``LinkLost`` when
        the link dies first, naming ``step`` (``channel.open``, ``basic.qos``...), so that a
        failed reconnect says where it failed."""
        fut = self.future()

        def done(result: Any = None) -> None:
            if not fut.done():
                fut.set_result(result)

        try:
            start(done)
        except pika.exceptions.AMQPError as exc:
            # The connection or channel closed between our last look and this call (pika
            # refuses calls on a closed one): the same loss, seen a little earlier.
            fut.cancel()
            raise LinkLost(self.node, f"{describe(exc)} (at {step})") from exc
        try:
            return await fut
        except LinkLost as lost:
            raise LinkLost(lost.node, f"{lost.reason} (at {step})") from lost.__cause__

    async def open_channel(self) -> Channel:
        channel: Channel = await self.rpc(
            lambda cb: self.conn.channel(on_open_callback=cb), "channel.open")
        channel.add_on_close_callback(self._channel_closed)
        self.channel = channel
        self.frames = PublishFrames(self.conn, channel)
        return channel

    async def declare_topology(self, queue: QueueSettings) -> int:
        """``queue``, then its parking queue (so that an error names the queue first; a
        dead letter in between waits in the queue, at least once); the queue's message
        count."""
        count = await self.declare_queue(queue)
        parking = queue.parking()
        if parking is not None:
            await self.declare_queue(parking)
        return count

    async def declare_queue(self, queue: QueueSettings) -> int:
        """Declare (or passively check) ``queue``; its message count. Errors name the cause."""
        channel = self._require_channel()
        try:
            frame = await self.rpc(
                lambda cb: channel.queue_declare(
                    queue.name,
                    passive=not queue.declare,
                    durable=True,
                    arguments=queue.arguments() if queue.declare else None,
                    callback=cb,
                ),
                "queue.declare",
            )
        except LinkLost as exc:
            cause = exc.__cause__
            if isinstance(cause, pika.exceptions.ChannelClosedByBroker):
                vhost = urllib.parse.unquote(urllib.parse.urlsplit(self.url).path[1:]) or "/"
                if cause.reply_code == 404:
                    raise QueueNotFound(queue.name, vhost) from cause
                if cause.reply_code == 406:
                    parsed = parse_inequivalent(cause.reply_text)
                    if parsed is not None:
                        raise QueueMismatch(
                            queue.name, parsed.argument, parsed.received, parsed.current
                        ) from cause
            raise
        return int(frame.method.message_count)

    def _require_channel(self) -> Channel:
        if self.channel is None or self.lost is not None:
            raise self.lost or LinkLost(self.node, "no channel")
        return self.channel

    async def close(self, timeout: float = 5.0) -> None:
        self.closing = True
        if self.conn.is_open:
            self.conn.close()
        elif self.conn.is_closed and not self.closed.done():
            self.closed.set_result(None)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)


async def open_link(
    url: str,
    settings: ConnectionSettings,
    role: str,
    on_lost: Callable[[Link, LinkLost], None],
    on_blocked: Callable[[bool], None] | None = None,
) -> Link:
    """Open a connection and a channel to ``url``, or raise a translated error."""
    loop = asyncio.get_running_loop()
    params = build_parameters(url, settings, role)
    opened: asyncio.Future[AsyncioConnection] = loop.create_future()
    holder: dict[str, Link] = {}

    def on_open(conn: Any) -> None:
        if not opened.done():
            opened.set_result(conn)

    def on_open_error(conn: Any, exc: BaseException) -> None:
        if not opened.done():
            opened.set_exception(_translate_open_error(url, exc))

    def on_close(conn: Any, exc: BaseException) -> None:
        if not opened.done():
            opened.set_exception(_translate_open_error(url, exc))
        elif "link" in holder:
            holder["link"].connection_closed(exc)

    conn = BatchedAsyncioConnection(
        params,
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=on_close,
        custom_ioloop=loop,
    )
    try:
        await asyncio.wait_for(asyncio.shield(opened), settings.connect_timeout * 3)
    except BaseException as exc:
        # Cancelled or timed out half-way: never leave a socket behind, and let the late
        # outcome of the attempt go unread without asyncio logging it as lost.
        opened.add_done_callback(lambda f: f.cancelled() or f.exception())
        if not (conn.is_closing or conn.is_closed):
            conn.close()
        if isinstance(exc, TimeoutError | ConnectError) and params.ssl_options is not None:
            # pika only logs a failed TLS handshake and lets the attempt time out: find out
            # why with a handshake of our own, so that the error can say it.
            why = await _tls_failure(params, settings.connect_timeout)
            if why is not None:
                raise ConnectError(f"{node_of(url)}: TLS handshake failed: {why}") from None
        if isinstance(exc, TimeoutError):
            raise ConnectError(
                f"{node_of(url)}: no connection within {settings.connect_timeout * 3:g} s"
            ) from None
        raise
    link = Link(conn, url, on_lost)
    holder["link"] = link
    if on_blocked is not None:
        conn.add_on_connection_blocked_callback(lambda _c, _f: on_blocked(True))
        conn.add_on_connection_unblocked_callback(lambda _c, _f: on_blocked(False))
    # Watched from the start: a node that goes silent while the link is being set up is
    # a failed attempt within two heartbeats, not a setup step that waits forever.
    link.watch(settings.heartbeat)
    try:
        await link.open_channel()
    except BaseException:
        await link.close()
        raise
    return link


async def _tls_failure(params: pika.URLParameters, timeout: float) -> str | None:
    """Why a TLS handshake with the node fails, or None if it succeeds."""
    options = params.ssl_options
    try:
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                params.host, params.port, ssl=options.context,
                server_hostname=options.server_hostname or params.host,
            ),
            timeout,
        )
    except ssl.SSLError as exc:
        return str(exc)
    except (OSError, TimeoutError):
        return None
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return None
