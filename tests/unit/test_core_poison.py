"""sac.sdk._core.poison: what happens to a message whose handler fails.

The retry-or-park decision (``after_failure``) and the longest a message can wait in
retries (``worst_case``); the headers a parked copy carries and the ones its replay sends
(``parking_headers``, ``replay_headers``); where a parked message came from and why
(``origin_of``, ``reason_of``); the ids given to messages published without one
(``MessageIdFrom``); and the budget of log lines per second (``LogBudget``).
"""

from __future__ import annotations

import random
import re
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sac.sdk._core.backoff import Backoff
from sac.sdk._core.poison import (
    AT_HEADER,
    ATTEMPTS_HEADER,
    BY_HEADER,
    ERROR_HEADER,
    MAX_REASON,
    QUEUE_HEADER,
    REASON_HEADER,
    REPLAYED_HEADER,
    LogBudget,
    MessageIdFrom,
    Park,
    Retry,
    after_failure,
    origin_of,
    parking_headers,
    reason_of,
    replay_headers,
    worst_case,
)

HANDLER_RETRY = Backoff(initial=0.5, maximum=8.0, max_attempts=4, max_elapsed=60.0)
NOW = 1_700_000_000.25

# Examples enough to run well under a second; no example database written into the tree.
CHECK = settings(max_examples=200, deadline=None, database=None)


class Boom(Exception):
    """A failure with a type name of its own."""


# ------------------------------------------------------------------- after_failure


@pytest.mark.parametrize("attempts", [1, 3, 10])
def test_permanent_failure_parks_at_once(attempts: int) -> None:
    step = after_failure(HANDLER_RETRY, attempts, elapsed=0.0, permanent=True,
                         rng=lambda: 0.5)
    assert step == Park(attempts=attempts)


def test_first_permanent_failure_parks_with_one_attempt() -> None:
    assert after_failure(HANDLER_RETRY, 1, elapsed=0.0, permanent=True) == Park(attempts=1)


def test_transient_failure_retries_with_the_next_attempt_number() -> None:
    step = after_failure(HANDLER_RETRY, 1, elapsed=0.0, permanent=False, rng=lambda: 0.5)
    assert step == Retry(delay=0.25, attempt=2)


@pytest.mark.parametrize(("attempts", "cap"), [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0)])
@pytest.mark.parametrize("draw", [0.0, 0.3, 0.999])
def test_retry_delay_is_the_cap_scaled_by_the_draw(attempts: int, cap: float,
                                                   draw: float) -> None:
    step = after_failure(HANDLER_RETRY, attempts, elapsed=0.0, permanent=False,
                         rng=lambda: draw)
    assert isinstance(step, Retry)
    assert step.delay == pytest.approx(cap * draw)
    assert step.attempt == attempts + 1


def test_retry_delays_stay_within_zero_and_the_cap() -> None:
    rng = random.Random(2024).random
    for attempts in range(1, 5):
        for _ in range(50):
            step = after_failure(HANDLER_RETRY, attempts, elapsed=0.0, permanent=False,
                                 rng=rng)
            assert isinstance(step, Retry)
            assert 0.0 <= step.delay <= HANDLER_RETRY.cap(attempts) <= HANDLER_RETRY.maximum


def test_failures_one_to_four_retry_and_the_fifth_parks() -> None:
    steps = [after_failure(HANDLER_RETRY, n, elapsed=0.0, permanent=False, rng=lambda: 1.0)
             for n in range(1, 7)]
    assert steps[:4] == [Retry(delay=0.5, attempt=2), Retry(delay=1.0, attempt=3),
                         Retry(delay=2.0, attempt=4), Retry(delay=4.0, attempt=5)]
    assert steps[4:] == [Park(attempts=5), Park(attempts=6)]


def test_a_failing_message_runs_max_attempts_plus_one_times() -> None:
    """The loop a consumer runs: the handler fails every time; it is parked after the
    first run and ``max_attempts`` retries."""
    attempts, elapsed, runs = 1, 0.0, 1
    while True:
        step = after_failure(HANDLER_RETRY, attempts, elapsed, permanent=False,
                             rng=lambda: 0.5)
        if isinstance(step, Park):
            break
        elapsed += step.delay
        attempts = step.attempt
        runs += 1
    assert step == Park(attempts=5)
    assert runs == 5
    assert elapsed == pytest.approx((0.5 + 1 + 2 + 4) / 2)


