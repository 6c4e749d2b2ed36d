"""A consumer's link and subscription: the channel, what arrives on it, what leaves it.

Sets a new link up (the queue's topology, the prefetch, the subscription when the consumer
may subscribe), turns what the broker sends into the consumer machine's events (deliveries,
a server cancel, the link's loss), and puts the machine's acks and rejects on the channel.
Reconnecting is ``_recovery.py``'s; deciding is the machine's (``_core/consuming.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import types
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

from pika.spec import Basic, BasicProperties

from sac.history import Ack as Acked
from sac.history import Cancelled, Deliver, HistoryEvent, Subscribed
from sac.history import Reject as Rejected
from .._core.acks import Ack, Reject
from .._core.codecs import Codecs, Undecodable
from .._core.consuming import Actions, ConsumerMachine
from .._core.queues import consume_arguments
from .._delivery import Delivery, delivery_count, other_properties
from .._errors import SacError, UnfitMessage
from .._history import HistoryRecorder, recorded_id
from .._recovery import Recovering
from .._settings import ConnectionSettings, ConsumerSettings
from .._transport import Link, LinkLost
from .._wire.pika_hooks import undecodable

log = logging.getLogger("sac.consumer")

_tags = itertools.count(1)
_NO_HEADERS: Mapping[str, Any] = types.MappingProxyType({})


class LinkOwner(Protocol):
    """What the link tells the consumer (its engine) and asks of it."""

    @property
    def shutting_down(self) -> bool: ...

    @property
    def may_subscribe(self) -> bool:
        """Not guarded, or leading its group."""

    def carry_out(self, actions: Actions[Delivery]) -> None: ...

    def subscribed_now(self) -> None:
        """A subscription was just made (the guard notes its token)."""

    def link_lost(self, reason: LinkLost) -> None:
        """The link went; the machine was told (``channel_lost``)."""

    def give_up(self, exc: SacError) -> None:
        """Reconnecting failed for good."""


class ConsumerLink(Recovering):
    """The link, its subscription, the deliveries in and the acks out, on the loop."""

    _role = "consumer"

    def __init__(
        self, settings: ConsumerSettings, connection: ConnectionSettings,
        recorder: HistoryRecorder | None, machine: ConsumerMachine[Delivery], codecs: Codecs,
        owner: LinkOwner,
    ) -> None:
        super().__init__(connection, recorder)
        self.settings = settings
        self._queue_name = settings.queue.name
        self._machine = machine
        self._owner = owner
        self.consumer_tag: str | None = None
        self._ids_by_tag: dict[int, str | None] = {}
        self.acked = self.rejected = 0
        self._id_from = settings.message_id_from
        self._decoding = None if codecs.decodes_nothing else codecs
        """None by default: every value is its body, nothing to do per message."""

    @property
    def link(self) -> Link | None:
        return self._link

    @property
    def connection_name(self) -> str | None:
        """As the broker shows it (a guarded consumer's names its instance)."""
        return self._connection.name

    @property
    def shutting_down(self) -> bool:
        return self._owner.shutting_down

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._spawn(work)

    def replace_recovery(self, work: Coroutine[Any, Any, None]) -> None:
        self._replace_recovery(work)

    async def stop_recovery(self) -> None:
        await self._stop_recovery()

    async def open(self) -> None:
        """At start: each node once, failing fast."""
        await self._open(retry=False)

    @property
    def reconnects(self) -> int:
        return self._reconnecting.reconnects

    @property
    def opening(self) -> bool:
        return self._opening

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def record(self, event: HistoryEvent) -> None:
        """Records ``event`` when the consumer records its history."""
        self._record(event)

    # ------------------------------------------------------------------ acks out

    def ack(self, action: Ack) -> None:
        link = self._link
        if link is None or link.channel is None or not link.usable:
            return
        link.channel.basic_ack(action.tag, multiple=action.multiple)
        self.acked += action.count
        rec = self._recorder
        if rec is not None:
            tags = [t for t in self._ids_by_tag if t <= action.tag] \
                if action.multiple else [action.tag]
            for tag in tags:
                rec.record(Acked(msg=self._ids_by_tag.pop(tag, None)))

    def reject(self, action: Reject) -> None:
        link = self._link
        if link is None or link.channel is None or not link.usable:
            return
        link.channel.basic_reject(action.tag, requeue=action.requeue)
        self.rejected += 1
        rec = self._recorder
        if rec is not None:
            rec.record(Rejected(msg=self._ids_by_tag.pop(action.tag, None),
                                requeue=action.requeue))

    def parked(self, delivery: Delivery, parking_queue: str | None) -> None:
        """``delivery``'s copy is confirmed: recorded as a reject into the parking queue."""
        rec = self._recorder
        if rec is not None:
            self._ids_by_tag.pop(delivery.delivery_tag, None)  # not recorded as an ack
            rec.record(Rejected(msg=recorded_id(delivery.message_id), requeue=False,
                                parked=parking_queue))

    # ------------------------------------------------------------------ deliveries in

    def _on_message(
        self, channel: Any, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        """A delivery that pika decoded (the fast path in ``sac/sdk/_wire/deliveries.py`` takes the
        usual ones): the same handling, and one that reached pika without its headers (they
        do not decode: ``pika_hooks.undecodable``) is unfit there too."""
        rare = other_properties(props)
        self._take(method.delivery_tag, method.redelivered, method.exchange,
                   method.routing_key, props.content_type, props.headers,
                   props.correlation_id, props.message_id, props.timestamp, body,
                   undecodable(props), properties=rare or _NO_HEADERS)

    def _take(
        self, tag: int, redelivered: bool, exchange: str, routing_key: str,
        content_type: str | None, headers: dict[str, Any] | None,
        correlation_id: str | None, message_id: str | None, timestamp: int | None,
        body: bytes, unfit: str | None = None, properties: Mapping[str, Any] = _NO_HEADERS,
    ) -> None:
        try:
            derived = False
            if not message_id and self._id_from is not None:
                message_id = self._id_from.derive(body, headers)
                derived = message_id is not None
            value: Any = body
            decoding = self._decoding
            if decoding is not None and unfit is None:
                # Here, once, as it arrives: a retry does not decode again, and a body that
                # does not decode is parked in its turn, never seen by the handler.
                try:
                    value = decoding.decode(content_type, body)
                except Undecodable as undecodable:
                    unfit = undecodable.reason
            delivery = Delivery(
                body, message_id, headers or _NO_HEADERS, bool(redelivered),
                None if headers is None else delivery_count(headers), self._queue_name,
                routing_key, exchange, content_type, correlation_id, timestamp, tag, derived,
                properties, value)
            rec = self._recorder
            if rec is not None:
                msg = self._ids_by_tag[tag] = recorded_id(message_id)
                rec.record(Deliver(msg=msg, redelivered=delivery.redelivered,
                                   delivery_count=delivery.delivery_count))
            if unfit is None:
                actions = self._machine.deliver(delivery)
            else:  # the wire could not decode it (``sac/sdk/_wire/deliveries.py``): park it
                actions = self._machine.refuse(
                    delivery, UnfitMessage(self._queue_name, tag, unfit))
            if actions:
                self._owner.carry_out(actions)
        except Exception:
            # Otherwise the message would sit unacked on this channel until it closes.
            log.exception("could not take delivery %s; rejecting it with requeue", tag)
            link = self._link
            if link is not None and link.usable and link.channel is not None:
                link.channel.basic_reject(tag, requeue=True)

    # ------------------------------------------------------------------ the subscription

    def server_cancel(self, _frame: Any) -> None:
        """The broker cancelled us (queue deleted, mirrored queue failed over)."""
        self._record(Cancelled(queue=self._queue_name, by="server"))
        link = self._link
        if link is not None and link.channel is not None and self.consumer_tag is not None:
            link.release_deliveries(self.consumer_tag)
        self.consumer_tag = None
        if self._opening and not self._owner.shutting_down:
            # Cancelled while a (re)connect sets this link up: that attempt failed, and the
            # open under way tries again (declaring the queue again names a deleted one).
            if link is not None:
                link.abandon("the broker cancelled the subscription while it was set up")
            return
        self._owner.carry_out(self._machine.server_cancel(self.now()))

    async def resubscribe(self) -> None:
        """One attempt to consume again after a server cancel; the machine decides on the
        next one."""
        link = self._link
        if link is None or not link.usable or not self._owner.may_subscribe:
            return  # the reconnect path (or the next leadership) subscribes again
        try:
            await self.subscribe(link)
        except LinkLost:
            return
        except SacError as exc:
            log.warning("consume again on %r failed: %s", self._queue_name, exc)
            self._owner.carry_out(self._machine.subscribe_failed(self.now(), exc))

    async def subscribe(self, link: Link) -> None:
        channel = link.channel
        assert channel is not None
        queue = self.settings.queue
        if self._machine.subscriptions:  # again after a cancel: the queue may have gone
            await link.declare_topology(queue)
        name = self.settings.consumer_name or "sac"
        tag = f"{name}-{next(_tags)}-{id(self):x}"
        arguments = consume_arguments(queue.type, link.broker, self.settings.priority)
        # Deliveries to this tag are decoded by our own fast path, pika's for the rest.
        link.take_deliveries(tag, self._take)
        try:
            await link.rpc(lambda cb: channel.basic_consume(
                queue.name, self._on_message, consumer_tag=tag, arguments=arguments,
                callback=cb), "basic.consume")
        except BaseException:
            link.release_deliveries(tag)
            raise
        self.consumer_tag = tag
        self._owner.subscribed_now()
        self._record(Subscribed(queue=queue.name, by="client"))
        self._owner.carry_out(self._machine.subscribed(self.now()))

    async def cancel(self, timeout: float) -> None:
        """The weakened handover (``Handover.CANCEL``): ``basic.cancel`` before the close."""
        link = self._link
        tag = self.consumer_tag
        if link is None or not link.usable or tag is None:
            return
        channel = link.channel
        assert channel is not None
        # From here pika rejects (requeues) what still arrives for the tag, as it does for
        # any consumer it cancels.
        link.release_deliveries(tag)
        try:
            await asyncio.wait_for(link.rpc(
                lambda cb: channel.basic_cancel(tag, callback=cb), "basic.cancel"), timeout)
            self._record(Cancelled(queue=self._queue_name, by="client"))
        except (LinkLost, TimeoutError):
            pass

    async def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            await link.close()

    # ------------------------------------------------------------------ Recovering's hooks

    @property
    def _shutting_down(self) -> bool:
        return self._owner.shutting_down

    async def _setup(self, link: Link, retry: bool) -> None:
        channel = link.channel
        assert channel is not None
        await link.declare_topology(self.settings.queue)
        await link.rpc(lambda cb: channel.basic_qos(
            prefetch_count=self.settings.prefetch, callback=cb), "basic.qos")
        channel.add_on_cancel_callback(self.server_cancel)
        if self._owner.may_subscribe:
            await self.subscribe(link)
        else:
            self._owner.carry_out(self._machine.standing_by(self.now()))

    def _dropped(self, link: Link, reason: LinkLost) -> None:
        self.consumer_tag = None
        self._ids_by_tag.clear()
        self._owner.carry_out(self._machine.channel_lost(self.now()))
        self._owner.link_lost(reason)

    def _give_up(self, exc: SacError) -> None:
        self._owner.give_up(exc)
