"""Where a consumer's runs execute: one policy (the consumer machine's), driven two ways.

``AsyncWorker`` runs them on the asyncio loop (the asyncio face); ``ThreadWorker`` in the
thread that called the blocking ``Consumer.run()``, so a long handler never stalls the loop
and its heartbeats. Each runs the tickets it is given in order, skips those its
``Admission`` refuses (handed out before the machine learned that an earlier one ended
early), and reports how each ended. A worker knows the ``Runner`` and its tickets, never the
machine: what the loop has to tell a run comes with its ticket (``runs.py``).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import queue as thread_queue
import threading
import time
from typing import Protocol

from .._core.consuming import Admission
from .runs import Outcome, Runner, Tally, Ticket


class Worker(Protocol):
    """Where runs execute. ``begin``, ``submit`` and ``finish`` are called on the loop."""

    def begin(self, runner: Runner) -> None: ...

    def submit(self, ticket: Ticket) -> None: ...

    async def finish(self) -> None:
        """No more runs: returns once those submitted are done (or no one runs them)."""

    @property
    def in_handler(self) -> bool:
        """The caller runs one of this worker's handlers: a stop asked for from there must
        not wait for the handler to end."""


_SERVING: contextvars.ContextVar[AsyncWorker] = contextvars.ContextVar("sac_serving")
"""The asyncio worker whose handler the current task runs (or was started from)."""


class AsyncWorker:
    """Runs on the loop, one run at a time, in delivery order (the asyncio face)."""

    def __init__(self) -> None:
        # A deque and one waiter rather than asyncio.Queue: this runs once per run.
        self._runs: collections.deque[Ticket | None] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def begin(self, runner: Runner) -> None:
        self._task = asyncio.get_running_loop().create_task(self._work(runner))

    @property
    def in_handler(self) -> bool:
        """The caller runs in the worker's task, or in a task started from it: a handler,
        or what a handler awaits (``asyncio.wait_for`` runs its awaitable as a task)."""
        return _SERVING.get(None) is self

    def submit(self, ticket: Ticket) -> None:
        self._runs.append(ticket)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def finish(self) -> None:
        if self._task is None:
            return
        self._runs.append(None)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        await asyncio.shield(self._task)

    async def _work(self, runner: Runner) -> None:
        _SERVING.set(self)  # this task's own context, and that of the tasks it starts
        runs = self._runs
        admission = Admission()
        loop = asyncio.get_running_loop()
        while True:
            while not runs:
                self._waiter = loop.create_future()
                await self._waiter
                self._waiter = None
            ticket = runs.popleft()
            if ticket is None:
                return
            if admission.admits(ticket.run):
                outcome = await runner.execute_async(ticket)
                admission.ran(ticket.run, outcome[0])
                runner.reports.report(ticket, outcome)
                if runner.stop_requested:
                    # A stop asked for on this loop (a handler's own stop(), a signal) runs
                    # as a task: let it, or runs cut short and handed back at once would
                    # keep this loop busy without ever yielding to it.
                    await asyncio.sleep(0)


REPORT_LINGER = 0.001
"""Seconds the blocking face's worker waits for the next run of a stream before it reports
the runs it ended. A fast handler empties each run (what one read brought: a few
deliveries, when the broker is the slower side) long before the next one comes, and every
report wakes the loop thread: a round trip of thread switches per run. While runs keep
coming, waiting a millisecond lets one report cover the runs of that millisecond (up to an
ack batch); an ack goes out that much later at most. A run that comes alone (the first
after a pause) is reported at once, and nothing that needs its report (a failure, a run cut
short, a stop) waits."""


class ThreadWorker:
    """Hands runs to the thread in ``serve`` (the blocking face's ``run()``): one thread
    hop per run there, one per report back (which covers several runs), not per message."""

    def __init__(self) -> None:
        self._runs: thread_queue.SimpleQueue[Ticket | None] = thread_queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._server: int | None = None

    @property
    def serving(self) -> bool:
        """A thread is in ``serve``."""
        return not self._idle.is_set()

    @property
    def in_handler(self) -> bool:
        """The caller is the thread in ``serve``: a handler."""
        return self.serving and self._server == threading.get_ident()

    def begin(self, runner: Runner) -> None:
        pass

    def submit(self, ticket: Ticket) -> None:
        self._runs.put(ticket)

    async def finish(self) -> None:
        self._runs.put(None)
        # Nobody serving: what was submitted is left, and the broker gets it back.
        await asyncio.get_running_loop().run_in_executor(None, self._idle.wait)

    def serve(self, runner: Runner) -> None:
        """In the caller's thread, until the consumer's stop ends it. An exception from
        outside the handler's own (``KeyboardInterrupt``) ends it too, after reporting
        what the run under way had done.

        Reports go back in one hop for several runs: when no further run waits, or, while
        runs keep coming (each within ``REPORT_LINGER`` of the last one's end), when none
        came within that time; when an ack batch is done; when a run ended early. An inbox
        never waits: its next run waits for this report."""
        self._server = threading.get_ident()
        self._idle.clear()
        runs = self._runs
        batch = runner.batch
        reports = runner.reports
        tally = Tally()
        admission = Admission()
        ended: list[tuple[Ticket, Outcome]] = []
        done = 0
        running: Ticket | None = None
        linger = REPORT_LINGER if runner.pipelined else 0.0
        streaming = False  # this run came within ``linger`` of the last one's end
        last_end = 0.0
        try:
            while True:
                if ended:
                    try:
                        ticket = runs.get(timeout=linger if streaming else 0.0)
                    except thread_queue.Empty:
                        reports.report_threadsafe(ended)
                        ended, done = [], 0
                        ticket = runs.get()
                else:
                    ticket = runs.get()
                streaming = time.monotonic() - last_end < linger
                if ticket is None:
                    break
                if not admission.admits(ticket.run):
                    continue
                tally.done = 0
                running = ticket
                outcome = runner.execute(ticket, tally)
                last_end = time.monotonic()
                running = None
                admission.ran(ticket.run, outcome[0])
                ended.append((ticket, outcome))
                done += outcome[0]
                if done >= batch or outcome[0] < len(ticket.run.deliveries):
                    reports.report_threadsafe(ended)
                    ended, done = [], 0
        except BaseException:
            if running is not None:
                ended.append((running, (tally.done, None, None)))
            raise
        finally:
            if ended:
                reports.report_threadsafe(ended)
            self._idle.set()
