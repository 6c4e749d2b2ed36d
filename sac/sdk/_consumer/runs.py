"""How one run (a batch of deliveries the consumer machine handed out) executes: the handler
on each delivery, or the inbox on all of them.

A run executes in whatever thread its worker uses (``workers.py``), while the
loop thread owns the consumer machine. So a run never reads the machine: it carries a
``Ticket``, made on the loop when the run is handed out, with what it needs to know: the
``cut`` flag, which the loop sets when runs under way must end after the delivery in hand (a
stop, a pause, a halt, or the run's channel lost), and, for a guarded consumer's inbox, the
fencing token of the run's channel with the flag the loop sets when that channel goes.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs

from .._core.consuming import Run
from .._delivery import Delivery
from .._errors import SacError, StaleEpoch, StoreUnavailable
from ..dedup.inbox import InboxSession

Handler = Callable[[Delivery], Awaitable[None]] | Callable[[Delivery], None]
Outcome = tuple[int, Exception | None, SacError | None]
"""A run's end: how many of its deliveries succeeded (handler returned, or committed), the
exception that stopped it at the next one, and the inbox's refusal of the whole run
(``StaleEpoch``, ``StoreUnavailable``). A plain tuple: one is made per run."""


class Cut:
    """Raised by the loop (``up``): the runs that hold this flag end after the delivery in
    hand. A plain attribute rather than a ``threading.Event``: nobody waits on it, and a
    run reads it before every delivery, where an attribute read costs a fraction of a
    method call. Only the loop writes it; a bool's store and load are atomic under the GIL,
    so the worker's thread sees it at its next check."""

    __slots__ = ("up",)

    def __init__(self) -> None:
        self.up = False


@attrs.frozen(kw_only=True, eq=False)
class Fence:
    """A guarded consumer's fencing for the runs of one channel: the leadership token it
    was subscribed under (None: not led) and ``gone``, set by the loop when the channel is
    given up or lost."""

    token: int | None
    gone: threading.Event


@attrs.frozen(kw_only=True, eq=False)
class Ticket:
    """A run and what the loop tells the thread that executes it."""

    run: Run[Delivery]
    cut: Cut
    """Set by the loop: end after the delivery in hand (stop, pause, halt, channel lost)."""
    fence: Fence | None = None
    """Only for a guarded consumer's inbox."""


class Tally:
    """Deliveries of the run under way that succeeded, readable if the run is interrupted
    (``KeyboardInterrupt`` in the blocking face's handler)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = 0


class Reports(Protocol):
    """Where a worker reports how its runs ended."""

    def report(self, ticket: Ticket, outcome: Outcome) -> None:
        """On the loop."""

    def report_threadsafe(self, ended: list[tuple[Ticket, Outcome]]) -> None:
        """From the worker's thread: these runs' ends, in order, in one hop."""


class Runner:
    """Executes runs for one consumer; knows the handler or the inbox, never the machine."""

    def __init__(self, handler: Handler | None, session: InboxSession | None, *,
                 queue: str, batch: int, reports: Reports, pipelined: bool) -> None:
        self._handler: Any = handler
        self.session = session
        self.handler_is_async = session is None and inspect.iscoroutinefunction(handler)
        self._queue = queue
        self.batch = batch
        """The ack batch: the blocking face's worker reports at least this often."""
        self.reports = reports
        self.pipelined = pipelined
        """The machine hands runs out without waiting for the reports of those before
        (``ConsumerMachine``'s ``pipeline``): a worker may hold its reports back a moment."""
        self.stop_requested = False
        """Set from any thread by the consumer's ``request_stop``: the run under way ends
        after the delivery in hand, before the loop has begun the stop."""

    def execute(self, ticket: Ticket, tally: Tally) -> Outcome:
        """Run ``ticket``'s run in the calling thread: a plain handler for each delivery, or
        the inbox on all of them (its effects block: store drivers do)."""
        run = ticket.run
        cut = ticket.cut
        session = self.session
        if session is not None:
            if self.stop_requested or cut.up:
                return 0, None, None
            fence = ticket.fence
            try:
                results = session.process_batch(
                    run.deliveries, run.activation,
                    epoch=None if fence is None else self._epoch_of(fence))
            except (StaleEpoch, StoreUnavailable) as exc:
                return 0, None, exc
            count = len(results)
            last = results[-1] if count else None
            if isinstance(last, Exception):
                return count - 1, last, None
            tally.done = count
            return count, None, None
        handler = self._handler
        done = 0
        try:
            for delivery in run.deliveries:
                if self.stop_requested or cut.up:
                    break
                try:
                    handler(delivery)
                except Exception as exc:  # noqa: BLE001 - the machine retries, then parks it
                    return done, exc, None
                done += 1
        finally:
            tally.done = done  # also when KeyboardInterrupt ends the handler
        return done, None, None

    async def execute_async(self, ticket: Ticket) -> Outcome:
        """``execute`` for the asyncio face: a coroutine handler runs on the loop; a plain
        one, and the inbox, in a thread (one hop per run), so they cannot stall the
        heartbeats."""
        if not self.handler_is_async:
            if self.session is not None:
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self.session.executor, self.execute,
                                                  ticket, Tally())
            return await asyncio.to_thread(self.execute, ticket, Tally())
        handler = self._handler
        cut = ticket.cut
        done = 0
        for delivery in ticket.run.deliveries:
            if self.stop_requested or cut.up:
                break
            try:
                await handler(delivery)
            except Exception as exc:  # noqa: BLE001 - the machine retries it, then parks it
                return done, exc, None
            done += 1
        return done, None, None

    def _epoch_of(self, fence: Fence) -> Callable[[], int]:
        """The inbox's epoch for a run (in the inbox's thread): the token of the leadership
        the run's channel was subscribed under; a run of a channel given up is refused."""
        queue = self._queue

        def epoch() -> int:
            if fence.token is None or fence.gone.is_set():
                raise StaleEpoch(queue, 0, 0)
            return fence.token
        return epoch

