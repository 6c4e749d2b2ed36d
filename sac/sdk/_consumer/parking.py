"""A consumer's parking: copy a message that failed for good to the parking queue, wait for
the confirm, and tell the consumer machine how it went (``parked`` or ``park_failed``).

Which failures stop the consumer is decided in ``_core/park_failures.py``; the copy goes
over a confirm-mode channel of its own (``_forward.py``) on the consumer's link.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pika.spec import BasicProperties

from .._core.consuming import Actions, ConsumerMachine, Park
from .._core.park_failures import ParkEnd, parking_failure
from .._core.poison import parking_headers
from .._delivery import PARKED_PROPERTIES, Delivery
from .._errors import ParkingFailed, SacError
from .._forward import Forwarder, Refused
from .._settings import ConsumerSettings
from .._transport import Link, LinkLost
from .link import ConsumerLink

PARK_TIMEOUT = 120.0
"""Longest a park waits for the parking queue's confirm (the nack retries are bounded by
30 s, a lost link ends it at once): past it the consumer stops, the message unacked."""


class Parker:
    """Parks one message at a time (the machine runs nothing else meanwhile)."""

    def __init__(self, settings: ConsumerSettings, link: ConsumerLink,
                 machine: ConsumerMachine[Delivery],
                 carry_out: Callable[[Actions[Delivery]], None]) -> None:
        self.settings = settings
        self._link = link
        self._machine = machine
        self._carry_out = carry_out
        self._forwarder: Forwarder | None = None
        self._parking: asyncio.Task[None] | None = None

    def park(self, park: Park[Delivery]) -> None:
        self._parking = asyncio.get_running_loop().create_task(self._park(park))

    def link_lost(self) -> None:
        self._forwarder = None

    async def quiet(self) -> None:
        """Until no park is under way."""
        parking = self._parking
        if parking is not None and not parking.done():
            await asyncio.shield(parking)

    async def _park(self, park: Park[Delivery]) -> None:
        """Copy the message to the parking queue and wait for the confirm; then the machine
        acks the original."""
        delivery = park.delivery
        queue = self.settings.queue
        link = self._link.link
        try:
            await asyncio.wait_for(self._forward(link, park), PARK_TIMEOUT)
        except LinkLost as lost:
            self._failed(park, ParkEnd.LINK_LOST, str(lost), lost,
                         consuming_link_up=self._link.link is link and link is not None
                         and link.usable)
        except Refused as refused:
            self._failed(park, ParkEnd.REFUSED, str(refused), refused)
        except TimeoutError:
            self._failed(park, ParkEnd.TIMED_OUT, "", None)
        else:
            self._link.parked(delivery, queue.parking_queue)
            self._carry_out(self._machine.parked(self._link.now()))

    def _failed(self, park: Park[Delivery], end: ParkEnd, detail: str,
                cause: SacError | Refused | None, *, consuming_link_up: bool = True) -> None:
        reason = parking_failure(end, consuming_link_up=consuming_link_up,
                                 parking_queue=self.settings.queue.parking_queue,
                                 detail=detail, timeout=PARK_TIMEOUT)
        error: SacError
        if reason is None:
            assert isinstance(cause, SacError)
            error = cause  # the link went: no failure of the message's
        else:
            error = ParkingFailed(self.settings.queue.name, park.delivery.message_id, reason)
            if isinstance(cause, Refused):
                error.__cause__ = cause
        self._carry_out(self._machine.park_failed(self._link.now(), error))

    async def _forward(self, link: Link | None, park: Park[Delivery]) -> None:
        queue = self.settings.queue
        assert queue.parking_queue is not None
        if link is None or not link.usable:
            raise LinkLost(link.node if link is not None else "-", "the link is gone")
        forwarder = self._forwarder
        if forwarder is None or forwarder.link is not link:
            forwarder = self._forwarder = Forwarder(link)
        delivery = park.delivery
        headers = parking_headers(delivery.headers, park.error, queue.name, park.attempts,
                                  self.settings.consumer_name)
        kept = {k: v for k, v in delivery.properties.items() if k in PARKED_PROPERTIES}
        props = BasicProperties(
            content_type=delivery.content_type, headers=headers, delivery_mode=2,
            correlation_id=delivery.correlation_id,
            message_id=None if delivery.id_derived else delivery.message_id,
            timestamp=delivery.timestamp, **kept)
        await forwarder.send(queue.parking_queue, delivery.body, props)
