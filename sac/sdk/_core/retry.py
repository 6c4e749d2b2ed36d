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
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol, TypeVar

import attrs

T = TypeVar("T")

GiveUp = Callable[[int, float, BaseException], BaseException]
"""``(failures, elapsed, last)`` -> the error to raise when the policy is exhausted."""

OnRetry = Callable[[int, float, BaseException], None]
"""``(failures, delay, last)``: told before each wait (to log it, count it)."""


class DelayPlan(Protocol):
    """When to try again: ``Backoff`` is one; a first connect's once-per-node is another."""

    def delay(
        self, attempt: int, elapsed: float, rng: Callable[[], float] = ...
    ) -> float | None: ...


Errors = type[BaseException] | tuple[type[BaseException], ...]


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

    policy: DelayPlan
    clock: Callable[[], float]
    sleep: Callable[[float], Any]
    interrupted: Callable[[], bool] = _never
    rng: Callable[[], float] = random.random

    def _failures(
        self, give_up: GiveUp, on_retry: OnRetry | None
    ) -> Callable[[BaseException], float]:
        """One loop's bookkeeping, shared by ``steps`` and ``run_async``: told each failure,
        it returns the delay before the next attempt, or raises (interrupted, exhausted)."""
        began: float | None = None
        failures = 0

        def failed(last: BaseException) -> float:
            nonlocal began, failures
            if self.interrupted():
                raise Interrupted() from last
            if began is None:
                began = self.clock()
            failures += 1
            elapsed = self.clock() - began
            delay = self.policy.delay(failures, elapsed, self.rng)
            if delay is None:
                raise give_up(failures, elapsed, last) from last
            if on_retry is not None:
                on_retry(failures, delay, last)
            return delay

        return failed

    def steps(
        self,
        attempt: Callable[[], T],
        *,
        retry_on: Errors = Exception,
        permanent: Errors = (),
        give_up: GiveUp = _exhausted,
        on_retry: OnRetry | None = None,
    ) -> Generator[float, None, T]:
        """``run`` as a generator: it yields each delay instead of sleeping it and returns
        the result. A driver on virtual time (the simulator) lets time pass between two
        steps while everything else goes on; ``run`` drives it with ``sleep``. A failure
        that is also one of ``permanent`` is raised at once (wrong credentials do not get
        better)."""
        failed = self._failures(give_up, on_retry)
        while True:
            try:
                return attempt()
            except retry_on as exc:
                if isinstance(exc, permanent):
                    raise
                delay, last = failed(exc), exc
            yield delay
            if self.interrupted():
                raise Interrupted() from last

    def run(
        self,
        attempt: Callable[[], T],
        *,
        retry_on: Errors = Exception,
        permanent: Errors = (),
        give_up: GiveUp = _exhausted,
        on_retry: OnRetry | None = None,
    ) -> T:
        return drive(self.steps(attempt, retry_on=retry_on, permanent=permanent,
                                give_up=give_up, on_retry=on_retry), self.sleep)

    async def run_async(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        retry_on: Errors = Exception,
        permanent: Errors = (),
        give_up: GiveUp = _exhausted,
        on_retry: OnRetry | None = None,
    ) -> T:
        failed = self._failures(give_up, on_retry)
        while True:
            try:
                return await attempt()
            except retry_on as exc:
                if isinstance(exc, permanent):
                    raise
                delay, last = failed(exc), exc
            slept = self.sleep(delay)
            if inspect.isawaitable(slept):
                await slept
            if self.interrupted():
                raise Interrupted() from last


def drive(steps: Generator[float, None, T], sleep: Callable[[float], Any]) -> T:
    """Run ``steps`` to its end, sleeping each delay it yields; its result."""
    try:
        while True:
            sleep(next(steps))
    except StopIteration as done:
        result: T = done.value
        return result
