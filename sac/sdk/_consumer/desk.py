"""The loop's side of runs: the tickets it hands out with them and the reports it takes back.

The loop thread owns the consumer machine. A run executes elsewhere (the blocking face's
thread, the inbox's), so the desk tells it what it must know in its ``Ticket``: the ``cut``
flag, set here when runs under way must end after the delivery in hand, and a guarded
inbox's ``Fence``. How a run ended comes back here, and goes to the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

from .._core.consuming import Actions, ConsumerMachine, Run
from .._delivery import Delivery
from .._errors import StaleEpoch
from .runs import Cut, Fence, Outcome, Ticket


class RunDesk:
    """Hands tickets out and takes reports in, on the loop (``Reports``)."""

    def __init__(self, machine: ConsumerMachine[Delivery],
                 carry_out: Callable[[Actions[Delivery]], None], *, fenced: bool) -> None:
        self._machine = machine
        self._carry_out = carry_out
        self.loop: asyncio.AbstractEventLoop | None = None
        self._cut = Cut()
        self._fence = Fence(token=None, gone=threading.Event()) if fenced else None

    def ticket(self, run: Run[Delivery]) -> Ticket:
        return Ticket(run=run, cut=self._cut, fence=self._fence)

    def cut(self) -> None:
        """Runs handed out so far end after the delivery in hand (stop, pause, halt, lost
        channel); those handed out later get a fresh flag."""
        self._cut.up = True
        self._cut = Cut()

    def refence(self, gone: bool, token: int | None) -> None:
        """A guarded inbox's runs from now on commit under ``token``; with ``gone``, those
        handed out before are refused."""
        old = self._fence
        if old is None:
            return
        if gone:
            old.gone.set()
        if gone or token != old.token:
            self._fence = Fence(token=token, gone=threading.Event())

    def report(self, ticket: Ticket, outcome: Outcome) -> None:
        """On the loop: how ``ticket``'s run ended, to the machine."""
        done, failed, refused = outcome
        loop = self.loop
        now = loop.time() if loop is not None else time.monotonic()
        if refused is None:
            actions = self._machine.ran(ticket.run, done, failed, now)
        else:
            actions = self._machine.commit_failed(ticket.run, refused, now,
                                                  fenced=isinstance(refused, StaleEpoch))
        if actions:
            self._carry_out(actions)

    def report_all(self, ended: list[tuple[Ticket, Outcome]]) -> None:
        for ticket, outcome in ended:
            self.report(ticket, outcome)

    def report_threadsafe(self, ended: list[tuple[Ticket, Outcome]]) -> None:
        """From the worker's thread: how these runs ended, in order, in one hop."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed: nothing more is acked anyway
                loop.call_soon_threadsafe(self.report_all, ended)
