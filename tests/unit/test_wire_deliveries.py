"""sac.sdk._wire.deliveries decodes deliveries exactly as pika does, and hands pika every other
frame.

The fast path bypasses pika's frame objects, so nothing but a comparison keeps the two in
step: every stream here is built with pika's own marshalling and decoded twice, once by
``InboundDeliveries`` and once by pika (``pika.frame.decode_frame`` and pika's
``ContentFrameAssembler``). The deliveries pika assembles for registered consumers must reach
the callbacks with equal values *and types*; every other frame must reach ``to_pika``
byte for byte, whole and in order; and the byte and frame counts the connection adds to
pika's heartbeat bookkeeping must account for everything fed, each byte as soon as it is fed.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import pika.frame
import pika.spec
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pika.channel import ContentFrameAssembler
from pika.spec import Basic, BasicProperties, Channel, Connection

from sac.sdk._wire.deliveries import InboundDeliveries
from tests.sdk.test_hostile_frames import nested_headers

# Small frames, so that multi-frame bodies stay cheap to generate (4096 is AMQP's minimum).
FRAME_MAX = 4096
PAYLOAD_MAX = FRAME_MAX - 8
BIG_FRAME_MAX = pika.spec.FRAME_MAX_SIZE  # what the connection gives InboundDeliveries

# Who may be registered: a few channels and tags, so that generated deliveries often hit a
# registered pair, a registered channel with another tag, or an unregistered channel.
CHANNELS = (1, 2, 7, 65535)
TAGS = ("ctag", "sac-1-7f3a", "é-tag", "")

Key = tuple[int, str]

# ---------------------------------------------------------------------------- wire bytes


def method(channel: int, value: Any) -> bytes:
    marshalled: bytes = pika.frame.Method(channel, value).marshal()
    return marshalled


def heartbeat() -> bytes:
    marshalled: bytes = pika.frame.Heartbeat().marshal()
    return marshalled


def content(channel: int, props: BasicProperties, body: bytes,
            fragment: int = PAYLOAD_MAX) -> list[bytes]:
    """A header frame and the body frames, cut as a broker cuts them (``fragment`` at most)."""
    frames = [pika.frame.Header(channel, len(body), props).marshal()]
    frames += [pika.frame.Body(channel, body[at:at + fragment]).marshal()
               for at in range(0, len(body), fragment)]
    return frames


@dataclass(frozen=True)
class Delivery:
    """One Basic.Deliver with its content, as a broker would send it."""

    channel: int
    consumer_tag: str | bytes
    delivery_tag: int = 1
    redelivered: bool = False
    exchange: str | bytes = ""
    routing_key: str | bytes = "q"
    props: BasicProperties = field(default_factory=BasicProperties)
    body: bytes = b"body"
    fragment: int = PAYLOAD_MAX

    def frames(self) -> list[bytes]:
        deliver = Basic.Deliver(consumer_tag=self.consumer_tag, delivery_tag=self.delivery_tag,
                                redelivered=self.redelivered, exchange=self.exchange,
                                routing_key=self.routing_key)
        return [method(self.channel, deliver),
                *content(self.channel, self.props, self.body, self.fragment)]

    def wire(self) -> bytes:
        return b"".join(self.frames())


def raw_frame(kind: int, channel: int, payload: bytes, end: bytes = b"\xce") -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + end


# ------------------------------------------------------------------- pika, the reference


def split_frames(stream: bytes) -> list[tuple[bytes, pika.frame.Frame]]:
    """Whole frames, each as its bytes and as pika decodes it; fails on a partial frame."""
    frames: list[tuple[bytes, pika.frame.Frame]] = []
    pos = 0
    while pos < len(stream):
        assert len(stream) - pos >= 8, f"partial frame head at {pos}"
        (size,) = struct.unpack_from(">I", stream, pos + 3)
        raw = stream[pos:pos + 8 + size]
        used, value = pika.frame.decode_frame(raw)
        assert used == len(raw) == 8 + size, f"partial frame at {pos}"
        assert isinstance(value, pika.frame.Frame)
        frames.append((raw, value))
        pos += used
    return frames


def call_args(deliver: Any, header: Any, body: bytes) -> tuple[Any, ...]:
    """What the callback must receive for a delivery pika assembled."""
    props = header.properties
    return (deliver.delivery_tag, deliver.redelivered, deliver.exchange, deliver.routing_key,
            props.content_type, props.headers, props.correlation_id, props.message_id,
            props.timestamp, body, None)


@dataclass
class Expected:
    calls: list[tuple[Key, tuple[Any, ...]]]
    to_pika: list[bytes]  # the frames pika must get, each whole
    frames_taken: int
    timeline: list[tuple[Any, ...]]  # both merged, in stream order (see ``Harness``)
    unit_ends: list[int]  # where each frame for pika, or each delivery taken, ends


RARE = ("content_encoding", "priority", "reply_to", "expiration", "type", "user_id", "app_id",
        "cluster_id")


def rare(props: BasicProperties) -> bool:
    """A property the fast path leaves to pika (the consumer keeps pika's whole decoding)."""
    return any(getattr(props, name) is not None for name in RARE)


def pika_reference(stream: bytes, registered: Iterable[Key]) -> Expected:
    """What pika decodes from ``stream``, split the way the fast path is meant to split it:
    a Basic.Deliver to a registered (channel, tag) whose frames are back to back and whose
    properties are only those a ``Delivery`` has fields for is taken, every other frame
    (other deliveries' included) goes to pika."""
    keys = set(registered)
    frames = split_frames(stream)
    assemblers: dict[int, ContentFrameAssembler] = {}
    in_progress: dict[int, list[int]] = {}  # channel -> indices of its content's frames
    taken: set[int] = set()
    held: set[int] = set()  # methods of our deliveries left to pika: decided at their header
    calls: list[tuple[Key, tuple[Any, ...]]] = []
    for index, (_raw, value) in enumerate(frames):
        channel = value.channel_number
        if isinstance(value, pika.frame.Method):
            if pika.spec.has_content(value.method.INDEX):
                in_progress[channel] = [index]
                assemblers.setdefault(channel, ContentFrameAssembler()).process(value)
            continue
        if not isinstance(value, pika.frame.Header | pika.frame.Body):
            continue
        in_progress[channel].append(index)
        done = assemblers[channel].process(value)
        if done is None:
            continue
        method_frame, header_frame, body = done
        indices = in_progress.pop(channel)
        deliver = method_frame.method
        key = (channel, deliver.consumer_tag) if isinstance(deliver, Basic.Deliver) else None
        back_to_back = indices == list(range(indices[0], indices[0] + len(indices)))
        if key in keys and back_to_back and not rare(header_frame.properties):
            assert key is not None
            calls.append((key, call_args(deliver, header_frame, body)))
            taken.update(indices)
        elif key in keys and indices[1] == indices[0] + 1:
            held.add(indices[0])
    assert not in_progress, "a generated stream left a content incomplete"
    timeline: list[tuple[Any, ...]] = []
    unit_ends: list[int] = []
    starts = iter(calls)
    end = 0
    for index, (raw, value) in enumerate(frames):
        end += len(raw)
        if index not in taken:
            timeline.append(("pika", raw))
            if index not in held:
                unit_ends.append(end)
            continue
        if isinstance(value, pika.frame.Method):  # a delivery is called at its method
            key, args = next(starts)
            timeline.append(("call", key, typed(args)))
        if index + 1 not in taken or isinstance(frames[index + 1][1], pika.frame.Method):
            unit_ends.append(end)  # the last frame of a delivery taken
    return Expected(calls=calls,
                    to_pika=[raw for i, (raw, _) in enumerate(frames) if i not in taken],
                    frames_taken=len(taken), timeline=timeline, unit_ends=unit_ends)


def typed(value: Any) -> Any:
    """``value`` with the type of every part in it: ``"a" != b"a"`` and ``1 != True`` here."""
    if isinstance(value, dict):
        return ("dict", {typed(k): typed(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(typed(v) for v in value))
    return (type(value).__name__, value)


# ---------------------------------------------------------------------- the decoder, fed


def frame_lengths(chunk: bytes) -> list[bytes]:
    """``chunk`` cut into frames by their size fields alone (bad frame ends included);
    fails unless it is whole frames."""
    frames, pos = [], 0
    while pos < len(chunk):
        assert len(chunk) - pos >= 8, "a partial frame handed to pika"
        end = pos + 8 + struct.unpack_from(">I", chunk, pos + 3)[0]
        assert end <= len(chunk), "a partial frame handed to pika"
        frames.append(chunk[pos:end])
        pos = end
    return frames


class Harness:
    """An ``InboundDeliveries`` fed as the connection feeds it: the counters are read and
    reset after each feed, and summed here. ``timeline`` has the frames pika got and the
    callbacks made, in the order they happened: pika must see a Basic.Cancel or a
    Channel.Close before the deliveries that follow it, as it would without the fast path."""

    def __init__(self, registered: Iterable[Key] = (), frame_max: int = FRAME_MAX) -> None:
        self.to_pika: list[bytes] = []
        self.calls: list[tuple[Key, tuple[Any, ...]]] = []
        self.timeline: list[tuple[Any, ...]] = []
        self.inbound = InboundDeliveries(self._to_pika, frame_max)
        self.bytes_taken = 0
        self.frames_taken = 0
        self.fed = 0
        self.pika_count = 0
        self.progress: list[tuple[int, int]] = []  # after each feed: bytes fed, bytes done
        self.uncounted: list[int] = []  # after each feed: bytes fed that no counter has
        for key in registered:
            self.register(key)

    def register(self, key: Key, callback: Callable[..., None] | None = None) -> None:
        def record(*args: Any) -> None:
            self.calls.append((key, args))
            self.timeline.append(("call", key, typed(args)))

        self.inbound.register(*key, callback or record)

    def feed(self, chunks: Iterable[bytes]) -> None:
        inbound = self.inbound
        for chunk in chunks:
            self.fed += len(chunk)
            try:
                inbound.feed(chunk)
            finally:
                self.bytes_taken += inbound.bytes
                self.frames_taken += inbound.frames
                inbound.bytes = inbound.frames = 0
            self.progress.append((self.fed, self.pika_count + self.bytes_taken))
            self.uncounted.append(
                self.fed - self.pika_count - self.bytes_taken - inbound.held)

    def _to_pika(self, chunk: bytes) -> None:
        self.to_pika.append(chunk)
        self.pika_count += len(chunk)
        self.timeline += [("pika", frame) for frame in frame_lengths(chunk)]

    @property
    def pika_frames(self) -> list[bytes]:
        return [entry[1] for entry in self.timeline if entry[0] == "pika"]

    @property
    def pika_bytes(self) -> bytes:
        return b"".join(self.to_pika)

    def check(self, expected: Expected) -> None:
        """Everything the reference says, and every byte accounted for."""
        assert [(key, typed(args)) for key, args in self.calls] == \
            [(key, typed(args)) for key, args in expected.calls]
        for chunk in self.to_pika:  # whole frames only, each hand-over, and pika decodes them
            split_frames(chunk)
        got = [raw for raw, _ in split_frames(self.pika_bytes)]
        assert got == expected.to_pika
        assert self.timeline == expected.timeline
        assert len(self.pika_bytes) + self.bytes_taken == self.fed
        assert self.frames_taken == expected.frames_taken
        assert set(self.uncounted) <= {0}, "bytes that arrived were not counted at once"

    def check_prompt(self, expected: Expected) -> None:
        """Nothing complete is held back: after each feed, every frame for pika and every
        delivery taken that the bytes so far complete is done (a heartbeat or an ack behind
        a delivery must not wait for the next read). Only for streams whose deliveries are
        back to back: for the others the decoder needs the next frame's head to decide."""
        ends = expected.unit_ends
        for fed, done in self.progress:
            complete = bisect.bisect_right(ends, fed)
            assert done == (ends[complete - 1] if complete else 0), f"after {fed} bytes"


def whole(stream: bytes) -> list[bytes]:
    return [stream]


def ones(stream: bytes) -> list[bytes]:
    return [stream[i:i + 1] for i in range(len(stream))]


def sized(stream: bytes, sizes: Sequence[int]) -> list[bytes]:
    chunks, pos, i = [], 0, 0
    while pos < len(stream):
        size = sizes[i % len(sizes)]
        chunks.append(stream[pos:pos + size])
        pos += size
        i += 1
    return chunks


SPLITS: dict[str, Callable[[bytes], list[bytes]]] = {
    "whole": whole,
    "ones": ones,
    "sevens": lambda s: sized(s, [7]),  # a frame head at a time
    "odd": lambda s: sized(s, [3, 11, 1, 4096, 5]),
}


# --------------------------------------------------------------------------- strategies

short_strings = st.one_of(
    st.text(max_size=12),  # at most 48 bytes of UTF-8
    st.binary(max_size=12),  # UTF-8 or not, by chance
    st.binary(max_size=12).map(lambda b: b"\xff" + b),  # never UTF-8: pika returns bytes
)
optional_short = st.none() | short_strings
octets = st.integers(0, 255)

table_keys = st.text(max_size=8)
table_scalars = st.one_of(
    st.text(max_size=10),
    st.binary(max_size=10),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.none(),
    st.decimals(min_value=-10**6, max_value=10**6, places=3, allow_nan=False,
                allow_infinity=False),
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1)),
)
table_values = st.recursive(
    table_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(table_keys, inner, max_size=3),
    max_leaves=8,
)
headers_tables = st.none() | st.dictionaries(table_keys, table_values, max_size=4)

all_properties = st.builds(
    BasicProperties,
    content_type=optional_short,
    content_encoding=optional_short,
    headers=headers_tables,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | octets,
    correlation_id=optional_short,
    reply_to=optional_short,
    expiration=optional_short,
    message_id=optional_short,
    timestamp=st.none() | st.integers(0, 2**64 - 1),
    type=optional_short,
    user_id=optional_short,
    app_id=optional_short,
    cluster_id=optional_short,
)
common_properties = st.builds(
    BasicProperties,
    content_type=optional_short,
    headers=headers_tables,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    correlation_id=optional_short,
    message_id=optional_short,
    timestamp=st.none() | st.integers(0, 2**64 - 1),
)
# Half of them with only the properties the fast path decodes (those it takes), half with any
# (mostly left to pika).
properties = common_properties | all_properties

bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=40),
    # Up to three full frames, and sizes either side of a frame's payload.
    st.builds(lambda seed, size: (seed * size)[:size],
              st.binary(min_size=1, max_size=8),
              st.integers(PAYLOAD_MAX - 2, 2 * PAYLOAD_MAX + 3)),
)


