"""Bodies other than bytes: a serializer turns a value into a body and back, under a content type.

A publisher encodes with one ``Serializer`` and sets its content type on every message; a
consumer decodes with the one its ``Codecs`` picks by the message's content type. ``BYTES``
(the default on both sides) is no codec at all: the body is the caller's bytes, as before
serializers existed. ``JSON`` is built in; any other format is a ``Serializer`` made of two
functions (``Serializer("application/msgpack", msgpack.packb, msgpack.unpackb)``).

Pure: the decisions (which codec, what a failure says) are here; the publisher and the
consumer only call them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import attrs

from .._errors import ConfigurationError

V = TypeVar("V")

_MEDIA_TYPE = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+")
MAX_CONTENT_TYPE = 255
"""AMQP carries ``content_type`` as a short string: at most 255 bytes."""


def media_type(content_type: str | bytes | None) -> str | None:
    """The ``type/subtype`` of a content type, lower case, its parameters (``; charset=...``)
    dropped: what two content types must share to name the same codec. None for none (and
    for one that is not UTF-8: AMQP hands such a short string over as bytes)."""
    if not isinstance(content_type, str):
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def _content_type(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise ConfigurationError(
            f"Serializer.{attribute.name} must be a str such as 'application/json' (or None "
            f"for raw bytes), got {value!r}")
    kind = value.split(";", 1)[0].strip()
    if not _MEDIA_TYPE.fullmatch(kind) or not value.isascii() or len(value) > MAX_CONTENT_TYPE:
        raise ConfigurationError(
            f"Serializer.{attribute.name} must be a media type 'type/subtype' (ASCII, at most "
            f"{MAX_CONTENT_TYPE} characters, parameters after ';' allowed), got {value!r}")


def _callable(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not callable(value):
        raise ConfigurationError(f"Serializer.{attribute.name} must be callable, got {value!r}")


@attrs.frozen
class Serializer(Generic[V]):
    """How values of type ``V`` become message bodies and back.

    ``content_type`` is set on every message a publisher with this serializer sends, and a
    consumer decodes with it the messages whose content type has the same media type (its
    parameters aside: ``application/json; charset=utf-8`` is JSON). ``encode`` must return
    bytes and raise (``TypeError``, ``ValueError``...) for a value it cannot encode; ``decode``
    must raise for a body it cannot read. Both run in the application's process for every
    message: a consumer decodes on its connection's event loop as the message arrives (once,
    not again on a retry), so keep them quick.

    ``content_type=None`` is raw bytes (``BYTES``): nothing is encoded or set, and a consumer
    hands over undecoded any message whose content type no other of its serializers reads.
    """

    content_type: str | None = attrs.field(validator=_content_type)
    encode: Callable[[V], bytes] = attrs.field(validator=_callable, repr=False)
    decode: Callable[[bytes], V] = attrs.field(validator=_callable, repr=False)

    @property
    def raw(self) -> bool:
        """The raw-bytes serializer: no encoding, no content type of its own."""
        return self.content_type is None

    def __str__(self) -> str:
        return "raw bytes" if self.content_type is None else repr(self.content_type)


def _bytes_body(body: bytes) -> bytes:
    if type(body) is bytes:
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    raise ConfigurationError(f"message body must be bytes, got {type(body).__name__}")


def _bytes_value(data: bytes) -> bytes:
    return data


def _json_encode(value: object) -> bytes:
    # Compact and UTF-8; NaN and infinities are not JSON (RFC 8259): refused, not written.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")


def _json_decode(data: bytes) -> object:
    return json.loads(data.decode("utf-8"))


BYTES: Serializer[bytes] = Serializer(None, _bytes_body, _bytes_value)
"""The default: the body is bytes (``bytearray`` and ``memoryview`` are copied to bytes), the
content type whatever the caller sets, and a consumer's ``Delivery.value`` is the body."""

JSON: Serializer[object] = Serializer("application/json", _json_encode, _json_decode)
"""``application/json``: compact UTF-8 (``ensure_ascii=False``); NaN, infinities and anything
``json`` cannot encode (a set, bytes, an object) are refused before anything is sent. Decodes
to dicts, lists, str, int, float, bool and None."""


def checked(serializer: object, who: str) -> Serializer[Any]:
    """A publisher's ``serializer`` argument, or ``ConfigurationError`` naming ``who``."""
    if not isinstance(serializer, Serializer):
        raise ConfigurationError(f"{who}'s serializer must be a Serializer (BYTES, JSON, ...), "
                                 f"got {serializer!r}")
    return serializer


