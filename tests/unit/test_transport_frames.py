"""The publisher's own frame encoding gives the bytes pika's marshalling gives."""

from __future__ import annotations

import struct

import pika.frame
import pytest
from pika.spec import Basic, BasicProperties

from sac.sdk import ConfigurationError
from sac.sdk._transport import encode_header, encode_id, encode_publish


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


@pytest.mark.parametrize(("exchange", "key", "mandatory"),
                         [("", "orders", True), ("ex", "a.b", False), ("", "", True)])
def test_publish_method_matches_pika(exchange: str, key: str, mandatory: bool) -> None:
    ours = frame(1, 7, encode_publish(exchange, key, mandatory))
    theirs = pika.frame.Method(7, Basic.Publish(
        exchange=exchange, routing_key=key, mandatory=mandatory)).marshal()
    assert ours == theirs


@pytest.mark.parametrize("extra", [
    {},
    {"headers": {"x-sac-retransmit": 1}},
    {"content_type": "application/json", "correlation_id": "c-1"},
])
@pytest.mark.parametrize("size", [0, 256, 200_000])
def test_content_header_matches_pika(extra: dict[str, object], size: int) -> None:
    ours = frame(2, 3, encode_header(size, encode_id("01a2-id"), **extra))  # type: ignore[arg-type]
    props = BasicProperties(delivery_mode=2, message_id="01a2-id", **extra)  # type: ignore[arg-type]
    assert ours == pika.frame.Header(3, size, props).marshal()


def test_what_amqp_cannot_carry_is_refused_before_sending() -> None:
    with pytest.raises(ConfigurationError, match="255"):
        encode_id("x" * 256)
    with pytest.raises(ConfigurationError, match="255"):
        encode_publish("", "k" * 256, True)
    with pytest.raises(ConfigurationError, match="cannot be encoded"):
        encode_header(1, b"id", headers={"bad": object()})
