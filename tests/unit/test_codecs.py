"""sac.sdk._core.codecs: bodies other than bytes.

What a publisher sends for a value (``encode_body``: the body, the content type, and the
errors raised before anything is sent), and what a consumer makes of a body (``Codecs``:
which serializer a content type picks, and why a body is refused).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sac.sdk import (
    BYTES,
    JSON,
    AsyncConsumer,
    AsyncPublisher,
    ConfigurationError,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Publisher,
    PublisherSettings,
    QueueSettings,
    Serializer,
)
from sac.sdk._core.codecs import Codecs, Undecodable, encode_body, media_type

WHERE = "Publisher.publish() to 'orders'"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def reverse_codec() -> Serializer[str]:
    """A codec of the test's own: text stored back to front."""
    return Serializer("text/x-reversed",
                      lambda text: text[::-1].encode("utf-8"),
                      lambda data: data.decode("utf-8")[::-1])


# ---------------------------------------------------------------------- JSON


def test_json_is_compact_utf8_with_unicode_kept() -> None:
    data, content_type = encode_body(JSON, {"name": "Zoë", "city": "東京", "n": [1, 2.5]},
                                     None, WHERE)
    assert data == '{"name":"Zoë","city":"東京","n":[1,2.5]}'.encode()
    assert content_type == "application/json"


@settings(deadline=None)  # servers boot beside the unit tests: a slow example is no failure
@given(json_values)
def test_json_round_trips_what_json_can_hold(value: Any) -> None:
    data, content_type = encode_body(JSON, value, None, WHERE)
    assert Codecs(JSON).decode(content_type, data) == value


