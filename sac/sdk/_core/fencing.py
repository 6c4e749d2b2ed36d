"""A guarded consumer's fencing token, and when it must step down: pure.

The guard's leadership token is the inbox's epoch: a store refuses a commit from an older
one. It is only the token of a channel subscribed *under* that leadership: a run that came on
another channel (one given up, or one subscribed before the leadership) has no token, and its
commit is refused. And a leader whose connection a newer leader evicted steps down, whatever
its ZooKeeper session still says: a process that froze hears of its session's expiry only
when it wakes.
"""

from __future__ import annotations

from .eviction import evicted_by


class Fencing:
    """Which channel generation was subscribed under which leadership token."""

    __slots__ = ("_led",)

    def __init__(self) -> None:
        self._led: tuple[int, int] | None = None

    @property
    def token(self) -> int | None:
        """The token the current subscription holds, if it was made as a leader."""
        return None if self._led is None else self._led[1]

    def subscribed(self, generation: int, token: int | None) -> None:
        """A subscription was made on channel ``generation``, leading with ``token`` (None:
        not leading; the old leadership's channel keeps nothing)."""
        if token is not None:
            self._led = (generation, token)

    def abandoned(self) -> None:
        """The channel was given up: no run of it commits any more."""
        self._led = None

    def token_for(self, generation: int) -> int | None:
        """The epoch a run of channel ``generation`` commits under; None: refuse it."""
        led = self._led
        if led is None or led[0] != generation:
            return None
        return led[1]

    def steps_down(self, close_reason: str) -> int | None:
        """The broker closed the connection telling ``close_reason``: the newer leader's
        token if that leader evicted this one (step down and contend again), else None."""
        led = self._led
        token = evicted_by(close_reason)
        if led is None or token is None or token <= led[1]:
            return None
        return token
