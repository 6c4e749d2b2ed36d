"""The one retry value: bounded, jittered, interruptible, and the cause is never lost."""

from __future__ import annotations

import asyncio

import pytest

from sac.sdk._core.backoff import Backoff
from sac.sdk._core.retry import Interrupted, Retry, RetryExhausted


class Clock:
    """Virtual time: sleeping advances it, nothing waits."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        self.now += delay


def failing(times: int, error: type[Exception] = OSError) -> tuple[list[int], object]:
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error(f"failure {len(calls)}")
        return "done"

    return calls, attempt


def test_succeeds_after_failures_with_jittered_bounded_waits() -> None:
    clock = Clock()
    policy = Backoff(initial=1.0, maximum=4.0, max_attempts=10, max_elapsed=None)
    calls, attempt = failing(3)
    told: list[tuple[int, float]] = []
    retry = Retry(policy, clock, clock.sleep, rng=lambda: 0.5)
    result = retry.run(attempt, on_retry=lambda n, d, _e: told.append((n, d)))  # type: ignore[arg-type]
    assert result == "done"
    assert len(calls) == 4
    assert clock.slept == [0.5, 1.0, 2.0]  # half of 1, 2, 4: the jitter draw scales the cap
    assert told == [(1, 0.5), (2, 1.0), (3, 2.0)]


def test_exhaustion_raises_the_callers_error_from_the_last_failure() -> None:
    clock = Clock()
    policy = Backoff(initial=1.0, maximum=1.0, max_attempts=2, max_elapsed=None)
    _calls, attempt = failing(10)
    retry = Retry(policy, clock, clock.sleep, rng=lambda: 1.0)
    with pytest.raises(RuntimeError, match="3 failures") as info:
        retry.run(attempt,  # type: ignore[arg-type]
                  give_up=lambda n, _elapsed, _last: RuntimeError(f"{n} failures"))
    assert str(info.value.__cause__) == "failure 3"


def test_default_exhaustion_names_the_count_and_keeps_the_cause() -> None:
    clock = Clock()
    policy = Backoff(initial=1.0, maximum=1.0, max_attempts=None, max_elapsed=2.5)
    _calls, attempt = failing(10)
    with pytest.raises(RetryExhausted) as info:
        Retry(policy, clock, clock.sleep, rng=lambda: 1.0).run(attempt)  # type: ignore[arg-type]
    assert info.value.failures == 4  # waits 1, 1, 0.5 (capped at max_elapsed), then over
    assert isinstance(info.value.__cause__, OSError)


def test_only_the_named_errors_are_retried() -> None:
    clock = Clock()
    _calls, attempt = failing(1, KeyError)
    with pytest.raises(KeyError):
        Retry(Backoff(), clock, clock.sleep).run(attempt, retry_on=OSError)  # type: ignore[arg-type]
    assert clock.slept == []


def test_interrupt_during_the_wait_stops_with_the_last_cause() -> None:
    clock = Clock()
    stop: list[bool] = []

    def sleep(delay: float) -> None:
        clock.sleep(delay)
        stop.append(True)  # the stop arrives while it waits

    calls, attempt = failing(10)
    retry = Retry(Backoff(initial=1.0), clock, sleep, interrupted=lambda: bool(stop))
    with pytest.raises(Interrupted) as info:
        retry.run(attempt)  # type: ignore[arg-type]
    assert len(calls) == 1
    assert str(info.value.__cause__) == "failure 1"


def test_run_async_awaits_an_async_sleep() -> None:
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    calls = 0

    async def attempt() -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise OSError("not yet")
        return calls

    retry = Retry(Backoff(initial=0.2, maximum=0.2), lambda: 0.0, sleep, rng=lambda: 1.0)
    assert asyncio.run(retry.run_async(attempt)) == 3
    assert slept == [0.2, 0.2]