@pytest.mark.parametrize(("value", "why"), [
    ({1, 2}, "Object of type set is not JSON serializable"),
    (b"raw", "Object of type bytes is not JSON serializable"),
    (math.nan, "Out of range float values are not JSON compliant"),
    ({"deep": [math.inf]}, "Out of range float values are not JSON compliant"),
])
def test_a_value_json_cannot_hold_is_refused_naming_who_what_and_why(
        value: object, why: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        encode_body(JSON, value, None, WHERE)
    text = str(caught.value)
    assert text.startswith(f"{WHERE}: the body (a {type(value).__name__}) cannot be encoded "
                           f"as 'application/json'")
    assert why in text
    assert text.endswith("nothing was sent")
    assert isinstance(caught.value.__cause__, TypeError | ValueError)


def test_the_callers_content_type_may_add_parameters_but_not_change_the_type() -> None:
    _, content_type = encode_body(JSON, [], "application/JSON; charset=utf-8", WHERE)
    assert content_type == "application/JSON; charset=utf-8"  # as the caller wrote it
    with pytest.raises(ConfigurationError, match=r"content_type='text/plain' disagrees with "
                       r"the publisher's serializer \('application/json'\)"):
        encode_body(JSON, [], "text/plain", WHERE)


# ---------------------------------------------------------------------- bytes and others


def test_bytes_keep_the_callers_content_type_and_copy_views() -> None:
    assert encode_body(BYTES, b"x", None, WHERE) == (b"x", None)
    assert encode_body(BYTES, bytearray(b"y"), "text/plain", WHERE) == (b"y", "text/plain")
    assert encode_body(BYTES, memoryview(b"z"), None, WHERE) == (b"z", None)
    with pytest.raises(ConfigurationError, match="message body must be bytes, got str"):
        encode_body(BYTES, "text", None, WHERE)


def test_a_custom_codec_round_trips_under_its_content_type() -> None:
    codec = reverse_codec()
    data, content_type = encode_body(codec, "abc", None, WHERE)
    assert (data, content_type) == (b"cba", "text/x-reversed")
    assert Codecs([codec]).decode(content_type, data) == "abc"


def test_an_encoder_that_returns_no_bytes_is_refused() -> None:
    text_out = Serializer("text/plain", str, bytes)
    with pytest.raises(ConfigurationError, match=r"returned a str, not bytes; nothing was sent"):
        encode_body(text_out, 1, None, WHERE)


@pytest.mark.parametrize("content_type", [
    "", "json", "application/", "/json", "application/json extra", "applicatión/json",
    "a/" + "b" * 260, 5,
])
def test_a_serializer_needs_a_media_type(content_type: Any) -> None:
    with pytest.raises(ConfigurationError, match="content_type must be"):
        Serializer(content_type, bytes, bytes)


def test_a_serializer_needs_functions() -> None:
    with pytest.raises(ConfigurationError, match=r"Serializer\.decode must be callable"):
        Serializer("text/plain", bytes, "not a function")  # type: ignore[arg-type]


# ---------------------------------------------------------------------- consuming


def test_media_type_drops_parameters_and_case() -> None:
    assert media_type("Application/JSON ; charset=utf-8") == "application/json"
    assert media_type(None) is None
    assert media_type("") is None
    assert media_type(b"\xff/x") is None  # not UTF-8 on the wire: names no codec


def test_bytes_alone_decode_nothing_and_hand_every_body_over() -> None:
    codecs = Codecs(BYTES)
    assert codecs.decodes_nothing
    assert codecs.decode("application/json", b"{not json") == b"{not json"
    assert codecs.decode(None, b"x") == b"x"


def test_json_alone_decodes_no_content_type_as_json_and_refuses_others() -> None:
    codecs = Codecs(JSON)
    assert not codecs.decodes_nothing
    assert codecs.decode(None, b'{"a":1}') == {"a": 1}
    assert codecs.decode("application/json; charset=utf-8", b"[1]") == [1]
    with pytest.raises(Undecodable) as caught:
        codecs.decode("text/plain", b"hello")
    assert caught.value.reason == ("its content type 'text/plain' is not one this consumer "
                                   "reads ('application/json')")


def test_with_bytes_as_well_other_content_types_come_raw() -> None:
    codecs = Codecs([JSON, BYTES])
    assert codecs.decode("text/plain", b"hello") == b"hello"
    assert codecs.decode(None, b"[2]") == [2]  # the first one is the default
    codecs = Codecs([BYTES, JSON])
    assert codecs.decode(None, b"[2]") == b"[2]"
    assert codecs.decode("application/json", b"[2]") == [2]


@pytest.mark.parametrize(("body", "error"), [
    (b"{not json", "JSONDecodeError: Expecting property name enclosed in double quotes"),
    (b'"caf\xe9"', "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9"),
    (b"", "JSONDecodeError: Expecting value"),
])
def test_a_body_that_does_not_decode_is_refused_naming_the_type_and_the_error(
        body: bytes, error: str) -> None:
    with pytest.raises(Undecodable) as caught:
        Codecs([JSON, BYTES]).decode("application/json", body)
    reason = caught.value.reason
    assert reason.startswith("its body does not decode as 'application/json' (content type "
                             "'application/json'): ")
    assert error in reason


def test_any_exception_of_a_custom_decoder_is_the_bodys_fault() -> None:
    def broken(_data: bytes) -> object:
        raise RuntimeError("codec bug")

    with pytest.raises(Undecodable, match="RuntimeError: codec bug"):
        Codecs(Serializer("text/x-broken", bytes, broken)).decode("text/x-broken", b"")


@pytest.mark.parametrize(("serializers", "why"), [
    ([], "at least one"),
    ("application/json", "must be a Serializer or a sequence"),
    ([JSON, "text/plain"], "must be Serializer instances"),
    ([JSON, Serializer("application/json; charset=utf-8", bytes, bytes)],
     "the media type 'application/json' twice"),
    ([BYTES, Serializer(None, bytes, bytes)], "raw bytes .* twice"),
])
def test_a_consumers_serializers_are_checked(serializers: Any, why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        Codecs(serializers)


def test_json_decoding_matches_the_standard_library() -> None:
    """The decoder is ``json``'s own: a number or a string alone is JSON too."""
    for text in ("3", '"s"', "null", "[]"):
        assert Codecs(JSON).decode(None, text.encode()) == json.loads(text)


@pytest.mark.parametrize("consumer", [Consumer, AsyncConsumer])
def test_a_consumer_checks_its_serializers_when_made(consumer: Any) -> None:
    settings = ConsumerSettings(ConnectionSettings(urls=["amqp://localhost:1"]),
                                QueueSettings("orders"))
    with pytest.raises(ConfigurationError, match="serializers must be a Serializer"):
        consumer(settings, lambda _d: None, serializers="application/json")


@pytest.mark.parametrize("publisher", [Publisher, AsyncPublisher])
def test_a_publisher_checks_its_serializer_when_made(publisher: Any) -> None:
    settings = PublisherSettings(ConnectionSettings(urls=["amqp://localhost:1"]))
    with pytest.raises(ConfigurationError, match=r"Publisher's serializer must be a "
                       r"Serializer \(BYTES, JSON, ...\), got <module 'json'"):
        publisher(settings, serializer=json)
