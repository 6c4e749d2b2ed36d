"""The asyncio consumer's shell: carries out each action of the consumer machine, nothing
else (``_core/dispatch.ConsumerShell``; the one dispatcher calls it).

Each operation hands its action to the room that does the I/O: a run to the worker with its
ticket (``desk.py``), an ack to the link (``link.py``), a park to the
parker (``parking.py``), a fenced run to the guard (``guard.py``); timers
call the machine's ``dispatch`` and ``tick`` on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sac.history import Active
from .._core import consuming as c
from .._core.acks import Ack, Reject
from .._core.dispatch import carry_out
from .._core.roles import Role
from .._delivery import Delivery
from .._errors import SacError
from .desk import RunDesk
from .guard import GuardRoom
from .link import ConsumerLink
from .log import ConsumerLog
from .parking import Parker
from .role_poll import RolePoller
from .values import RoleCallback
from .workers import Worker

log = logging.getLogger("sac.consumer")


class AsyncConsumerShell:
    """One consumer's ``ConsumerShell``, on its loop."""

    def __init__(
        self, machine: c.ConsumerMachine[Delivery], worker: Worker, desk: RunDesk,
        link: ConsumerLink, parker: Parker, *, queue: str, records_activity: bool,
        halt: Callable[[SacError], None], on_role_change: RoleCallback | None,
    ) -> None:
        self._machine = machine
        self._worker = worker
        self._desk = desk
        self._link = link
        self._parker = parker
        self._queue = queue
        self._records_activity = records_activity
        """No inbox: the shell records each activation (an inbox records its epoch)."""
        self._halt = halt
        self._on_role_change = on_role_change
        self._log = ConsumerLog(queue)
        self.guard: GuardRoom | None = None
        self.poller: RolePoller | None = None
        self.handover: c.Cancel | c.Release | None = None
        """What the graceful stop under way does once the machine said it (``finish``)."""

    def carry_out(self, actions: c.Actions[Delivery]) -> None:
        carry_out(actions, self)

    def submit(self, run: c.Run[Delivery]) -> None:
        self._worker.submit(self._desk.ticket(run))

    def wake(self) -> None:
        # After the read under way: one run takes all it brought.
        asyncio.get_running_loop().call_soon(self._dispatch)

    def ack(self, ack: Ack) -> None:
        self._link.ack(ack)

    def reject(self, reject: Reject) -> None:
        self._link.reject(reject)

    def retry_later(self, retry: c.RetryLater[Delivery]) -> None:
        self._log.failure(retry.delivery, retry.error, retry.attempts, retry.delay)
        asyncio.get_running_loop().call_at(retry.at, self._tick)

    def park(self, park: c.Park[Delivery]) -> None:
        self._log.failure(park.delivery, park.error, park.attempts, None)
        if park.target is c.Parking.QUEUE:
            self._parker.park(park)

    def resubscribe_later(self, later: c.ResubscribeLater) -> None:
        asyncio.get_running_loop().call_at(later.at, self._tick)

    def subscribe(self, subscribe: c.Subscribe) -> None:
        self._link.replace_recovery(self._link.resubscribe())

    def hand_over(self, handover: c.Cancel | c.Release) -> None:
        self.handover = handover

    def role_changed(self, change: c.RoleChanged) -> None:
        if self.poller is not None:
            self.poller.changed(change.new, asyncio.get_running_loop().time())
        if change.new is Role.ACTIVE and self._records_activity:
            self._link.record(Active(queue=self._queue, epoch=None))
        if self._on_role_change is not None:
            try:
                self._on_role_change(change.new)
            except Exception:
                log.exception("on_role_change callback failed")

    def halt(self, halt: c.Halt[Delivery]) -> None:
        self._desk.cut()
        self._halt(self._log.error_of(halt))

    def replaced(self, replaced: c.Replaced) -> None:
        assert self.guard is not None, "only a guarded consumer's machine rejoins"
        self.guard.replaced()

    def _dispatch(self) -> None:
        actions = self._machine.dispatch(asyncio.get_running_loop().time())
        if actions:
            self.carry_out(actions)

    def _tick(self) -> None:
        actions = self._machine.tick(asyncio.get_running_loop().time())
        if actions:
            self.carry_out(actions)
