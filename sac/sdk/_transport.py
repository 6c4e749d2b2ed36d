"""One AMQP connection with one channel on an asyncio loop, and the only place pika's errors
are translated into the SDK's.

Both faces run on pika's own asyncio adapter (``AsyncioConnection``): it spends about a tenth
of aio-pika's client CPU per published message (``bench/throughput.py``: about 19 µs against
180 µs), and the hot paths are held to the official Go client's speed (``bench/anchor.py``).
The blocking face runs the same code on a private loop in a background thread
(``_loop_thread.py``), so both faces share every decision, and heartbeats keep flowing while a
blocking handler runs. On the two hot paths pika's per-frame objects are bypassed: published
frames are encoded by ``_wire/frames.py``, and deliveries to our consumers are decoded by
``_wire/deliveries.py``; pika keeps every other frame. The connection that does it is in
``_wire/pika_hooks.py``, the one module that touches pika's internals. Consumers register
their deliveries here, through ``Link``, never on the connection itself.

A ``Link`` lives and dies as a whole: when its connection or channel closes, every pending
operation fails with ``LinkLost`` and the owner (publisher or consumer) decides what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pika
import pika.exceptions
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.adapters.utils.connection_workflow import (
    AMQPConnectionWorkflowFailed,
    AMQPConnectorException,
)
from pika.channel import Channel

from ._core.attempts import Attempts
from ._core.outbox import BrokerClose
from ._core.queues import BrokerVersion, parse_inequivalent, type_hint
from ._core.retry import Retry
from ._errors import (
    AuthenticationError,
    ConfigurationError,
    ConnectError,
    QueueMismatch,
    QueueNotFound,
    SacError,
)
from ._settings import ConnectionSettings, QueueSettings, mask_url
from ._wire.deliveries import DeliveryCallback
from ._wire.pika_hooks import BatchedAsyncioConnection, PublishFrames, keep_subscriptions_at_close

T = TypeVar("T")


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


def broker_close(reason: LinkLost) -> BrokerClose | None:
    """The broker's reply when it closed the channel itself (its code and text, for the
    outbox to read: ``sac.sdk._core.outbox.refused_exchange`` and ``refused_size``); None
    for any other loss."""
    cause = reason.__cause__
    if not isinstance(cause, pika.exceptions.ChannelClosedByBroker):
        return None
    return BrokerClose(code=int(cause.reply_code), text=str(cause.reply_text))


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
    if type(exc) is pika.exceptions.AMQPConnectionError and exc.args and \
            isinstance(exc.args[0], BaseException):  # pika's wrapper says nothing itself
        return _translate_open_error(url, exc.args[0])
    if isinstance(exc, AMQPConnectionWorkflowFailed):
        inner = exc.exceptions[-1] if exc.exceptions else exc
        return _translate_open_error(url, inner)
    if isinstance(exc, AMQPConnectorException):
        # A phase error keeps its cause in ``exception``; others, if any, in ``args``.
        inner = getattr(exc, "exception", None) or (exc.args[0] if exc.args else exc)
        if isinstance(inner, BaseException) and inner is not exc:
            return _translate_open_error(url, inner)
    return ConnectError(f"{node}: {describe(exc)}")


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
                self.conn.sac_drop(error)
                return
            self._watchdog = loop.call_later(period, check)

        self._watchdog = loop.call_later(period, check)

    @property
    def broker(self) -> BrokerVersion | None:
        """The RabbitMQ version this link's connection reached (``connection.start``), which
        the queue's and the subscription's arguments adapt to."""
        properties = self.conn.server_properties or {}
        return BrokerVersion.parse(properties.get("version"))

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
        self._close_connection()

    def _channel_closed(self, channel: Channel, exc: BaseException) -> None:
        self.forget_channel(channel)
        reason = LinkLost(self.node, f"channel closed: {describe(exc)}")
        reason.__cause__ = exc
        self._fail(reason)
        # A channel closed by the broker leaves the connection useless to us: close it too.
        if self.conn.is_open and not self.closing:
            self.conn.close()

    def take_deliveries(self, consumer_tag: str, callback: DeliveryCallback) -> None:
        """Deliveries to ``consumer_tag`` on this link's channel are decoded by the SDK's fast
        path (``sac/sdk/_wire/deliveries.py``) and given to ``callback``; pika decodes the rest
        (and hands them to the callback given to ``basic_consume``)."""
        channel = self._require_channel()
        self.conn.sac_inbound.register(channel.channel_number, consumer_tag, callback)

    def release_deliveries(self, consumer_tag: str) -> None:
        """From here pika takes what arrives for ``consumer_tag`` (and rejects, requeued,
        what arrives for a tag it cancelled)."""
        if self.channel is not None:
            self.conn.sac_inbound.unregister(self.channel.channel_number, consumer_tag)

    def forget_channel(self, channel: Channel) -> None:
        """A channel of this connection closed: nothing registered on it is taken any more."""
        self.conn.sac_inbound.forget_channel(channel.channel_number)

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
                    arguments=queue.arguments(self.broker) if queue.declare else None,
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
                            queue.name, parsed.argument, parsed.received, parsed.current,
                            type_hint(parsed, queue.type),
                        ) from cause
            raise
        return int(frame.method.message_count)

    def _require_channel(self) -> Channel:
        if self.channel is None or self.lost is not None:
            raise self.lost or LinkLost(self.node, "no channel")
        return self.channel

    def _close_connection(self) -> None:
        """Close the connection, its channel with it, without a ``basic.cancel`` first: a
        consumer's subscription ends with its channel. That is what keeps a single-active
        queue's order (``sac/sdk/_core/consuming.py``, ``Handover``): the broker takes back what
        the channel holds before it activates the next consumer, while a cancel would
        activate it first."""
        if not self.conn.is_open:
            return
        channel = self.channel
        if channel is not None and channel.is_open:
            keep_subscriptions_at_close(channel)
        self.conn.close()

    async def close(self, timeout: float = 5.0) -> None:
        self.closing = True
        if self.conn.is_open:
            self._close_connection()
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


async def connect_any(
    settings: ConnectionSettings,
    attempt: Callable[[str], Awaitable[T]],
    *,
    start: int = 0,
    retry: bool = False,
    on_retry: Callable[[str, str, float], None] | None = None,
) -> tuple[T, int]:
    """``attempt(url)`` node after node until one works: its result and the node's index.

    A first connect (``retry=False``) tries each node once and fails fast; a reconnect goes
    round the nodes under ``settings.reconnect``. A refused login is raised at once; any other
    failure (``ConnectError``, or ``LinkLost`` half-way through the attempt's setup) is one
    more failed attempt, and giving up raises a ``ConnectError`` naming every attempt.
    ``on_retry(node, cause, delay)`` is told before each wait."""
    plan = Attempts([node_of(u) for u in settings.urls], start, settings.reconnect, retry)
    began = time.monotonic()

    async def one() -> tuple[T, int]:
        index = plan.index
        try:
            return await attempt(settings.urls[index]), index
        except LinkLost as exc:
            plan.record(exc.reason)
            raise
        except ConnectError as exc:
            if not isinstance(exc, AuthenticationError):
                plan.record(str(exc).removeprefix(f"{plan.nodes[index]}: "))
            raise

    def give_up(_failures: int, _elapsed: float, _last: BaseException) -> BaseException:
        return ConnectError(plan.summary(time.monotonic() - began), plan.causes())

    def told(_failures: int, delay: float, _last: BaseException) -> None:
        if on_retry is not None:
            node, cause = plan.failures[-1]
            on_retry(node, cause, delay)

    return await Retry(plan.delays, time.monotonic, asyncio.sleep).run_async(
        one, retry_on=(ConnectError, LinkLost), permanent=AuthenticationError,
        give_up=give_up, on_retry=told)


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