@st.composite
def deliveries(draw: st.DrawFn, keys: st.SearchStrategy[tuple[int, str | bytes]]) -> Delivery:
    """A delivery to one of ``keys`` (channel, consumer tag)."""
    body = draw(bodies)
    fragment = draw(st.just(PAYLOAD_MAX) | st.integers(1, PAYLOAD_MAX))
    fragment = max(fragment, -(-len(body) // 16))  # at most 16 body frames: keep it quick
    channel, consumer_tag = draw(keys)
    return Delivery(
        channel=channel,
        consumer_tag=consumer_tag,
        delivery_tag=draw(st.integers(0, 2**64 - 1)),
        redelivered=draw(st.booleans()),
        exchange=draw(short_strings),
        routing_key=draw(short_strings),
        props=draw(properties),
        body=body,
        fragment=fragment,
    )


any_channel = st.integers(0, 65535)
other_methods = st.one_of(
    st.builds(lambda ch, tag, multiple: method(ch, Basic.Ack(tag, multiple)),
              any_channel, st.integers(0, 2**64 - 1), st.booleans()),
    st.builds(lambda ch, tag: method(ch, Basic.CancelOk(consumer_tag=tag)),
              any_channel, st.sampled_from(TAGS)),
    st.builds(lambda ch, tag: method(ch, Basic.Cancel(consumer_tag=tag)),
              any_channel, st.sampled_from(TAGS)),
    st.builds(lambda ch, active: method(ch, Channel.Flow(active=active)),
              any_channel, st.booleans()),
    st.builds(lambda reason: method(0, Connection.Blocked(reason=reason)), st.text(max_size=8)),
)


@st.composite
def contents_not_deliveries(draw: st.DrawFn,
                            channels: st.SearchStrategy[int] | None = None) -> list[bytes]:
    """A Basic.Return or Basic.GetOk with its content: content frames that are not ours,
    often on a channel we registered."""
    channel = draw(st.sampled_from(CHANNELS) if channels is None else channels)
    if draw(st.booleans()):
        head = Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="x",
                            routing_key=draw(st.text(max_size=8)))
    else:
        head = Basic.GetOk(delivery_tag=draw(st.integers(0, 2**64 - 1)), redelivered=False,
                           exchange="", routing_key="q", message_count=0)
    return [method(channel, head),
            *content(channel, draw(properties), draw(st.binary(max_size=20)))]


registrations = st.sets(st.tuples(st.sampled_from(CHANNELS), st.sampled_from(TAGS)),
                        min_size=1, max_size=6)
any_keys = st.tuples(st.sampled_from(CHANNELS) | st.integers(1, 65535),
                     st.sampled_from(TAGS) | short_strings)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[set[Key], list[list[bytes]]]:
    """Registered (channel, tag) pairs, and a stream (as events, each its frames) where most
    deliveries go to one of them and the rest to any tag on any channel."""
    registered = draw(registrations, label="registered")
    ours = st.sampled_from(sorted(registered))
    keys = st.one_of(ours, ours, ours, any_keys)
    events = st.lists(st.one_of(
        deliveries(keys).map(Delivery.frames),  # three times as likely as the rest
        deliveries(keys).map(Delivery.frames),
        deliveries(keys).map(Delivery.frames),
        st.builds(lambda: [heartbeat()]),
        other_methods.map(lambda frame: [frame]),
        contents_not_deliveries(),
    ), min_size=1, max_size=12)
    return registered, draw(events, label="events")


@st.composite
def chunkings(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    """``stream`` cut as a socket might: whole, a byte at a time, or anywhere at all (empty
    chunks included)."""
    style = draw(st.sampled_from(["whole", "ones", "sizes", "cuts"]))
    if style == "whole":
        return [stream]
    if style == "ones":
        return ones(stream)
    if style == "sizes":
        return sized(stream, draw(st.lists(st.integers(1, 300), min_size=1, max_size=6)))
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=16)))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


