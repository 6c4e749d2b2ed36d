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

from .acks import Ack, Reject
from .consuming import (
    Action,
    Cancel,
    Halt,
    Park,
    Release,
    Replaced,
    ResubscribeLater,
    RetryLater,
    RoleChanged,
    Run,
    Subscribe,
    Tagged,
    Wake,
)
from .guarding import (
    Abandon,
    Contend,
    ContendLater,
    GiveUp,
    GuardAction,
    Lead,
    Pause,
    Resume,
    Withdraw,
)

D = TypeVar("D", bound=Tagged)


class ConsumerShell(Protocol[D]):
    """The operations a consumer shell carries out, one per member of ``consuming.Action``
    (see its docstring for what each means)."""

    def submit(self, run: Run[D]) -> None:
        """Hand ``run`` to the worker."""

    def wake(self) -> None:
        """Call the machine's ``dispatch`` soon, after the read under way."""

    def ack(self, ack: Ack) -> None: ...

    def reject(self, reject: Reject) -> None: ...

    def retry_later(self, retry: RetryLater[D]) -> None:
        """Log the failure; ``tick`` the machine at ``retry.at``."""

    def park(self, park: Park[D]) -> None:
        """Log it; with a parking queue, copy it there and report the confirm."""

    def resubscribe_later(self, later: ResubscribeLater) -> None:
        """``tick`` the machine at ``later.at``."""

    def subscribe(self, subscribe: Subscribe) -> None:
        """Consume again (after a server cancel)."""

    def hand_over(self, handover: Cancel | Release) -> None:
        """The graceful stop's handover: cancel then close, or close with the subscription
        in place."""

    def role_changed(self, change: RoleChanged) -> None: ...

    def halt(self, halt: Halt[D]) -> None:
        """Stop; ``wait``/``run`` raise the error."""

    def replaced(self, replaced: Replaced) -> None:
        """A newer leader fenced this one: give the channel up, contend again."""


def carry_out(actions: Iterable[Action[D]], shell: ConsumerShell[D]) -> None:
    """Carry out ``actions`` in order on ``shell``."""
    for action in actions:
        match action:
            case Run():
                shell.submit(action)
            case Wake():
                shell.wake()
            case Ack():
                shell.ack(action)
            case Reject():
                shell.reject(action)
            case RetryLater():
                shell.retry_later(action)
            case Park():
                shell.park(action)
            case ResubscribeLater():
                shell.resubscribe_later(action)
            case Subscribe():
                shell.subscribe(action)
            case Cancel() | Release():
                shell.hand_over(action)
            case RoleChanged():
                shell.role_changed(action)
            case Halt():
                shell.halt(action)
            case Replaced():
                shell.replaced(action)
            case _:
                assert_never(action)


class GuardShell(Protocol):
    """The operations a guarded consumer carries out, one per member of
    ``guarding.GuardAction``."""

    def lead(self, lead: Lead) -> None:
        """Evict the predecessor if the rules allow, and subscribe."""

    def pause(self, pause: Pause) -> None:
        """Start no new work (the consumer machine's ``pause``)."""

    def resume(self, resume: Resume) -> None: ...

    def abandon(self, abandon: Abandon) -> None:
        """Give the channel up, acking nothing in hand."""

    def contend(self, contend: Contend) -> None: ...

    def contend_later(self, later: ContendLater) -> None:
        """``tick`` the guard machine at ``later.at``."""

    def withdraw(self, withdraw: Withdraw) -> None: ...

    def give_up(self, give_up: GiveUp) -> None:
        """The election cannot be joined: halt the consumer."""


def carry_out_guard(actions: Iterable[GuardAction], shell: GuardShell) -> None:
    """Carry out the guard machine's ``actions`` in order on ``shell``."""
    for action in actions:
        match action:
            case Lead():
                shell.lead(action)
            case Pause():
                shell.pause(action)
            case Resume():
                shell.resume(action)
            case Abandon():
                shell.abandon(action)
            case Contend():
                shell.contend(action)
            case ContendLater():
                shell.contend_later(action)
            case Withdraw():
                shell.withdraw(action)
            case GiveUp():
                shell.give_up(action)
            case _:
                assert_never(action)
