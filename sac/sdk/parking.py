"""Parked messages: what failed and why, and sending them back after a fix.

A consumer parks a message its handler could not handle (``ConsumerSettings.retry`` spent,
or ``Poison``) in the queue's parking queue, ``<queue>.parked`` by default, with the reason in
its headers; the broker dead-letters there too what reached the delivery limit (a crash
loop). ``Parking.messages`` shows them and gives them back (in their order; what that costs
on RabbitMQ 3.10 is in its docstring); ``Parking.replay`` moves them back to their queue,
each confirmed there before it leaves the parking queue, keeping its message id and marked as
a replay, so that an inbox looks each one up and a message whose effect was committed after
all is not done twice.

Two faces, as for every client of the SDK: ``Parking`` blocks, ``AsyncParking`` has the same
methods, awaited. Each call opens its own connection (to the first node that answers) and
closes it: the tools are for an operator's occasional look, not a hot path.

Example::

    from sac.sdk import ConnectionSettings, Parking

    parking = Parking(ConnectionSettings.from_env())
    for message in parking.messages("orders"):
        print(message.message_id, message.reason)
    parking.replay("orders")      # after the fix is deployed

``sac dlq list|replay QUEUE`` is the same from the command line.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from pika import spec
from pika.channel import Channel
from pika.spec import BasicProperties

from ._core.parked import next_replay, parked_fields, to_take
from ._core.poison import REPLAYED_HEADER, replay_headers, text
from ._delivery import PARKED_PROPERTIES, other_properties
from ._errors import ConfigurationError, ConnectError, QueueError, QueueNotFound
from ._forward import Forwarder, Refused
from ._settings import ConnectionSettings, QueueSettings
from ._transport import Link, LinkLost, connect_any, node_of, open_link
from ._wire.pika_hooks import undecodable


@attrs.frozen
class ParkedMessage:
    """One message in a parking queue, as it is there."""

    message_id: str | None
    reason: str
    """Why it was parked: the handler's exception, or the broker's dead-letter reason."""
    error: str | None
    """The exception's type name, when a consumer parked it."""
    origin: str | None
    """The queue it came from."""
    attempts: int | None
    """How many times the handler ran for it before it was parked."""
    parked_at: datetime.datetime | None
    body: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    headers: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    content_type: str | None = None
    correlation_id: str | None = None
    properties: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    """The other AMQP properties it has (``content_encoding``, ``reply_to``, ``type``,
    ``app_id``...), as in ``Delivery.properties``."""
    invalid: tuple[str, ...] = ()
    """The fields above (``reason``, ``error``, ``origin``, ``attempts``, ``parked_at``)
    whose ``x-sac-parked-*`` header is there but not of its type (a foreign or forged
    message): each is None (the reason says so), the others are read as usual; and
    ``headers`` when the whole table cannot be decoded (see ``undecodable``)."""
    undecodable: str | None = None
    """Why its headers table cannot be decoded (nested past 64 levels, a date past 9999...),
    or None. Such a message is listed with ``headers`` empty and every ``x-sac-parked-*``
    field None, and never replayed or moved: a copy would lose its headers."""


class ReplayError(QueueError):
    """A parked message could not be sent back; those before it were, and it stays parked.
    Or, once the others were sent back: some stay parked whose headers cannot be decoded."""


def _parking_name(queue: str | QueueSettings) -> tuple[str, str]:
    settings = queue if isinstance(queue, QueueSettings) else QueueSettings(queue)
    if settings.parking_queue is None:
        raise ConfigurationError(f"queue {settings.name!r} has no parking queue")
    return settings.name, settings.parking_queue


def _parked(props: BasicProperties, body: bytes) -> ParkedMessage:
    headers = dict(props.headers or {})
    fields = parked_fields(headers)
    at = fields.parked_at_ms
    why = undecodable(props)
    return ParkedMessage(
        message_id=text(props.message_id),
        reason=fields.reason if why is None else f"unknown ({why})",
        error=fields.error,
        origin=fields.origin,
        attempts=fields.attempts,
        parked_at=None if at is None else datetime.datetime.fromtimestamp(at / 1000, datetime.UTC),
        body=body,
        headers=headers,
        content_type=text(props.content_type),
        correlation_id=text(props.correlation_id),
        properties=other_properties(props),
        invalid=fields.invalid if why is None else ("headers",),
        undecodable=why,
    )


async def _connect(connection: ConnectionSettings) -> Link:
    """Each node once, as a client's first connect: the same plan and the same error."""
    link, _ = await connect_any(connection, lambda url: open_link(
        url, connection, "parking", lambda _link, _why: None))
    return link


