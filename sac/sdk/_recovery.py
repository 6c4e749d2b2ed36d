"""Keeping one link up: connect, notice its loss, reconnect to the next node, give up only
when the reconnect policy is exhausted. Publisher and consumer differ only in what they set
up on a new link and what they do with the state of a lost one.

Which node and when are decided in ``_core/reconnects.py`` (the simulator's clients decide
with the same code); this is the asyncio shell that carries them out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from sac.history import Connected, ConnectionLost, HistoryEvent
from ._core.reconnects import Reconnects
from ._errors import SacError
from ._history import HistoryRecorder
from ._settings import ConnectionSettings
from ._transport import Link, LinkLost, connect_any, open_link

log = logging.getLogger("sac.recovery")


class Recovering:
    """Base of the publisher (``AsyncPublisher``) and of the consumer's link
    (``_consumer.link.ConsumerLink``): owns ``_link`` and its recovery."""

    _role = "client"

    def __init__(self, connection: ConnectionSettings, recorder: HistoryRecorder | None) -> None:
        self._connection = connection
        self._recorder = recorder
        self._link: Link | None = None
        self._reconnecting = Reconnects(connection.reconnect, connection.heartbeat)
        self._recovery: asyncio.Task[None] | None = None
        self._opener: object | None = None  # the open() under way, if any
        self._background: set[asyncio.Task[None]] = set()

    # -- what subclasses decide

    @property
    def _shutting_down(self) -> bool:
        raise NotImplementedError

    async def _setup(self, link: Link, retry: bool) -> None:
        """Prepare a fresh link (declare, confirm mode, subscribe...); ``self._link`` is it."""
        raise NotImplementedError

    def _dropped(self, link: Link, reason: LinkLost) -> None:
        """Settle the state the lost link leaves behind (unconfirmed, unacked...)."""

    def _give_up(self, exc: SacError) -> None:
        raise NotImplementedError

    def _on_blocked(self, blocked: bool) -> None:
        """``connection.blocked`` / ``unblocked`` from the broker."""

    # -- the mechanism

    @property
    def _opening(self) -> bool:
        return self._opener is not None

    async def _open(self, retry: bool) -> None:
        """Attempt after attempt until a link is up and set up: ``retry=False`` (start) tries
        each node once and fails fast, ``retry=True`` (after a loss) goes round the nodes
        under the reconnect backoff. A loss at any step is one more failed attempt; only the
        backoff decides to give up, with a ``ConnectError`` that names every attempt."""
        token = self._opener = object()

        def told(node: str, cause: str, delay: float) -> None:
            if retry:
                log.warning("%s: attempt to %s failed (%s); next in %.2f s",
                            self._role, node, cause, delay)

        try:
            _, node = await connect_any(
                self._connection, lambda url: self._attempt(url, retry),
                start=self._reconnecting.node, retry=retry, on_retry=told)
            self._reconnecting.up(node, asyncio.get_running_loop().time())
        finally:
            if self._opener is token:
                self._opener = None

    async def _attempt(self, url: str, retry: bool) -> None:
        """One attempt: connect, handshake, ``channel.open``, then the owner's setup."""
        link = await open_link(url, self._connection, self._role, self._link_lost,
                               on_blocked=self._on_blocked)
        self._link = link
        self._record(Connected(node=link.node, reason="retry" if retry else "start"))
        try:
            await self._setup(link, retry)
            if link.lost is not None:
                # Lost after the last step answered but before this resumed: a link that is
                # already gone is not a working one.
                raise link.lost
        except BaseException:
            if self._link is link:
                self._link = None
            await link.close()
            raise

    def _link_lost(self, link: Link, reason: LinkLost) -> None:
        if link is not self._link:
            return
        self._link = None
        self._dropped(link, reason)
        self._record(ConnectionLost(node=link.node, reason=reason.reason))
        if self._shutting_down or self._opening:
            # start() reports a failure itself; a reconnect under way counts it as a
            # failed attempt (its pending step fails with LinkLost) and goes on.
            return
        step = self._reconnecting.lost(asyncio.get_running_loop().time())
        if step.wait > 0:
            log.warning("%s: the link to %s was lost %.2f s after it came up (%s), %d time(s) "
                        "in a row; reconnecting in %.2f s", self._role, link.node, step.lived,
                        reason.reason, step.streak, step.wait)
        self._replace_recovery(self._reconnect(step.wait))

    def _replace_recovery(self, work: Coroutine[Any, Any, None]) -> None:
        if self._recovery is not None:
            self._recovery.cancel()
        self._recovery = asyncio.get_running_loop().create_task(work)

    async def _stop_recovery(self) -> None:
        """Cancel the recovery under way and wait until it has let go of its half-made link:
        a task only cancelled would finish (or be destroyed pending) after its owner closed,
        and the blocking face closes the loop right after."""
        task, self._recovery = self._recovery, None
        if task is None or task is asyncio.current_task():
            return
        task.cancel()
        await asyncio.wait([task])

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background, holding a reference (asyncio keeps only a weak one,
        and a task collected half-way never finishes)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _reconnect(self, wait: float = 0.0) -> None:
        """Reconnect after ``wait`` seconds (a link that died at once, see ``Flaps``)."""
        try:
            if wait > 0:
                await asyncio.sleep(wait)
            await self._open(retry=True)
        except asyncio.CancelledError:
            raise
        except SacError as exc:
            self._give_up(exc)

    def _record(self, event: HistoryEvent) -> None:
        """Records a rare event (a connection, a subscription) when something records; a
        step taken per message tests the recorder itself before it builds its event."""
        if self._recorder is not None:
            self._recorder.record(event)