# Examples enough to run in a few seconds; no example database written into the tree.
CHECK = settings(max_examples=300, deadline=None, database=None)


# ------------------------------------------------------- 1. pika's deliveries, pika's frames


@CHECK
@given(scenario=scenarios(), frame_max=st.sampled_from([FRAME_MAX, BIG_FRAME_MAX]),
       data=st.data())
def test_decodes_what_pika_decodes_and_hands_pika_the_rest(
    scenario: tuple[set[Key], list[list[bytes]]], frame_max: int, data: st.DataObject,
) -> None:
    """Random deliveries among heartbeats, other methods and other contents, cut anywhere:
    the callbacks get exactly the registered deliveries pika decodes, pika gets exactly the
    rest, whole and in order, and every byte is counted once. (``frame_max`` is what the
    decoder is told; the body frames here are at most 4096 bytes either way.)"""
    registered, events = scenario
    stream = b"".join(frame for part in events for frame in part)
    harness = Harness(registered, frame_max)
    chunks = data.draw(chunkings(stream), label="chunks")
    harness.feed(chunks)
    expected = pika_reference(stream, registered)
    harness.check(expected)
    harness.check_prompt(expected)
    # What the examples exercised (pytest --hypothesis-show-statistics).
    event(f"deliveries taken: {min(len(expected.calls), 3)}")
    event(f"frames to pika: {min(len(expected.to_pika), 3)}")
    event(f"more body frames than deliveries taken: "
          f"{expected.frames_taken > 3 * len(expected.calls)}")
    event(f"non-UTF-8 string delivered: "
          f"{any(type(v) is bytes for _, args in expected.calls for v in args[2:9])}")
    event(f"chunks: {'1' if len(chunks) == 1 else 'many'}")
    for channel in CHANNELS:
        harness.inbound.forget_channel(channel)
    assert not harness.inbound.active  # nothing left half-read


