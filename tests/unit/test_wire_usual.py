"""The usual delivery's short path (``InboundDeliveries._usual``) decodes what the general
one (``_delivery``) decodes, and what pika decodes.

A consumer of this project's own messages sees almost only deliveries of one shape (one
consumer on the connection, a persistent message with a message id and nothing else, a body
in one frame), so those skip most of the general decoding. Two things keep the shortcut
honest: on any bytes at all, a delivery it takes is one the general path takes the same way
(it may only decline, never differ), and streams of such deliveries, cut anywhere, reach the
callback exactly as pika assembles them (the differential harness of
``test_wire_deliveries.py``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pika.spec import BasicProperties

from sac.sdk._wire.deliveries import InboundDeliveries
from tests.unit.test_wire_deliveries import (
    BIG_FRAME_MAX,
    Delivery,
    Harness,
    chunkings,
    pika_reference,
)

CHANNEL, TAG = 1, "sac-1-7f3a2b"
CHECK = settings(max_examples=300, deadline=None, database=None)

message_ids = st.one_of(
    st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255),
    st.binary(max_size=40),  # pika gives a non-UTF-8 id as bytes
)
usual_props = st.builds(
    lambda mode, message_id: BasicProperties(delivery_mode=mode, message_id=message_id),
    st.sampled_from([1, 2]), message_ids)
other_props = st.one_of(
    usual_props,
    st.builds(lambda m: BasicProperties(message_id=m), message_ids),  # no delivery mode
    st.builds(lambda m: BasicProperties(delivery_mode=2, message_id=m, content_type="a/b"),
              message_ids),
    st.builds(lambda m: BasicProperties(delivery_mode=2, message_id=m, headers={"k": 1}),
              message_ids),
)


@st.composite
def our_deliveries(draw: st.DrawFn) -> Delivery:
    return Delivery(
        channel=draw(st.sampled_from([CHANNEL, CHANNEL, CHANNEL, 2])),
        consumer_tag=draw(st.sampled_from([TAG, TAG, TAG, "other"])),
        delivery_tag=draw(st.integers(0, 2**64 - 1)),
        redelivered=draw(st.booleans()),
        exchange=draw(st.sampled_from(["", "ex"])),
        routing_key=draw(st.sampled_from(["q", "orders.é"])),
        props=draw(st.one_of(usual_props, usual_props, other_props)),
        body=draw(st.sampled_from([b"", b"x", b"y" * 256, b"z" * 5000])),
        fragment=draw(st.sampled_from([4088, 4088, 100])),
    )


def _taken_usually(inbound: InboundDeliveries) -> list[int]:
    """Counts the deliveries the short path takes (wraps the instance's method)."""
    taken = [0]
    usual = inbound._usual

    def counting(*args: Any) -> Any:
        result = usual(*args)
        taken[0] += result is not None
        return result

    inbound._usual = counting  # type: ignore[method-assign]
    return taken


@CHECK
@given(events=st.lists(our_deliveries(), min_size=1, max_size=15), data=st.data())
def test_streams_of_usual_deliveries_reach_the_callback_as_pika_assembles_them(
    events: list[Delivery], data: st.DataObject,
) -> None:
    stream = b"".join(d.wire() for d in events)
    harness = Harness([(CHANNEL, TAG)], BIG_FRAME_MAX)
    harness.feed(data.draw(chunkings(stream), label="chunks"))
    expected = pika_reference(stream, [(CHANNEL, TAG)])
    harness.check(expected)
    harness.check_prompt(expected)


@CHECK
@given(delivery=our_deliveries(), at=st.integers(0, 400), value=st.integers(0, 255),
       cut=st.integers(0, 400))
def test_what_the_short_path_takes_the_general_path_takes_alike(
    delivery: Delivery, at: int, value: int, cut: int,
) -> None:
    """Any one byte changed and the stream cut anywhere: the short path declines, or gives
    exactly what the general path gives."""
    inbound = InboundDeliveries(lambda _frames: None, BIG_FRAME_MAX)
    inbound.register(CHANNEL, TAG, lambda *_args: None)
    good = delivery.wire()
    inbound.feed(good)  # the exchange and routing key are known from now on
    data = bytearray(good)
    if at < len(data):
        data[at] = value
    stream = bytes(data[:len(data) - cut % (len(data) + 1)])
    if len(stream) < 7:
        return
    method_end = 8 + int.from_bytes(stream[3:7], "big")
    channel = int.from_bytes(stream[1:3], "big")
    if method_end > len(stream):
        return
    usual = inbound._usual(stream, 0, method_end, channel, len(stream))
    if usual is not None:
        assert usual == inbound._delivery(stream, 0, method_end, channel, len(stream))


def test_our_own_messages_take_the_short_path() -> None:
    """The shape our publisher sends (a delivery mode and a message id) is the usual one,
    from the second delivery of an exchange and routing key on."""
    deliveries = [Delivery(CHANNEL, TAG, delivery_tag=i, routing_key="orders", body=b"x" * 256,
                           props=BasicProperties(delivery_mode=2, message_id=f"id-{i}"))
                  for i in range(1, 11)]
    harness = Harness([(CHANNEL, TAG)], BIG_FRAME_MAX)
    taken = _taken_usually(harness.inbound)
    stream = b"".join(d.wire() for d in deliveries)
    harness.feed([stream])
    harness.check(pika_reference(stream, [(CHANNEL, TAG)]))
    assert taken[0] == 9
    assert [args[7] for _, args in harness.calls] == [f"id-{i}" for i in range(1, 11)]


def test_a_second_consumer_on_the_connection_turns_the_short_path_off() -> None:
    harness = Harness([(CHANNEL, TAG), (2, TAG)], BIG_FRAME_MAX)
    taken = _taken_usually(harness.inbound)
    stream = b"".join(Delivery(CHANNEL, TAG, delivery_tag=i, props=BasicProperties(
        delivery_mode=2, message_id="m")).wire() for i in range(3))
    harness.feed([stream])
    harness.check(pika_reference(stream, [(CHANNEL, TAG), (2, TAG)]))
    assert taken[0] == 0
    harness.inbound.unregister(2, TAG)
    harness.feed([stream])
    assert taken[0] == 3
