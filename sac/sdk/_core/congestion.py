"""How many messages the publisher may have unconfirmed right now: all of its window while the
broker acks, fewer after nacks, down to one probe while a queue nacks everything.

A quorum queue nacks what it cannot take while it elects a new leader (a few seconds). A
publisher that keeps its whole window in flight meanwhile refills every slot a nack frees with
a new message, which is nacked too: one nack per message per retry, thousands per election,
all of them sent again later. A broker nack never means "a bit slow" (a slow queue simply
acks late); it means "I could not take this one", so the answer is steep: every nack halves
the limit (of what was in flight), down to one message in flight. While that single probe
keeps being nacked the next one waits, under the nack backoff (exponential, full jitter,
capped), so an election costs about one nack per probe instead of one per message. The first
ack ends the pause and the limit grows by one per acked message (it doubles per round trip)
back to the window: a handful of round trips after the election the window is full again.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .backoff import Backoff


class SendLimit:
    """The number of messages that may be in flight, between 1 and ``window``; 0 while
    sending pauses after a nacked probe (``resume()`` ends the pause).

    Example::

        limit = SendLimit(1000, backoff)
        pause = limit.nacked(in_flight=0)   # a delay in seconds, or None
        limit.acked(5)                      # grows back, at most to the window
    """

    __slots__ = ("_backoff", "_probes_nacked", "_rng", "allowed", "limit", "window")

    def __init__(
        self, window: int, backoff: Backoff, rng: Callable[[], float] = random.random
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.limit = window
        """In flight allowed once sending is not paused."""
        self.allowed = window
        """In flight allowed now: ``limit``, or 0 while paused. The publisher's pump reads
        only this, so the no-nack path costs what it did before."""
        self._backoff = backoff
        self._rng = rng
        self._probes_nacked = 0

    @property
    def paused(self) -> bool:
        return self.allowed == 0

    def nacked(self, in_flight: int) -> float | None:
        """A nack arrived (``in_flight`` messages are still unconfirmed after it): the limit
        becomes half of what was in flight (a publisher that had only a few out must not be
        allowed to send many more); when the last message in flight was already the only one
        allowed, it was a probe and the queue still refuses, so sending pauses for the delay
        returned (seconds; call ``resume()`` after it). None: no pause."""
        if self.limit > 1:
            self.limit = max(1, min(self.limit, in_flight + 1) // 2)
            if self.allowed:
                self.allowed = self.limit
            return None
        if in_flight or self.paused:
            return None  # the rest of an earlier, wider window draining: not a probe
        self._probes_nacked += 1
        self.allowed = 0
        # The cap grows with the probes nacked in a row; the policy's bounds (attempts,
        # elapsed) are for each message's own retries, not for how long a queue may elect.
        return self._backoff.cap(self._probes_nacked) * self._rng()

    def resume(self) -> None:
        """The pause after a nacked probe is over: one more probe may go."""
        self.allowed = self.limit

    def restart(self) -> None:
        """The channel was lost: on the next one, start from a single message and grow, as
        after a nack. What was in flight goes out again there, and a lost node is often a
        quorum queue's leader, whose queue elects meanwhile: resending the whole window at
        once would only have it nacked. One probe goes at once (a new channel may be the
        cure); a healthy queue is back to the full window within a few round trips."""
        self.limit = 1
        self.allowed = 1

    def acked(self, count: int) -> None:
        """``count`` messages were acked: the queue takes messages again, so the pause ends
        and the limit grows by ``count`` (doubling per round trip), up to the window."""
        self._probes_nacked = 0
        self.limit = min(self.window, self.limit + count)
        self.allowed = self.limit