def test_a_run_of_our_deliveries_is_all_taken() -> None:
    """Back-to-back deliveries to one consumer, empty bodies included, cut small: all taken,
    none of it given to pika."""
    stream = b"".join(Delivery(1, "ctag", delivery_tag=i, body=bytes(i)).wire()
                      for i in range(20))
    harness = Harness([(1, "ctag")])
    harness.feed(sized(stream, [5, 64]))
    assert [args[0] for _, args in harness.calls] == list(range(20))
    assert harness.to_pika == []
    assert harness.frames_taken == 20 * 2 + 19  # method + header, a body frame unless empty
    harness.check(pika_reference(stream, [(1, "ctag")]))


NOT_UTF8 = b"\xff\xfe-not-utf-8"
EVERY_PROPERTY = BasicProperties(
    content_type="application/json", content_encoding="gzip",
    headers={"x-int": 1, "x-big": 2**40, "x-neg": -5, "x-true": True, "x-str": "é",
             "x-bytes": b"\x00\xff", "x-none": None, "x-list": [1, "a", [b"z"]],
             "x-table": {"nested": {"deep": False}}, "x-decimal": Decimal("1.25"),
             "x-time": datetime(2024, 5, 6, 7, 8, 9)},
    delivery_mode=2, priority=9, correlation_id="c" * 255, reply_to="amq.rabbitmq.reply-to",
    expiration="60000", message_id="m" * 255, timestamp=2**64 - 1, type="t",
    user_id="guest", app_id="app", cluster_id="cluster",
)


