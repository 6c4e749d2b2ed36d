"""sac/sdk/_wire/pika_hooks.py refuses, at import, a pika that lacks a hook it uses, naming it;
and no content header pika decodes holds a table our bounded decoder refuses."""

from __future__ import annotations

import struct
from typing import Any

import pika
import pika.frame
import pytest

from sac.sdk._wire.pika_hooks import (
    HOOKS,
    Hook,
    UndecodableProperties,
    require,
    undecodable,
    without_undecodable_headers,
)
from tests.sdk.test_hostile_frames import RawProperties, nested_headers


class Base:
    def __init__(self) -> None:
        self._kept = 1

    def _method(self) -> None:
        pass


class Derived(Base):
    def __init__(self) -> None:
        super().__init__()


def test_every_hook_is_in_the_installed_pika() -> None:
    assert [hook.describe() for hook in HOOKS if not hook.present()] == []


def test_a_missing_method_is_named_with_the_pika_version() -> None:
    hooks = [Hook(Base, "_method", "calls"), Hook(Base, "_gone", "overrides to do X")]
    with pytest.raises(ImportError, match=r"pika 9\.9\.9 has no .*Base\._gone.*overrides to do X"):
        require(hooks, "9.9.9")


def test_an_instance_attribute_is_looked_for_where_it_is_set_bases_included() -> None:
    require([Hook(Derived, "_kept", "reads", set_in="__init__")], pika.__version__)
    with pytest.raises(ImportError, match=r"Derived\._other \(set in Derived\.__init__\)"):
        require([Hook(Derived, "_other", "reads", set_in="__init__")], "1.0")
    with pytest.raises(ImportError, match="_kept"):
        require([Hook(Derived, "_kept", "reads", set_in="_nowhere")], "1.0")


# ---------------------------------------------------------------- content headers pika reads

def header_frame(properties: Any, channel: int = 3, body_size: int = 11) -> bytes:
    return bytes(pika.frame.Header(channel, body_size, properties).marshal())


def test_a_header_pika_cannot_decode_reaches_it_without_its_table() -> None:
    """Before, pika's decoder met the table itself: ``RecursionError`` in its frame reader,
    and the connection was lost."""
    frame = header_frame(RawProperties(nested_headers(3000), "deep", rare=True))
    with pytest.raises(RecursionError):
        pika.frame.decode_frame(frame)
    bare = without_undecodable_headers(frame + b"\x08\x00")  # a heartbeat behind it
    assert bare is not None
    cleaned, size, why = bare
    assert size == len(frame)
    assert why == "its headers cannot be decoded: tables nested deeper than 64 levels"
    used, header = pika.frame.decode_frame(cleaned)
    assert used == len(cleaned)
    assert (header.channel_number, header.body_size) == (3, 11)
    props = header.properties
    assert (props.headers, props.delivery_mode, props.priority, props.message_id) == (
        None, 2, 1, "deep")


def test_what_comes_before_a_table_that_runs_past_its_frame_is_kept() -> None:
    props = pika.BasicProperties(content_type="text/plain", headers={"a": 1}, message_id="m")
    frame = bytearray(header_frame(props))
    table_at = 7 + 14 + 1 + len("text/plain")
    struct.pack_into(">I", frame, table_at, 10_000)
    bare = without_undecodable_headers(bytes(frame))
    assert bare is not None
    cleaned, size, why = bare
    assert (size, why) == (len(frame), "its headers cannot be decoded: a table runs past the "
                           f"end of the headers ({10_000 + table_at + 4 - len(frame) + 1} "
                           "bytes short)")
    decoded = pika.frame.decode_frame(cleaned)[1].properties
    assert (decoded.content_type, decoded.headers, decoded.message_id) == (
        "text/plain", None, None)


def test_properties_that_run_past_their_frame_before_the_table_are_all_left_out() -> None:
    props = pika.BasicProperties(content_type="t", content_encoding="e", headers={"a": 1},
                                 message_id="m")
    frame = bytearray(header_frame(props))
    frame[7 + 14] = 200  # the content type's length
    with pytest.raises(struct.error):
        pika.frame.decode_frame(bytes(frame))
    bare = without_undecodable_headers(bytes(frame))
    assert bare is not None
    cleaned, size, why = bare
    assert (size, why) == (len(frame), "its properties run past the end of their frame")
    decoded = pika.frame.decode_frame(cleaned)[1].properties
    assert vars(decoded) == vars(pika.BasicProperties())


@pytest.mark.parametrize("data", [
    header_frame(pika.BasicProperties(headers={"x-death": [{"count": 1, "q": "a"}]})),
    header_frame(pika.BasicProperties(message_id="no headers")),
    header_frame(RawProperties(nested_headers(3000), "deep", rare=False))[:-1],  # not whole
    bytes(pika.frame.Heartbeat().marshal()),
    bytes(pika.frame.Method(1, pika.spec.Basic.Ack(7)).marshal()),
    b"\x02\x00",
], ids=["decodable", "no-headers", "not-whole", "heartbeat", "method", "frame-head-short"])
def test_every_other_frame_is_left_to_pika(data: bytes) -> None:
    assert without_undecodable_headers(data) is None


def test_only_the_hook_can_mark_properties_undecodable() -> None:
    forged = pika.BasicProperties(headers={"undecodable": "x"})
    forged.undecodable = "set by anyone"
    assert undecodable(forged) is None
    marked = UndecodableProperties("why", message_id="m")
    assert (undecodable(marked), marked.headers, marked.message_id) == ("why", None, "m")
