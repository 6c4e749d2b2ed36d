"""What a shell must be able to do, and the one place that tells it to: pure.

The consumer machine (``consuming.py``) and the guard machine (``guarding.py``) return
actions; a shell (the SDK's asyncio consumer, the simulator's consumer) carries them out.
Each action union has a protocol here naming one operation per member, and one dispatcher
that matches on the union with a final ``assert_never``: a member added to a union that no
shell carries out is a type error here, and a shell that lacks an operation is a type error
where it is passed in. Nothing here does I/O; the shells do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar, assert_never

from . import consuming as c
from . import guarding as g
from .acks import Ack, Reject
from .consuming import Tagged

D = TypeVar("D", bound=Tagged)


class ConsumerShell(Protocol[D]):
    """The operations a consumer shell carries out, one per member of ``consuming.Action``
    (see its docstring for what each means)."""

    def submit(self, run: c.Run[D]) -> None:
        """Hand ``run`` to the worker."""

    def wake(self) -> None:
        """Call the machine's ``dispatch`` soon, after the read under way."""

    def ack(self, ack: Ack) -> None: ...

    def reject(self, reject: Reject) -> None: ...

    def retry_later(self, retry: c.RetryLater[D]) -> None:
        """Log the failure; ``tick`` the machine at ``retry.at``."""

    def park(self, park: c.Park[D]) -> None:
        """Log it; with a parking queue, copy it there and report the confirm."""

    def resubscribe_later(self, later: c.ResubscribeLater) -> None:
        """``tick`` the machine at ``later.at``."""

    def subscribe(self, subscribe: c.Subscribe) -> None:
        """Consume again (after a server cancel)."""

    def hand_over(self, handover: c.Cancel | c.Release) -> None:
        """The graceful stop's handover: cancel then close, or close with the subscription
        in place."""

    def role_changed(self, change: c.RoleChanged) -> None: ...

    def halt(self, halt: c.Halt[D]) -> None:
        """Stop; ``wait``/``run`` raise the error."""

    def replaced(self, replaced: c.Replaced) -> None:
        """A newer leader fenced this one: give the channel up, contend again."""


def carry_out(actions: Iterable[c.Action[D]], shell: ConsumerShell[D]) -> None:
    """Carry out ``actions`` in order on ``shell``."""
    for action in actions:
        match action:
            case c.Run():
                shell.submit(action)
            case c.Wake():
                shell.wake()
            case Ack():
                shell.ack(action)
            case Reject():
                shell.reject(action)
            case c.RetryLater():
                shell.retry_later(action)
            case c.Park():
                shell.park(action)
            case c.ResubscribeLater():
                shell.resubscribe_later(action)
            case c.Subscribe():
                shell.subscribe(action)
            case c.Cancel() | c.Release():
                shell.hand_over(action)
            case c.RoleChanged():
                shell.role_changed(action)
            case c.Halt():
                shell.halt(action)
            case c.Replaced():
                shell.replaced(action)
            case _:
                assert_never(action)


class GuardShell(Protocol):
    """The operations a guarded consumer carries out, one per member of
    ``guarding.GuardAction``."""

    def lead(self, lead: g.Lead) -> None:
        """Evict the predecessor if the rules allow, and subscribe."""

    def pause(self, pause: g.Pause) -> None:
        """Start no new work (the consumer machine's ``pause``)."""

    def resume(self, resume: g.Resume) -> None: ...

    def abandon(self, abandon: g.Abandon) -> None:
        """Give the channel up, acking nothing in hand."""

    def contend(self, contend: g.Contend) -> None: ...

    def contend_later(self, later: g.ContendLater) -> None:
        """``tick`` the guard machine at ``later.at``."""

    def withdraw(self, withdraw: g.Withdraw) -> None: ...

    def give_up(self, give_up: g.GiveUp) -> None:
        """The election cannot be joined: halt the consumer."""


def carry_out_guard(actions: Iterable[g.GuardAction], shell: GuardShell) -> None:
    """Carry out the guard machine's ``actions`` in order on ``shell``."""
    for action in actions:
        match action:
            case g.Lead():
                shell.lead(action)
            case g.Pause():
                shell.pause(action)
            case g.Resume():
                shell.resume(action)
            case g.Abandon():
                shell.abandon(action)
            case g.Contend():
                shell.contend(action)
            case g.ContendLater():
                shell.contend_later(action)
            case g.Withdraw():
                shell.withdraw(action)
            case g.GiveUp():
                shell.give_up(action)
            case _:
                assert_never(action)