@pytest.mark.parametrize("split", SPLITS, ids=list(SPLITS))
@pytest.mark.parametrize("delivery", [
    Delivery(3, "ctag", props=EVERY_PROPERTY, body=b"x" * (3 * PAYLOAD_MAX + 1)),
    Delivery(3, "ctag", body=b""),
    Delivery(3, "ctag", body=b"a", props=BasicProperties(headers={})),
    Delivery(3, "ctag", exchange=NOT_UTF8, routing_key=NOT_UTF8, props=BasicProperties(
        content_type=NOT_UTF8, correlation_id=NOT_UTF8, message_id=NOT_UTF8,
        reply_to=NOT_UTF8, type=NOT_UTF8, headers={"k": NOT_UTF8})),
    Delivery(3, "ctag", exchange="e" * 255, routing_key="r" * 255,
             delivery_tag=2**64 - 1, redelivered=True),
    Delivery(3, "ctag", body=b"0123456789", fragment=1),
], ids=["every-property", "empty-body", "empty-headers", "not-utf8", "longest", "1-byte-frames"])
def test_explicit_deliveries(delivery: Delivery, split: str) -> None:
    """Edge values, each on its own and followed by a heartbeat and a second delivery: all as
    pika decodes them, non-UTF-8 strings as bytes; one with a property a ``Delivery`` keeps
    only in its ``properties`` (``reply_to``, ``app_id``...) is pika's to decode, whole."""
    stream = delivery.wire() + heartbeat() + Delivery(3, "ctag", delivery_tag=99).wire()
    harness = Harness([(3, "ctag")])
    harness.feed(SPLITS[split](stream))
    expected = pika_reference(stream, [(3, "ctag")])
    harness.check(expected)
    harness.check_prompt(expected)
    if rare(delivery.props):
        assert len(harness.calls) == 1
        assert harness.pika_bytes == delivery.wire() + heartbeat()
    else:
        assert len(harness.calls) == 2
        assert harness.pika_bytes == heartbeat()


def test_non_utf8_strings_come_back_as_bytes() -> None:
    """The reference could be wrong in the same way as the decoder: this states it outright."""
    stream = Delivery(1, "ctag", exchange=NOT_UTF8, routing_key="rk", props=BasicProperties(
        content_type=NOT_UTF8, correlation_id="c", message_id=NOT_UTF8)).wire()
    harness = Harness([(1, "ctag")])
    harness.feed([stream])
    [(_, args)] = harness.calls
    assert typed(args[2:8]) == typed((NOT_UTF8, "rk", NOT_UTF8, None, "c", NOT_UTF8))


@pytest.mark.parametrize("split", SPLITS, ids=list(SPLITS))
def test_deliveries_not_ours_go_to_pika(split: str) -> None:
    """Another tag on a registered channel, our tag on another channel, a non-UTF-8 tag, and
    the content of a Basic.Return on our channel: all pika's."""
    stream = b"".join([
        Delivery(1, "other").wire(),
        Delivery(2, "ctag").wire(),
        Delivery(1, b"\xffctag").wire(),
        method(1, Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="",
                               routing_key="q")),
        *content(1, BasicProperties(), b"returned"),
    ])
    harness = Harness([(1, "ctag")])
    harness.feed(SPLITS[split](stream))
    assert harness.calls == []
    assert harness.pika_bytes == stream
    expected = pika_reference(stream, [(1, "ctag")])
    harness.check(expected)
    harness.check_prompt(expected)


# --------------------------------------------------------------------- 2. interleaved frames


@CHECK
@given(
    ours=deliveries(st.just((1, "ctag"))),
    other=st.one_of(
        deliveries(st.sampled_from([(2, "ctag"), (3, "ctag")])).map(Delivery.frames),
        contents_not_deliveries(channels=st.sampled_from([2, 3])),
        other_methods.filter(lambda frame: struct.unpack_from(">H", frame, 1)[0] != 1)
        .map(lambda frame: [frame]),
    ),
    heartbeats=st.integers(0, 2),
    data=st.data(),
)
def test_frames_between_a_deliverys_frames_leave_it_to_pika(
    ours: Delivery, other: list[bytes], heartbeats: int, data: st.DataObject,
) -> None:
    """Two channels' contents multiplexed frame by frame (each in its own order), heartbeats
    anywhere: a delivery whose frames are not back to back goes to pika whole and in order,
    one that is is taken, and the next delivery on the channel is taken again."""
    ours_frames = ours.frames()
    sources = [ours_frames, other, [heartbeat()] * heartbeats]
    order = data.draw(st.permutations(
        [i for i, frames in enumerate(sources) for _ in frames]), label="order")
    queues = [iter(frames) for frames in sources]
    merged = [next(queues[i]) for i in order]
    after = Delivery(1, "ctag", delivery_tag=12345, body=b"after")
    stream = b"".join(merged) + after.wire()
    registered = [(1, "ctag"), (2, "ctag")]
    harness = Harness(registered)
    harness.feed(data.draw(chunkings(stream), label="chunks"))
    harness.check(pika_reference(stream, registered))

    first = order.index(0)
    back_to_back = order[first:first + len(ours_frames)] == [0] * len(ours_frames)
    taken = back_to_back and not rare(ours.props)
    ours_called = [args for key, args in harness.calls if key == (1, "ctag")]
    assert len(ours_called) == (2 if taken else 1)
    assert ours_called[-1][0] == 12345
    if not taken:  # all its frames went to pika, in their order
        assert [frame for frame in harness.pika_frames if frame in ours_frames] == ours_frames


@pytest.mark.parametrize("split", SPLITS, ids=list(SPLITS))
@pytest.mark.parametrize("at", [1, 2, 3])
def test_interleaved_explicit(at: int, split: str) -> None:
    """The same, spelled out: after the method, after the header or between the bodies, a
    heartbeat, another channel's method, or another channel's delivery frame (registered or
    not: a header or body frame of channel 2 right after our frames is not ours)."""
    frames = Delivery(1, "ctag", body=b"abcdef", fragment=3).frames()  # method, header, 2 bodies
    other = Delivery(2, "ctag", body=b"xyz").frames()  # method, header, body
    cases = {
        "heartbeat": [heartbeat()],
        "method": [method(3, Basic.Ack(1, False))],
        "delivery": other,  # all of another delivery (taken: it is registered)
    }
    mixed = {name: [*frames[:at], *intruder, *frames[at:]] for name, intruder in cases.items()}
    # Channel 2's header, or its body, amid ours: same frame type, not ours.
    mixed["header"] = [other[0], *frames[:at], other[1], *frames[at:], other[2]]
    mixed["body"] = [other[0], other[1], *frames[:at], other[2], *frames[at:]]
    # Channel 2's whole content right after our method: a delivery's worth, not ours.
    mixed["content"] = [other[0], frames[0], *other[1:], *frames[1:]]
    empty = Delivery(2, "ctag", body=b"").frames()  # method, header: complete with no body
    mixed["empty-content"] = [empty[0], frames[0], empty[1], *frames[1:]]
    for name, stream_frames in mixed.items():
        check_interleaved(name, b"".join(stream_frames), frames, split)


