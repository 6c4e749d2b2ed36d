"""The consumer's engine: owns the consumer machine (``_core/consuming.py``) and wires the
rooms that carry its actions out, on one asyncio loop.

Everything a consumer decides (what runs next, when to ack, retry or park, resubscribe, how a
stop hands over) is the machine's. The engine owns its lifecycle (start, the graceful stop,
the failure ``wait`` raises) and wires the rooms: the link and subscription, which feed the
machine its events (``link.py``); the shell, which carries its actions out through
the one dispatcher (``shell.py``, ``_core/dispatch.py``); parking
(``parking.py``); the guard and eviction (``guard.py``); the role poll
(``role_poll.py``). Runs execute in a worker (``workers.py``) through a
``Runner`` (``runs.py``) that never reads the machine: each run carries a
``Ticket`` from the loop's desk (``desk.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Sequence
from typing import Any

import attrs

from sac.history import Cancelled
from .._core.codecs import BYTES, Codecs, Serializer
from .._core.consuming import Actions, Cancel, ConsumerMachine, Release, permanent_failure
from .._core.eviction import instance_connection_name
from .._core.guarding import GuardStatus
from .._core.lifecycle import Lifecycle, Phase
from .._delivery import Delivery
from .._errors import ConfigurationError, LifecycleError, SacError
from .._history import HistoryRecorder
from .._settings import ConsumerSettings
from .._transport import LinkLost
from ..dedup.inbox import Inbox
from .desk import RunDesk
from .guard import GuardRoom
from .link import ConsumerLink
from .log import ConsumerLog
from .parking import Parker
from .role_poll import RolePoller, role_seen
from .runs import Handler, Runner
from .shell import AsyncConsumerShell
from .values import ConsumerStats, RoleCallback
from .workers import Worker

log = logging.getLogger("sac.consumer")


class ConsumerEngine:
    """One consumer's machine and the rooms around it, on one asyncio loop."""

    def __init__(
        self, settings: ConsumerSettings, handler: Handler | Inbox, worker: Worker, *,
        recorder: HistoryRecorder | None = None, on_role_change: RoleCallback | None = None,
        serializers: Serializer[Any] | Sequence[Serializer[Any]] = BYTES,
    ) -> None:
        inbox = handler if isinstance(handler, Inbox) else None
        pipelined = inbox is None
        codecs = Codecs(serializers)  # a wrong one fails here, before anything connects
        if inbox is None and not callable(handler):
            raise TypeError(f"handler must be callable or an Inbox, got {type(handler).__name__}")
        if settings.guard is not None and inbox is not None and inbox.epoch_source is not None:
            raise ConfigurationError(
                "ConsumerSettings.guard with an Inbox that has its own epoch_source: the "
                "guard's fencing token is the inbox's epoch; drop epoch_source")
        connection = settings.connection
        if settings.guard is not None:
            # A successor evicts this consumer by its connection's name: one per instance.
            connection = attrs.evolve(connection, name=instance_connection_name(
                connection.name or "sac-consumer", secrets.token_hex(8)))
        self.settings = settings
        self._queue_name = settings.queue.name
        self.session = None if inbox is None else inbox.session(
            queue=settings.queue.name,
            consumer=settings.consumer_name or (recorder.actor if recorder else None),
            recorder=recorder)
        self.machine: ConsumerMachine[Delivery] = ConsumerMachine(
            batch=settings.ack_batch, retry=settings.retry,
            resubscribe=settings.connection.reconnect, parking=settings.queue.parking_target,
            permanent=permanent_failure,
            # An inbox commits a run in one transaction: one at a time, each as large as
            # what waits. Handlers run one message at a time anyway: keep the worker fed.
            pipeline=None if pipelined else 1,
            rejoins=settings.guard is not None, handover=settings.handover)
        self.life = Lifecycle("consumer")
        self._recorder = recorder
        self._worker = worker
        self.desk = RunDesk(self.machine, self.carry_out,
                            fenced=settings.guard is not None and inbox is not None)
        self.runner = Runner(None if isinstance(handler, Inbox) else handler, self.session,
                             queue=self._queue_name, batch=settings.ack_batch,
                             reports=self.desk, pipelined=pipelined)
        self.link = ConsumerLink(settings, connection, recorder, self.machine, codecs, self)
        self._parker = Parker(settings, self.link, self.machine, self.carry_out)
        self.shell = AsyncConsumerShell(
            self.machine, worker, self.desk, self.link, self._parker, queue=self._queue_name,
            records_activity=inbox is None, halt=self._halt, on_role_change=on_role_change)
        self._log = ConsumerLog(self._queue_name)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = asyncio.Event()
        self._guard = self.shell.guard = None if settings.guard is None else GuardRoom(
            settings, settings.guard, self.link, self.machine, carry_out=self.carry_out,
            halt=self._halt, cut=self.desk.cut, refence=self._refence)
        self._poller = self.shell.poller = None if settings.role_poll is None else RolePoller(
            settings, lambda: self.link.consumer_tag, lambda: self.machine.role,
            lambda verdict, tag: role_seen(verdict, tag, self.link, self.machine,
                                           self.carry_out))

    # ------------------------------------------------------------------ the faces' API

    @property
    def failure(self) -> SacError | None:
        """What stopped the consumer, if it was an error."""
        return self.life.failure

    @property
    def guard_status(self) -> GuardStatus | None:
        return None if self._guard is None else self._guard.status

    @property
    def stats(self) -> ConsumerStats:
        c, link = self.machine.counts, self.link
        return ConsumerStats(
            delivered=c.delivered, acked=link.acked, rejected=link.rejected,
            handler_errors=c.handler_errors, reconnects=link.reconnects,
            resubscribes=c.resubscribes, retried=c.retried, parked=c.parked)

    async def start(self) -> None:
        """Connect, declare or check the queue, subscribe. Fails fast if no node answers."""
        self.life.start()
        loop = self._loop = self.desk.loop = asyncio.get_running_loop()
        self.carry_out(self.machine.start(loop.time()))
        guard, session = self._guard, self.session
        if guard is not None:
            # No ZooKeeper session, or another lease than asked for: fails here, first.
            try:
                await guard.connect()
            except BaseException:
                self._ended()
                raise
        if session is not None:
            # A store that cannot be used fails here, before any message is consumed.
            try:
                await loop.run_in_executor(session.executor, session.open)
            except BaseException:
                await loop.run_in_executor(None, session.close)
                await self._close_guard()
                self._ended()
                raise
        self._worker.begin(self.runner)
        try:
            await self.link.open()
        except BaseException:
            self.life.close()
            self.machine.finish(loop.time())
            await self._worker.finish()
            if session is not None:
                await loop.run_in_executor(None, session.close)
            await self._close_guard()
            self._ended()
            raise
        self.life.started()
        if guard is not None:
            guard.start()
        if self._poller is not None:
            self._poller.start()

    async def wait(self) -> None:
        if self.life.phase is Phase.NEW:
            raise LifecycleError("cannot wait: this consumer is not started")
        await self._stopped.wait()
        if self.life.failure is not None:
            raise self.life.failure

    async def stop(self, timeout: float | None = None) -> None:
        """Graceful handover: let the running handler finish, ack what is done, then close
        the channel with the subscription in place (``Release``): the broker puts what was
        prefetched but not started back at the head of the queue, in order, and only then
        makes the next consumer active."""
        if not self.life.close():
            if self.life.phase is not Phase.CLOSED or self._loop is not None:
                await self._stopped.wait()
            return
        loop = asyncio.get_running_loop()
        wait = self.settings.stop_timeout if timeout is None else timeout
        if self._poller is not None:
            await self._poller.stop()
        self.carry_out(self.machine.stop(loop.time()))  # nothing more is taken or started
        self.desk.cut()
        if self.session is not None:
            self.session.interrupt()  # a batch waiting for a failing store: leave it unacked
        await self.link.stop_recovery()  # a reconnect may still be making a new link
        try:
            await asyncio.wait_for(self._quiet(), wait)
        except TimeoutError:
            log.warning("a handler did not finish within %.1f s; closing anyway", wait)
        # Acks for what is done, then the handover: the broker hands the queue over only
        # once this consumer's last handler ended, so two never work at once.
        self.shell.handover = None
        self.carry_out(self.machine.finish(loop.time()))
        # Release: no basic.cancel (a link closes without one), the close itself ends the
        # subscription, and the broker takes back what this channel holds before it
        # activates the next consumer. Cancel (the weakened order): cancel first.
        if isinstance(self.shell.handover, Cancel):
            await self.link.cancel(wait)
        elif isinstance(self.shell.handover, Release) and self.link.consumer_tag is not None:
            # The close ends the subscription as a cancel would: a graceful hand-back, which
            # the checker tells from a failed consumer's (whose messages may come back late).
            self.link.record(Cancelled(queue=self._queue_name, by="client"))
        await self.link.close()
        # Only now, the subscription gone: the next contender leads once this one's
        # session ends (its election node goes with it).
        await self._close_guard()
        if self.session is not None:
            await loop.run_in_executor(None, self.session.close)
        self._ended()

    def request_stop(self, timeout: float | None = None) -> None:
        """From any thread (a signal handler too: it does not block): begin the graceful
        stop; the run under way ends after its delivery in hand."""
        self.runner.stop_requested = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing: stopping anyway
                loop.call_soon_threadsafe(self._stop_soon, timeout)

    def carry_out(self, actions: Actions[Delivery]) -> None:
        self.shell.carry_out(actions)

    # ------------------------------------------------------------------ LinkOwner

    @property
    def shutting_down(self) -> bool:
        return self.life.shutting_down

    @property
    def may_subscribe(self) -> bool:
        return self._guard is None or self._guard.leading

    def subscribed_now(self) -> None:
        if self._guard is not None:
            self._guard.subscribed(self.machine.generation)

    def link_lost(self, reason: LinkLost) -> None:
        self.desk.cut()
        self._parker.link_lost()
        if self._guard is not None:
            self._refence(True)
            self._guard.link_lost(reason)

    def give_up(self, exc: SacError) -> None:
        log.error("consumer of %r gives up: %s", self._queue_name, exc)
        self.life.fail(exc)
        self._stop_soon(1.0)

    # ------------------------------------------------------------------ the rest

    def _now_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        assert loop is not None
        return loop

    def _refence(self, gone: bool) -> None:
        if self._guard is not None:
            self.desk.refence(gone, self._guard.fencing.token_for(self.machine.generation))

    def _halt(self, exc: SacError) -> None:
        """Leave the messages in hand unacked (the broker gives them back when our channel
        closes) and stop; ``wait``/``run`` raise ``exc``."""
        self._log.halting(exc)
        self.life.fail(exc)
        self._stop_soon(1.0)

    def _stop_soon(self, timeout: float | None) -> None:
        self.link.spawn(self.stop(timeout))

    async def _quiet(self) -> None:
        """Until the worker has ended what it was given and no park is under way."""
        await self._worker.finish()
        await self._parker.quiet()

    async def _close_guard(self) -> None:
        if self._guard is not None:
            await self._guard.close()

    def _ended(self) -> None:
        self.carry_out(self.machine.closed(self._now_loop().time()))
        self.desk.cut()
        self.life.closed()
        if self._recorder is not None:
            self._recorder.flush()
        self._stopped.set()
