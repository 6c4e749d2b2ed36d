"""Where a client is in its life, as one explicit state instead of a handful of flags.

Flags side by side (started, closed, stopping, failed) let each method check its own
combination of them, and two methods could disagree on what a client may do now. One phase
per client makes every misuse a precise error (start twice, publish before start or after close)
and makes "what may happen now" a question with one answer.

::

    NEW --start()--> STARTING --started()--> RUNNING --close()--> CLOSING --closed()--> CLOSED
                         \\                      |                   ^
                          +------fail()----> FAILED ---close()--------+
"""

from __future__ import annotations

import enum

from .._errors import ClosedError, LifecycleError, SacError


class Phase(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    FAILED = "failed"
    """Gave up for good (``failure`` says why); close() still settles what is left."""
    CLOSING = "closing"
    CLOSED = "closed"


class Lifecycle:
    """The phase of one client (``what`` names it in errors: "publisher", "consumer")."""

    __slots__ = ("failure", "phase", "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self.phase = Phase.NEW
        self.failure: SacError | None = None

    def __repr__(self) -> str:
        return f"Lifecycle({self.what!r}, {self.phase.value})"

    @property
    def shutting_down(self) -> bool:
        return self.phase in (Phase.CLOSING, Phase.CLOSED)

    @property
    def running(self) -> bool:
        return self.phase is Phase.RUNNING

    def start(self) -> None:
        """Enter STARTING; a second start is an error, whatever happened since the first."""
        if self.phase is Phase.NEW:
            self.phase = Phase.STARTING
            return
        if self.shutting_down:
            raise ClosedError(f"this {self.what} is {self.phase.value}: a closed {self.what} "
                              "cannot be started again, create a new one")
        raise LifecycleError(f"this {self.what} was already started ({self.phase.value})")

    def started(self) -> None:
        """The first link is up. A close() that came in meanwhile keeps its phase."""
        if self.phase is Phase.STARTING:
            self.phase = Phase.RUNNING

    def fail(self, error: SacError) -> None:
        """Give up for good: later use raises ``error`` itself."""
        if self.phase in (Phase.STARTING, Phase.RUNNING):
            self.phase = Phase.FAILED
            self.failure = error

    def close(self) -> bool:
        """Enter CLOSING; False when another close() already did (or nothing was started),
        so close() is idempotent and the first caller does the work."""
        if self.phase is Phase.NEW:
            self.phase = Phase.CLOSED
            return False
        if self.shutting_down:
            return False
        self.phase = Phase.CLOSING
        return True

    def closed(self) -> None:
        self.phase = Phase.CLOSED

    def check_usable(self, action: str) -> None:
        """Raise the precise error for doing ``action`` ("publish") in this phase; a client
        that is still starting may be used (the work waits for the link)."""
        phase = self.phase
        if phase is Phase.RUNNING or phase is Phase.STARTING:
            return
        if phase is Phase.NEW:
            raise LifecycleError(f"cannot {action}: this {self.what} is not started; call "
                                 "start() or use it as a context manager")
        if phase is Phase.FAILED:
            assert self.failure is not None
            raise self.failure
        raise ClosedError(f"cannot {action}: this {self.what} is {phase.value}")
