"""Bounded exponential backoff with full jitter, as an immutable value.

Full jitter (a uniform draw between 0 and the exponential cap) spreads the reconnects of many
clients that lost the same node, instead of having them return in lock-step. Every policy is
bounded: by a number of attempts, by a total time, or both. The caller supplies the clock and
the random source, so the asyncio face sleeps with ``asyncio.sleep`` and the blocking face
with ``time.sleep``, and tests are deterministic.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs

from .._errors import ConfigurationError
from .checks import no_less_than, optional, positive


@attrs.frozen
class Backoff:
    """Delay before retry number ``attempt`` (1-based): ``uniform(0, min(maximum, initial *
    multiplier ** (attempt - 1)))``; no retry past ``max_attempts`` or ``max_elapsed`` s."""

    initial: float = attrs.field(default=0.1, validator=positive)
    maximum: float = attrs.field(default=5.0, validator=positive)
    multiplier: float = attrs.field(default=2.0, validator=no_less_than(1.0))
    max_attempts: int | None = attrs.field(default=20, validator=optional(positive))
    max_elapsed: float | None = attrs.field(default=120.0, validator=optional(positive))

    def __attrs_post_init__(self) -> None:
        if self.max_attempts is None and self.max_elapsed is None:
            raise ConfigurationError(
                "a backoff must be bounded: set max_attempts or max_elapsed")
        if self.maximum < self.initial:
            raise ConfigurationError(
                f"maximum ({self.maximum}) is below initial ({self.initial})")

    def cap(self, attempt: int) -> float:
        """The largest delay retry number ``attempt`` may wait."""
        exponent = min(attempt - 1, 64)  # beyond this the cap is reached anyway
        try:
            grown = self.initial * self.multiplier**exponent
        except OverflowError:  # a large multiplier passes the float range before 64 steps
            return float(self.maximum)
        return float(min(self.maximum, grown))

    def exhausted(self, attempt: int, elapsed: float) -> bool:
        """No retry number ``attempt`` after ``elapsed`` s since the first failure."""
        if attempt < 1:
            raise ValueError(f"attempt counts from 1, got {attempt}")
        if self.max_attempts is not None and attempt > self.max_attempts:
            return True
        return self.max_elapsed is not None and elapsed >= self.max_elapsed

    def delay(
        self, attempt: int, elapsed: float, rng: Callable[[], float] = random.random
    ) -> float | None:
        """Seconds to wait before retry ``attempt``, or None when the policy is exhausted.

        ``elapsed`` is the time since the first failure; the delay never overshoots
        ``max_elapsed``.
        """
        if self.exhausted(attempt, elapsed):
            return None
        wait = self.cap(attempt) * rng()
        if self.max_elapsed is not None:
            wait = min(wait, self.max_elapsed - elapsed)
        return wait