def check_interleaved(name: str, stream: bytes, ours: list[bytes], split: str) -> None:
    """``stream`` holds our delivery's frames ``ours`` with others among them."""
    harness = Harness([(1, "ctag"), (2, "ctag")])
    harness.feed(SPLITS[split](stream))
    harness.check(pika_reference(stream, [(1, "ctag"), (2, "ctag")]))
    assert all(key != (1, "ctag") for key, _ in harness.calls), name
    assert [frame for frame in harness.pika_frames if frame in ours] == ours, name


# ---------------------------------------------------------------------- 3. malformed frames


def _with_end(frame: bytes, end: bytes) -> bytes:
    return frame[:-1] + end


def _header_payload(frame: bytes) -> bytes:
    return frame[7:-1]


GOOD = Delivery(5, "ctag", body=b"hello", props=BasicProperties(content_type="text/plain"))
_M, _H, _B = GOOD.frames()
_DELIVER_PAYLOAD = _M[7:-1]
_FLAGS_AT = 12  # in a header payload: class, weight, body size, then the flags
_flags = struct.unpack_from(">H", _H, 7 + _FLAGS_AT)[0]


def _header_flags(flags: int, payload: bytes = _header_payload(_H)) -> bytes:
    return raw_frame(2, 5, payload[:_FLAGS_AT] + struct.pack(">H", flags)
                     + payload[_FLAGS_AT + 2:])


MALFORMED: dict[str, bytes] = {
    "method-frame-end": _with_end(_M, b"\x00") + _H + _B,
    "header-frame-end": _M + _with_end(_H, b"\xcf") + _B,
    "body-frame-end": _M + _H + _with_end(_B, b"\x00"),
    "properties-shorter-than-flags": _M + _header_flags(
        _flags | BasicProperties.FLAG_TIMESTAMP) + _B,
    "table-shorter-than-flags": _M + _header_flags(_flags | BasicProperties.FLAG_HEADERS) + _B,
    "properties-longer-than-flags": _M + raw_frame(2, 5, _header_payload(_H) + b"\x00") + _B,
    "continued-flags": _M + _header_flags(_flags | 1) + _B,
    "not-basic-class": _M + raw_frame(2, 5, b"\x00\x3b" + _header_payload(_H)[2:]) + _B,
    "body-longer-than-announced": _M + _H + raw_frame(3, 5, b"hello!"),
    "second-body-frame-too-long": _M + _H + raw_frame(3, 5, b"hel") + raw_frame(3, 5, b"lo!"),
    "method-longer-than-fields": raw_frame(1, 5, _DELIVER_PAYLOAD + b"\x00") + _H + _B,
    "method-shorter-than-fields": raw_frame(1, 5, _DELIVER_PAYLOAD[:-3]) + _H + _B,
    "method-cut-after-tag": raw_frame(1, 5, _DELIVER_PAYLOAD[:9]) + _H + _B,
}


@pytest.mark.parametrize("split", SPLITS, ids=list(SPLITS))
@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_malformed_frames_go_to_pika(case: str, split: str) -> None:
    """A delivery that is not exactly what AMQP says is pika's to report: none of its bytes
    reach a callback, all reach pika, and the well-formed deliveries around it are taken."""
    before = Delivery(5, "ctag", delivery_tag=1).wire()
    after = Delivery(5, "ctag", delivery_tag=3).wire()
    bad = MALFORMED[case]
    harness = Harness([(5, "ctag")])
    harness.feed(SPLITS[split](before + bad + after))
    assert harness.pika_bytes == bad
    kinds = [entry[0] for entry in harness.timeline]
    assert kinds == ["call", *["pika"] * len(frame_lengths(bad)), "call"]
    assert [args[0] for _, args in harness.calls] == [1, 3]
    assert harness.bytes_taken == len(before) + len(after)
    assert harness.frames_taken == 6


# Trailing bytes after the fields, and a continued flag word (pika reads the first two
# property bytes as more flags): pika decodes these without complaint, the fast path leaves
# them to pika all the same. Every other case is an error for pika too.
PIKA_ACCEPTS = {"properties-longer-than-flags", "method-longer-than-fields", "continued-flags"}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_the_malformed_cases_are_what_they_claim(case: str) -> None:
    """Guard for the test above: a case that pika rejects must raise in pika's decoding (not
    in this file's checks), so each one is malformed the way its name says."""
    try:
        pika_reference(MALFORMED[case], [(5, "ctag")])
    except AssertionError:
        raise
    except Exception:  # noqa: BLE001 - whichever error pika raises
        assert case not in PIKA_ACCEPTS
    else:
        assert case in PIKA_ACCEPTS


# --------------------------------------------------------------- 4. the callback's exceptions


class Boom(Exception):
    pass


@pytest.mark.parametrize("split", ["whole", "ones"])
def test_a_callback_error_propagates_and_is_not_a_decoding_error(split: str) -> None:
    """What the consumer's callback raises comes out of ``feed``; the delivery was taken (it
    is not handed to pika as well), and the frames before it did reach pika."""
    calls: list[int] = []

    def explode(tag: int, *rest: Any) -> None:
        calls.append(tag)
        raise Boom

    stream = heartbeat() + Delivery(1, "ctag", delivery_tag=7).wire()
    harness = Harness()
    harness.register((1, "ctag"), explode)
    with pytest.raises(Boom):
        harness.feed(SPLITS[split](stream))
    assert calls == [7]
    assert harness.pika_bytes == heartbeat()
    assert harness.bytes_taken == len(stream) - len(heartbeat())
    assert harness.frames_taken == 3


