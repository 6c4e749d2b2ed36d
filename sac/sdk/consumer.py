"""Consumers for a single-active-consumer queue that keep consuming across faults.

``AsyncConsumer`` is the asyncio face; ``Consumer`` is the blocking face over the same code
(the connection lives on a private loop thread, the handler runs in the caller's thread).

What they do for you:

- declare the queue from its settings (quorum, single active consumer) or check it
  passively; a queue that exists with other arguments raises ``QueueMismatch`` naming it;
- manual acks, sent only after the handler returned (batched as ``multiple`` acks, flushed
  whenever no further delivery waits);
- ``serializers=JSON`` (or any ``Serializer``) decodes each body by its content type into
  ``Delivery.value``, for a handler and an inbox effect alike; a body that does not decode
  (or a content type the consumer does not read) is parked at once, in its turn, with why;
- a handler (or inbox effect) that raises is run again for the same message, in place and
  unacked, under ``ConsumerSettings.retry``; then (or at once for ``Poison`` and a message
  without an id for the inbox) the message is parked: copied, with the reason in its
  headers, to the queue's parking queue, confirmed, and only then acked. Never requeued in a
  hot loop, never dropped;
- a server-sent ``basic.cancel`` (queue deleted, mirrored-queue failover: classic queues are
  consumed with ``x-cancel-on-ha-failover``) leads to a new ``basic.consume`` with backoff;
- a dead connection (closed, reset, or silent for two heartbeat intervals) leads to a
  reconnect to the next node and a new subscription;
- the consumer knows whether it is the active one: from its first delivery on, or, with
  ``ConsumerSettings.management``, as soon as the management API names it (empty queue too);
- ``stop()`` hands over gracefully: let the running handler finish and ack, then close, so
  the broker requeues what was prefetched but not started, for the next consumer;
- given an ``sac.sdk.dedup.Inbox`` instead of a handler, each message's effect commits once, with
  its dedup record, before the ack; a consumer that was replaced (fenced by a newer epoch)
  stops without acking, and ``wait()``/``run()`` raise ``StaleEpoch``;
- given ``ConsumerSettings.guard`` (ZooKeeper, extra ``zk``), it subscribes only while it
  leads its group, pauses while its session is suspended, gives its channel up (nothing in
  hand acked) when the session is lost and contends again; the leader's token fences its
  inbox (``guard`` tells its standing).

Both are faces of one engine (``_consumer/engine.py``) around one state machine
(``_core/consuming.py``): the asyncio face runs handlers on its loop, the blocking face in the
thread that calls ``run()``, told by the loop when to stop (``_consumer.runs.Ticket``).

Example::

    async def handle(delivery: Delivery) -> None:
        await save(delivery.value["order"])       # the decoded JSON; delivery.body: bytes

    settings = ConsumerSettings(conn, QueueSettings("orders"))
    async with AsyncConsumer(settings, handle, serializers=JSON) as c:
        await c.wait()
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import signal
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from ._consumer.engine import ConsumerEngine
from ._consumer.runs import Handler
from ._consumer.values import ConsumerStats, RoleCallback
from ._consumer.workers import AsyncWorker, ThreadWorker
from ._core.codecs import BYTES, Serializer
from ._core.guarding import GuardStatus
from ._core.lifecycle import Phase
from ._core.roles import Role
from ._delivery import Delivery
from ._history import HistoryRecorder
from ._loop_thread import LoopThread
from ._settings import ConsumerSettings
from ._signals import stop_on_signals
from .dedup.inbox import Inbox

log = logging.getLogger("sac.consumer")


class AsyncConsumer:
    """Consumes one queue, one message at a time, until ``stop()``.

    ``serializers`` (one ``Serializer`` or several; default ``BYTES``: the body as it came)
    make ``Delivery.value`` from the body, by the message's content type (its media type,
    parameters aside): the serializer of that content type decodes it; a message without one
    is decoded by the first serializer; any other content type is handed over raw when
    ``BYTES`` is among them, else parked at once. A body its serializer cannot decode (not
    JSON, not UTF-8) is parked at once, in its turn, the reason naming the content type and
    the error; the consumer goes on with the next message. So ``serializers=JSON`` reads
    JSON only, ``[JSON, BYTES]`` JSON and anything else raw."""

    def __init__(
        self,
        settings: ConsumerSettings,
        handler: Handler | Inbox,
        *,
        recorder: HistoryRecorder | None = None,
        on_role_change: RoleCallback | None = None,
        serializers: Serializer[Any] | Sequence[Serializer[Any]] = BYTES,
    ) -> None:
        self.settings = settings
        self._worker = AsyncWorker()
        self._engine = ConsumerEngine(settings, handler, self._worker, recorder=recorder,
                                      on_role_change=on_role_change, serializers=serializers)

    @property
    def role(self) -> Role:
        """``waiting`` until the broker hands this consumer its first message (or the
        management API names it), then ``active``; ``connecting`` while it recovers;
        ``stopped`` after ``stop()``."""
        return self._engine.machine.role

    @property
    def stats(self) -> ConsumerStats:
        return self._engine.stats

    @property
    def guard(self) -> GuardStatus | None:
        """With ``ConsumerSettings.guard``: the ZooKeeper session's state, the leadership
        (its fencing token, and the leader before it) or None while contending, and whether
        new work is paused. None without a guard."""
        return self._engine.guard_status

    async def start(self) -> Self:
        """Connect, declare or check the queue, subscribe. Fails fast if no node answers."""
        await self._engine.start()
        return self

    async def wait(self) -> None:
        """Until the consumer stops; raises what stopped it if that was an error."""
        await self._engine.wait()

    async def stop(self, timeout: float | None = None) -> None:
        """Graceful handover: let the running handler finish and ack, then close the
        channel; what was prefetched but not started goes back to the queue. The channel is
        closed rather than the subscription cancelled first: a cancel would let the broker
        activate the next consumer while this one still holds messages (``Handover``).

        Awaited in the handler itself, it returns at once: the stop goes on once the handler
        returns (its message acked), and ``wait()`` then returns. Why not wait there: the
        stop waits for the very handler that would be waiting for it."""
        if self._worker.in_handler:
            self._engine.request_stop(timeout)
            return
        await self._engine.stop(timeout)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


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
        serializers: Serializer[Any] | Sequence[Serializer[Any]] = BYTES,
    ) -> None:
        if inspect.iscoroutinefunction(handler):
            raise TypeError("the blocking Consumer takes a plain function; use AsyncConsumer")
        self.settings = settings
        self._thread = LoopThread(name="sac-consumer")
        self._worker = ThreadWorker()
        self._engine = ConsumerEngine(settings, handler, self._worker, recorder=recorder,
                                      on_role_change=on_role_change, serializers=serializers)
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def role(self) -> Role:
        return self._engine.machine.role

    @property
    def stats(self) -> ConsumerStats:
        return self._engine.stats

    @property
    def guard(self) -> GuardStatus | None:
        """See ``AsyncConsumer.guard``."""
        return self._engine.guard_status

    def start(self) -> Self:
        """Connect and subscribe; deliveries wait until ``run()`` handles them."""
        if self._engine.life.phase is not Phase.NEW:
            self._engine.life.start()  # the precise error: started twice, or closed
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
        self._engine.request_stop()

    @staticmethod
    def _signalled(sig: signal.Signals) -> None:
        log.info("%s: stopping gracefully (a second one is not caught)", sig.name)

    def _run(self) -> None:
        try:
            self._worker.serve(self._engine.runner)  # until the engine's stop ends it
        finally:
            # Also after KeyboardInterrupt: hand over gracefully, then re-raise.
            self._close()
        failure = self._engine.failure
        if failure is not None:
            raise failure

    def _close(self) -> None:
        """Complete the stop (whoever started it) and end the loop thread."""
        with self._lock:
            if self._thread.running:
                self._thread.run(self._engine.stop())
                self._thread.stop()
            self._closed.set()

    def stop(self, timeout: float | None = None) -> None:
        """Graceful handover (see ``AsyncConsumer.stop``); safe from any thread. While
        ``run()`` is active it finishes the running handler first and returns. Called from
        the handler itself, it returns at once: the stop goes on once the handler returns
        (its message acked), and ``run()`` then returns. Why not wait there: the stop waits
        for the very handler that would be waiting for it."""
        if not self._thread.running:
            return
        if self._worker.in_handler:
            self._engine.request_stop(timeout)
            return
        if self._worker.serving:
            # run() owns the handler thread: start the stop on the loop and let run()
            # finish it once the running handler is done.
            self._engine.request_stop(timeout)
            wait = (self.settings.stop_timeout if timeout is None else timeout) + 10
            self._closed.wait(wait)
            return
        self._close()

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
