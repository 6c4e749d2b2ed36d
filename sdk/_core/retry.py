"""One retry loop for every shell: an attempt, a bounded backoff with jitter, and a way out.

The SDK retries in several places (the dedup store, a nacked forward, a first connect), and
each had its own loop with its own clock, its own sleep and its own idea of when to stop. A
``Retry`` is the one value they share: the clock, the sleep and the interrupt are injected, so
the asyncio face sleeps on its loop, the blocking face on an event it can cut short, and tests
and the simulator on virtual time. When the policy is exhausted the caller's ``give_up`` turns
the last failure into the caller's own error, raised ``from`` that failure, so the cause is
never lost; an interrupt (a stop) raises ``Interrupted``, also from the last failure.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

from .backoff import Backoff

T = TypeVar("T")

GiveUp = Callable[[int, float, BaseException], BaseException]
"""``(failures, elapsed, last)`` -> the error to raise when the policy is exhausted."""

OnRetry = Callable[[int, float, BaseException], None]
"""``(failures, delay, last)``: told before each wait (to log it, count it)."""


class RetryExhausted(Exception):
    """The default ``give_up``: the policy ran out (the last failure is ``__cause__``)."""

    def __init__(self, failures: int, elapsed: float) -> None:
        super().__init__(failures, elapsed)
        self.failures = failures
        self.elapsed = elapsed

    def __str__(self) -> str:
        return f"gave up after {self.failures} failure(s) over {self.elapsed:.1f} s"


class Interrupted(Exception):
    """The retry was interrupted (the client is stopping); the last failure is ``__cause__``."""


def _exhausted(failures: int, elapsed: float, _last: BaseException) -> BaseException:
    return RetryExhausted(failures, elapsed)


def _never() -> bool:
    return False


@attrs.frozen
class Retry:
    """Run an attempt until it succeeds, the policy is exhausted, or ``interrupted()``.

    ``sleep(delay)`` may return an awaitable (then only ``run_async`` can use it); a sleep that
    returns early when interrupted (``threading.Event.wait``) makes a stop prompt.
    """

    policy: Backoff
    clock: Callable[[], float]
    sleep: Callable[[float], Any]
    interrupted: Callable[[], bool] = _never
    rng: Callable[[], float] = random.random

    def _wait_for(
        self, failures: int, began: float, last: BaseException, give_up: GiveUp,
        on_retry: OnRetry | None,
    ) -> float:
        """The delay before the next attempt, or raise: interrupted, or exhausted."""
        if self.interrupted():
            raise Interrupted() from last
        elapsed = self.clock() - began
        delay = self.policy.delay(failures, elapsed, self.rng)
        if delay is None:
            raise give_up(failures, elapsed, last) from last
        if on_retry is not None:
            on_retry(failures, delay, last)
        return delay

    def run(
        self,
        attempt: Callable[[], T],
        *,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        give_up: GiveUp = _exhausted,
        on_retry: OnRetry | None = None,
    ) -> T:
        began: float | None = None
        failures = 0
        while True:
            try:
                return attempt()
            except retry_on as exc:
                if began is None:
                    began = self.clock()
                failures += 1
                delay = self._wait_for(failures, began, exc, give_up, on_retry)
                last = exc
            self.sleep(delay)
            if self.interrupted():
                raise Interrupted() from last

    async def run_async(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        give_up: GiveUp = _exhausted,
        on_retry: OnRetry | None = None,
    ) -> T:
        began: float | None = None
        failures = 0
        while True:
            try:
                return await attempt()
            except retry_on as exc:
                if began is None:
                    began = self.clock()
                failures += 1
                delay = self._wait_for(failures, began, exc, give_up, on_retry)
                last = exc
            slept = self.sleep(delay)
            if inspect.isawaitable(slept):
                await slept
            if self.interrupted():
                raise Interrupted() from last