@pytest.mark.parametrize("elapsed", [60.0, 60.001, 3600.0])
def test_parks_once_max_elapsed_is_passed(elapsed: float) -> None:
    step = after_failure(HANDLER_RETRY, 2, elapsed, permanent=False, rng=lambda: 0.5)
    assert step == Park(attempts=2)


def test_retry_delay_never_overshoots_max_elapsed() -> None:
    step = after_failure(HANDLER_RETRY, 4, elapsed=59.0, permanent=False, rng=lambda: 1.0)
    assert isinstance(step, Retry)
    assert step.delay == pytest.approx(1.0)


def test_time_only_policy_retries_until_max_elapsed() -> None:
    policy = Backoff(initial=1.0, maximum=1.0, max_attempts=None, max_elapsed=10.0)
    assert isinstance(after_failure(policy, 500, 9.5, permanent=False, rng=lambda: 1.0), Retry)
    assert (after_failure(policy, 500, 10.0, permanent=False, rng=lambda: 1.0)
            == Park(attempts=500))


def test_without_an_rng_the_delay_is_still_within_the_cap() -> None:
    step = after_failure(HANDLER_RETRY, 3, elapsed=0.0, permanent=False)
    assert isinstance(step, Retry)
    assert 0.0 <= step.delay <= 2.0
    assert step.attempt == 4


# ------------------------------------------------------------------- worst_case


def test_worst_case_of_the_handler_policy_is_the_sum_of_its_caps() -> None:
    assert worst_case(HANDLER_RETRY) == pytest.approx(0.5 + 1 + 2 + 4)


def test_worst_case_counts_the_maximum_for_late_attempts() -> None:
    policy = Backoff(initial=1.0, maximum=3.0, max_attempts=5, max_elapsed=None)
    assert worst_case(policy) == pytest.approx(1 + 2 + 3 + 3 + 3)


def test_worst_case_is_capped_by_max_elapsed() -> None:
    policy = Backoff(initial=1.0, maximum=10.0, max_attempts=20, max_elapsed=30.0)
    assert worst_case(policy) == 30.0


def test_worst_case_of_a_time_only_policy_is_max_elapsed() -> None:
    policy = Backoff(initial=0.1, maximum=5.0, max_attempts=None, max_elapsed=42.0)
    assert worst_case(policy) == 42.0


@st.composite
def policies(draw: st.DrawFn) -> Backoff:
    """Valid policies small enough to run out in at most a few thousand steps."""
    initial = draw(st.floats(0.05, 10.0), label="initial")
    maximum = initial * draw(st.floats(1.0, 50.0), label="maximum / initial")
    multiplier = draw(st.floats(1.0, 10.0), label="multiplier")
    max_attempts = draw(st.none() | st.integers(1, 60), label="max_attempts")
    max_elapsed = draw(st.floats(0.01, 200.0) if max_attempts is None
                       else st.none() | st.floats(0.01, 200.0), label="max_elapsed")
    return Backoff(initial=initial, maximum=maximum, multiplier=multiplier,
                   max_attempts=max_attempts, max_elapsed=max_elapsed)


@CHECK
@given(policy=policies())
def test_delays_drawn_never_exceed_the_worst_case(policy: Backoff) -> None:
    """Every draw at its largest (rng 1.0), the clock advanced by each delay: the total
    wait before the message is parked is at most ``worst_case``. (When ``max_elapsed``
    cuts the last delay, ``max_elapsed - elapsed`` and the running sum are both rounded,
    and the total can come out one ulp above ``max_elapsed``: hence the 1e-12 slack.)"""
    attempts, elapsed, total = 1, 0.0, 0.0
    for _ in range(10_000):
        step = after_failure(policy, attempts, elapsed, permanent=False, rng=lambda: 1.0)
        if isinstance(step, Park):
            break
        assert step.delay >= 0.0
        total += step.delay
        elapsed += step.delay
        attempts = step.attempt
    else:
        pytest.fail(f"{policy} never parked")
    assert step == Park(attempts=attempts)
    assert total <= worst_case(policy) * (1 + 1e-12)
    if policy.max_attempts is not None:
        assert attempts <= policy.max_attempts + 1