def test_what_follows_a_raising_callback_is_kept_for_the_next_feed() -> None:
    """The frames after the delivery whose callback raised are not lost: the next feed
    handles them first."""
    raised: list[int] = []

    def explode_once(tag: int, *rest: Any) -> None:
        if not raised:
            raised.append(tag)
            raise Boom

    harness = Harness()
    harness.register((1, "ctag"), explode_once)
    harness.register((1, "seen"))
    stream = (Delivery(1, "ctag", delivery_tag=1).wire() + heartbeat()
              + Delivery(1, "seen", delivery_tag=2).wire())
    with pytest.raises(Boom):
        harness.feed([stream])
    harness.feed([b""])
    assert raised == [1]
    assert harness.pika_bytes == heartbeat()
    assert [args[0] for _, args in harness.calls] == [2]
    assert len(harness.pika_bytes) + harness.bytes_taken == len(stream)


# ------------------------------------------------------------ 5. unregister, forget_channel


@pytest.mark.parametrize("split", ["whole", "ones"])
def test_frames_before_a_delivery_reach_pika_before_it_is_decided(split: str) -> None:
    """A Basic.Cancel (or Channel.Close) that pika handles unregisters the consumer; a
    delivery behind it in the same read must then be pika's, as it would be without the
    fast path."""
    harness = Harness([(1, "ctag")])
    cancel = pika.frame.Method(1, pika.spec.Basic.Cancel(consumer_tag="ctag")).marshal()

    def to_pika(chunk: bytes) -> None:
        harness._to_pika(chunk)
        if cancel in chunk:
            harness.inbound.unregister(1, "ctag")

    harness.inbound._to_pika = to_pika
    after = Delivery(1, "ctag", delivery_tag=9).wire()
    harness.feed(SPLITS[split](cancel + after))
    assert harness.calls == []
    assert harness.pika_bytes == cancel + after




def test_unregister_and_forget_channel_hand_deliveries_back_to_pika() -> None:
    """Deliveries to a tag no longer registered, or on a forgotten channel, are pika's; the
    other registrations keep their fast path."""
    harness = Harness([(1, "a"), (1, "b"), (2, "c")])
    a, b, c = (Delivery(1, "a").wire(), Delivery(1, "b").wire(), Delivery(2, "c").wire())

    harness.feed([a + b + c])
    assert [key for key, _ in harness.calls] == [(1, "a"), (1, "b"), (2, "c")]
    assert harness.to_pika == []

    harness.inbound.unregister(1, "a")
    harness.inbound.unregister(1, "a")  # twice: no harm
    harness.calls.clear()
    harness.feed([a + b + c])
    assert [key for key, _ in harness.calls] == [(1, "b"), (2, "c")]
    assert harness.pika_bytes == a

    harness.inbound.forget_channel(1)
    harness.calls.clear()
    harness.to_pika.clear()
    harness.feed([a + b + c])
    assert [key for key, _ in harness.calls] == [(2, "c")]
    assert harness.pika_bytes == a + b
    assert harness.inbound.active

    harness.inbound.forget_channel(2)
    assert not harness.inbound.active
    harness.to_pika.clear()
    harness.feed([c])
    assert harness.pika_bytes == c


@pytest.mark.parametrize("split", ["whole", "ones"])
def test_a_callback_that_unregisters_hands_what_follows_to_pika(split: str) -> None:
    """A consumer may unregister from its own callback (it is stopping): the deliveries to it
    still in the buffer go to pika, the other consumers' are still taken, order kept."""
    harness = Harness([(1, "other")])

    def once(*args: Any) -> None:
        harness.timeline.append(("call", (1, "ctag"), typed(args)))
        harness.inbound.unregister(1, "ctag")

    harness.register((1, "ctag"), once)
    first, second = Delivery(1, "ctag", delivery_tag=1), Delivery(1, "ctag", delivery_tag=2)
    third = Delivery(1, "other", delivery_tag=3)
    stream = first.wire() + second.wire() + third.wire()
    harness.feed(SPLITS[split](stream))
    assert [entry[0] for entry in harness.timeline] == ["call", "pika", "pika", "pika", "call"]
    assert harness.pika_bytes == second.wire()
    assert [args[0] for _, args in harness.calls] == [3]


def test_registering_a_key_twice_then_unregistering_it_once_forgets_it() -> None:
    """A second registration replaces the callback; it is not counted as a second consumer
    on the channel (which would keep the channel on the fast path forever)."""
    harness = Harness()
    first: list[int] = []
    harness.register((1, "a"), lambda tag, *rest: first.append(tag))
    harness.register((1, "a"))
    harness.feed([Delivery(1, "a", delivery_tag=4).wire()])
    assert first == []
    assert len(harness.calls) == 1
    harness.inbound.unregister(1, "a")
    assert not harness.inbound.active
    assert harness.inbound._on_channel == {}  # the count is the point


def test_active_while_a_frame_is_half_read() -> None:
    """``active`` stays True while part of a frame is held, even with nothing registered, so
    that the connection keeps feeding us (pika never saw those bytes); it ends with it."""
    harness = Harness([(1, "ctag")])
    assert harness.inbound.active
    stream = Delivery(1, "ctag").wire() + heartbeat()
    harness.feed([stream[:10]])
    harness.inbound.unregister(1, "ctag")
    assert harness.inbound.active
    harness.feed([stream[10:]])
    assert not harness.inbound.active
    assert harness.calls == []
    assert harness.pika_bytes == stream

    idle = Harness()
    assert not idle.inbound.active
    idle.feed([heartbeat()[:3]])
    assert idle.inbound.active
    idle.feed([heartbeat()[3:]])
    assert not idle.inbound.active
    assert idle.pika_bytes == heartbeat()


