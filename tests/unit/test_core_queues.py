"""sac.sdk._core.queues: reading RabbitMQ's "inequivalent arg" texts; the broker's version,
and the arguments that adapt to it."""

from __future__ import annotations

import pytest

from sac.sdk._core.queues import (
    BrokerVersion,
    Inequivalent,
    consume_arguments,
    delivery_limit_argument,
    parse_inequivalent,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q1' in vhost '/': "
            "received the value 'quorum' of type 'longstr' but current is none",
            Inequivalent("x-queue-type", "q1", received="quorum", current=None),
            id="typed-vs-none",
        ),
        pytest.param(
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q2' in vhost '/': "
            "received 'true' but current is 'false'",
            Inequivalent("durable", "q2", received="true", current="false"),
            id="untyped-both",
        ),
        pytest.param(
            "PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue 'q3' in vhost "
            "'v': received the value '5' of type 'signedint' but current is the value '3' of "
            "type 'signedint'",
            Inequivalent("x-delivery-limit", "q3", received="5", current="3"),
            id="typed-both",
        ),
        pytest.param(
            "PRECONDITION_FAILED - inequivalent arg 'x-single-active-consumer' for queue "
            "'orders.v2' in vhost 'prod': received none but current is the value 'true' of "
            "type 'bool'",
            Inequivalent("x-single-active-consumer", "orders.v2", received=None, current="true"),
            id="none-vs-typed",
        ),
    ],
)
def test_parses_real_broker_texts(text: str, expected: Inequivalent) -> None:
    assert parse_inequivalent(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "NOT_FOUND - no queue 'q1' in vhost '/'",
        "PRECONDITION_FAILED - unknown delivery tag 42",
        "ACCESS_REFUSED - queue 'amq.x' in vhost '/' not found",
        "",
    ],
)
def test_unrelated_text_is_none(text: str) -> None:
    assert parse_inequivalent(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4.0.5", BrokerVersion(4, 0, 5)), (b"3.10.8", BrokerVersion(3, 10, 8)),
     ("4.1", BrokerVersion(4, 1, 0)), ("4.2.0-beta.1", BrokerVersion(4, 2, 0)),
     ("", None), (None, None), ("unknown", None), (405, None)],
)
def test_the_broker_version_from_connection_start(text: object,
                                                  expected: BrokerVersion | None) -> None:
    assert BrokerVersion.parse(text) == expected


def test_ha_failover_cancel_only_for_a_classic_queue_on_3_x() -> None:
    """4.0 removed mirrored queues: the argument is accepted there and means nothing."""
    v3, v4 = BrokerVersion(3, 10, 8), BrokerVersion(4, 0, 5)
    assert consume_arguments("classic", v3, None) == {"x-cancel-on-ha-failover": True}
    assert consume_arguments("classic", None, None) == {"x-cancel-on-ha-failover": True}
    assert consume_arguments("classic", v4, None) is None
    assert consume_arguments("quorum", v3, None) is None
    assert consume_arguments("quorum", v4, 10) == {"x-priority": 10}
    assert consume_arguments("classic", v3, 0) == {"x-cancel-on-ha-failover": True,
                                                   "x-priority": 0}


def test_no_delivery_limit_is_declared_as_each_series_reads_it() -> None:
    assert delivery_limit_argument(-1, BrokerVersion(4, 0, 5)) == -1
    assert delivery_limit_argument(-1, BrokerVersion(3, 10, 8)) is None
    assert delivery_limit_argument(-1, None) == -1
    assert delivery_limit_argument(20, BrokerVersion(3, 10, 8)) == 20
    assert delivery_limit_argument(None, BrokerVersion(4, 0, 5)) is None