# ------------------------------------------------------------------- parking_headers


def test_parking_headers_keep_the_original_ones_and_say_why() -> None:
    original = {"x-order-id": "o-1", "x-sac-retransmit": 1}
    headers = parking_headers(original, Boom("the handler broke"), "orders", 5,
                              "billing-1", now=NOW)
    assert headers == {
        "x-order-id": "o-1",
        "x-sac-retransmit": 1,
        REASON_HEADER: "Boom: the handler broke",
        ERROR_HEADER: "Boom",
        QUEUE_HEADER: "orders",
        ATTEMPTS_HEADER: 5,
        AT_HEADER: 1_700_000_000_250,
        BY_HEADER: "billing-1",
    }


def test_parking_headers_do_not_change_the_original() -> None:
    original = {"x-order-id": "o-1"}
    parking_headers(original, ValueError("bad"), "orders", 1, "c", now=NOW)
    assert original == {"x-order-id": "o-1"}


@pytest.mark.parametrize("consumer", [None, ""])
def test_parked_by_only_when_the_consumer_has_a_name(consumer: str | None) -> None:
    headers = parking_headers(None, ValueError("bad"), "orders", 1, consumer, now=NOW)
    assert BY_HEADER not in headers
    assert headers[QUEUE_HEADER] == "orders"


def test_parked_at_is_unix_time_in_milliseconds() -> None:
    headers = parking_headers({}, ValueError("bad"), "q", 1, None, now=12.3456)
    assert headers[AT_HEADER] == 12_345
    assert isinstance(headers[AT_HEADER], int)


def test_parked_at_defaults_to_now() -> None:
    before = int(time.time() * 1000)
    headers = parking_headers({}, ValueError("bad"), "q", 1, None)
    assert before <= headers[AT_HEADER] <= int(time.time() * 1000)


def test_a_long_reason_is_cut_to_max_reason() -> None:
    headers = parking_headers({}, ValueError("x" * 5000), "q", 1, None, now=NOW)
    reason = headers[REASON_HEADER]
    assert len(reason) == MAX_REASON
    assert reason.startswith("ValueError: xxx")
    assert reason.endswith("…")


def test_a_reason_of_exactly_max_reason_is_kept_whole() -> None:
    text = "y" * (MAX_REASON - len("ValueError: "))
    headers = parking_headers({}, ValueError(text), "q", 1, None, now=NOW)
    assert headers[REASON_HEADER] == f"ValueError: {text}"


def test_an_exception_without_text_gives_its_type_name() -> None:
    headers = parking_headers({}, Boom(), "q", 1, None, now=NOW)
    assert headers[REASON_HEADER] == "Boom"
    assert headers[ERROR_HEADER] == "Boom"


# ------------------------------------------------------------------- replay_headers


PARKED = {
    "x-order-id": "o-1",
    "x-sac-retransmit": 2,
    REPLAYED_HEADER: 1,
    REASON_HEADER: "Boom: broke",
    ERROR_HEADER: "Boom",
    QUEUE_HEADER: "orders",
    ATTEMPTS_HEADER: 5,
    AT_HEADER: 1_700_000_000_250,
    BY_HEADER: "billing-1",
    "x-sac-parked-something-new": "later versions may add more",
    "x-death": [{"queue": "orders", "reason": "delivery_limit", "count": 1}],
    "x-first-death-exchange": "",
    "x-first-death-queue": "orders",
    "x-first-death-reason": "delivery_limit",
    "x-delivery-count": 20,
}


def test_replay_keeps_only_what_the_message_had_before_it_failed() -> None:
    assert replay_headers(PARKED) == {
        "x-order-id": "o-1",
        "x-sac-retransmit": 2,
        REPLAYED_HEADER: 1,
    }


def test_replay_does_not_change_its_input() -> None:
    before = dict(PARKED)
    replay_headers(PARKED)
    assert before == PARKED


def test_replay_of_parking_headers_gives_back_the_original() -> None:
    original = {"x-order-id": "o-1", "x-sac-retransmit": 1}
    parked = parking_headers(original, Boom("broke"), "orders", 5, "billing-1", now=NOW)
    assert replay_headers(parked) == original


