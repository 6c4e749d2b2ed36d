"""The consumer's engine: owns the consumer machine (``_core/consuming.py``) and wires the
rooms that carry its actions out, on one asyncio loop.

Everything a consumer decides (what runs next, when to ack, retry or park, resubscribe, how a
stop hands over) is the machine's; the engine feeds it events and carries its actions out
through the one dispatcher (``_core/dispatch.py``), as the ``ConsumerShell`` it implements.
The rooms it wires: the link and subscription (``_consumer_link.py``), parking
(``_consumer_parking.py``), the guard and eviction (``_consumer_guard.py``), the role poll
(``_role_poll.py``); runs execute in a worker (``_consumer_workers.py``) through a
``Runner`` (``_consumer_runs.py``) that never reads the machine: each run carries a
``Ticket`` with what the loop tells it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ._consumer_guard import GuardRoom
from ._consumer_link import ConsumerLink
from ._consumer_log import ConsumerLog
from ._consumer_parking import Parker
from ._consumer_runs import Fence, Handler, Outcome, Runner, Ticket
from ._consumer_workers import Worker
from ._core.acks import Ack, Reject
from ._core.codecs import BYTES, Codecs, Serializer
from ._core.consuming import (
    Actions,
    Cancel,
    ConsumerMachine,
    Halt,
    Park,
    Parking,
    Release,
    Replaced,
    ResubscribeLater,
    RetryLater,
    RoleChanged,
    Run,
    Subscribe,
    permanent_failure,
)
from ._core.dispatch import carry_out
from ._core.eviction import instance_connection_name
from ._core.guarding import GuardStatus
from ._core.lifecycle import Lifecycle, Phase
from ._core.roles import Role, Verdict
from ._delivery import Delivery
from ._errors import ConfigurationError, LifecycleError, SacError, StaleEpoch
from ._history import HistoryRecorder
from ._role_poll import RolePoller
from ._settings import ConsumerSettings
from ._transport import LinkLost
from .dedup.inbox import Inbox

log = logging.getLogger("sac.consumer")

RoleCallback = Callable[[Role], None]


@attrs.frozen(kw_only=True)
class ConsumerStats:
    delivered: int
    acked: int
    rejected: int
    handler_errors: int
    reconnects: int
    resubscribes: int
    retried: int = 0
    """Handler runs made again for a message that failed (in place, unacked)."""
    parked: int = 0
    """Messages moved to the parking queue (or rejected into the dead-letter exchange)."""


class ConsumerEngine:
    """One consumer's machine and the rooms around it, on one asyncio loop."""

    def __init__(
        self, settings: ConsumerSettings, handler: Handler | Inbox, worker: Worker, *,
        recorder: HistoryRecorder | None = None, on_role_change: RoleCallback | None = None,
        serializers: Serializer[Any] | Sequence[Serializer[Any]] = BYTES,
    ) -> None:
        inbox = handler if isinstance(handler, Inbox) else None
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
            pipeline=1 if inbox is not None else None,
            rejoins=settings.guard is not None, handover=settings.handover)
        self.life = Lifecycle("consumer")
        self._recorder = recorder
        self._worker = worker
        self.runner = Runner(None if isinstance(handler, Inbox) else handler, self.session,
                             queue=self._queue_name, batch=settings.ack_batch, reports=self)
        self._on_role_change = on_role_change
        self.link = ConsumerLink(settings, connection, recorder, self.machine, codecs, self)
        self._parker = Parker(settings, self.link, self.machine, self.carry_out)
        self._log = ConsumerLog(self._queue_name)
        self._handover: Cancel | Release | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = asyncio.Event()
        self._cut = threading.Event()
        """Set when runs handed out so far must end after the delivery in hand."""
        self._fence: Fence | None = None
        self._guard = None if settings.guard is None else GuardRoom(
            settings, settings.guard, self.link, self.machine, carry_out=self.carry_out,
            halt=self._halt, cut=self._cut_runs, refence=self._refence)
        if self._guard is not None and inbox is not None:
            self._fence = Fence(token=None, gone=threading.Event())
        self._poller = None if settings.role_poll is None else RolePoller(
            settings, lambda: self.link.consumer_tag, lambda: self.machine.role,
            self._role_seen)

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
        loop = self._loop = asyncio.get_running_loop()
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
        self._cut_runs()
        if self.session is not None:
            self.session.interrupt()  # a batch waiting for a failing store: leave it unacked
        await self.link.stop_recovery()  # a reconnect may still be making a new link
        try:
            await asyncio.wait_for(self._quiet(), wait)
        except TimeoutError:
            log.warning("a handler did not finish within %.1f s; closing anyway", wait)
        # Acks for what is done, then the handover: the broker hands the queue over only
        # once this consumer's last handler ended, so two never work at once.
        self._handover = None
        self.carry_out(self.machine.finish(loop.time()))
        # Release: no basic.cancel (a link closes without one), the close itself ends the
        # subscription, and the broker takes back what this channel holds before it
        # activates the next consumer. Cancel (the weakened order): cancel first.
        if isinstance(self._handover, Cancel):
            await self.link.cancel(wait)
        elif isinstance(self._handover, Release) and self.link.consumer_tag is not None:
            # The close ends the subscription as a cancel would: a graceful hand-back, which
            # the checker tells from a failed consumer's (whose messages may come back late).
            self.link.record("cancelled", queue=self._queue_name, by="client")
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

    # ------------------------------------------------------------------ runs

    def report(self, ticket: Ticket, outcome: Outcome) -> None:
        """On the loop: how ``ticket``'s run ended, to the machine."""
        done, failed, refused = outcome
        loop = self._loop
        now = loop.time() if loop is not None else time.monotonic()
        if refused is None:
            actions = self.machine.ran(ticket.run, done, failed, now)
        else:
            actions = self.machine.commit_failed(ticket.run, refused, now,
                                                 fenced=isinstance(refused, StaleEpoch))
        if actions:
            self.carry_out(actions)

    def report_all(self, ended: list[tuple[Ticket, Outcome]]) -> None:
        for ticket, outcome in ended:
            self.report(ticket, outcome)

    def report_threadsafe(self, ended: list[tuple[Ticket, Outcome]]) -> None:
        """From the worker's thread: how these runs ended, in order, in one hop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed: nothing more is acked anyway
                loop.call_soon_threadsafe(self.report_all, ended)

    def _cut_runs(self) -> None:
        """Runs handed out so far end after the delivery in hand (stop, pause, halt, lost
        channel); those handed out later get a fresh flag."""
        self._cut.set()
        self._cut = threading.Event()

    def _refence(self, gone: bool) -> None:
        """A guarded inbox's runs from now on commit under the current token; with
        ``gone``, those handed out before are refused."""
        old, guard = self._fence, self._guard
        if old is None or guard is None:
            return
        if gone:
            old.gone.set()
        token = guard.fencing.token_for(self.machine.generation)
        if gone or token != old.token:
            self._fence = Fence(token=token, gone=threading.Event())

    # ------------------------------------------------------------------ ConsumerShell

    def carry_out(self, actions: Actions[Delivery]) -> None:
        carry_out(actions, self)

    def submit(self, run: Run[Delivery]) -> None:
        self._worker.submit(Ticket(run=run, cut=self._cut, fence=self._fence))

    def wake(self) -> None:
        # After the read under way: one run takes all it brought.
        self._now_loop().call_soon(self._dispatch)

    def ack(self, ack: Ack) -> None:
        self.link.ack(ack)

    def reject(self, reject: Reject) -> None:
        self.link.reject(reject)

    def retry_later(self, retry: RetryLater[Delivery]) -> None:
        self._log.failure(retry.delivery, retry.error, retry.attempts, retry.delay)
        self._now_loop().call_at(retry.at, self._tick)

    def park(self, park: Park[Delivery]) -> None:
        self._log.failure(park.delivery, park.error, park.attempts, None)
        if park.target is Parking.QUEUE:
            self._parker.park(park)

    def resubscribe_later(self, later: ResubscribeLater) -> None:
        self._now_loop().call_at(later.at, self._tick)

    def subscribe(self, subscribe: Subscribe) -> None:
        self.link.replace_recovery(self.link.resubscribe())

    def hand_over(self, handover: Cancel | Release) -> None:
        self._handover = handover  # the stop under way does it

    def role_changed(self, change: RoleChanged) -> None:
        if self._poller is not None:
            self._poller.changed(change.new, self._now_loop().time())
        if change.new is Role.ACTIVE and self.session is None:
            # An inbox records it with the epoch it claims.
            self.link.record("active", queue=self._queue_name, epoch=None)
        if self._on_role_change is not None:
            try:
                self._on_role_change(change.new)
            except Exception:
                log.exception("on_role_change callback failed")

    def halt(self, halt: Halt[Delivery]) -> None:
        self._cut_runs()
        self._halt(self._log.error_of(halt))

    def replaced(self, replaced: Replaced) -> None:
        assert self._guard is not None, "only a guarded consumer's machine rejoins"
        self._guard.replaced()

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
        self._cut_runs()
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

    def _dispatch(self) -> None:
        actions = self.machine.dispatch(self._now_loop().time())
        if actions:
            self.carry_out(actions)

    def _tick(self) -> None:
        actions = self.machine.tick(self._now_loop().time())
        if actions:
            self.carry_out(actions)

    def _role_seen(self, verdict: Verdict, active_tag: str | None) -> None:
        """The management API named the queue's active consumer: this one (it is active,
        delivery or not), or another while this one thought itself active; or said the queue
        is gone while this consumer is subscribed to it."""
        now, tag = self._now_loop().time(), self.link.consumer_tag
        if verdict is Verdict.GONE:
            log.warning("queue %r does not exist, yet this consumer (%s) is subscribed to it "
                        "(management API): consuming again", self._queue_name, tag)
            self.link.server_cancel(None)  # as if the broker had cancelled the orphan
        elif verdict is Verdict.ACTIVE:
            log.info("the broker names this consumer (%s) active on %r (management API)",
                     tag, self._queue_name)
            self.carry_out(self.machine.confirmed_active(now))
        else:
            log.warning("the broker names consumer %s active on %r, not this one (%s): "
                        "waiting again", active_tag, self._queue_name, tag)
            self.carry_out(self.machine.demoted(now))

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
        self._cut_runs()
        self.life.closed()
        if self._recorder is not None:
            self._recorder.flush()
        self._stopped.set()