def encode_body(
    serializer: Serializer[Any], body: Any, content_type: str | None, where: str
) -> tuple[bytes, str | None]:
    """The body and content type of a message to publish, or ``ConfigurationError`` naming
    ``where`` (the publisher and its method), the value's type and why, before anything is
    sent.

    The serializer's content type is set; a ``content_type`` the caller passes as well must
    name the same media type (it may add parameters, ``; charset=utf-8``, and is then sent as
    the caller wrote it): another one would make consumers decode the body as what it is not.
    """
    kind = media_type(serializer.content_type)
    if content_type is not None and kind is not None and media_type(content_type) != kind:
        raise ConfigurationError(
            f"{where}: content_type={content_type!r} disagrees with the publisher's "
            f"serializer ({serializer.content_type!r}), which sets the content type itself; "
            f"drop content_type=, or publish with a publisher of another serializer")
    try:
        data = serializer.encode(body)
    except Exception as exc:
        raise ConfigurationError(
            f"{where}: the body (a {type(body).__name__}) cannot be encoded as "
            f"{serializer}: {type(exc).__name__}: {exc}; nothing was sent") from exc
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise ConfigurationError(
                f"{where}: the serializer for {serializer} returned a "
                f"{type(data).__name__}, not bytes; nothing was sent")
        data = bytes(data)
    return data, content_type if content_type is not None else serializer.content_type


class Undecodable(Exception):
    """A body the consumer will not hand to its handler; ``reason`` says why (it becomes the
    parked copy's ``x-sac-parked-reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _serializers(value: Any) -> tuple[Serializer[Any], ...]:
    """One or several, checked (here: the index below is built before validators run)."""
    if isinstance(value, Serializer):
        return (value,)
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ConfigurationError(
            f"serializers must be a Serializer or a sequence of them (BYTES, JSON, ...), got "
            f"{value!r}")
    items: tuple[Any, ...] = tuple(value)
    if not items:
        raise ConfigurationError("serializers must name at least one Serializer")
    seen: set[str | None] = set()
    for item in items:
        if not isinstance(item, Serializer):
            raise ConfigurationError(
                f"serializers must be Serializer instances (BYTES, JSON, ...), got {item!r}")
        kind = media_type(item.content_type)
        if kind in seen:
            raise ConfigurationError(
                "serializers name " + ("raw bytes (content type None)" if kind is None
                                       else f"the media type {kind!r}") + " twice")
        seen.add(kind)
    return items


@attrs.frozen
class Codecs:
    """What a consumer reads, and how: its serializers, the first one the default.

    For each message, in this order:

    - its content type has the media type of one of them: that one decodes it;
    - it has no content type: the first one (the default) decodes it;
    - another content type: raw bytes (``Delivery.value`` is the body) if ``BYTES`` is one
      of them, else it is refused (parked at once, the reason naming the content type).

    A body its codec cannot decode is refused too, the reason naming the content type and
    the codec's error. ``BYTES`` alone (the default) decodes nothing.
    """

    serializers: tuple[Serializer[Any], ...] = attrs.field(converter=_serializers)
    _by_type: dict[str, Serializer[Any]] = attrs.field(init=False, repr=False, eq=False)
    _raw: Serializer[Any] | None = attrs.field(init=False, repr=False, eq=False)

    @_by_type.default
    def _index(self) -> dict[str, Serializer[Any]]:
        return {kind: s for s in self.serializers
                if (kind := media_type(s.content_type)) is not None}

    @_raw.default
    def _find_raw(self) -> Serializer[Any] | None:
        return next((s for s in self.serializers if s.raw), None)

    @property
    def decodes_nothing(self) -> bool:
        """``BYTES`` alone: every value is its body, so there is nothing to do per message."""
        return self.serializers == (BYTES,)

    def decode(self, content_type: str | bytes | None, body: bytes) -> Any:
        """The value a handler gets for ``body``, or ``Undecodable`` saying why none."""
        serializer = self._pick(content_type)
        if serializer.raw:
            return body
        try:
            return serializer.decode(body)
        except Exception as exc:  # any codec's failure is the body's
            raise Undecodable(
                f"its body does not decode as {serializer.content_type!r} (content type "
                f"{_shown(content_type)}): {type(exc).__name__}: {exc}") from exc

    def _pick(self, content_type: str | bytes | None) -> Serializer[Any]:
        if content_type is None or content_type in ("", b""):
            return self.serializers[0]
        found = self._by_type.get(media_type(content_type) or "")
        if found is not None:
            return found
        if self._raw is not None:
            return self._raw
        reads = ", ".join(repr(s.content_type) for s in self.serializers)
        raise Undecodable(f"its content type {_shown(content_type)} is not one this consumer "
                          f"reads ({reads})")


def _shown(content_type: str | bytes | None) -> str:
    return "none" if not content_type else repr(content_type)
