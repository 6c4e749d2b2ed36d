"""The consumer's shell: carries out what the consumer machine (``_core/consuming.py``) decides.

Everything a consumer decides (what runs next, when to ack, retry or park, resubscribe, how a
stop hands over) is the machine's; this shell owns the I/O around it on the asyncio loop: the
link and its recovery, the subscription, acks and rejects on the channel, parked copies, the
history, the logs, and the timers that call the machine's ``tick``.

Runs (a batch of deliveries for the handler, or for the inbox) go to a worker
(``_consumer_workers.py``), which runs them in order and reports how each ended: on the loop
for the asyncio face, in the thread that called ``Consumer.run()`` for the blocking face.
Both run a batch with the same code (``execute``) and report with the same call
(``report``), so the two faces differ only in where a run executes.

With ``ConsumerSettings.guard`` the consumer subscribes only while it leads its group in
ZooKeeper: the guard's shell (``guard.py``, kazoo) reports to this loop, the guard machine
(``_core/guarding.py``) decides, and this shell subscribes (``Lead``), pauses and resumes the
consumer machine, or gives the channel up (``Abandon``). The leader's token is the inbox's
epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import secrets
import time
import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from pika.spec import Basic, BasicProperties

from ._consumer_workers import Tally, Worker
from ._core.acks import Ack, Reject
from ._core.codecs import BYTES, Codecs, Serializer, Undecodable
from ._core.consuming import (
    RUNNING,
    Action,
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
    Wake,
    Why,
    permanent_failure,
)
from ._core.eviction import Evict, decide_eviction, evicted_by, instance_connection_name
from ._core.guarding import (
    Abandon,
    Contend,
    ContendLater,
    GiveUp,
    GuardAction,
    GuardMachine,
    GuardStatus,
    Lead,
    Leadership,
    Pause,
    Resume,
    SessionState,
    Withdraw,
)
from ._core.lifecycle import Lifecycle, Phase
from ._core.poison import LogBudget, describe_failure, parking_headers
from ._core.queues import consume_arguments
from ._core.roles import Role, Verdict
from ._delivery import PARKED_PROPERTIES, Delivery, delivery_count, other_properties
from ._errors import (
    ConfigurationError,
    ConsumerError,
    LifecycleError,
    ManagementError,
    ParkingFailed,
    SacError,
    StaleEpoch,
    StoreUnavailable,
    UnfitMessage,
)
from ._forward import Forwarder, Refused
from ._history import HistoryRecorder
from ._recovery import Recovering
from ._role_poll import RolePoller
from ._settings import ConsumerSettings, GuardSettings
from ._transport import Link, LinkLost
from ._wire.pika_hooks import undecodable
from .dedup.inbox import Inbox

if TYPE_CHECKING:
    from ._evictor import Evictor
    from .guard import ZooKeeperGuard

log = logging.getLogger("sac.consumer")

Handler = Callable[[Delivery], Awaitable[None]] | Callable[[Delivery], None]
RoleCallback = Callable[[Role], None]
Outcome = tuple[int, Exception | None, SacError | None]
"""A run's end: how many of its deliveries succeeded (handler returned, or committed), the
exception that stopped it at the next one, and the inbox's refusal of the whole run
(``StaleEpoch``, ``StoreUnavailable``). A plain tuple: one is made per run."""
PARK_TIMEOUT = 120.0
"""Longest a park waits for the parking queue's confirm (the nack retries are bounded by
30 s, a lost link ends it at once): past it the consumer stops, the message unacked."""

_SETTLE = (Ack, Reject)
_tags = itertools.count(1)
_NO_HEADERS: Mapping[str, Any] = types.MappingProxyType({})


class ConsumerEngine(Recovering):
    """One consumer's machine and the I/O around it, on one asyncio loop."""

    _role = "consumer"

    def __init__(
        self,
        settings: ConsumerSettings,
        handler: Handler | Inbox,
        worker: Worker,
        *,
        recorder: HistoryRecorder | None = None,
        on_role_change: RoleCallback | None = None,
        serializers: Serializer[Any] | Sequence[Serializer[Any]] = BYTES,
    ) -> None:
        inbox = handler if isinstance(handler, Inbox) else None
        codecs = Codecs(serializers)  # a wrong one fails here, before anything connects
        if inbox is None and not callable(handler):
            raise TypeError(f"handler must be callable or an Inbox, got {type(handler).__name__}")
        connection = settings.connection
        if settings.guard is not None:
            # A successor evicts this consumer by its connection's name: one per instance.
            connection = attrs.evolve(connection, name=instance_connection_name(
                connection.name or f"sac-{self._role}", secrets.token_hex(8)))
        super().__init__(connection, recorder)
        self.settings = settings
        self.inbox = inbox
        self._queue_name = settings.queue.name
        self._handler = handler
        self.handler_is_async = inbox is None and inspect.iscoroutinefunction(handler)
        if inbox is not None:
            inbox.bind(settings.queue.name,
                       settings.consumer_name or (recorder.actor if recorder is not None else None),
                       recorder)
        self.machine: ConsumerMachine[Delivery] = ConsumerMachine(
            batch=settings.ack_batch, retry=settings.retry,
            resubscribe=settings.connection.reconnect, parking=settings.queue.parking_target,
            permanent=permanent_failure,
            # An inbox commits a run in one transaction: one at a time, each as large as
            # what waits. Handlers run one message at a time anyway: keep the worker fed.
            pipeline=1 if inbox is not None else None,
            rejoins=settings.guard is not None, handover=settings.handover)
        self.life = Lifecycle("consumer")
        self._worker = worker
        self._on_role_change = on_role_change
        self._consumer_tag: str | None = None
        self._ids_by_tag: dict[int, str | None] = {}
        self._acked = self._rejected = 0
        self._id_from = settings.message_id_from
        self.codecs = codecs
        self._decoding = None if codecs.decodes_nothing else codecs
        """None by default: every value is its body, nothing to do per message."""
        self._forwarder: Forwarder | None = None
        self._parking: asyncio.Task[None] | None = None
        self._log_budget = LogBudget()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = asyncio.Event()
        self.stop_requested = False
        """Set from any thread by ``request_stop``: the run under way ends after the
        delivery in hand, before the loop has begun the stop."""
        self._guard: ZooKeeperGuard | None = None
        self._guard_machine: GuardMachine | None = None
        self._led: tuple[int, int] | None = None
        """(generation, token): the channel generation subscribed under a leadership."""
        self._evictor: Evictor | None = None
        self._batch_generation = 0
        if settings.guard is not None:
            self._make_guard(settings.guard, inbox)
        self._poller = None if settings.role_poll is None else RolePoller(
            settings, lambda: self._consumer_tag, lambda: self.machine.role, self._role_seen)

    # ------------------------------------------------------------------ the faces' API

    @property
    def failure(self) -> SacError | None:
        """What stopped the consumer, if it was an error."""
        return self.life.failure

    @property
    def guard_status(self) -> GuardStatus | None:
        machine = self._guard_machine
        return None if machine is None else machine.status

    @property
    def counts(self) -> tuple[int, int, int, int, int, int, int, int]:
        c = self.machine.counts
        return (c.delivered, self._acked, self._rejected, c.handler_errors, self._reconnects,
                c.resubscribes, c.retried, c.parked)

    async def start(self) -> None:
        """Connect, declare or check the queue, subscribe. Fails fast if no node answers."""
        self.life.start()
        loop = self._loop = asyncio.get_running_loop()
        self._carry_out(self.machine.start(loop.time()))
        guard = self._guard
        if guard is not None:
            # No ZooKeeper session, or another lease than asked for: fails here, first.
            try:
                await loop.run_in_executor(None, guard.connect)
            except BaseException:
                self._ended()
                raise
        inbox = self.inbox
        if inbox is not None:
            # A store that cannot be used fails here, before any message is consumed.
            try:
                await loop.run_in_executor(inbox.executor, inbox.open)
            except BaseException:
                await loop.run_in_executor(None, inbox.close)
                await self._close_guard()
                self._ended()
                raise
        self._worker.begin(self)
        try:
            await self._open(retry=False)
        except BaseException:
            self.life.close()
            self.machine.finish(loop.time())
            await self._worker.finish()
            if inbox is not None:
                await loop.run_in_executor(None, inbox.close)
            await self._close_guard()
            self._ended()
            raise
        self.life.started()
        if self._guard_machine is not None:
            self._carry_out_guard(self._guard_machine.start(loop.time()))
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
        self._carry_out(self.machine.stop(loop.time()))  # nothing more is taken or started
        if self.inbox is not None:
            self.inbox.interrupt()  # a batch waiting for a failing store: leave it unacked
        await self._stop_recovery()  # a reconnect may still be making a new link
        try:
            await asyncio.wait_for(self._quiet(), wait)
        except TimeoutError:
            log.warning("a handler did not finish within %.1f s; closing anyway", wait)
        # Acks for what is done, then the handover: the broker hands the queue over only
        # once this consumer's last handler ended, so two never work at once.
        handover = self._carry_out(self.machine.finish(loop.time()))
        link = self._link
        # Release: no basic.cancel (a link closes without one), the close itself ends the
        # subscription, and the broker takes back what this channel holds before it
        # activates the next consumer. Cancel (the weakened order): cancel first.
        if (isinstance(handover, Cancel) and link is not None and link.usable
                and self._consumer_tag is not None):
            channel = link.channel
            assert channel is not None
            tag = self._consumer_tag
            # From here pika rejects (requeues) what still arrives for the tag, as it does
            # for any consumer it cancels.
            link.release_deliveries(tag)
            try:
                await asyncio.wait_for(link.rpc(
                    lambda cb: channel.basic_cancel(tag, callback=cb), "basic.cancel"), wait)
                self._record("cancelled", queue=self.settings.queue.name, by="client")
            except (LinkLost, TimeoutError):
                pass
        if isinstance(handover, Release) and self._consumer_tag is not None:
            # The close ends the subscription as a cancel would: a graceful hand-back, which
            # the checker tells from a failed consumer's (whose messages may come back late).
            self._record("cancelled", queue=self.settings.queue.name, by="client")
        self._link = None
        if link is not None:
            await link.close()
        # Only now, the subscription gone: the next contender leads once this one's
        # session ends (its election node goes with it).
        await self._close_guard()
        if self.inbox is not None:
            await loop.run_in_executor(None, self.inbox.close)
        self._ended()

    def request_stop(self, timeout: float | None = None) -> None:
        """From any thread (a signal handler too: it does not block): begin the graceful
        stop; the run under way ends after its delivery in hand."""
        self.stop_requested = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing: stopping anyway
                loop.call_soon_threadsafe(self._stop_soon, timeout)

    # ------------------------------------------------------------------ runs

    def live(self, generation: int) -> bool:
        """Whether a run of ``generation`` goes on to its next delivery (any thread)."""
        return not self.stop_requested and self.machine.live(generation)

    def execute(self, run: Run[Delivery], tally: Tally) -> Outcome:
        """Run ``run`` in the calling thread: a plain handler for each delivery, or the inbox
        on all of them (its effects block: store drivers do). Either face, any thread."""
        generation = run.generation
        inbox = self.inbox
        if inbox is not None:
            if not self.live(generation):
                return 0, None, None
            self._batch_generation = generation  # for the guard's token (``_guard_token``)
            try:
                results = inbox.process_batch(run.deliveries, run.activation)
            except (StaleEpoch, StoreUnavailable) as exc:
                return 0, None, exc
            count = len(results)
            last = results[-1] if count else None
            if isinstance(last, Exception):
                return count - 1, last, None
            tally.done = count
            return count, None, None
        handler: Any = self._handler
        machine = self.machine
        done = 0
        try:
            for delivery in run.deliveries:
                # ``live`` inlined: this runs once per message.
                if (self.stop_requested or machine.stage is not RUNNING or machine.paused
                        or machine.generation != generation):
                    break
                try:
                    handler(delivery)
                except Exception as exc:  # noqa: BLE001 - the machine retries, then parks it
                    return done, exc, None
                done += 1
        finally:
            tally.done = done  # also when KeyboardInterrupt ends the handler
        return done, None, None

    async def execute_async(self, run: Run[Delivery]) -> Outcome:
        """``execute`` for the asyncio face: a coroutine handler runs on the loop; a plain
        one, and the inbox, in a thread (one hop per run), so they cannot stall the
        heartbeats."""
        if not self.handler_is_async:
            if self.inbox is not None:
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self.inbox.executor, self.execute, run,
                                                  Tally())
            return await asyncio.to_thread(self.execute, run, Tally())
        handler: Any = self._handler
        generation = run.generation
        machine = self.machine
        done = 0
        for delivery in run.deliveries:
            if (self.stop_requested or machine.stage is not RUNNING or machine.paused
                    or machine.generation != generation):
                break
            try:
                await handler(delivery)
            except Exception as exc:  # noqa: BLE001 - the machine retries it, then parks it
                return done, exc, None
            done += 1
        return done, None, None

    def report(self, run: Run[Delivery], outcome: Outcome) -> None:
        """On the loop: how ``run`` ended, to the machine."""
        done, failed, refused = outcome
        loop = self._loop
        now = loop.time() if loop is not None else time.monotonic()
        if refused is None:
            actions = self.machine.ran(run, done, failed, now)
        else:
            actions = self.machine.commit_failed(run, refused, now,
                                                 fenced=isinstance(refused, StaleEpoch))
        if actions:
            self._carry_out(actions)

    def report_all(self, ended: list[tuple[Run[Delivery], Outcome]]) -> None:
        for run, outcome in ended:
            self.report(run, outcome)

    def report_threadsafe(self, ended: list[tuple[Run[Delivery], Outcome]]) -> None:
        """From the worker's thread: how these runs ended, in order, in one hop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed: nothing more is acked anyway
                loop.call_soon_threadsafe(self.report_all, ended)

    # ------------------------------------------------------------------ actions

    def _carry_out(self, actions: Sequence[Action[Delivery]]) -> Cancel | Release | None:
        """Do what the machine says, in order; the handover it asked for (a stop), if any."""
        handover: Cancel | Release | None = None
        for action in actions:
            if isinstance(action, Run):
                self._worker.submit(action)
            elif isinstance(action, Wake):
                # After the read under way: one run takes all it brought.
                self._now_loop().call_soon(self._dispatch)
            elif isinstance(action, _SETTLE):
                self._settle(action)
            elif isinstance(action, RoleChanged):
                self._role_changed(action)
            elif isinstance(action, RetryLater):
                self._log_failure(action.delivery, action.error, action.attempts, action.delay)
                self._now_loop().call_at(action.at, self._tick)
            elif isinstance(action, Park):
                self._log_failure(action.delivery, action.error, action.attempts, None)
                if action.target is Parking.QUEUE:
                    self._parking = self._now_loop().create_task(self._park(action))
            elif isinstance(action, ResubscribeLater):
                self._now_loop().call_at(action.at, self._tick)
            elif isinstance(action, Subscribe):
                self._replace_recovery(self._resubscribe())
            elif isinstance(action, Halt):
                self._halt(self._error_of(action))
            elif isinstance(action, Replaced):
                assert self._guard_machine is not None
                self._carry_out_guard(self._guard_machine.fenced(self._now_loop().time()))
            else:  # Cancel or Release: the stop under way does it
                assert isinstance(action, Cancel | Release)
                handover = action
        return handover

    def _now_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        assert loop is not None
        return loop

    def _dispatch(self) -> None:
        actions = self.machine.dispatch(self._now_loop().time())
        if actions:
            self._carry_out(actions)

    def _tick(self) -> None:
        actions = self.machine.tick(self._now_loop().time())
        if actions:
            self._carry_out(actions)

    def _settle(self, action: Ack | Reject) -> None:
        link = self._link
        if link is None or link.channel is None or not link.usable:
            return
        channel = link.channel
        rec = self._recorder
        if isinstance(action, Ack):
            channel.basic_ack(action.tag, multiple=action.multiple)
            self._acked += action.count
            if rec is not None:
                tags = [t for t in self._ids_by_tag if t <= action.tag] \
                    if action.multiple else [action.tag]
                for tag in tags:
                    rec.record("ack", msg=self._ids_by_tag.pop(tag, None))
        else:
            channel.basic_reject(action.tag, requeue=action.requeue)
            self._rejected += 1
            if rec is not None:
                rec.record("reject", msg=self._ids_by_tag.pop(action.tag, None),
                           requeue=action.requeue)

    def _role_seen(self, verdict: Verdict, active_tag: str | None) -> None:
        """The management API named the queue's active consumer: this one (it is active,
        delivery or not), or another while this one thought itself active; or said the queue
        is gone while this consumer is subscribed to it."""
        now = self._now_loop().time()
        if verdict is Verdict.GONE:
            log.warning("queue %r does not exist, yet this consumer (%s) is subscribed to it "
                        "(management API): consuming again", self._queue_name,
                        self._consumer_tag)
            self._on_server_cancel(None)  # as if the broker had cancelled the orphan
        elif verdict is Verdict.ACTIVE:
            log.info("the broker names this consumer (%s) active on %r (management API)",
                     self._consumer_tag, self._queue_name)
            self._carry_out(self.machine.confirmed_active(now))
        else:
            log.warning("the broker names consumer %s active on %r, not this one (%s): "
                        "waiting again", active_tag, self._queue_name, self._consumer_tag)
            self._carry_out(self.machine.demoted(now))

    def _role_changed(self, change: RoleChanged) -> None:
        if self._poller is not None:
            self._poller.changed(change.new, self._now_loop().time())
        if change.new is Role.ACTIVE and self.inbox is None:
            # An inbox records it with the epoch it claims.
            self._record("active", queue=self.settings.queue.name, epoch=None)
        if self._on_role_change is not None:
            try:
                self._on_role_change(change.new)
            except Exception:
                log.exception("on_role_change callback failed")

    def _log_failure(
        self, delivery: Delivery, exc: Exception, attempts: int, delay: float | None
    ) -> None:
        """The traceback with a message's first failure, one line per further attempt,
        within the log budget."""
        allowed, held = self._log_budget.allow(time.monotonic())
        if not allowed:
            return
        more = f" ({held} similar lines held back)" if held else ""
        mid = delivery.message_id or "(no id)"
        if delay is not None and attempts == 1:
            log.error("handler failed for message %s on queue %r (attempt 1); retrying in "
                      "%.2f s, the message unacked%s", mid, self._queue_name, delay, more,
                      exc_info=exc)
        elif delay is not None:
            log.warning("handler failed again for message %s on queue %r (attempt %d): %s; "
                        "retrying in %.2f s%s", mid, self._queue_name, attempts,
                        describe_failure(exc), delay, more)
        else:
            log.error("message %s on queue %r failed (%d attempt(s)): %s; parking it%s", mid,
                      self._queue_name, attempts, describe_failure(exc), more,
                      exc_info=exc if attempts == 1 and exc.__traceback__ is not None else None)

    def _error_of(self, halt: Halt[Delivery]) -> SacError:
        error = halt.error
        if halt.why is Why.NOWHERE_TO_PARK:
            assert halt.delivery is not None
            return ParkingFailed(self._queue_name, halt.delivery.message_id,
                                 "the queue has no parking queue and no dead-letter exchange "
                                 "(QueueSettings.parking_queue is None)")
        if halt.why is Why.NOT_RESUBSCRIBED:
            return ConsumerError(f"could not consume {self._queue_name!r} again after "
                                 f"{halt.attempts} attempts")
        assert isinstance(error, SacError)
        return error

    def _halt(self, exc: SacError) -> None:
        """A newer consumer holds the queue, the store is gone, there is nowhere to park, or
        the queue cannot be consumed again: leave the messages in hand unacked (the broker
        gives them back when our channel closes) and stop; ``wait``/``run`` raise ``exc``."""
        if isinstance(exc, ConsumerError) and not isinstance(exc, StaleEpoch | ParkingFailed):
            log.error("consumer of %r gives up: %s", self._queue_name, exc)
        else:
            log.warning("%s; stopping without acking the messages in hand", exc)
        self.life.fail(exc)
        self._stop_soon(1.0)

    def _stop_soon(self, timeout: float | None) -> None:
        self._spawn(self.stop(timeout))

    async def _quiet(self) -> None:
        """Until the worker has ended what it was given and no park is under way."""
        await self._worker.finish()
        parking = self._parking
        if parking is not None and not parking.done():
            await asyncio.shield(parking)

    def _ended(self) -> None:
        self._carry_out(self.machine.closed(self._now_loop().time()))
        self.life.closed()
        if self._recorder is not None:
            self._recorder.flush()
        self._stopped.set()

    # ------------------------------------------------------------------ parking

    async def _park(self, park: Park[Delivery]) -> None:
        """Copy the message to the parking queue and wait for the confirm; then the machine
        acks the original."""
        delivery = park.delivery
        loop = self._now_loop()
        link = self._link
        try:
            await asyncio.wait_for(self._forward(link, park), PARK_TIMEOUT)
        except LinkLost as lost:
            error: SacError = lost
            if self._link is link and link is not None and link.usable:
                # Only the forwarding channel went: the message must not be passed over.
                error = ParkingFailed(self._queue_name, delivery.message_id,
                                      f"the parking channel closed: {lost}")
            actions = self.machine.park_failed(loop.time(), error)
        except Refused as refused:
            failed = ParkingFailed(
                self._queue_name, delivery.message_id,
                f"parking queue {self.settings.queue.parking_queue!r} refused it: {refused}")
            failed.__cause__ = refused
            actions = self.machine.park_failed(loop.time(), failed)
        except TimeoutError:
            actions = self.machine.park_failed(loop.time(), ParkingFailed(
                self._queue_name, delivery.message_id,
                f"no confirm from the parking queue within {PARK_TIMEOUT:.0f} s"))
        else:
            if self._recorder is not None:
                self._ids_by_tag.pop(delivery.delivery_tag, None)  # not recorded as an ack
                self._recorder.record("reject", msg=delivery.message_id, requeue=False,
                                      parked=self.settings.queue.parking_queue)
            actions = self.machine.parked(loop.time())
        self._carry_out(actions)

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

    # ------------------------------------------------------------------ broker events

    def _on_message(
        self, channel: Any, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        """A delivery that pika decoded (the fast path in ``sdk/_wire/deliveries.py`` takes the
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
                delivery_count(headers), self._queue_name, routing_key, exchange,
                content_type, correlation_id, timestamp, tag, derived, properties, value,
            )
            if self._recorder is not None:
                self._ids_by_tag[tag] = message_id
                self._record("deliver", msg=message_id, redelivered=delivery.redelivered,
                             delivery_count=delivery.delivery_count)
            if unfit is None:
                actions = self.machine.deliver(delivery)
            else:  # the wire could not decode it (``sdk/_wire/deliveries.py``): park it
                actions = self.machine.refuse(
                    delivery, UnfitMessage(self._queue_name, tag, unfit))
            if actions:
                self._carry_out(actions)
        except Exception:
            # Otherwise the message would sit unacked on this channel until it closes.
            log.exception("could not take delivery %s; rejecting it with requeue", tag)
            link = self._link
            if link is not None and link.usable and link.channel is not None:
                link.channel.basic_reject(tag, requeue=True)

    def _on_server_cancel(self, _frame: Any) -> None:
        """The broker cancelled us (queue deleted, mirrored queue failed over)."""
        self._record("cancelled", queue=self.settings.queue.name, by="server")
        link = self._link
        if link is not None and link.channel is not None and self._consumer_tag is not None:
            link.release_deliveries(self._consumer_tag)
        self._consumer_tag = None
        if self._opening and not self.life.shutting_down:
            # Cancelled while a (re)connect sets this link up: that attempt failed, and the
            # open under way tries again (declaring the queue again names a deleted one).
            if link is not None:
                link.abandon("the broker cancelled the subscription while it was set up")
            return
        self._carry_out(self.machine.server_cancel(self._now_loop().time()))

    async def _resubscribe(self) -> None:
        """One attempt to consume again after a server cancel; the machine decides on the
        next one."""
        link = self._link
        if link is None or not link.usable or not self._may_subscribe:
            return  # the reconnect path (or the next leadership) subscribes again
        try:
            await self._subscribe(link)
        except LinkLost:
            return
        except SacError as exc:
            log.warning("consume again on %r failed: %s", self.settings.queue.name, exc)
            self._carry_out(self.machine.subscribe_failed(self._now_loop().time(), exc))

    # ------------------------------------------------------------------ connection

    @property
    def _shutting_down(self) -> bool:
        return self.life.shutting_down

    async def _setup(self, link: Link, retry: bool) -> None:
        channel = link.channel
        assert channel is not None
        await link.declare_topology(self.settings.queue)
        await link.rpc(lambda cb: channel.basic_qos(
            prefetch_count=self.settings.prefetch, callback=cb), "basic.qos")
        channel.add_on_cancel_callback(self._on_server_cancel)
        if self._may_subscribe:
            await self._subscribe(link)
        else:
            self._carry_out(self.machine.standing_by(self._now_loop().time()))

    async def _subscribe(self, link: Link) -> None:
        channel = link.channel
        assert channel is not None
        queue = self.settings.queue
        if self.machine.subscriptions:  # again after a cancel: the queue may have gone
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
        self._consumer_tag = tag
        guard = self._guard_machine
        if guard is not None and guard.leadership is not None:
            self._led = (self.machine.generation, guard.leadership.token)
        self._record("subscribed", queue=queue.name, by="client")
        self._carry_out(self.machine.subscribed(self._now_loop().time()))

    def _dropped(self, link: Link, reason: LinkLost) -> None:
        self._consumer_tag = None
        self._ids_by_tag.clear()
        self._forwarder = None
        self._carry_out(self.machine.channel_lost(self._now_loop().time()))
        if self._guard_machine is not None:
            self._evicted(reason)

    def _give_up(self, exc: SacError) -> None:
        log.error("consumer of %r gives up: %s", self.settings.queue.name, exc)
        self.life.fail(exc)
        self._stop_soon(1.0)

    # ------------------------------------------------------------------ the guard

    def _make_guard(self, settings: GuardSettings, inbox: Inbox | None) -> None:
        from . import guard as zk  # kazoo, or a ConfigurationError naming the `zk` extra

        if inbox is not None:
            if inbox.epoch_source is not None:
                raise ConfigurationError(
                    "ConsumerSettings.guard with an Inbox that has its own epoch_source: the "
                    "guard's fencing token is the inbox's epoch; drop epoch_source")
            inbox.epoch_source = self._guard_token
        self._guard_machine = GuardMachine(settings.retry)
        self._guard = zk.ZooKeeperGuard(
            settings, zk.identity(self.settings.consumer_name, self._connection.name),
            on_session=lambda state: self._post(self._guard_session, state),
            on_won=lambda attempt, leadership: self._post(self._guard_won, attempt, leadership),
            on_failed=lambda attempt, error: self._post(self._guard_failed, attempt, error))

    @property
    def _may_subscribe(self) -> bool:
        return self._guard_machine is None or self._guard_machine.leading

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        """From kazoo's threads (never blocks): ``callback(*args)`` on the loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing: stopping anyway
                loop.call_soon_threadsafe(callback, *args)

    def _guard_token(self) -> int:
        """The inbox's epoch source (its thread): the token of the leadership the running
        batch's channel was subscribed under. A batch of a channel given up is refused."""
        led = self._led
        if led is None or led[0] != self._batch_generation:
            raise StaleEpoch(self._queue_name, 0, 0)
        return led[1]

    def _guard_session(self, state: SessionState) -> None:
        machine = self._guard_machine
        if machine is None or self.life.shutting_down:
            return
        log.log(logging.INFO if state is SessionState.CONNECTED else logging.WARNING,
                "consumer of %r: ZooKeeper session %s", self._queue_name, state.value)
        self._carry_out_guard(machine.session_changed(state, self._now_loop().time()))

    def _guard_won(self, attempt: int, leadership: Leadership) -> None:
        machine = self._guard_machine
        if machine is None or self.life.shutting_down:
            return  # the session ends with the stop, and the node with it
        self._carry_out_guard(machine.won(attempt, leadership, self._now_loop().time()))

    def _guard_failed(self, attempt: int, error: Exception) -> None:
        machine = self._guard_machine
        if machine is None or self.life.shutting_down:
            return
        log.warning("consumer of %r: joining the election failed: %r", self._queue_name, error)
        self._carry_out_guard(machine.failed(attempt, error, self._now_loop().time()))

    def _guard_tick(self) -> None:
        machine = self._guard_machine
        if machine is not None and not self.life.shutting_down:
            self._carry_out_guard(machine.tick(self._now_loop().time()))

    def _carry_out_guard(self, actions: Sequence[GuardAction]) -> None:
        guard = self._guard
        assert guard is not None
        for action in actions:
            if isinstance(action, Lead):
                self._lead(action.leadership)
            elif isinstance(action, Pause):
                self._carry_out(self.machine.pause(self._now_loop().time()))
            elif isinstance(action, Resume):
                self._carry_out(self.machine.resume(self._now_loop().time()))
            elif isinstance(action, Abandon):
                self._abandon(action.why)
            elif isinstance(action, Contend):
                guard.contend(action.attempt)
            elif isinstance(action, ContendLater):
                self._now_loop().call_at(action.at, self._guard_tick)
            elif isinstance(action, Withdraw):
                guard.withdraw(action.attempt)
            else:  # GiveUp
                assert isinstance(action, GiveUp)
                self._halt(ConsumerError(
                    f"could not join the election of {guard.settings.group!r} in ZooKeeper "
                    f"({action.attempts} attempts): {action.error!r}"))

    def _lead(self, leadership: Leadership) -> None:
        previous = leadership.previous
        log.info("consumer of %r leads with token %d (before it: %s); subscribing",
                 self._queue_name, leadership.token,
                 "nobody" if previous is None else f"token {previous.token}, connection "
                 f"{previous.connection!r}")
        self._evict_previous(leadership)
        link = self._link
        if self._opening or link is None or not link.usable or self._consumer_tag is not None:
            return  # the link being set up subscribes at its end (``_setup``)
        self._spawn(self._subscribe_leader(link))

    async def _subscribe_leader(self, link: Link) -> None:
        try:
            await self._subscribe(link)
        except LinkLost:
            return  # the reconnect subscribes
        except SacError as exc:
            if self._link is link and not link.closing:
                link.abandon(f"subscribing as the leader failed: {exc}")

    def _evict_previous(self, leadership: Leadership) -> None:
        """Ask the broker to close the predecessor's connection, if the rules allow
        (``_core/eviction.py``); in the background: the subscription does not wait."""
        guard = self._guard
        assert guard is not None
        own = self._connection.name
        assert own is not None
        decision = decide_eviction(
            leadership, own, guard.settings.group,
            single_active=self.settings.queue.single_active_consumer,
            management=self.settings.management is not None, enabled=guard.settings.evict)
        if isinstance(decision, Evict):
            self._spawn(self._evict(decision))
        elif leadership.previous is not None:
            log.info("consumer of %r evicts nobody: %s", self._queue_name, decision.why)

    async def _evict(self, decision: Evict) -> None:
        from ._evictor import Evictor

        management = self.settings.management
        assert management is not None
        if self._evictor is None:
            self._evictor = Evictor(self.settings)
        fields = {"connection": decision.connection, "token": decision.token,
                  "previous_token": decision.previous.token}
        try:
            done = await self._evictor.evict(decision)
        except (ManagementError, TimeoutError) as exc:
            log.warning("consumer of %r could not evict the previous leader's connection %r "
                        "(token %d): %s; the broker hands the queue over once its heartbeats "
                        "go unanswered", self._queue_name, decision.connection,
                        decision.previous.token, exc or type(exc).__name__)
            self._record("evict", outcome="failed", error=str(exc) or type(exc).__name__,
                         **fields)
            return
        # None found: the predecessor stopped cleanly (or its connection is on another
        # cluster of a federated group), nothing to hand over.
        outcome = "closed" if done.closed else "none"
        log.info("consumer of %r evicted the previous leader (token %d): %d connection(s) "
                 "named %r closed, %d gone already", self._queue_name, decision.previous.token,
                 len(done.closed), decision.connection, len(done.gone))
        self._record("evict", outcome=outcome, closed=len(done.closed), gone=len(done.gone),
                     **fields)

    def _evicted(self, reason: LinkLost) -> None:
        """The broker closed this link because a newer leader evicted it: whatever the
        ZooKeeper session still says (a process that froze hears of its expiry only now),
        a newer token exists, so this consumer steps down and contends again."""
        machine = self._guard_machine
        led = self._led
        token = evicted_by(reason.reason)
        if machine is None or led is None or token is None or token <= led[1]:
            return
        log.warning("consumer of %r was evicted by the leader with token %d: stepping down",
                    self._queue_name, token)
        self._carry_out_guard(machine.fenced(self._now_loop().time()))

    def _abandon(self, why: str) -> None:
        """Give the channel up: the subscription goes, and the broker requeues every
        unacked delivery, those in flight too (their runs end unacked: a new generation)."""
        log.warning("consumer of %r gives its channel up, acking nothing in hand: %s",
                    self._queue_name, why)
        self._led = None
        link = self._link
        if link is not None and not link.closing:
            link.abandon(why)

    async def _close_guard(self) -> None:
        """End the ZooKeeper session (once; blocking work in a thread)."""
        guard, machine = self._guard, self._guard_machine
        if guard is None or machine is None:
            return
        machine.stop(self._now_loop().time())  # its Withdraw: the session's end does it
        await self._now_loop().run_in_executor(None, guard.close)
