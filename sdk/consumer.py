"""Consumers for a single-active-consumer queue that keep consuming across faults.

``AsyncConsumer`` is the asyncio face; ``Consumer`` is the blocking face over the same code
(the connection lives on a private loop thread, the handler runs in the caller's thread).

What they do for you:

- declare the queue from its settings (quorum, single active consumer) or check it
  passively; a queue that exists with other arguments raises ``QueueMismatch`` naming it;
- manual acks, sent only after the handler returned (batched as ``multiple`` acks, flushed
  whenever no further delivery waits);
- a handler (or inbox effect) that raises is run again for the same message, in place and
  unacked, under ``ConsumerSettings.retry``; then (or at once for ``Poison`` and a message
  without an id for the inbox) the message is parked: copied, with the reason in its
  headers, to the queue's parking queue, confirmed, and only then acked. Never requeued in a
  hot loop, never dropped;
- a server-sent ``basic.cancel`` (queue deleted, mirrored-queue failover: classic queues are
  consumed with ``x-cancel-on-ha-failover``) leads to a new ``basic.consume`` with backoff;
- a dead connection (closed, reset, or silent for two heartbeat intervals) leads to a
  reconnect to the next node and a new subscription;
- the consumer knows whether it is the active one: from its first delivery on;
- ``stop()`` hands over gracefully: cancel, let the running handler finish and ack, then
  close, so the broker requeues what was prefetched but not started, for the next consumer;
- given an ``sac.sdk.dedup.Inbox`` instead of a handler, each message's effect commits once, with
  its dedup record, before the ack; a consumer that was replaced (fenced by a newer epoch)
  stops without acking, and ``wait()``/``run()`` raise ``StaleEpoch``.

Example::

    async def handle(delivery: Delivery) -> None:
        await save(delivery.body)

    async with AsyncConsumer(ConsumerSettings(conn, QueueSettings("orders")), handle) as c:
        await c.wait()
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import inspect
import itertools
import logging
import queue as thread_queue
import signal
import threading
import time
import types
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Self

import attrs
from pika.spec import Basic, BasicProperties

from ._core.acks import Ack, AckBatcher, Action, Reject
from ._core.poison import (
    LogBudget,
    Park,
    Retry,
    Step,
    after_failure,
    describe_failure,
    parking_headers,
)
from ._core.roles import Change, Role, RoleTracker
from ._delivery import PARKED_PROPERTIES, Delivery, delivery_count, other_properties
from ._errors import (
    ClosedError,
    ConsumerError,
    MissingMessageId,
    ParkingFailed,
    Poison,
    SacError,
    StaleEpoch,
    StoreUnavailable,
)
from ._forward import Forwarder, Refused
from ._history import HistoryRecorder
from ._loop_thread import LoopThread
from ._recovery import Recovering
from ._settings import ConsumerSettings
from ._signals import stop_on_signals
from ._transport import Link, LinkLost
from .dedup.inbox import Inbox

log = logging.getLogger("sac.consumer")

Handler = Callable[[Delivery], Awaitable[None]] | Callable[[Delivery], None]
RoleCallback = Callable[[Role], None]
_tags = itertools.count(1)
_NO_HEADERS: Mapping[str, Any] = types.MappingProxyType({})


@attrs.frozen
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


_Outcome = tuple[int, int, bool]
"""A message's end: (channel generation, delivery tag, ack it). True acks (handled, or parked
and confirmed there), False rejects without requeue (the broker dead-letters it). A plain
tuple: one is made per message."""
PARK_TIMEOUT = 120.0
"""Longest a handler thread waits for a park to be confirmed (the nack retries are bounded
by 30 s, a lost link ends it at once): past it the consumer stops, the message unacked."""


class AsyncConsumer(Recovering):
    """Consumes one queue, one message at a time, until ``stop()``."""

    _role = "consumer"

    def __init__(
        self,
        settings: ConsumerSettings,
        handler: Handler | Inbox,
        *,
        recorder: HistoryRecorder | None = None,
        on_role_change: RoleCallback | None = None,
    ) -> None:
        self._inbox: Inbox | None = handler if isinstance(handler, Inbox) else None
        if self._inbox is None and not callable(handler):
            raise TypeError(f"handler must be callable or an Inbox, got {type(handler).__name__}")
        super().__init__(settings.connection, recorder)
        self.settings = settings
        self._queue_name = settings.queue.name
        self._handler = handler
        if self._inbox is not None:
            self._inbox.bind(
                settings.queue.name,
                settings.consumer_name or (recorder.actor if recorder is not None else None),
                recorder,
            )
        self._activation = 0
        self._on_role_change = on_role_change
        self._roles = RoleTracker()
        self._batcher = AckBatcher(settings.ack_batch)
        self._generation = 0
        self._consumer_tag: str | None = None
        self._ids_by_tag: dict[int, str | None] = {}
        self._done: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self._started = False
        self._pending: collections.deque[tuple[int, Delivery] | None] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._delivered = self._acked = self._rejected = self._errors = 0
        self._resubscribes = self._retried = self._parked = 0
        self._id_from = settings.message_id_from
        self._forwarder: Forwarder | None = None
        self._log_budget = LogBudget()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cut = threading.Event()
        """Set when a retry wait should end early: stopping, or the channel is gone."""
        self._cut_async = asyncio.Event()

    # ------------------------------------------------------------------ public

    @property
    def role(self) -> Role:
        """``waiting`` until the broker hands this consumer its first message, then
        ``active``; ``connecting`` while it recovers; ``stopped`` after ``stop()``."""
        return self._roles.role

    @property
    def stats(self) -> ConsumerStats:
        return ConsumerStats(
            self._delivered, self._acked, self._rejected, self._errors,
            self._reconnects, self._resubscribes, self._retried, self._parked,
        )

    async def start(self) -> Self:
        """Connect, declare or check the queue, subscribe. Fails fast if no node answers."""
        if self._started:
            raise ClosedError("this consumer was already started")
        self._started = True
        loop = self._loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        self._change(self._roles.connecting())
        inbox = self._inbox
        if inbox is not None:
            # A store that cannot be used fails here, before any message is consumed.
            try:
                await loop.run_in_executor(inbox.executor, inbox.open)
            except BaseException:
                await loop.run_in_executor(None, inbox.close)
                self._stopping = True
                self._change(self._roles.stopped())
                self._stopped.set()
                raise
        self._start_dispatch()
        try:
            await self._open(retry=False)
        except BaseException:
            self._stopping = True
            await self._stop_dispatch()
            if inbox is not None:
                await loop.run_in_executor(None, inbox.close)
            self._change(self._roles.stopped())
            self._stopped.set()
            raise
        return self

    async def wait(self) -> None:
        """Until the consumer stops; raises what stopped it if that was an error."""
        if self._done is None:
            raise ClosedError("consumer is not started")
        await asyncio.shield(self._done)

    async def stop(self, timeout: float | None = None) -> None:
        """Graceful handover: cancel the subscription, let the running handler finish and
        ack, then close; what was prefetched but not started goes back to the queue."""
        if self._done is None:
            return
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        self._interrupt()
        self._change(self._roles.stopping())
        if self._inbox is not None:
            self._inbox.interrupt()  # a batch waiting for a failing store: leave it unacked
        wait = self.settings.stop_timeout if timeout is None else timeout
        await self._stop_recovery()  # first: a reconnect may still be making a new link
        link = self._link
        if link is not None and link.usable and self._consumer_tag is not None:
            channel = link.channel
            assert channel is not None
            tag = self._consumer_tag
            # From here pika rejects (requeues) what still arrives for the tag, as it does
            # for any consumer it cancels.
            link.conn.sac_inbound.unregister(channel.channel_number, tag)
            try:
                await asyncio.wait_for(link.rpc(
                    lambda cb: channel.basic_cancel(tag, callback=cb), "basic.cancel"), wait)
                self._record("cancelled", queue=self.settings.queue.name, by="client")
            except (LinkLost, TimeoutError):
                pass
        try:
            await asyncio.wait_for(self._stop_dispatch(), wait)
        except TimeoutError:
            log.warning("a handler did not finish within %.1f s; closing anyway", wait)
        if link is not None and link.usable:
            self._apply(self._batcher.flush())
        self._link = None
        if link is not None:
            await link.close()
        if self._inbox is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._inbox.close)
        self._change(self._roles.stopped())
        if self._recorder is not None:
            self._recorder.flush()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        self._stopped.set()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------------ dispatch
    # The asyncio face runs handlers on one worker task, in delivery order; the blocking
    # face overrides these three methods to run them in the caller's thread.

    def _start_dispatch(self) -> None:
        work = self._work() if self._inbox is None else self._work_inbox(self._inbox)
        self._task = asyncio.get_running_loop().create_task(work)

    def _dispatch(self, generation: int, delivery: Delivery) -> None:
        self._pending.append((generation, delivery))
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _stop_dispatch(self) -> None:
        if self._task is not None:
            self._pending.append(None)
            self._wake()
            await asyncio.shield(self._task)

    async def _work(self) -> None:
        # A deque and one waiter rather than asyncio.Queue: this runs once per message.
        pending = self._pending
        loop = asyncio.get_running_loop()
        handler = self._handler
        is_async = inspect.iscoroutinefunction(handler)
        while True:
            while not pending:
                self._waiter = loop.create_future()
                await self._waiter
                self._waiter = None
            item = pending.popleft()
            if item is None:
                return
            generation, delivery = item
            if self._stopping or generation != self._generation:
                continue  # not started: the broker requeues it when the channel closes
            try:
                if is_async:
                    await handler(delivery)  # type: ignore[misc,operator]
                else:
                    # A plain function runs in a thread, so it cannot stall the heartbeats.
                    await asyncio.to_thread(handler, delivery)  # type: ignore[arg-type]
                ok: bool | None = True
            except Exception as exc:  # noqa: BLE001 - retried, then parked
                try:
                    ok = await self._recover(generation, delivery, exc, is_async)
                except ParkingFailed as failed:
                    self._halt(failed)
                    return
            if ok is None:
                continue  # stopping, or the channel is gone: the broker has it back
            self._settle_one(generation, delivery.delivery_tag, ok, not pending)

    async def _work_inbox(self, inbox: Inbox) -> None:
        """The inbox's effects block (store drivers do), so they run on the inbox's thread;
        deliveries go there in batches of what is waiting (up to ``ack_batch``), which keeps
        delivery order and pays one thread hop per batch rather than per message."""
        pending = self._pending
        loop = asyncio.get_running_loop()
        limit = self.settings.ack_batch
        while True:
            while not pending:
                self._waiter = loop.create_future()
                await self._waiter
                self._waiter = None
            batch: list[tuple[int, Delivery]] = []
            last = False
            while pending and len(batch) < limit:
                item = pending.popleft()
                if item is None:
                    last = True
                    break
                batch.append(item)
            if batch:
                outcomes, halted = await loop.run_in_executor(
                    inbox.executor, self._process_batch, inbox, batch)
                self._settle(outcomes, not pending)
                if halted is not None:
                    self._halt(halted)
                    return
            if last:
                return

    def _process_batch(
        self, inbox: Inbox, batch: list[tuple[int, Delivery]]
    ) -> tuple[list[_Outcome], SacError | None]:
        """In the thread that runs effects (either face): the deliveries of the current
        channel through the inbox, each run of them one store transaction. A failed effect
        ends its run: it is retried alone, in place, then parked, before the deliveries
        after it run (the queue's order holds). Returns the outcomes, and the error that
        stops the consumer: fenced (``StaleEpoch``), the store gone for good
        (``StoreUnavailable``; none when stopping anyway), nowhere to park
        (``ParkingFailed``). What has no outcome is not acked."""
        outcomes: list[_Outcome] = []
        live = [(g, d) for g, d in batch if not self.stale(g)]
        while live:
            try:
                results = inbox.process_batch([d for _, d in live], self._activation)
            except (StaleEpoch, StoreUnavailable) as exc:
                return outcomes, self._halting(exc)
            for (generation, delivery), result in zip(live, results, strict=False):
                if not isinstance(result, Exception):
                    outcomes.append((generation, delivery.delivery_tag, True))
            failed = results[-1] if results else None
            if isinstance(failed, Exception):
                generation, delivery = live[len(results) - 1]
                try:
                    ok = self._recover_in_thread(
                        generation, delivery, failed,
                        functools.partial(self._again, inbox, delivery))
                except (StaleEpoch, StoreUnavailable) as exc:
                    return outcomes, self._halting(exc)
                except ParkingFailed as exc:
                    return outcomes, exc
                if ok is None:
                    return outcomes, None  # stopping, or the channel is gone
                outcomes.append((generation, delivery.delivery_tag, ok))
            live = [(g, d) for g, d in live[len(results):] if not self.stale(g)]
        return outcomes, None

    def _again(self, inbox: Inbox, delivery: Delivery) -> None:
        inbox.process(delivery, self._activation)

    def _halting(self, exc: SacError) -> SacError | None:
        return None if self._stopping and isinstance(exc, StoreUnavailable) else exc

    def stale(self, generation: int) -> bool:
        """A delivery of this generation is no longer to be handled: stopping, or its
        channel is gone (the broker gives it back)."""
        return self._stopping or generation != self._generation

    # ------------------------------------------------------------------ failures

    def _recover_in_thread(
        self, generation: int, delivery: Delivery, exc: Exception,
        again: Callable[[], object],
    ) -> bool | None:
        """In the thread that runs a plain handler or the inbox's effects, after ``exc``
        ended the message's first run: retries in place, then park. True: ack it (it
        succeeded, or it is parked); False: reject it without requeue (the broker
        dead-letters it); None: leave it (stopping, or its channel is gone). Raises
        ``ParkingFailed``, and the inbox's ``StaleEpoch``/``StoreUnavailable``."""
        began = time.monotonic()
        attempts = 1
        while True:
            step = self._next_step(delivery, exc, attempts, time.monotonic() - began)
            if isinstance(step, Park):
                break
            self._cut.wait(step.delay)
            if self.stale(generation):
                return None
            self._retried += 1
            try:
                again()
                return True
            except (StaleEpoch, StoreUnavailable):
                raise
            except Exception as error:  # noqa: BLE001 - the next step decides
                exc, attempts = error, attempts + 1
        loop = self._loop
        if self.stale(generation) or loop is None or loop.is_closed():
            return None
        future = asyncio.run_coroutine_threadsafe(
            self._park(generation, delivery, exc, attempts), loop)
        try:
            return future.result(PARK_TIMEOUT)
        except TimeoutError:
            future.cancel()
            raise ParkingFailed(self._queue_name, delivery.message_id,
                                f"no confirm from the parking queue within {PARK_TIMEOUT:.0f} s"
                                ) from None

    async def _recover(
        self, generation: int, delivery: Delivery, exc: Exception, is_async: bool
    ) -> bool | None:
        """``_recover_in_thread`` for the asyncio face's handler, on the loop."""
        handler: Any = self._handler
        loop = asyncio.get_running_loop()
        began = loop.time()
        attempts = 1
        while True:
            step = self._next_step(delivery, exc, attempts, loop.time() - began)
            if isinstance(step, Park):
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cut_async.wait(), step.delay)
            if self.stale(generation):
                return None
            self._retried += 1
            try:
                if is_async:
                    await handler(delivery)
                else:
                    await asyncio.to_thread(handler, delivery)
                return True
            except Exception as error:  # noqa: BLE001 - the next step decides
                exc, attempts = error, attempts + 1
        return await self._park(generation, delivery, exc, attempts)

    def _next_step(
        self, delivery: Delivery, exc: Exception, attempts: int, elapsed: float
    ) -> Step:
        """Decide, count and log (within the log budget: the traceback with the first
        line of a message, one line per further attempt)."""
        self._errors += 1
        step = after_failure(self.settings.retry, attempts, elapsed,
                             isinstance(exc, Poison | MissingMessageId))
        allowed, held = self._log_budget.allow(time.monotonic())
        if not allowed:
            return step
        more = f" ({held} similar lines held back)" if held else ""
        mid = delivery.message_id or "(no id)"
        if isinstance(step, Retry) and attempts == 1:
            log.error("handler failed for message %s on queue %r (attempt 1); retrying in "
                      "%.2f s, the message unacked%s", mid, self._queue_name, step.delay, more,
                      exc_info=exc)
        elif isinstance(step, Retry):
            log.warning("handler failed again for message %s on queue %r (attempt %d): %s; "
                        "retrying in %.2f s%s", mid, self._queue_name, attempts,
                        describe_failure(exc), step.delay, more)
        else:
            log.error("message %s on queue %r failed (%d attempt(s)): %s; parking it%s", mid,
                      self._queue_name, attempts, describe_failure(exc), more,
                      exc_info=exc if attempts == 1 and exc.__traceback__ is not None else None)
        return step

    async def _park(
        self, generation: int, delivery: Delivery, exc: Exception, attempts: int
    ) -> bool | None:
        """On the loop: copy the message to the parking queue and wait for the confirm.
        True: ack the original now; False: reject it without requeue (no parking queue,
        the broker dead-letters it); None: the channel went first (it comes back)."""
        queue = self.settings.queue
        link = self._link
        if self.stale(generation) or link is None or not link.usable:
            return None
        if queue.parking_queue is None:
            if queue.dead_letter_exchange is not None:
                self._parked += 1
                return False
            raise ParkingFailed(queue.name, delivery.message_id,
                                "the queue has no parking queue and no dead-letter exchange "
                                "(QueueSettings.parking_queue is None)")
        forwarder = self._forwarder
        if forwarder is None or forwarder.link is not link:
            forwarder = self._forwarder = Forwarder(link)
        headers = parking_headers(delivery.headers, exc, queue.name, attempts,
                                  self.settings.consumer_name)
        kept = {k: v for k, v in delivery.properties.items() if k in PARKED_PROPERTIES}
        props = BasicProperties(
            content_type=delivery.content_type, headers=headers, delivery_mode=2,
            correlation_id=delivery.correlation_id,
            message_id=None if delivery.id_derived else delivery.message_id,
            timestamp=delivery.timestamp, **kept)
        try:
            await forwarder.send(queue.parking_queue, delivery.body, props)
        except LinkLost:
            return None
        except Refused as refused:
            raise ParkingFailed(queue.name, delivery.message_id,
                                f"parking queue {queue.parking_queue!r} refused it: {refused}"
                                ) from refused
        self._parked += 1
        if self._recorder is not None:
            self._ids_by_tag.pop(delivery.delivery_tag, None)  # not recorded as an ack
            self._recorder.record("reject", msg=delivery.message_id, requeue=False,
                                  parked=queue.parking_queue)
        return True

    def _interrupt(self) -> None:
        """End the retry waits under way (they then see why)."""
        self._cut.set()
        self._cut_async.set()

    def _halt(self, exc: SacError) -> None:
        """A newer consumer holds the queue, or the store is gone: leave the messages in
        hand unacked (the broker gives them back to the queue, or to the active consumer,
        when our channel closes) and stop; ``wait()``/``run()`` raise ``exc``."""
        log.warning("%s; stopping without acking the messages in hand", exc)
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        self._spawn(self.stop(timeout=1.0))

    # ------------------------------------------------------------------ broker events

    def _on_message(
        self, channel: Any, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        """A delivery that pika decoded (the fast path in ``sdk/_inbound.py`` takes the
        usual ones): the same handling."""
        rare = other_properties(props)
        self._take(method.delivery_tag, method.redelivered, method.exchange,
                   method.routing_key, props.content_type, props.headers,
                   props.correlation_id, props.message_id, props.timestamp, body,
                   rare or _NO_HEADERS)

    def _take(
        self, tag: int, redelivered: bool, exchange: str, routing_key: str,
        content_type: str | None, headers: dict[str, Any] | None,
        correlation_id: str | None, message_id: str | None, timestamp: int | None,
        body: bytes, properties: Mapping[str, Any] = _NO_HEADERS,
    ) -> None:
        try:
            derived = False
            if not message_id and self._id_from is not None:
                message_id = self._id_from.derive(body, headers)
                derived = message_id is not None
            delivery = Delivery(
                body, message_id, headers or _NO_HEADERS, bool(redelivered),
                delivery_count(headers), self._queue_name, routing_key, exchange,
                content_type, correlation_id, timestamp, tag, derived, properties,
            )
            self._delivered += 1
            if self._roles.role is not Role.ACTIVE:
                self._change(self._roles.delivered())
            if self._recorder is not None:
                self._ids_by_tag[tag] = message_id
                self._record("deliver", msg=message_id, redelivered=delivery.redelivered,
                             delivery_count=delivery.delivery_count)
            self._dispatch(self._generation, delivery)
        except Exception:
            # Otherwise the message would sit unacked on this channel until it closes.
            log.exception("could not take delivery %s; rejecting it with requeue", tag)
            link = self._link
            if link is not None and link.usable and link.channel is not None:
                link.channel.basic_reject(tag, requeue=True)

    def _settle_one(self, generation: int, tag: int, ok: bool, idle: bool) -> None:
        """``_settle`` for one outcome, without building lists (the asyncio hot path)."""
        link = self._link
        if generation != self._generation or link is None or not link.usable:
            return
        batcher = self._batcher
        actions = batcher.done(tag) if ok else batcher.failed(tag, requeue=False)
        if idle:
            actions = [*actions, *batcher.flush()]
        if actions:
            self._apply(actions)

    def _settle(self, outcomes: list[_Outcome], idle: bool) -> None:
        """Handler results, in delivery order; acks for those of the current channel."""
        link = self._link
        current = link is not None and link.usable
        actions: list[Action] = []
        generation_now = self._generation
        batcher = self._batcher
        for generation, tag, ok in outcomes:
            if generation != generation_now or not current:
                continue  # that channel is gone: the broker redelivers the message
            if ok:
                actions += batcher.done(tag)
            else:
                actions += batcher.failed(tag, requeue=False)
        if idle and current:
            actions += self._batcher.flush()
        self._apply(actions)

    def _apply(self, actions: list[Action]) -> None:
        if not actions:
            return
        link = self._link
        if link is None or link.channel is None or not link.usable:
            return
        channel = link.channel
        rec = self._recorder
        for action in actions:
            if isinstance(action, Ack):
                channel.basic_ack(action.tag, multiple=action.multiple)
                self._acked += action.count
                if rec is not None:
                    tags = [t for t in self._ids_by_tag if t <= action.tag] \
                        if action.multiple else [action.tag]
                    for tag in tags:
                        rec.record("ack", msg=self._ids_by_tag.pop(tag, None))
            elif isinstance(action, Reject):
                channel.basic_reject(action.tag, requeue=action.requeue)
                self._rejected += 1
                if rec is not None:
                    rec.record("reject", msg=self._ids_by_tag.pop(action.tag, None),
                               requeue=action.requeue)

    def _on_server_cancel(self, _frame: Any) -> None:
        """The broker cancelled us (queue deleted, mirrored queue failed over)."""
        self._record("cancelled", queue=self.settings.queue.name, by="server")
        link = self._link
        if link is not None and link.channel is not None and self._consumer_tag is not None:
            link.conn.sac_inbound.unregister(link.channel.channel_number, self._consumer_tag)
        self._consumer_tag = None
        self._change(self._roles.lost())
        if self._stopping:
            return
        link = self._link
        if self._opening:
            # Cancelled while a (re)connect sets this link up: that attempt failed, and the
            # open under way tries again (declaring the queue again names a deleted one).
            if link is not None:
                link.abandon("the broker cancelled the subscription while it was set up")
            return
        if link is not None and link.usable:
            # Acks of messages already handled still count on this channel.
            self._apply(self._batcher.flush())
        self._replace_recovery(self._resubscribe())

    async def _resubscribe(self) -> None:
        backoff = self.settings.connection.reconnect
        loop = asyncio.get_running_loop()
        began = loop.time()
        attempt = 0
        while not self._stopping:
            attempt += 1
            delay = backoff.delay(attempt, loop.time() - began)
            if delay is None:
                self._give_up(ConsumerError(
                    f"could not consume {self.settings.queue.name!r} again after "
                    f"{attempt - 1} attempts"))
                return
            await asyncio.sleep(delay)
            link = self._link
            if link is None or not link.usable:
                return  # the reconnect path subscribes again
            try:
                await self._subscribe(link)
                self._resubscribes += 1
                return
            except LinkLost:
                return
            except SacError as exc:
                log.warning("consume again on %r failed: %s", self.settings.queue.name, exc)

    # ------------------------------------------------------------------ connection

    @property
    def _shutting_down(self) -> bool:
        return self._stopping

    async def _setup(self, link: Link, retry: bool) -> None:
        channel = link.channel
        assert channel is not None
        await link.declare_topology(self.settings.queue)
        await link.rpc(lambda cb: channel.basic_qos(
            prefetch_count=self.settings.prefetch, callback=cb), "basic.qos")
        channel.add_on_cancel_callback(self._on_server_cancel)
        await self._subscribe(link)

    async def _subscribe(self, link: Link) -> None:
        channel = link.channel
        assert channel is not None
        queue = self.settings.queue
        if self._roles.subscriptions:  # again after a cancel: the queue may have gone
            await link.declare_topology(queue)
        name = self.settings.consumer_name or "sac"
        tag = f"{name}-{next(_tags)}-{id(self):x}"
        arguments = {"x-cancel-on-ha-failover": True} if queue.type == "classic" else None
        # Deliveries to this tag are decoded by our own fast path, pika's for the rest.
        inbound = link.conn.sac_inbound
        inbound.register(channel.channel_number, tag, self._take)
        try:
            await link.rpc(lambda cb: channel.basic_consume(
                queue.name, self._on_message, consumer_tag=tag, arguments=arguments,
                callback=cb), "basic.consume")
        except BaseException:
            inbound.unregister(channel.channel_number, tag)
            raise
        self._consumer_tag = tag
        self._cut.clear()
        self._cut_async.clear()
        self._record("subscribed", queue=queue.name, by="client")
        self._change(self._roles.subscribed())

    def _dropped(self, link: Link, reason: LinkLost) -> None:
        self._consumer_tag = None
        self._generation += 1  # outcomes of the old channel can no longer be acked
        self._batcher.channel_lost()
        self._ids_by_tag.clear()
        self._forwarder = None
        self._interrupt()
        if not self._stopping:
            self._change(self._roles.lost())

    def _give_up(self, exc: SacError) -> None:
        log.error("consumer of %r gives up: %s", self.settings.queue.name, exc)
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        self._spawn(self.stop(timeout=1.0))

    # ------------------------------------------------------------------ bookkeeping

    def _change(self, change: Change | None) -> None:
        if change is None:
            return
        if change.new is Role.ACTIVE:
            self._activation += 1
            if self._inbox is None:  # an inbox records it with the epoch it claims
                self._record("active", queue=self.settings.queue.name, epoch=None)
        if self._on_role_change is not None:
            try:
                self._on_role_change(change.new)
            except Exception:
                log.exception("on_role_change callback failed")


class _ThreadedConsumer(AsyncConsumer):
    """The engine of the blocking ``Consumer``: deliveries go to the caller's thread in
    batches (all that one loop iteration received), outcomes come back in batches, so the
    two threads wake each other once per batch, not once per message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handoff: thread_queue.SimpleQueue[list[tuple[int, Delivery]] | None] = \
            thread_queue.SimpleQueue()
        self._outbox: list[tuple[int, Delivery]] = []
        self.handlers_done = threading.Event()
        self.handlers_done.set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_requested = False
        """Set in the handler thread (a signal) or by ``stop()``: the deliveries handed over
        but not started are left unacked at once, not only once the loop has begun the
        stop, so that the handler running when the stop was asked is the last one."""

    def _start_dispatch(self) -> None:
        self.loop = asyncio.get_running_loop()

    def _dispatch(self, generation: int, delivery: Delivery) -> None:
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._hand_over)
        self._outbox.append((generation, delivery))

    def _hand_over(self) -> None:
        if self._outbox:
            self.handoff.put(self._outbox)
            self._outbox = []

    async def _stop_dispatch(self) -> None:
        self._hand_over()
        self.handoff.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self.handlers_done.wait)

    def stale(self, generation: int) -> bool:
        return self._stopping or self.stop_requested or generation != self._generation

    def recover_in_thread(
        self, generation: int, delivery: Delivery, exc: Exception,
        again: Callable[[], object],
    ) -> bool | None:
        return self._recover_in_thread(generation, delivery, exc, again)

    def process_batch(
        self, inbox: Inbox, batch: list[tuple[int, Delivery]]
    ) -> tuple[list[_Outcome], SacError | None]:
        return self._process_batch(inbox, batch)

    def settle_from_thread(self, outcomes: list[_Outcome], idle: bool) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._settle, outcomes, idle)

    @property
    def activation(self) -> int:
        return self._activation

    @property
    def dedup_inbox(self) -> Inbox | None:
        return self._inbox

    def halt_from_thread(self, exc: SacError) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._halt, exc)


class Consumer:
    """The blocking face. ``run()`` blocks the calling thread and runs the handler there;
    the connection (and its heartbeats) lives on a background loop thread.

    Example::

        def handle(delivery: Delivery) -> None:
            save(delivery.body)

        consumer = Consumer(ConsumerSettings(conn, QueueSettings("orders")), handle)
        consumer.run()      # until SIGTERM/SIGINT (in the main thread) or stop() elsewhere
    """

    def __init__(
        self,
        settings: ConsumerSettings,
        handler: Callable[[Delivery], None] | Inbox,
        *,
        recorder: HistoryRecorder | None = None,
        on_role_change: RoleCallback | None = None,
    ) -> None:
        if inspect.iscoroutinefunction(handler):
            raise TypeError("the blocking Consumer takes a plain function; use AsyncConsumer")
        self.settings = settings
        self._handler = handler
        self._thread = LoopThread(name="sac-consumer")
        self._engine = _ThreadedConsumer(
            settings, handler, recorder=recorder, on_role_change=on_role_change
        )
        self._running = False
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def role(self) -> Role:
        return self._engine.role

    @property
    def stats(self) -> ConsumerStats:
        return self._engine.stats

    def start(self) -> Self:
        """Connect and subscribe; deliveries wait until ``run()`` handles them."""
        self._thread.launch(self._engine.start())
        return self

    def run(self, *, handle_signals: bool = True) -> None:
        """Handle deliveries in this thread until the consumer stops (starts it if needed).
        Raises what stopped it if that was an error.

        Called in the main thread, ``run()`` also stops on SIGTERM or SIGINT, gracefully:
        the running handler finishes and is acked, what was prefetched goes back to the
        queue, and ``run()`` returns normally. The handlers that were installed before come
        back at the first signal (so a second Ctrl-C raises ``KeyboardInterrupt``, the
        running message then unacked and redelivered; a second SIGTERM under the default
        disposition ends the process) and when ``run()`` returns. ``handle_signals=False``
        leaves signals to the application; from any other thread they are never touched.
        """
        if not self._thread.running:
            self.start()
        with stop_on_signals(self._on_signal, handle_signals):
            self._run()

    def _on_signal(self, sig: signal.Signals) -> None:
        """From the signal handler, in the thread running handlers: must not block."""
        with contextlib.suppress(RuntimeError):  # the loop closing already: stopping anyway
            self._thread.call_soon(self._signalled, sig)
        self._stop_soon(None)

    @staticmethod
    def _signalled(sig: signal.Signals) -> None:
        log.info("%s: stopping gracefully (a second one is not caught)", sig.name)

    def _run(self) -> None:
        engine = self._engine
        engine.handlers_done.clear()
        self._running = True
        batch: list[_Outcome] = []
        limit = self.settings.ack_batch
        inbox = engine.dedup_inbox
        handler: Any = self._handler
        halted: SacError | None = None
        try:
            while halted is None and (items := engine.handoff.get()) is not None:
                if inbox is not None:
                    for start in range(0, len(items), limit):
                        if engine.stop_requested:
                            break  # left unacked: back to the queue
                        outcomes, halted = engine.process_batch(
                            inbox, items[start:start + limit])
                        batch += outcomes  # committed: acked even when it then stops
                        if halted is not None:
                            break  # the rest not acked: a newer consumer has them
                        if len(batch) >= limit:
                            engine.settle_from_thread(batch, False)
                            batch = []
                    if halted is None and engine.handoff.empty():
                        engine.settle_from_thread(batch, True)
                        batch = []
                    continue
                for generation, delivery in items:
                    if engine.stale(generation):
                        continue
                    try:
                        handler(delivery)
                        ok: bool | None = True
                    except Exception as error:  # noqa: BLE001 - retried, then parked
                        try:
                            ok = engine.recover_in_thread(
                                generation, delivery, error, functools.partial(handler, delivery))
                        except ParkingFailed as failed:
                            halted = failed
                            break
                    if ok is None:
                        continue  # stopping, or the channel is gone
                    batch.append((generation, delivery.delivery_tag, ok))
                    if len(batch) >= limit:
                        engine.settle_from_thread(batch, False)
                        batch = []
                if engine.handoff.empty():  # idle: acks go out now
                    engine.settle_from_thread(batch, True)
                    batch = []
        except BaseException:  # KeyboardInterrupt: hand over gracefully, then re-raise
            if batch:
                engine.settle_from_thread(batch, True)
            engine.handlers_done.set()
            self._close()
            raise
        if batch:
            engine.settle_from_thread(batch, True)
        if halted is not None:
            engine.halt_from_thread(halted)
        engine.handlers_done.set()
        self._close()
        done = engine._done
        if done is not None and done.done() and not done.cancelled():
            exc = done.exception()
            if exc is not None:
                raise exc

    def _close(self) -> None:
        """Complete the stop (whoever started it) and end the loop thread."""
        with self._lock:
            if self._thread.running:
                self._thread.run(self._engine.stop())
                self._thread.stop()
            self._running = False
            self._closed.set()

    def stop(self, timeout: float | None = None) -> None:
        """Graceful handover (see ``AsyncConsumer.stop``); safe from any thread. While
        ``run()`` is active it finishes the running handler first and returns."""
        if not self._thread.running:
            return
        if self._running:
            # run() owns the handler thread: start the stop on the loop and let run()
            # finish it once the running handler is done.
            self._stop_soon(timeout)
            wait = (self.settings.stop_timeout if timeout is None else timeout) + 10
            self._closed.wait(wait)
            return
        self._close()

    def _stop_soon(self, timeout: float | None) -> None:
        """Start the graceful stop and return at once."""
        self._engine.stop_requested = True
        self._engine._cut.set()  # a retry wait in the handler thread ends now
        with contextlib.suppress(RuntimeError):
            self._thread.call_soon(self._spawn_stop, timeout)

    def _spawn_stop(self, timeout: float | None) -> None:
        self._engine._spawn(self._engine.stop(timeout))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


__all__ = ["AsyncConsumer", "Consumer", "ConsumerStats", "Handler", "Role"]
