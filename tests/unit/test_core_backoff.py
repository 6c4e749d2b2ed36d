"""sac.sdk._core.backoff: bounded exponential backoff with full jitter."""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest

from sac.sdk._core.backoff import Backoff


def test_caps_grow_exponentially_up_to_maximum() -> None:
    policy = Backoff(initial=0.1, maximum=5.0, multiplier=2.0)
    caps = [policy.cap(n) for n in range(1, 10)]
    assert caps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])


def test_multiplier_one_keeps_the_cap_constant() -> None:
    policy = Backoff(initial=0.5, maximum=5.0, multiplier=1.0)
    assert {policy.cap(n) for n in (1, 2, 50, 10_000)} == {0.5}


@pytest.mark.parametrize("multiplier", [2.0, 1e6])
def test_cap_of_a_very_late_attempt_is_the_maximum(multiplier: float) -> None:
    policy = Backoff(initial=0.1, maximum=7.0, multiplier=multiplier, max_attempts=None)
    assert policy.cap(60) == 7.0
    assert policy.cap(10**9) == 7.0
    assert policy.delay(10**9, elapsed=0.0, rng=lambda: 0.5) == pytest.approx(3.5)


@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 8, 20])
def test_delay_is_the_cap_scaled_by_the_random_draw(attempt: int) -> None:
    policy = Backoff(initial=0.1, maximum=5.0, max_elapsed=None)
    assert policy.delay(attempt, elapsed=0.0, rng=lambda: 0.0) == 0.0
    assert policy.delay(attempt, elapsed=0.0, rng=lambda: 0.25) == pytest.approx(
        policy.cap(attempt) * 0.25
    )
    almost_one = policy.delay(attempt, elapsed=0.0, rng=lambda: 0.999999)
    assert almost_one is not None
    assert almost_one <= policy.cap(attempt)


def test_delays_stay_within_zero_and_cap() -> None:
    policy = Backoff(initial=0.05, maximum=2.0, multiplier=3.0, max_attempts=30, max_elapsed=None)
    rng = random.Random(1234).random
    for attempt in range(1, 31):
        for _ in range(50):
            wait = policy.delay(attempt, elapsed=0.0, rng=rng)
            assert wait is not None
            assert 0.0 <= wait <= policy.cap(attempt) <= 2.0


def test_full_jitter_spreads_the_delays() -> None:
    policy = Backoff(initial=1.0, maximum=1.0, max_elapsed=None)
    rng = random.Random(7).random
    waits = [policy.delay(1, elapsed=0.0, rng=rng) for _ in range(200)]
    assert len(set(waits)) == 200
    assert min(w for w in waits if w is not None) < 0.1
    assert max(w for w in waits if w is not None) > 0.9


def test_exhausted_after_max_attempts() -> None:
    policy = Backoff(max_attempts=3, max_elapsed=None)
    assert [policy.delay(n, elapsed=0.0, rng=lambda: 0.5) is None for n in (1, 2, 3, 4, 5)] == [
        False,
        False,
        False,
        True,
        True,
    ]


@pytest.mark.parametrize("elapsed", [10.0, 10.5, 1000.0])
def test_exhausted_once_max_elapsed_is_reached(elapsed: float) -> None:
    policy = Backoff(max_attempts=None, max_elapsed=10.0)
    assert policy.delay(2, elapsed=elapsed, rng=lambda: 0.5) is None


@pytest.mark.parametrize("elapsed", [0.0, 5.0, 9.0, 9.99])
def test_delay_never_overshoots_max_elapsed(elapsed: float) -> None:
    policy = Backoff(initial=4.0, maximum=4.0, max_attempts=None, max_elapsed=10.0)
    wait = policy.delay(1, elapsed=elapsed, rng=lambda: 0.999)
    assert wait is not None
    assert wait > 0.0
    assert elapsed + wait <= 10.0
    assert wait == pytest.approx(min(4.0 * 0.999, 10.0 - elapsed))


def test_both_bounds_apply_whichever_comes_first() -> None:
    policy = Backoff(max_attempts=5, max_elapsed=10.0)
    assert policy.delay(6, elapsed=0.0, rng=lambda: 0.5) is None
    assert policy.delay(2, elapsed=10.0, rng=lambda: 0.5) is None
    assert policy.delay(5, elapsed=9.0, rng=lambda: 0.5) is not None


@pytest.mark.parametrize(
    ("attempt", "elapsed", "exhausted"),
    [(5, 9.0, False), (6, 0.0, True), (1, 10.0, True), (1, 0.0, False)],
)
def test_exhausted_says_what_delay_would_refuse(
    attempt: int, elapsed: float, exhausted: bool
) -> None:
    policy = Backoff(max_attempts=5, max_elapsed=10.0)
    assert policy.exhausted(attempt, elapsed) is exhausted
    assert (policy.delay(attempt, elapsed, rng=lambda: 0.5) is None) is exhausted


def test_default_policy_is_bounded_and_uses_random() -> None:
    policy = Backoff()
    wait = policy.delay(1, elapsed=0.0)
    assert wait is not None
    assert 0.0 <= wait <= policy.initial
    assert policy.max_attempts is not None
    assert policy.delay(policy.max_attempts + 1, elapsed=0.0) is None


def test_unbounded_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="bounded"):
        Backoff(max_attempts=None, max_elapsed=None)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"initial": 0}, "initial"),
        ({"initial": -1.0}, "initial"),
        ({"maximum": 0}, "maximum"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_elapsed": -5.0}, "max_elapsed"),
        ({"initial": 2.0, "maximum": 1.0}, "maximum"),
    ],
)
def test_bad_values_are_refused(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Backoff(**kwargs)


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempts_count_from_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="from 1"):
        Backoff().delay(attempt, elapsed=0.0, rng=lambda: 0.5)


def test_policy_is_frozen() -> None:
    policy = Backoff()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.initial = 1.0  # type: ignore[misc]
    assert attrs.evolve(policy, initial=1.0).initial == 1.0
