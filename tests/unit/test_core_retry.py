"""The one retry value: bounded, jittered, interruptible, and the cause is never lost."""

from __future__ import annotations

import asyncio

import pytest

from sac.sdk._core.attempts import Attempts
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


def test_steps_yield_each_delay_for_a_driver_that_lets_time_pass() -> None:
    """The simulator's way in: nothing sleeps, the driver moves the clock between steps."""
    clock = Clock()
    calls, attempt = failing(2)
    steps = Retry(Backoff(initial=1.0, maximum=4.0), clock, clock.sleep,
                  rng=lambda: 1.0).steps(attempt)  # type: ignore[arg-type]
    assert next(steps) == 1.0
    assert len(calls) == 1
    assert clock.slept == []  # the wait is the driver's
    clock.now += 1.0
    assert next(steps) == 2.0
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value == "done"
    assert len(calls) == 3


def test_steps_end_with_the_same_errors_as_run() -> None:
    clock = Clock()
    _calls, attempt = failing(10)
    retry = Retry(Backoff(initial=1.0, maximum=1.0, max_attempts=1, max_elapsed=None), clock,
                  clock.sleep, rng=lambda: 1.0)
    steps = retry.steps(attempt, give_up=lambda n, _e, _l: RuntimeError(f"{n}"))  # type: ignore[arg-type]
    assert next(steps) == 1.0
    with pytest.raises(RuntimeError, match="2") as info:
        next(steps)
    assert str(info.value.__cause__) == "failure 2"


class Refused(OSError):
    """A failure of the retried kind that no retry cures (like refused credentials)."""


def _async(attempt: object) -> object:
    async def wrapped() -> object:
        return attempt()  # type: ignore[operator]

    return wrapped


def test_a_permanent_failure_is_raised_at_once_though_it_is_of_a_retried_kind() -> None:
    clock = Clock()
    _calls, attempt = failing(5, Refused)
    retry = Retry(Backoff(), clock, clock.sleep)
    with pytest.raises(Refused, match="failure 1"):
        retry.run(attempt, retry_on=OSError, permanent=Refused)  # type: ignore[arg-type]
    assert clock.slept == []
    with pytest.raises(Refused, match="failure 1"):
        asyncio.run(retry.run_async(_async(failing(5, Refused)[1]), retry_on=OSError,
                                    permanent=Refused))
    assert clock.slept == []


def test_a_first_connect_tries_each_node_once_then_gives_up_with_every_cause() -> None:
    clock = Clock()
    plan = Attempts(["a:1", "b:1", "c:1"], start=1, policy=Backoff(), retry=False)
    tried: list[str] = []

    def attempt() -> str:
        tried.append(plan.nodes[plan.index])
        plan.record("refused")
        raise OSError("refused")

    retry = Retry(plan.delays, clock, clock.sleep)
    with pytest.raises(RuntimeError, match="3 attempt") as info:
        retry.run(attempt, give_up=lambda *_: RuntimeError(plan.summary(0.0)))
    assert tried == ["b:1", "c:1", "a:1"]
    assert clock.slept == [0.0, 0.0]
    assert isinstance(info.value.__cause__, OSError)