@pytest.mark.parametrize("parked", [None, {}])
def test_replay_of_no_headers_is_empty(parked: dict[str, Any] | None) -> None:
    assert replay_headers(parked) == {}


# ------------------------------------------------------------------- origin_of / reason_of


def test_origin_is_our_header_first() -> None:
    assert origin_of({QUEUE_HEADER: "orders", "x-first-death-queue": "other"}) == "orders"


def test_origin_falls_back_to_the_brokers_dead_letter_record() -> None:
    assert origin_of({"x-first-death-queue": "orders"}) == "orders"
    assert origin_of({QUEUE_HEADER: "", "x-first-death-queue": "orders"}) == "orders"


def test_origin_decodes_bytes() -> None:
    assert origin_of({QUEUE_HEADER: b"orders"}) == "orders"
    assert origin_of({"x-first-death-queue": "caf\u00e9".encode()}) == "caf\u00e9"


@pytest.mark.parametrize("headers", [None, {}, {"x-order-id": "o-1"}, {QUEUE_HEADER: ""},
                                     {QUEUE_HEADER: 7}])
def test_origin_unknown_is_none(headers: dict[str, Any] | None) -> None:
    assert origin_of(headers) is None


def test_reason_is_our_header_first() -> None:
    headers = {REASON_HEADER: "Boom: broke", "x-first-death-reason": "delivery_limit"}
    assert reason_of(headers) == "Boom: broke"


def test_reason_decodes_bytes() -> None:
    assert reason_of({REASON_HEADER: b"Boom: broke"}) == "Boom: broke"


@pytest.mark.parametrize("value", ["delivery_limit", b"delivery_limit"])
def test_reason_of_a_delivery_limit_dead_letter_says_so(value: str | bytes) -> None:
    reason = reason_of({"x-first-death-reason": value})
    assert "delivery limit" in reason
    assert "broker" in reason


@pytest.mark.parametrize("value", ["rejected", b"rejected"])
def test_reason_of_another_dead_letter_names_the_brokers_reason(value: str | bytes) -> None:
    assert reason_of({"x-first-death-reason": value}) == "dead-lettered by the broker: rejected"


@pytest.mark.parametrize("headers", [None, {}, {"x-order-id": "o-1"},
                                     {"x-first-death-reason": ""}])
def test_reason_unknown_says_unknown(headers: dict[str, Any] | None) -> None:
    assert "unknown" in reason_of(headers)


# ------------------------------------------------------------------- MessageIdFrom


HEX40 = re.compile(r"sha256:[0-9a-f]{40}")


@pytest.mark.parametrize(("value", "expected"), [
    ("o-1", "o-1"),
    (b"o-1", "o-1"),
    ("caf\u00e9".encode(), "caf\u00e9"),
    (42, "42"),
])
def test_header_id_is_the_headers_value_as_text(value: Any, expected: str) -> None:
    source = MessageIdFrom.header("x-order-id")
    assert source.derive(b"body", {"x-order-id": value, "other": "x"}) == expected


@pytest.mark.parametrize("headers", [None, {}, {"other": "o-1"}, {"x-order-id": None},
                                     {"x-order-id": ""}, {"x-order-id": b""}])
def test_header_id_missing_or_empty_is_none(headers: dict[str, Any] | None) -> None:
    assert MessageIdFrom.header("x-order-id").derive(b"body", headers) is None


def test_header_id_ignores_the_body() -> None:
    source = MessageIdFrom.header("x-order-id")
    assert source.derive(b"a", {"x-order-id": "o-1"}) == source.derive(b"b", {"x-order-id": "o-1"})


def test_content_id_is_a_short_sha256() -> None:
    value = MessageIdFrom.content().derive(b"body", None)
    assert value is not None
    assert HEX40.fullmatch(value)


def test_content_id_is_equal_for_equal_bodies_and_different_for_different_ones() -> None:
    source = MessageIdFrom.content()
    assert source.derive(b"body", {}) == source.derive(b"body", {"x-other": "ignored"})
    assert source.derive(b"body", {}) != source.derive(b"body!", {})
    assert source.derive(b"", {}) != source.derive(b"\0", {})


