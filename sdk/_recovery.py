"""Keeping one link up: connect, notice its loss, reconnect to the next node, give up only
when the reconnect policy is exhausted. Publisher and consumer differ only in what they set
up on a new link and what they do with the state of a lost one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from ._errors import ConnectError, SacError
from ._history import HistoryRecorder
from ._settings import ConnectionSettings
from ._transport import Link, LinkLost, connect_any


class Recovering:
    """Base of ``AsyncPublisher`` and ``AsyncConsumer``: owns ``_link`` and its recovery."""

    _role = "client"

    def __init__(self, connection: ConnectionSettings, recorder: HistoryRecorder | None) -> None:
        self._connection = connection
        self._recorder = recorder
        self._link: Link | None = None
        self._node_index = 0
        self._reconnects = 0
        self._recovery: asyncio.Task[None] | None = None
        self._first_open = False

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

    async def _open(self, retry: bool) -> None:
        """Connect to the first node that answers, from the one after the last used."""
        self._first_open = not retry
        try:
            await self._open_link(retry)
        finally:
            self._first_open = False

    async def _open_link(self, retry: bool) -> None:
        link, index = await connect_any(
            self._connection, self._role, self._link_lost,
            start=self._node_index, retry=retry, on_blocked=self._on_blocked,
        )
        self._node_index = index
        self._link = link
        self._record("connected", node=link.node, reason="retry" if retry else "start")
        try:
            await self._setup(link, retry)
        except BaseException as exc:
            self._link = None
            await link.close()
            if not retry and isinstance(exc, LinkLost):
                raise ConnectError(str(exc)) from exc
            raise

    def _link_lost(self, link: Link, reason: LinkLost) -> None:
        if link is not self._link:
            return
        self._link = None
        self._dropped(link, reason)
        self._record("connection_lost", node=link.node, reason=reason.reason)
        if self._shutting_down or self._first_open:
            return  # start() reports a failure while it sets up: no recovery behind it
        self._node_index += 1  # try the next node first
        self._reconnects += 1
        self._replace_recovery(self._reconnect())

    def _replace_recovery(self, work: Coroutine[Any, Any, None]) -> None:
        if self._recovery is not None:
            self._recovery.cancel()
        self._recovery = asyncio.get_running_loop().create_task(work)

    def _cancel_recovery(self) -> None:
        if self._recovery is not None:
            self._recovery.cancel()
            self._recovery = None

    async def _reconnect(self) -> None:
        try:
            await self._open(retry=True)
        except asyncio.CancelledError:
            raise
        except SacError as exc:
            self._give_up(exc)

    def _record(self, kind: str, **fields: Any) -> None:
        if self._recorder is not None:
            self._recorder.record(kind, **fields)
