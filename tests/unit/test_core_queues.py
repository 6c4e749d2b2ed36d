"""sac.sdk._core.queues: reading RabbitMQ's "inequivalent arg" texts."""

from __future__ import annotations

import pytest

from sac.sdk._core.queues import Inequivalent, parse_inequivalent


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
