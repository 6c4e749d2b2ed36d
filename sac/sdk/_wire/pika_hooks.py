"""The one module that touches pika's internals: every private pika name the SDK uses is here.

pika never decodes a headers table the SDK's bounded decoder refuses (``tables.py``): its
decoder would raise inside its frame reader (``RecursionError`` for a table nested thousands
deep, ``OverflowError`` for a date past 9999...) and the connection would be lost, for a
consumer and for every tool that reads with ``basic.get`` (``sac dlq``, ``Mover``),
every time it met that message. ``_read_frame`` looks at each content header pika is about
to decode; one whose table does not decode reaches pika without it, and pika's properties
come out as ``UndecodableProperties``: ``headers`` None, ``undecodable`` the reason. A
subclass rather than a marker header: a publisher can write any header, but not this.

Two hot paths bypass pika's per-frame objects (``frames.py`` encodes what we publish,
``deliveries.py`` decodes what our consumers receive), and one write path skips a loop
iteration. That needs a connection subclass which overrides pika's private data hooks
(``_on_data_available``, ``_adapter_emit_data``, ``_adapter_disconnect_stream``,
``_proto_connection_made``, where it sizes the transport's reads) and reads a few private
attributes. pika does not promise to keep them, so this module checks at import
that every one is still there, and fails with an ``ImportError`` naming the hook and the pika
version rather than misbehaving at run time. ``tests/sdk/test_pika_versions.py`` runs a real
round trip through this module with every pika release the dependency pin allows.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable
from typing import Any

import attrs
import pika
import pika.frame
import pika.spec
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.adapters.base_connection import BaseConnection
from pika.channel import Channel
from pika.connection import Connection

from .deliveries import InboundDeliveries, Malformed, _headers_at
from .frames import FRAME_HEAD, PublishEncoder
from .tables import Undecodable, decode_table

PIKA_PIN = "pika>=1.3,<2"
"""What ``pyproject.toml`` allows, and what the hooks are tested against."""


@attrs.frozen
class Hook:
    """A private name of pika's that this module relies on.

    ``set_in`` names the method that assigns an instance attribute (those cannot be seen on
    the class): the attribute must be among the names that method's code uses, in the class
    or any of its bases (a subclass's ``__init__`` may leave it to its base's).
    """

    owner: type
    name: str
    why: str
    set_in: str | None = None

    def present(self) -> bool:
        if self.set_in is None:
            return hasattr(self.owner, self.name)
        for klass in self.owner.__mro__:
            code = getattr(vars(klass).get(self.set_in), "__code__", None)
            if code is not None and self.name in code.co_names:
                return True
        return False

    def describe(self) -> str:
        where = f" (set in {self.owner.__name__}.{self.set_in})" if self.set_in else ""
        return f"{self.owner.__module__}.{self.owner.__name__}.{self.name}{where}"


def require(hooks: Iterable[Hook], version: str) -> None:
    """Raise ``ImportError`` naming the first hook that ``version`` of pika lacks."""
    for hook in hooks:
        if not hook.present():
            raise ImportError(
                f"pika {version} has no {hook.describe()}, which the SDK {hook.why}; "
                f"the SDK is tested with {PIKA_PIN} (tests/sdk/test_pika_versions.py): "
                "install a pika release in that range"
            )


try:
    from pika.adapters.utils.io_services_utils import (
        _AsyncPlaintextTransport as _PlaintextTransport,
    )
    from pika.adapters.utils.io_services_utils import (
        _AsyncTransportBase as _TransportBase,
    )
except ImportError as exc:  # pragma: no cover - only with a pika outside the pin
    raise ImportError(
        f"pika {pika.__version__} has no "
        "pika.adapters.utils.io_services_utils._AsyncPlaintextTransport (or its base "
        "_AsyncTransportBase), which the SDK writes to directly; the SDK is tested with "
        f"{PIKA_PIN}"
    ) from exc

HOOKS = (
    Hook(Connection, "_on_data_available", "overrides to decode its own deliveries"),
    Hook(Connection, "_frame_buffer", "completes when its fast path takes over",
         set_in="_init_connection_state"),
    Hook(Connection, "bytes_received", "counts received bytes into (heartbeat checks)",
         set_in="_init_connection_state"),
    Hook(Connection, "frames_received", "counts received frames into",
         set_in="_init_connection_state"),
    Hook(Connection, "frames_sent", "counts published frames into",
         set_in="_init_connection_state"),
    Hook(Connection, "bytes_sent", "counts published bytes into",
         set_in="_init_connection_state"),
    Hook(Connection, "_body_max_length", "cuts published bodies by",
         set_in="_on_connection_tune"),
    Hook(Connection, "_terminate_stream", "calls to drop a silent connection at once"),
    Hook(Connection, "_read_frame", "overrides to check content headers before pika"),
    Hook(Channel, "_consumers", "reads the subscriptions of", set_in="__init__"),
    Hook(Channel, "_cancelled", "marks subscriptions ended without a basic.cancel in",
         set_in="__init__"),
    Hook(BaseConnection, "_adapter_emit_data", "overrides to write a loop iteration at once"),
    Hook(BaseConnection, "_adapter_disconnect_stream", "overrides to flush before closing"),
    Hook(BaseConnection, "_transport", "writes to directly", set_in="_proto_connection_made"),
    Hook(BaseConnection, "_proto_connection_made", "overrides to size its transport's reads"),
    Hook(_TransportBase, "_MAX_RECV_BYTES", "raises to read deliveries in larger chunks"),
    Hook(_TransportBase, "_MAX_CONSUME_BYTES", "lowers to read once per readable event"),
    Hook(_PlaintextTransport, "_STATE_ACTIVE", "checks before writing to the socket"),
    Hook(_PlaintextTransport, "_state", "checks before writing to the socket",
         set_in="__init__"),
    Hook(_PlaintextTransport, "_sock", "writes to directly", set_in="__init__"),
    Hook(_PlaintextTransport, "get_write_buffer_size", "checks before writing directly"),
)

require(HOOKS, pika.__version__)


class UndecodableProperties(pika.spec.BasicProperties):  # type: ignore[misc]
    """A message's properties whose headers table could not be decoded: ``headers`` None,
    the other properties as they came, and ``undecodable`` saying why."""

    def __init__(self, undecodable: str, **properties: Any) -> None:
        super().__init__(**properties)
        self.undecodable = undecodable


def undecodable(properties: Any) -> str | None:
    """Why pika got ``properties`` without their headers (see ``UndecodableProperties``), or
    None when they are as the publisher sent them."""
    return properties.undecodable if isinstance(properties, UndecodableProperties) else None


RECV_BYTES = 65536
"""The most one ``recv`` reads: what a busy consumer's socket holds (prefetched deliveries
arrive back to back), under the size above which the allocator maps fresh memory for each
read."""

_CONTENT_HEADER = 2
_BASIC = 60
_HEADERS_FLAG = 1 << 13
_BEFORE_HEADERS = (1 << 15) | (1 << 14)  # content type, content encoding
_SIZES = struct.Struct(">HHQH")  # class, weight, body size, property flags
_U32 = struct.Struct(">I")


def without_undecodable_headers(data: bytes) -> tuple[bytes, int, str] | None:
    """For ``data`` that begins with a whole content-header frame whose headers table does
    not decode: the same frame without the table (its flag cleared), the size of the frame
    in ``data``, and why. None for anything else (another frame, one not whole yet, no
    headers, headers that decode), which pika reads as usual. A table whose size runs past
    the frame cannot be stepped over: the properties after it are left out too; and when
    those before it run past the frame, all of them are. Pure."""
    if len(data) < 7 or data[0] != _CONTENT_HEADER:
        return None
    _kind, channel, length = FRAME_HEAD.unpack_from(data, 0)
    end = 7 + length  # the frame-end octet
    if end >= len(data) or data[end] != 0xCE or length < _SIZES.size:
        return None  # not whole yet, or malformed: pika's to read or to report
    class_id, _weight, _size, flags = _SIZES.unpack_from(data, 7)
    if class_id != _BASIC or not flags & _HEADERS_FLAG:
        return None
    try:
        at = _headers_at(data, 7 + _SIZES.size, flags, end)
        decode_table(data, at, end)
        return None
    except Undecodable as exc:
        why = f"its headers cannot be decoded: {exc}"
        after = at + 4 + _U32.unpack_from(data, at)[0]
        if after > end:  # nothing after the table can be found: keep what comes before it
            flags, after = flags & _BEFORE_HEADERS, end
    except (Malformed, IndexError):  # what comes before the table runs past the frame
        why = "its properties run past the end of their frame"
        flags, at, after = 0, 7 + _SIZES.size, end
    payload = (data[7:19] + struct.pack(">H", flags & ~_HEADERS_FLAG)
               + data[7 + _SIZES.size:at] + data[after:end])
    return (FRAME_HEAD.pack(_CONTENT_HEADER, channel, len(payload)) + payload + b"\xce",
            end + 1, why)


class BatchedAsyncioConnection(AsyncioConnection):  # type: ignore[misc]
    """pika's asyncio connection, writing all frames of one loop iteration at once, reading
    up to ``RECV_BYTES`` at a time, and decoding the deliveries to our consumers itself
    (``sac_inbound``).

    pika hands every frame to the socket on its own: three ``send`` calls per published
    message (method, header, body), which cost more client CPU than everything else on the
    hot path. Collecting what one event-loop iteration produces and writing it with one call
    keeps the frame order and delays nothing beyond the current iteration. ``PublishFrames``
    adds its frames to the same list, so they stay in order with pika's own.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._sac_pending: list[bytes] = []
        # Frames are never larger than pika's maximum, whatever is negotiated.
        self.sac_inbound = InboundDeliveries(self._sac_to_pika, pika.spec.FRAME_MAX_SIZE)
        super().__init__(*args, **kwargs)

    def sac_drop(self, error: Exception) -> None:
        """Drop the socket at once, without a close handshake that a black hole would never
        answer: the same private call pika's own heartbeat checker makes."""
        self._terminate_stream(error)

    def _on_data_available(self, data_in: bytes) -> None:
        inbound = self.sac_inbound
        if not inbound.active:
            super()._on_data_available(data_in)
            return
        held: bytes = getattr(self, "_frame_buffer")  # noqa: B009 - pika leaves it untyped
        if held:
            # The first bytes since a consumer registered: pika may hold the start of a
            # frame, which is ours to complete now.
            data_in = held + data_in
            self._frame_buffer = b""
        kept = inbound.held
        inbound.feed(data_in)
        # Every byte that arrived counts now, for the silence checks (ours and pika's): the
        # frames pika did not see, and what is held of a frame or delivery still arriving.
        # pika counts a frame only when it is whole, but its frames are at most frame_max;
        # one delivery here may be the broker's maximum message size, over a slow link.
        self.bytes_received += inbound.bytes + inbound.held - kept
        self.frames_received += inbound.frames
        inbound.bytes = inbound.frames = 0

    def _proto_connection_made(self, transport: Any) -> None:
        if isinstance(transport, _TransportBase):
            # pika reads 4 KiB at a time: ten 256-byte deliveries, and a delivery split
            # across two reads every few. One read of what the socket holds costs one
            # call and one decoding pass for the lot (``RECV_BYTES``).
            transport._MAX_RECV_BYTES = RECV_BYTES
        if type(transport) is _PlaintextTransport:
            # And one read per readable event: pika reads until the socket would block,
            # so every event ends in an EAGAIN raised through three Python frames. The
            # loop's epoll is level-triggered: what is left is read at the next iteration.
            # Plain TCP only: TLS may hold decrypted bytes that epoll does not see.
            transport._MAX_CONSUME_BYTES = 1
        super()._proto_connection_made(transport)

    def _sac_to_pika(self, frames: bytes) -> None:
        super()._on_data_available(frames)

    def _read_frame(self) -> tuple[int, Any]:
        """pika's next frame, a content header checked by our decoder first (see the module
        docstring): pika decodes it without a table we refuse."""
        data: bytes = self._frame_buffer
        if data[0] == _CONTENT_HEADER:
            bare = without_undecodable_headers(data)
            if bare is not None:
                frame, size, why = bare
                _used, header = pika.frame.decode_frame(frame)
                header.properties = UndecodableProperties(why, **vars(header.properties))
                return size, header
        return super()._read_frame()  # type: ignore[no-any-return]

    def _adapter_emit_data(self, data: bytes) -> None:
        if not self._sac_pending:
            asyncio.get_running_loop().call_soon(self._sac_flush)
        self._sac_pending.append(data)

    def _sac_flush(self) -> None:
        if not self._sac_pending:
            return
        data = b"".join(self._sac_pending)
        self._sac_pending.clear()
        transport = self._transport
        if transport is None:
            return
        if (
            type(transport) is _PlaintextTransport
            and transport._state == transport._STATE_ACTIVE
            and not transport.get_write_buffer_size()
        ):
            # pika's transport only ever sends from a writability callback: two epoll_ctl
            # calls and one more loop iteration per write. A socket with nothing queued is
            # almost always writable: try at once, as asyncio's own transports do, and leave
            # whatever did not fit (or any error, which pika then meets itself and handles
            # its way) to pika's buffered path. Plain TCP only: TLS keeps pika's path.
            try:
                sent = transport._sock.send(data)
            except OSError:
                sent = 0
            if sent >= len(data):
                return
            data = data[sent:]
        super()._adapter_emit_data(data)

    def _adapter_disconnect_stream(self) -> None:
        self._sac_flush()
        super()._adapter_disconnect_stream()