async def _get(link: Link, queue: str) -> tuple[Any, BasicProperties, bytes] | None:
    """One ``basic.get`` (manual ack): the message, or None when the queue is empty."""
    channel: Channel | None = link.channel
    assert channel is not None
    fut = link.future()

    def got(_channel: Any, method: Any, props: BasicProperties, body: bytes) -> None:
        if not fut.done():
            fut.set_result((method, props, body))

    def empty(_frame: Any) -> None:
        if not fut.done():
            fut.set_result(None)

    channel.add_callback(empty, [spec.Basic.GetEmpty], one_shot=True)
    channel.basic_get(queue, got, auto_ack=False)
    result: tuple[Any, BasicProperties, bytes] | None = await fut
    if result is not None:
        channel.callbacks.remove(channel.channel_number, spec.Basic.GetEmpty, empty)
    return result


@attrs.frozen
class _Moved:
    moved: int
    kept: tuple[tuple[str | None, str], ...]
    """Each message left where it was, as its id and why: its headers cannot be decoded."""

    def error(self, done: str, target: str, source: str) -> str | None:
        """The one line that says what a move that left some behind did, or None."""
        if not self.kept:
            return None
        shown = "; ".join(f"{ident!r}: {why}" for ident, why in self.kept[:_NAMED])
        more = f"; and {len(self.kept) - _NAMED} more" if len(self.kept) > _NAMED else ""
        return (f"{done} {self.moved} message(s) to {target!r}; {len(self.kept)} cannot be "
                f"copied and stay in {source!r}: {shown}{more}")


_NAMED = 3
"""Messages left behind that an error names (the others are counted)."""


async def _move(
    link: Link, source: str, target: str, count: int,
    headers: Callable[[BasicProperties], Mapping[str, Any] | None], keep: frozenset[str],
    refused: Callable[[BasicProperties, int, Refused], Exception],
) -> _Moved:
    """Up to ``count`` messages from ``source`` to ``target``, in order: each taken with
    ``basic.get``, copied (persistent, with ``headers(props)`` and the properties in
    ``keep``), and acked in ``source`` once ``target`` confirmed the copy; how many, and
    which were left (see below).
    ``refused(props, moved, error)`` makes the error raised when ``target`` refuses one.

    A message whose headers cannot be decoded is not copied: a copy would lose them (what
    a handler reads, and the parked reason), and the SDK cannot send a table it cannot
    read. It is held until the others are moved (given back at once, it could be taken
    again within ``count``), then all such are given back, in their order, as a listing
    gives messages back."""
    forwarder = Forwarder(link)
    moved = 0
    kept: list[tuple[str | None, str]] = []
    last_kept = 0
    for _ in range(count):
        got = await _get(link, source)
        if got is None:
            break
        method, props, body = got
        why = undecodable(props)
        if why is not None:
            kept.append((text(props.message_id), why))
            last_kept = method.delivery_tag
            continue
        kept_properties = {k: v for k, v in other_properties(props).items() if k in keep}
        copy = BasicProperties(
            content_type=props.content_type, headers=headers(props), delivery_mode=2,
            correlation_id=props.correlation_id, message_id=props.message_id,
            timestamp=props.timestamp, **kept_properties)
        try:
            await forwarder.send(target, body, copy)
        except Refused as exc:
            raise refused(props, moved, exc) from exc
        channel = link.channel
        assert channel is not None
        channel.basic_ack(method.delivery_tag)
        moved += 1
    if kept:
        # Only they are unacked now: give them back, and wait until the broker counts them.
        ready = await link.declare_queue(_passive(source))
        await _give_back(link, source, last_kept, ready + len(kept))
    return _Moved(moved, tuple(kept))


async def _declare_parking(link: Link, name: str, parking: str) -> int:
    """The parking queue's ready count; QueueNotFound naming ``name`` as well, the queue the
    caller asked about, if it does not exist."""
    try:
        return await link.declare_queue(_passive(parking))
    except QueueNotFound as exc:
        raise QueueNotFound(exc.queue, exc.vhost, parking_of=name) from exc


def _passive(name: str) -> QueueSettings:
    return QueueSettings(name, single_active_consumer=False, parking_queue=None, declare=False)


RETURN_WAIT = 5.0
"""Seconds a listing waits for the broker to have put back what it took (see below)."""


async def _give_back(link: Link, queue: str, last_tag: int, count: int) -> None:
    """Give back every message taken on ``link`` (up to ``last_tag``), in the order taken,
    and wait until ``queue`` counts ``count`` ready messages again (or ``RETURN_WAIT`` s: a
    replay may be taking some meanwhile). The broker puts them back asynchronously: without
    the wait, a listing or a replay right after this one would miss some of them."""
    channel = link.channel
    assert channel is not None
    channel.basic_nack(last_tag, multiple=True, requeue=True)
    deadline = asyncio.get_running_loop().time() + RETURN_WAIT
    while await link.declare_queue(_passive(queue)) < count:
        if asyncio.get_running_loop().time() > deadline:
            return
        await asyncio.sleep(0.01)  # nothing tells when the broker has put them back: poll


