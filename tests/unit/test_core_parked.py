"""A parked message's headers read as untrusted input (``sac/sdk/_core/parked.py``), and the
listing's escaping (``sac dlq``): any value of any AMQP type in any ``x-sac-parked-*``
header, and any text, without a broker."""

from __future__ import annotations

import datetime
import decimal
import unicodedata
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sac.dlq import printable
from sac.sdk._core.parked import (
    LATEST_AT_MS,
    MAX_REPLAYS,
    ORDER_WINDOW,
    next_replay,
    parked_fields,
    to_take,
)

FIELDS = {"x-sac-parked-reason": "reason", "x-sac-parked-error": "error",
          "x-sac-parked-from": "origin", "x-sac-parked-attempts": "attempts",
          "x-sac-parked-at": "parked_at"}

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(),
    st.binary(), st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=st.just(datetime.UTC)))
amqp_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)
SHARED_CPU = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Two cores shared by many test runs: generating tables is slow, not wrong."""


def _valid(name: str, value: Any) -> bool:
    if name in ("x-sac-parked-reason", "x-sac-parked-error", "x-sac-parked-from"):
        return isinstance(value, str | bytes)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return False
    return name == "x-sac-parked-attempts" or value <= LATEST_AT_MS


@SHARED_CPU
@given(st.dictionaries(st.sampled_from(sorted(FIELDS)), amqp_values))
def test_every_header_value_reads_without_raising_and_only_its_own_field_is_invalid(
        headers: dict[str, Any]) -> None:
    fields = parked_fields(headers)
    assert set(fields.invalid) == {FIELDS[k] for k, v in headers.items() if not _valid(k, v)}
    if fields.parked_at_ms is not None:  # a time a datetime can show
        datetime.datetime.fromtimestamp(fields.parked_at_ms / 1000, datetime.UTC)
    assert isinstance(fields.reason, str)


def test_a_good_record_is_read_whole() -> None:
    fields = parked_fields({"x-sac-parked-reason": "Poison: x", "x-sac-parked-error": b"Poison",
                            "x-sac-parked-from": "orders", "x-sac-parked-attempts": 0,
                            "x-sac-parked-at": 1_700_000_000_000, "x-other": decimal.Decimal(1)})
    assert (fields.reason, fields.error, fields.origin, fields.attempts, fields.parked_at_ms,
            fields.invalid) == ("Poison: x", "Poison", "orders", 0, 1_700_000_000_000, ())


def test_a_broker_dead_letter_keeps_its_reason_when_ours_is_forged() -> None:
    assert parked_fields({"x-first-death-reason": "delivery_limit"}).invalid == ()
    fields = parked_fields({"x-sac-parked-reason": 5, "x-first-death-queue": "orders"})
    assert (fields.reason, fields.origin, fields.invalid) == (
        "unknown (x-sac-parked-reason is not text)", "orders", ("reason",))


def test_a_listing_takes_the_whole_queue_up_to_the_window() -> None:
    assert to_take(30, 5) == 30
    assert to_take(ORDER_WINDOW, 1) == ORDER_WINDOW
    assert to_take(ORDER_WINDOW + 1, 100) == 100
    assert to_take(50_000, 40_000) == 40_000
    assert to_take(0, 100) == 0


@SHARED_CPU
@given(amqp_values)
def test_a_replay_count_always_fits_an_amqp_integer(value: Any) -> None:
    assert 1 <= next_replay({"x-sac-replayed": value}) <= MAX_REPLAYS


def test_a_replay_count_counts_ours_and_restarts_a_forged_one() -> None:
    assert next_replay(None) == 1
    assert next_replay({"x-sac-replayed": 2}) == 3
    assert [next_replay({"x-sac-replayed": v}) for v in (2**63 - 1, -3, "7", True, 2.0)] == \
        [1, 1, 1, 1, 1]


@SHARED_CPU
@given(st.text())
def test_nothing_printed_drives_a_terminal(value: str) -> None:
    shown = printable(value, most=10**6)
    assert shown.isprintable()
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in shown)
    assert shown.encode("ascii", "backslashreplace").decode("unicode_escape") == value


def test_escapes_read_as_python_would_write_them() -> None:
    assert printable("a\x1b[2J\x9b\u202e\r\n\t\\b") == "a\\x1b[2J\\x9b\\u202e\\r\\n\\t\\\\b"
    assert printable("é ✓ 注文") == "é ✓ 注文"
    assert printable("x" * 5, most=3) == "xxx…"