def keep_subscriptions_at_close(channel: Channel) -> None:
    """Closing ``channel`` (or its connection) will send no ``basic.cancel`` first.

    pika's ``Channel.close`` cancels each of the channel's consumers before its
    ``channel.close``; a graceful handover must not (``sac/sdk/_core/consuming.py``,
    ``Handover``): a single-active queue activates the next consumer at the cancel, before
    this one's prefetched messages are back. Marking them cancelled already is all pika's
    close looks at; what still arrives meanwhile is no longer rejected by pika once the
    close has begun (it rejects only on an open channel), and comes back with the channel.
    Call it right before the close, in the same step of the loop."""
    channel._cancelled.update(channel._consumers)


class PublishFrames:
    """Writes Basic.Publish, content header and body frames for one channel straight into
    its connection's batched output, in the order of the calls (and of pika's own frames).

    The caller checks ``ready`` first: pika's ``basic_publish`` would refuse a channel that
    is not open, and so does this.
    """

    def __init__(self, conn: BatchedAsyncioConnection, channel: Channel) -> None:
        self._conn = conn
        self._channel = channel
        self._pending = conn._sac_pending
        self._flush = conn._sac_flush
        self._encode = PublishEncoder(channel.channel_number, conn._body_max_length).encode

    @property
    def ready(self) -> bool:
        return bool(self._channel.is_open) and not self._conn.is_closed

    def write(self, method: bytes, header: bytes, body: bytes) -> None:
        """One message (see ``PublishEncoder.encode``)."""
        pending = self._pending
        if not pending:
            asyncio.get_running_loop().call_soon(self._flush)
        frames, size = self._encode(pending, method, header, body)
        conn = self._conn
        conn.frames_sent += frames
        conn.bytes_sent += size


__all__ = ["HOOKS", "BatchedAsyncioConnection", "Hook", "PublishFrames",
           "keep_subscriptions_at_close", "require"]
