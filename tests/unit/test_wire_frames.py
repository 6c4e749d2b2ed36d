"""The publisher's own frame encoding (sac/sdk/_wire/frames.py) gives the bytes pika's marshalling
gives."""

from __future__ import annotations

import struct

import pika.frame
import pytest
from pika.spec import Basic, BasicProperties

from sac.sdk import ConfigurationError
from sac.sdk._wire.frames import PublishEncoder, encode_header, encode_id, encode_publish


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


@pytest.mark.parametrize("size", [0, 1, 4088, 4089, 10_000])
def test_encoder_frames_match_pika_and_count_what_they_add(size: int) -> None:
    """One message's frames as pika sends them (the body cut at ``body_max``), and the
    frame and byte counts the connection adds to pika's bookkeeping."""
    body_max = 4088
    encoder = PublishEncoder(5, body_max)
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    method = encode_publish("ex", "key", True)
    header = encode_header(size, encode_id("m-1"))
    out: list[bytes] = []
    frames, written = encoder.encode(out, method, header, body)
    props = BasicProperties(delivery_mode=2, message_id="m-1")
    theirs = [pika.frame.Method(5, Basic.Publish(exchange="ex", routing_key="key",
                                                 mandatory=True)).marshal(),
              pika.frame.Header(5, size, props).marshal()]
    theirs += [pika.frame.Body(5, body[at:at + body_max]).marshal()
               for at in range(0, size, body_max)]
    assert b"".join(out) == b"".join(theirs)
    assert (frames, written) == (len(theirs), sum(map(len, theirs)))
    again: list[bytes] = []
    assert encoder.encode(again, method, header, body) == (frames, written)  # cached method
    assert b"".join(again) == b"".join(theirs)


def test_encoder_refuses_a_frame_size_that_holds_no_body() -> None:
    with pytest.raises(ValueError, match="body_max"):
        PublishEncoder(1, 0)
