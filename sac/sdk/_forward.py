"""Moving one message to another queue, confirmed, before the original is acked.

Parking a failed message and replaying a parked one are the same move: publish a copy on a
channel of its own in confirm mode (mandatory, persistent), wait for the broker's ack, and
only then ack the original. A crash between the two leaves the original in place and the copy
delivered too: a duplicate with the same message id, which the inbox deduplicates; never a
loss. The broker's nack (a quorum queue electing a leader) is retried under a bounded backoff;
an unroutable copy (the target queue is gone) is refused at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pika.channel import Channel
from pika.spec import BasicProperties

from ._core.backoff import Backoff
from ._core.retry import Retry
from ._settings import PARK_NACK_RETRY
from ._transport import Link, LinkLost, describe

log = logging.getLogger("sac.forward")

"""A quorum queue nacks while it elects a leader, for up to a few seconds."""


class Refused(Exception):
    """The broker did not take the copy (unroutable, or nacked past ``PARK_NACK_RETRY``)."""


class _Nacked(Exception):
    """The broker nacked the copy (a quorum queue electing a leader): worth another try."""


class Forwarder:
    """A confirm-mode channel of its own on ``link`` (the link's main channel stays as it
    is), one message at a time."""

    def __init__(self, link: Link, retry: Backoff = PARK_NACK_RETRY) -> None:
        self.link = link
        self.retry = retry
        self._retry = Retry(retry, time.monotonic, asyncio.sleep)
        self._channel: Channel | None = None
        self._seq = 0
        self._waiting: dict[int, asyncio.Future[bool]] = {}
        self._returned: str | None = None
        self._lock = asyncio.Lock()

    async def _open(self) -> Channel:
        channel = self._channel
        if channel is not None and channel.is_open:
            return channel
        link = self.link
        if not link.usable:
            raise link.lost or LinkLost(link.node, "the link is closing")
        opened: Channel = await link.rpc(
            lambda cb: link.conn.channel(on_open_callback=cb), "channel.open (forward)")
        opened.add_on_close_callback(self._closed)
        opened.add_on_return_callback(self._on_return)
        await link.rpc(lambda cb: opened.confirm_delivery(self._on_confirm, callback=cb),
                       "confirm.select (forward)")
        self._channel, self._seq = opened, 0
        return opened

    async def send(self, routing_key: str, body: bytes, properties: BasicProperties) -> None:
        """Publish through the default exchange to the queue ``routing_key``; return once
        the broker confirmed it. ``Refused`` if it will not take it, ``LinkLost`` if the
        link died first (then nobody knows: the caller leaves the original unacked)."""

        async def attempt() -> None:
            if not await self._send_once(routing_key, body, properties):
                raise _Nacked()

        def retrying(_failures: int, delay: float, _nack: BaseException) -> None:
            log.warning("the broker nacked a message for %r; sending it again in %.2f s",
                        routing_key, delay)

        def give_up(failures: int, elapsed: float, _nack: BaseException) -> BaseException:
            return Refused(f"the broker nacked it {failures} time(s) over {elapsed:.1f} s")

        async with self._lock:
            await self._retry.run_async(attempt, retry_on=_Nacked, give_up=give_up,
                                        on_retry=retrying)

    async def _send_once(self, routing_key: str, body: bytes, props: BasicProperties) -> bool:
        channel = await self._open()
        self._seq += 1
        fut: asyncio.Future[bool] = self.link.future()
        self._waiting[self._seq] = fut
        self._returned = None
        try:
            channel.basic_publish("", routing_key, body, props, mandatory=True)
        except Exception as exc:  # pika refuses a call on a closing channel or connection
            self._waiting.pop(self._seq, None)
            fut.cancel()
            raise LinkLost(self.link.node, f"{describe(exc)} (at basic.publish)") from exc
        acked = await fut
        if self._returned is not None:
            raise Refused(f"unroutable: {self._returned} (does queue {routing_key!r} exist?)")
        return acked

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        acked = type(method).__name__ == "Ack"
        tags = [t for t in self._waiting if t <= method.delivery_tag] if method.multiple \
            else [method.delivery_tag]
        for tag in tags:
            fut = self._waiting.pop(tag, None)
            if fut is not None and not fut.done():
                fut.set_result(acked)

    def _on_return(self, _channel: Any, method: Any, _props: Any, _body: bytes) -> None:
        self._returned = f"{method.reply_code} {method.reply_text}"

    def _closed(self, channel: Channel, exc: BaseException) -> None:
        current = self._channel
        if current is None or channel is not current:
            return
        self._channel = None
        self.link.forget_channel(current)
        lost = LinkLost(self.link.node, f"forwarding channel closed: {describe(exc)}")
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(lost)
        self._waiting.clear()

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None and channel.is_open:
            channel.close()