def test_content_id_depends_on_the_named_headers_only() -> None:
    source = MessageIdFrom.content(headers=["a"])
    base = source.derive(b"body", {"a": "1", "b": "1"})
    assert source.derive(b"body", {"a": "2", "b": "1"}) != base
    assert source.derive(b"body", {"a": "1", "b": "2"}) == base
    assert source.derive(b"body", {"a": "1"}) == base


def test_content_id_tells_an_empty_header_from_a_missing_one() -> None:
    source = MessageIdFrom.content(headers=["a"])
    empty = source.derive(b"body", {"a": ""})
    assert empty != source.derive(b"body", {})
    assert source.derive(b"body", {}) == source.derive(b"body", None)


def test_content_id_tells_which_named_header_holds_a_value() -> None:
    source = MessageIdFrom.content(headers=["a", "b"])
    assert source.derive(b"body", {"a": "1"}) != source.derive(b"body", {"b": "1"})


def test_content_id_without_named_headers_differs_from_one_with() -> None:
    plain = MessageIdFrom.content().derive(b"body", {"a": "1"})
    assert plain != MessageIdFrom.content(headers=["a"]).derive(b"body", {"a": "1"})


def test_content_id_does_not_mix_a_header_value_with_the_body() -> None:
    source = MessageIdFrom.content(headers=["a"])
    assert source.derive(b"\0tail", {"a": b"v"}) != source.derive(b"tail", {"a": b"v\0"})


@CHECK
@given(body=st.binary(max_size=64), a=st.none() | st.binary(max_size=8),
       b=st.none() | st.binary(max_size=8))
def test_content_id_is_a_function_of_body_and_named_headers(
    body: bytes, a: bytes | None, b: bytes | None,
) -> None:
    source = MessageIdFrom.content(headers=["a", "b"])
    headers = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
    value = source.derive(body, {**headers, "c": body})
    assert value is not None
    assert HEX40.fullmatch(value)
    assert value == source.derive(body, headers)


def test_message_id_from_needs_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="MessageIdFrom"):
        MessageIdFrom()
    with pytest.raises(ValueError, match="MessageIdFrom"):
        MessageIdFrom(header_name="x-order-id", body=True)


def test_message_id_from_header_needs_a_name() -> None:
    with pytest.raises(ValueError, match="header name"):
        MessageIdFrom.header("")


def test_message_id_from_compares_by_value() -> None:
    assert MessageIdFrom.header("x") == MessageIdFrom.header("x")
    assert MessageIdFrom.content(headers=["a"]) == MessageIdFrom.content(headers=("a",))
    assert MessageIdFrom.content(headers=["a"]) != MessageIdFrom.content()


# ------------------------------------------------------------------- LogBudget


def test_a_burst_of_lines_passes_then_the_rest_are_counted() -> None:
    budget = LogBudget(rate=5, burst=20)
    assert [budget.allow(100.0) for _ in range(20)] == [(True, 0)] * 20
    assert [budget.allow(100.0) for _ in range(7)] == [(False, 0)] * 7
    assert budget.suppressed == 7


def test_after_a_second_rate_lines_pass_and_the_first_says_how_many_were_held() -> None:
    budget = LogBudget(rate=5, burst=20)
    for _ in range(20):
        budget.allow(100.0)
    for _ in range(7):
        budget.allow(100.0)
    assert [budget.allow(101.0) for _ in range(6)] == [
        (True, 7), (True, 0), (True, 0), (True, 0), (True, 0), (False, 0)]
    assert budget.suppressed == 1


def test_the_held_count_resets_once_said() -> None:
    budget = LogBudget(rate=5, burst=20)
    for _ in range(23):
        budget.allow(0.0)
    assert budget.allow(1.0) == (True, 3)
    assert budget.suppressed == 0
    assert budget.allow(1.0) == (True, 0)


def test_tokens_never_exceed_the_burst_after_a_long_pause() -> None:
    budget = LogBudget(rate=5, burst=20)
    budget.allow(0.0)
    passed = [budget.allow(3600.0)[0] for _ in range(30)]
    assert passed == [True] * 20 + [False] * 10


def test_lines_slower_than_the_rate_always_pass() -> None:
    budget = LogBudget(rate=5, burst=20)
    for _ in range(20):
        budget.allow(0.0)
    results = [budget.allow(0.25 * n) for n in range(1, 201)]
    assert all(ok for ok, _ in results)
    assert budget.suppressed == 0