async def _list(
    connection: ConnectionSettings, queue: str | QueueSettings, limit: int
) -> list[ParkedMessage]:
    """What ``AsyncParking.messages`` does (and ``Parking.messages``, on a loop of its own)."""
    if limit < 1:
        raise ConfigurationError(f"limit must be >= 1, got {limit}")
    name, parking = _parking_name(queue)
    link = await _connect(connection)
    try:
        count = await _declare_parking(link, name, parking)
        out: list[ParkedMessage] = []
        last_tag: int | None = None
        for _ in range(to_take(count, limit)):
            got = await _get(link, parking)
            if got is None:
                break
            method, props, body = got
            last_tag = method.delivery_tag
            if len(out) < limit:
                out.append(_parked(props, body))
        if last_tag is not None:
            await _give_back(link, parking, last_tag, count)
        return out
    finally:
        await link.close()


async def _replay(
    connection: ConnectionSettings, queue: str | QueueSettings, limit: int | None
) -> int:
    """What ``AsyncParking.replay`` does (and ``Parking.replay``, on a loop of its own)."""
    if limit is not None and limit < 1:
        raise ConfigurationError(f"limit must be >= 1, got {limit}")
    name, parking = _parking_name(queue)
    link = await _connect(connection)
    try:
        await link.declare_queue(_passive(name))
        count = await _declare_parking(link, name, parking)

        def replayed(props: BasicProperties) -> dict[str, Any]:
            headers = replay_headers(props.headers)
            headers[REPLAYED_HEADER] = next_replay(props.headers)
            return headers

        def refused(props: BasicProperties, done: int, exc: Refused) -> Exception:
            return ReplayError(f"replaying message {props.message_id!r} to {name!r} failed "
                               f"after {done} replayed: {exc}; it stays in {parking!r}")

        done = await _move(link, parking, name, count if limit is None else min(count, limit),
                           replayed, PARKED_PROPERTIES, refused)
        error = done.error("replayed", name, parking)
        if error is not None:
            raise ReplayError(error)
        return done.moved
    except LinkLost as exc:
        raise ConnectError(f"{node_of(link.url)}: the connection was lost during the replay "
                           f"({exc}); what was not confirmed stays parked") from exc
    finally:
        await link.close()


def _checked(connection: ConnectionSettings) -> ConnectionSettings:
    if not isinstance(connection, ConnectionSettings):
        raise TypeError(
            f"connection must be ConnectionSettings, got {type(connection).__name__}")
    return connection


class AsyncParking:
    """The parking queues of a cluster, from asyncio: list and replay what is parked."""

    def __init__(self, connection: ConnectionSettings) -> None:
        self.connection = _checked(connection)

    async def messages(
        self, queue: str | QueueSettings, limit: int = 100
    ) -> list[ParkedMessage]:
        """Up to ``limit`` messages of the queue's parking queue, oldest first, left in place.

        RabbitMQ cannot show a quorum queue's message without taking it: each is taken
        unacked and given back, which marks it redelivered and adds one to its
        ``x-delivery-count`` (a replay drops that header). To keep their order, every message of
        a parking queue holding up to ``ORDER_WINDOW`` (1 000) is taken, shown or not; past
        that only the first ``limit`` are, and those go back behind the rest. A message whose
        ``x-sac-parked-*`` headers are forged is listed, those fields None and named in its
        ``invalid``."""
        return await _list(self.connection, queue, limit)

    async def replay(self, queue: str | QueueSettings, limit: int | None = None) -> int:
        """Move the messages parked now (up to ``limit``) back to ``queue``, oldest first; how
        many. Each is confirmed in the queue before it is acked in the parking queue, so a
        failure half-way loses nothing (at worst one message is in both, with one id). Messages
        parked again while this runs are not replayed a second time. A message whose headers
        cannot be decoded stays parked, headers and all, and the others are replayed: then
        ``ReplayError`` says how many were, and names those left."""
        return await _replay(self.connection, queue, limit)


class Parking:
    """The blocking face of ``AsyncParking``: the same methods, each run to completion on
    its own event loop (so not from a running one: use ``AsyncParking`` there)."""

    def __init__(self, connection: ConnectionSettings) -> None:
        self.connection = _checked(connection)

    def messages(self, queue: str | QueueSettings, limit: int = 100) -> list[ParkedMessage]:
        """Up to ``limit`` messages parked for ``queue``, oldest first, left in place."""
        return asyncio.run(_list(self.connection, queue, limit))

    def replay(self, queue: str | QueueSettings, limit: int | None = None) -> int:
        """Send the messages parked now (up to ``limit``) back to ``queue``; how many."""
        return asyncio.run(_replay(self.connection, queue, limit))


__all__ = [
    "AsyncParking",
    "ParkedMessage",
    "Parking",
    "ReplayError",
]
