"""Deliveries read straight from the received bytes, without pika's frame objects.

pika turns every received frame into objects and runs each through its callback manager and
content assembler: for one delivery (a method, a header and a body frame) about 9 µs of the
13 µs a raw pika consumer spends per message on this project's reference machine. A consumer
that must keep pace with the fastest raw client, while doing more than a raw one (a
``Delivery``, a handoff, acks by the batch), cannot afford that, so the frames of a delivery
to one of *our* consumers are decoded here, in one pass over the buffer; everything else
(every other method, heartbeats, returns, deliveries to consumer tags we did not register)
still goes to pika, in the order it arrived, whole frames at a time, so pika's own state
never sees a gap.

A delivery is taken here only when its method, header and body frames are all in the buffer,
back to back on one channel, and look exactly as AMQP 0-9-1 says; anything unusual (another
channel's frame in between, a malformed frame) is left to pika, which has the error handling
for it. The usual delivery (the one consumer of the connection, our publisher's properties,
a body in one frame) takes a shorter path still (``InboundDeliveries._usual``), which may
only decline a delivery, never decode it otherwise. Values are decoded as pika decodes them
(a short string that is not UTF-8 stays bytes, tables as ``pika.data.decode_table`` gives
them, by ``tables.decode_table``), and differential tests hold the two together
(``tests/unit/test_wire_deliveries.py``, ``tests/unit/test_wire_usual.py``). Pure: bytes in,
callbacks out; the connection that feeds it is ``pika_hooks.BatchedAsyncioConnection``.

A delivery whose headers cannot be decoded (``tables.Undecodable``: nested past the limit, a
float pika cannot read...) is taken here too, whatever its other properties, and never left
to pika: pika's decoder would raise inside its frame reader, the connection would be lost,
and the broker would hand the same message back first in line, forever. Its callback gets
``headers`` None and the reason in ``unfit``; the consumer parks it at once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .frames import FRAME_HEAD as _FRAME_HEAD
from .tables import Undecodable, decode_table

DeliveryCallback = Callable[
    [int, bool, Any, Any, Any, Any, Any, Any, Any, bytes, "str | None"], None
]
"""``(delivery_tag, redelivered, exchange, routing_key, content_type, headers,
correlation_id, message_id, timestamp, body, unfit)``; strings as pika gives them (``str``,
or ``bytes`` when not UTF-8), ``headers`` a dict or None, ``timestamp`` an int or None;
``unfit`` None, or why the headers could not be decoded (``headers`` is then None)."""

_Taken = tuple[int, int, DeliveryCallback, tuple[Any, ...]]
"""A delivery decoded: the offset after its last frame, its number of frames, its
consumer's callback and the callback's arguments."""

_HEAD_SIZE = 7
_OVERHEAD = 8  # head and frame-end octet
_FRAME_END = 0xCE
_METHOD, _HEADER, _BODY = 1, 2, 3
_DELIVER = struct.pack(">HH", 60, 60)  # Basic.Deliver: class 60, method 60
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_TAG_REDELIVERED = struct.Struct(">QB")  # delivery tag, then the redelivered bit
_HEADER_FRAME = struct.Struct(">BHIHHQH")  # frame head, class, weight, body size, flags
_HEADER_FRAME_SIZE = _HEADER_FRAME.size  # 21: where the properties begin
_USUAL_HEADER = struct.Struct(">BHIHHQHBB")  # the same, the delivery mode, the id's length
_NAMES_KEPT = 256
"""Exchange and routing-key pairs kept decoded: a consumer's deliveries repeat a few, and a
dictionary hit on their raw bytes costs less than decoding the two short strings again; the
cache starts over when full, so a stream of distinct keys costs a decode each, no more."""

# Basic property flags, in wire order (AMQP 0-9-1, class basic).
_CONTENT_TYPE = 1 << 15
_CONTENT_ENCODING = 1 << 14
_HEADERS = 1 << 13
_DELIVERY_MODE = 1 << 12
_PRIORITY = 1 << 11
_CORRELATION_ID = 1 << 10
_REPLY_TO = 1 << 9
_EXPIRATION = 1 << 8
_MESSAGE_ID = 1 << 7
_TIMESTAMP = 1 << 6
_AFTER_TIMESTAMP = (1 << 5) | (1 << 4) | (1 << 3) | (1 << 2)  # type, user id, app id, cluster id
_CONTINUED = 1
_SHORTS_BEFORE_HEADERS = (_CONTENT_TYPE, _CONTENT_ENCODING)
_AFTER_HEADERS = (  # (flag, size: 0 for a short string)
    (_DELIVERY_MODE, 1), (_PRIORITY, 1), (_CORRELATION_ID, 0), (_REPLY_TO, 0),
    (_EXPIRATION, 0), (_MESSAGE_ID, 0), (_TIMESTAMP, 8), (1 << 5, 0), (1 << 4, 0),
    (1 << 3, 0), (1 << 2, 0))
_PERSISTENT_WITH_ID = _DELIVERY_MODE | _MESSAGE_ID
"""What our own publisher sends (a delivery mode and a message id): decoded without the
general walk over the flags."""
_RARE = _CONTENT_ENCODING | _PRIORITY | _REPLY_TO | _EXPIRATION | _AFTER_TIMESTAMP
"""Properties a ``Delivery`` keeps only in its ``properties`` mapping: a delivery that has
any of them goes to pika, whose decoded properties the consumer then keeps whole (our own
publisher sets none of them, so our messages stay on this path)."""


def _short(data: bytes, at: int) -> tuple[Any, int]:
    end = at + 1 + data[at]
    value = data[at + 1:end]
    try:
        return value.decode(), end
    except UnicodeDecodeError:
        return value, end


def _raw_tag(consumer_tag: str) -> bytes | None:
    """The bytes a broker sends for ``consumer_tag``; None when no bytes decode to it."""
    try:
        return consumer_tag.encode()
    except UnicodeEncodeError:
        return None


class Malformed(Exception):
    """Frames that do not decode as a delivery: pika gets them, and reports the error."""


def _headers_at(data: bytes, at: int, flags: int, end: int) -> int:
    """Where the headers table begins in the properties from ``at`` (``flags`` has it)."""
    for flag in _SHORTS_BEFORE_HEADERS:
        if flags & flag:
            at += 1 + data[at]
    if at + 4 > end:
        raise Malformed("header frame size")
    return at


def _around_headers(data: bytes, at: int, flags: int, end: int) -> tuple[Any, Any, Any, Any]:
    """``(content_type, correlation_id, message_id, timestamp)`` of properties whose headers
    table does not decode: the table is stepped over by its size, the rest read as usual."""
    content_type = correlation_id = message_id = timestamp = None
    if flags & _CONTENT_TYPE:
        content_type, _ = _short(data, at)
    at = _headers_at(data, at, flags, end)
    at += 4 + _U32.unpack_from(data, at)[0]
    for flag, size in _AFTER_HEADERS:
        if not flags & flag:
            continue
        if size == 0:
            value, at = _short(data, at)
            if flag == _CORRELATION_ID:
                correlation_id = value
            elif flag == _MESSAGE_ID:
                message_id = value
        else:
            if flag == _TIMESTAMP:
                timestamp = _U64.unpack_from(data, at)[0]
            at += size
    if at != end:
        raise Malformed("header frame size")
    return content_type, correlation_id, message_id, timestamp


class InboundDeliveries:
    """Per connection: which (channel, consumer tag) pairs take the fast path, the bytes of a
    frame not yet complete, and the decoding itself."""

    def __init__(self, to_pika: Callable[[bytes], None], frame_max: int) -> None:
        self._to_pika = to_pika
        self._frame_max = max(frame_max, 4096)
        self._consumers: dict[tuple[int, str], DeliveryCallback] = {}
        # The same, by the tag's UTF-8 bytes: what the method frame holds, compared without
        # decoding it (a tag that is not UTF-8 matches none, as pika's decoded one would not).
        self._by_raw: dict[tuple[int, bytes], DeliveryCallback] = {}
        self._names: dict[bytes, tuple[Any, Any]] = {}
        self._on_channel: dict[int, int] = {}  # channel -> number of registered consumers
        self._only: tuple[int, bytes, DeliveryCallback] | None = None
        """With exactly one consumer registered (the SDK's case): its channel, the bytes
        its deliveries' method frames begin with after the frame head, and its callback."""
        self._rest = bytearray()
        self._need = 0  # bytes ``_rest`` must hold before anything can be decoded
        self.bytes = 0
        self.frames = 0

    @property
    def active(self) -> bool:
        return bool(self._consumers) or bool(self._rest)

    @property
    def held(self) -> int:
        """Bytes kept until the frame or delivery they begin is complete. They arrived, so
        they count as traffic at once: a delivery that takes longer than two heartbeats to
        arrive is a link at work, not a silent one (``bytes`` counts a delivery only once
        it is decoded, and every fed byte is in ``bytes``, ``held`` or what pika got)."""
        return len(self._rest)

    def register(self, channel: int, consumer_tag: str, callback: DeliveryCallback) -> None:
        key = (channel, consumer_tag)
        if key not in self._consumers:
            self._on_channel[channel] = self._on_channel.get(channel, 0) + 1
        self._consumers[key] = callback
        raw = _raw_tag(consumer_tag)
        if raw is not None:
            self._by_raw[(channel, raw)] = callback
        self._single_out()

    def unregister(self, channel: int, consumer_tag: str) -> None:
        raw = _raw_tag(consumer_tag)
        if raw is not None:
            self._by_raw.pop((channel, raw), None)
        if self._consumers.pop((channel, consumer_tag), None) is not None:
            left = self._on_channel[channel] - 1
            if left:
                self._on_channel[channel] = left
            else:
                del self._on_channel[channel]
        self._single_out()

    def _single_out(self) -> None:
        self._only = None
        if len(self._by_raw) == 1 and len(self._consumers) == 1:
            ((channel, raw), callback), = self._by_raw.items()
            if len(raw) < 256:
                self._only = (channel, _DELIVER + bytes([len(raw)]) + raw, callback)

    def forget_channel(self, channel: int) -> None:
        for key in [k for k in self._consumers if k[0] == channel]:
            self.unregister(*key)

    # ------------------------------------------------------------------ decoding

    def feed(self, data: bytes) -> None:
        """Decode what ``data`` (after what was kept from before) completes."""
        rest = self._rest
        if rest:
            rest += data
            if len(rest) < self._need:
                return  # a frame (or a large delivery) still arriving: nothing to do yet
            data = bytes(rest)
            rest.clear()
        size = len(data)
        pos = 0
        passed = 0  # where the frames not yet handed to pika begin
        channels = self._on_channel
        while True:
            if size - pos < _HEAD_SIZE:
                need = pos + _HEAD_SIZE
                break
            kind, channel, length = _FRAME_HEAD.unpack_from(data, pos)
            frame_end = pos + _OVERHEAD + length
            if frame_end > size:
                need = frame_end
                break
            if kind == _METHOD and channel in channels and data.startswith(_DELIVER, pos + 7):
                if passed < pos:
                    # What came before first: it may be the cancel of this very consumer.
                    self._to_pika(data[passed:pos])
                    passed = pos
                try:
                    taken = (self._usual(data, pos, frame_end, channel, size)
                             or self._delivery(data, pos, frame_end, channel, size))
                except Exception:  # noqa: BLE001 - malformed: pika reports it its way
                    taken = 0
                if isinstance(taken, int):
                    if taken < 0:  # not all there yet: wait for the rest of it
                        need = -taken
                        break
                else:
                    end, frames, callback, args = taken
                    self.bytes += end - pos
                    self.frames += frames
                    passed = pos = end
                    # Outside the try: what the callback raises is not a decoding error.
                    try:
                        callback(*args)
                    except BaseException:
                        self._keep(data, pos, pos)
                        raise
                    continue
            pos = frame_end
        if passed < pos:
            self._to_pika(data[passed:pos])
        self._keep(data, pos, need)

    def _keep(self, data: bytes, pos: int, need: int) -> None:
        """Keep the bytes from ``pos`` on, until ``need`` (an offset in ``data``) is reached."""
        if pos < len(data):
            self._rest += memoryview(data)[pos:]
            self._need = need - pos
        else:
            self._need = 0

    def _usual(
        self, data: bytes, pos: int, method_end: int, channel: int, size: int
    ) -> _Taken | None:
        """``_delivery`` for the usual delivery, in fewer steps; None for any other.

        Usual: to the one registered consumer, an exchange and routing key seen before
        (``_names``), the properties our publisher sets (a delivery mode and a message id,
        nothing else), a body in one frame, all of it in ``data`` and well formed. Each
        delivery costs the consumer's event loop a few microseconds of decoding, most of
        its time per message, so the common case checks the method frame's class, method
        and consumer tag in one comparison and reads the header frame, the delivery mode
        and the id's length in one unpacking. Whatever this returns, ``_delivery`` returns
        too (``tests/unit/test_wire_usual.py`` holds the two together)."""
        only = self._only
        if only is None:
            return None
        only_channel, prefix, callback = only
        if channel != only_channel or not data.startswith(prefix, pos + 7):
            return None
        tag_end = pos + 7 + len(prefix)
        names = self._names.get(data[tag_end + 9:method_end - 1])
        if names is None or data[method_end - 1] != _FRAME_END:
            return None
        head = method_end
        if size - head < _USUAL_HEADER.size:
            return None
        kind, on, length, class_id, _weight, body_size, flags, _mode, id_size = (
            _USUAL_HEADER.unpack_from(data, head))
        header_end = head + _OVERHEAD + length
        id_start = head + _USUAL_HEADER.size
        body_end = header_end + _OVERHEAD + body_size
        if (kind != _HEADER or on != channel or class_id != 60 or flags != _PERSISTENT_WITH_ID
                or id_start + id_size + 1 != header_end or body_size == 0 or body_end > size
                or data[header_end - 1] != _FRAME_END or data[body_end - 1] != _FRAME_END
                or _FRAME_HEAD.unpack_from(data, header_end) != (_BODY, channel, body_size)):
            return None
        raw_id = data[id_start:header_end - 1]
        try:
            message_id: Any = raw_id.decode()
        except UnicodeDecodeError:
            message_id = raw_id
        delivery_tag, redelivered = _TAG_REDELIVERED.unpack_from(data, tag_end)
        exchange, routing_key = names
        return body_end, 3, callback, (
            delivery_tag, bool(redelivered & 1), exchange, routing_key, None, None, None,
            message_id, None, data[header_end + 7:body_end - 1], None)

    def _delivery(
        self, data: bytes, pos: int, method_end: int, channel: int, size: int
    ) -> int | _Taken:
        """Decode the delivery whose method frame starts at ``pos``: the offset after its
        last frame, the number of its frames, its consumer's callback and the arguments; 0
        if it is not ours to take; minus the bytes needed when it is not complete yet."""
        if data[method_end - 1] != _FRAME_END:
            raise Malformed("method frame end")
        at = pos + 11
        tag_end = at + 1 + data[at]
        callback = self._by_raw.get((channel, data[at + 1:tag_end]))
        if callback is None:
            return 0
        delivery_tag, redelivered = _TAG_REDELIVERED.unpack_from(data, tag_end)
        redelivered = bool(redelivered & 1)
        raw_names = data[tag_end + 9:method_end - 1]
        names = self._names.get(raw_names)
        if names is None:
            exchange, at = _short(data, tag_end + 9)
            routing_key, at = _short(data, at)
            if at != method_end - 1:
                raise Malformed("method frame size")
            if len(self._names) >= _NAMES_KEPT:
                self._names.clear()
            names = self._names[raw_names] = (exchange, routing_key)
        exchange, routing_key = names

        # The content header, on the same channel, right after.
        head = method_end
        if size - head < _HEADER_FRAME_SIZE:
            if size - head < _HEAD_SIZE:
                return -(head + _HEAD_SIZE)
            kind, on, length = _FRAME_HEAD.unpack_from(data, head)
            if kind != _HEADER or on != channel:
                return 0  # another frame in between: pika's assembler copes with that
            short_end: int = head + _OVERHEAD + length
            if short_end > size:
                return -short_end
            raise Malformed("content header")  # complete, and too short to be one
        kind, on, length, class_id, _weight, body_size, flags = _HEADER_FRAME.unpack_from(
            data, head)
        if kind != _HEADER or on != channel:
            return 0  # another frame in between: pika's assembler copes with that
        header_end: int = head + _OVERHEAD + length
        if header_end > size:
            return -header_end
        if data[header_end - 1] != _FRAME_END:
            raise Malformed("header frame end")
        if class_id != 60 or flags & _CONTINUED or length < _HEADER_FRAME_SIZE - _HEAD_SIZE:
            raise Malformed("content header")
        content_type = headers = correlation_id = message_id = timestamp = unfit = None
        at = head + _HEADER_FRAME_SIZE
        if flags == _PERSISTENT_WITH_ID:
            at += 1  # the delivery mode
            message_id, at = _short(data, at)
            if at != header_end - 1:
                raise Malformed("header frame size")
        else:
            try:
                if flags & _RARE:
                    if not flags & _HEADERS:
                        return 0
                    # pika decodes these; only its table decoder can fail on them: check first.
                    decode_table(data, _headers_at(data, at, flags, header_end - 1),
                                 header_end - 1)
                    return 0
                if flags & _CONTENT_TYPE:
                    content_type, at = _short(data, at)
                if flags & _HEADERS:
                    headers, at = decode_table(data, at, header_end - 1)
                if flags & _DELIVERY_MODE:
                    at += 1
                if flags & _CORRELATION_ID:
                    correlation_id, at = _short(data, at)
                if flags & _MESSAGE_ID:
                    message_id, at = _short(data, at)
                if flags & _TIMESTAMP:
                    timestamp = _U64.unpack_from(data, at)[0]
                    at += 8
                if at != header_end - 1:
                    raise Malformed("header frame size")
            except Undecodable as exc:
                unfit = f"its headers cannot be decoded: {exc}"
                content_type, correlation_id, message_id, timestamp = _around_headers(
                    data, head + _HEADER_FRAME_SIZE, flags, header_end - 1)

        # The body frames, on the same channel, right after.
        end = header_end
        frames = 2
        if body_size == 0:
            body = b""
        elif (size - end >= _HEAD_SIZE
              and _FRAME_HEAD.unpack_from(data, end) == (_BODY, channel, body_size)
              and end + _OVERHEAD + body_size <= size):
            # The whole body in the one frame after the header: the usual case.
            frame_end = end + _OVERHEAD + body_size
            if data[frame_end - 1] != _FRAME_END:
                raise Malformed("body frame end")
            body = data[end + 7:frame_end - 1]
            end = frame_end
            frames = 3
        else:
            parts: list[bytes] = []
            left = body_size
            while left > 0:
                if size - end < _HEAD_SIZE:
                    return -self._at_least(end, left)
                kind, on, length = _FRAME_HEAD.unpack_from(data, end)
                if kind != _BODY or on != channel:
                    return 0
                if length > left:
                    raise Malformed("body longer than announced")
                frame_end = end + _OVERHEAD + length
                if frame_end > size:
                    return -self._at_least(end, left)
                if data[frame_end - 1] != _FRAME_END:
                    raise Malformed("body frame end")
                parts.append(data[end + 7:frame_end - 1])
                left -= length
                end = frame_end
                frames += 1
            body = parts[0] if len(parts) == 1 else b"".join(parts)

        return end, frames, callback, (delivery_tag, redelivered, exchange, routing_key,
                                       content_type, headers, correlation_id, message_id,
                                       timestamp, body, unfit)

    def _at_least(self, at: int, body_left: int) -> int:
        """The fewest bytes that can hold ``body_left`` more body bytes from ``at``: frames
        are at most ``frame_max``, so a large message is decoded once, when it is all here,
        not once for each frame that arrives."""
        payload = self._frame_max - _OVERHEAD
        frames = -(-body_left // payload)
        return at + body_left + frames * _OVERHEAD


__all__ = ["DeliveryCallback", "InboundDeliveries"]