# ------------------------------------------------------------------------ 6. a large message


EIGHT_MB = bytes(range(256)) * (8 * 1024 * 1024 // 256)


@pytest.mark.parametrize("fragment", [BIG_FRAME_MAX - 8, PAYLOAD_MAX],
                         ids=["131064-byte-frames", "4088-byte-frames"])
def test_a_large_message_is_decoded_once(
    fragment: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """8 MB fed 4096 bytes at a time, as a socket gives it: one callback with the whole body,
    nothing to pika, and the delivery decoded a few times in all, not once per chunk (2049
    chunks: quadratic in the message size). The decoder is told pika's largest frame_max, as
    the connection tells it; a broker that negotiated smaller frames costs a few more."""
    delivery = Delivery(1, "ctag", delivery_tag=42, body=EIGHT_MB, fragment=fragment)
    stream = heartbeat() + delivery.wire() + heartbeat()
    harness = Harness([(1, "ctag")], frame_max=BIG_FRAME_MAX)
    decode = harness.inbound._delivery
    attempts: list[int] = []

    def counted(*args: Any) -> Any:
        attempts.append(args[1])
        return decode(*args)

    monkeypatch.setattr(harness.inbound, "_delivery", counted)
    harness.feed(sized(stream, [4096]))
    [(key, args)] = harness.calls
    assert key == (1, "ctag")
    assert args[0] == 42
    assert type(args[9]) is bytes
    assert args[9] == EIGHT_MB
    assert harness.pika_frames == [heartbeat(), heartbeat()]
    assert harness.bytes_taken == len(stream) - 2 * len(heartbeat())
    assert harness.frames_taken == 2 + -(-len(EIGHT_MB) // fragment)
    assert len(attempts) <= 6, f"decoded {len(attempts)} times"
    harness.check_prompt(pika_reference(stream, [(1, "ctag")]))


def test_a_large_message_not_ours_reaches_pika_frame_by_frame() -> None:
    """The same 8 MB to a tag we did not register: pika gets each body frame as soon as it
    is whole, and each once."""
    stream = Delivery(1, "other", body=EIGHT_MB, fragment=BIG_FRAME_MAX - 8).wire()
    harness = Harness([(1, "ctag")], frame_max=BIG_FRAME_MAX)
    harness.feed(sized(stream, [4096]))
    assert harness.calls == []
    assert harness.pika_bytes == stream
    harness.check_prompt(pika_reference(stream, [(1, "ctag")]))


def test_a_large_message_counts_as_traffic_while_it_arrives() -> None:
    """The connection's silence checks read the byte count: each piece of an 8 MB delivery
    counts when it arrives (as held bytes), not only when the last piece completes it, so
    a link that needs longer than two heartbeats to carry one message is not silent."""
    stream = Delivery(1, "ctag", body=EIGHT_MB, fragment=BIG_FRAME_MAX - 8).wire()
    harness = Harness([(1, "ctag")], frame_max=BIG_FRAME_MAX)
    harness.feed(sized(stream, [4096]))
    assert len(harness.calls) == 1
    assert harness.inbound.held == 0
    assert set(harness.uncounted) == {0}


# ------------------------------------------------------------- 7. headers that do not decode



def _hostile(channel: int, tag: str, priority: bool, body: bytes = b"payload") -> list[bytes]:
    """A delivery whose headers table is nested 5000 deep (pika: ``RecursionError``), with a
    content type before it and a message id and a timestamp after it."""
    deliver = method(channel, Basic.Deliver(consumer_tag=tag, delivery_tag=9,
                                            exchange="", routing_key="q"))
    flags = (1 << 15) | (1 << 13) | (1 << 12) | (1 << 7) | (1 << 6)
    props = b"\x0atext/plain" + nested_headers(5000) + b"\x02"
    if priority:
        flags |= 1 << 11
        props += b"\x05"
    props += b"\x03id1" + struct.pack(">Q", 1234)
    header = raw_frame(2, channel, struct.pack(">HHQH", 60, 0, len(body), flags) + props)
    return [deliver, header, raw_frame(3, channel, body)]


@pytest.mark.parametrize("priority", [False, True], ids=["common", "with-a-rare-property"])
@pytest.mark.parametrize("split", SPLITS, ids=list(SPLITS))
def test_a_delivery_whose_headers_do_not_decode_is_taken_as_unfit(
    priority: bool, split: str,
) -> None:
    """Never left to pika (whose decoder would raise inside its frame reader and lose the
    connection): the callback gets it with headers None, the reason, and the properties
    around the table; frames after it go on as usual."""
    stream = b"".join(_hostile(1, "ctag", priority)) + heartbeat()
    harness = Harness([(1, "ctag")], frame_max=BIG_FRAME_MAX)
    with pytest.raises(RecursionError):
        pika.frame.decode_frame(_hostile(1, "ctag", priority)[1])
    harness.feed(SPLITS[split](stream))
    [(key, args)] = harness.calls
    assert key == (1, "ctag")
    tag, _redelivered, _exchange, _key, content_type, headers, _corr, message_id, \
        timestamp, body, unfit = args
    assert (tag, content_type, headers, message_id, timestamp, body) == \
        (9, "text/plain", None, "id1", 1234, b"payload")
    assert unfit is not None
    assert "nested deeper than 64 levels" in unfit
    assert harness.pika_bytes == heartbeat()
    assert set(harness.uncounted) <= {0}
