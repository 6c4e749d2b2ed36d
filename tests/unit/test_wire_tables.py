"""sac.sdk._wire.tables decodes field tables as pika does, and hostile bytes only as
``Undecodable``: never a crash of another kind, never a hang, never more objects than bytes.

The differential half encodes tables of every AMQP field type byte by byte (pika's encoder
cannot write floats, nor the nesting depths that matter) and decodes them twice. The fuzzing
half feeds random, truncated and mutated bytes. ``SAC_FUZZ_EXAMPLES`` sets how many examples
each property test runs: 150 in ``make test``, 10 000 in ``make fuzz``.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any

import pika.data
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sac.sdk._wire.deliveries import InboundDeliveries
from sac.sdk._wire.tables import MAX_DEPTH, Undecodable, decode_table
from tests.unit.test_wire_deliveries import typed

EXAMPLES = int(os.environ.get("SAC_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ------------------------------------------------------------------ raw encoding, by hand


def short(raw: bytes) -> bytes:
    return bytes([len(raw)]) + raw


def long_bytes(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def table(fields: list[tuple[bytes, bytes]]) -> bytes:
    """A field table from (name, encoded value) pairs."""
    return long_bytes(b"".join(short(name) + value for name, value in fields))


def nested(depth: int) -> bytes:
    """A table ``depth`` levels deep: {"k": {"k": ... {} }}."""
    encoded = table([])
    for _ in range(depth - 1):
        encoded = table([(b"k", b"F" + encoded)])
    return encoded


names = st.binary(max_size=6) | st.text(max_size=4).map(str.encode)
FIXED = {b"t": ">B", b"b": ">b", b"B": ">B", b"U": ">h", b"u": ">H", b"s": ">h", b"I": ">i",
         b"i": ">I", b"L": ">q", b"l": ">q", b"T": ">Q"}


@st.composite
def fixed_values(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(sorted(FIXED)))
    fmt = FIXED[kind]
    size = struct.calcsize(fmt)
    if kind == b"T":  # mostly valid dates, sometimes past year 9999 (pika cannot)
        seconds = draw(st.integers(0, 253402300799) | st.integers(0, 2**64 - 1))
        return kind + struct.pack(fmt, seconds)
    return kind + draw(st.binary(min_size=size, max_size=size))


floats = st.builds(lambda kind, raw: kind + raw, st.just(b"f"), st.binary(min_size=4, max_size=4)) \
    | st.builds(lambda kind, raw: kind + raw, st.just(b"d"), st.binary(min_size=8, max_size=8))
strings = st.builds(lambda kind, raw: kind + long_bytes(raw), st.sampled_from([b"S", b"x"]),
                    st.binary(max_size=12) | st.text(max_size=6).map(str.encode))
decimals = st.builds(lambda places, raw: b"D" + bytes([places]) + struct.pack(">i", raw),
                     st.integers(0, 255), st.integers(-(2**31), 2**31 - 1))
scalars = st.one_of(fixed_values(), floats, strings, decimals, st.just(b"V"))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: b"A" + long_bytes(b"".join(items))),
        st.lists(st.tuples(names, inner), max_size=4).map(lambda f: b"F" + table(f)),
    ),
    max_leaves=12,
)
tables = st.lists(st.tuples(names, values), max_size=5).map(table)


def pika_decode(data: bytes, offset: int = 0) -> tuple[Any, int] | BaseException:
    try:
        return pika.data.decode_table(data, offset)
    except Exception as exc:  # noqa: BLE001 - what pika raises is the point
        return exc


def ours(data: bytes, offset: int = 0) -> tuple[Any, int] | Undecodable:
    """Our decoder; any exception but ``Undecodable`` fails the test."""
    try:
        return decode_table(data, offset)
    except Undecodable as exc:
        return exc


def objects(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(1 + objects(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(objects(v) for v in value)
    return 1


# ------------------------------------------------------------------------- differential


@FUZZ
@given(tables)
def test_well_formed_tables_decode_as_pika_decodes_them(encoded: bytes) -> None:
    """Every field type, nested: the same values of the same types, the same end offset;
    where pika fails (a NaN or infinite float, a date past 9999) ours is ``Undecodable``."""
    theirs, mine = pika_decode(encoded), ours(encoded)
    if isinstance(theirs, BaseException):
        assert isinstance(mine, Undecodable), f"pika raised {theirs!r}, we returned {mine!r}"
    else:
        assert not isinstance(mine, Undecodable), f"{mine} where pika decoded {theirs!r}"
        assert typed(mine[0]) == typed(theirs[0])
        assert mine[1] == theirs[1] == len(encoded)


def test_a_table_of_every_type_pika_encodes_is_equal() -> None:
    """pika's own encoder on one table of each type it writes, read back by both."""
    from datetime import UTC, datetime
    from decimal import Decimal

    value = {"s": "text", "b": b"\xff\x00", "t": True, "i": 7, "big": 2**40, "n": None,
             "d": Decimal("1.25"), "ts": datetime(2024, 5, 1, tzinfo=UTC),
             "x-death": [{"count": 1, "queue": "q", "reason": "rejected"}], "e": {}}
    pieces: list[bytes] = []
    pika.data.encode_table(pieces, value)
    encoded = b"".join(pieces)
    assert typed(decode_table(encoded, 0)) == typed(pika.data.decode_table(encoded, 0))


def test_floats_are_ints_as_pika_makes_them_and_nan_is_undecodable() -> None:
    encoded = table([(b"f", b"d" + struct.pack(">d", 2.75))])
    assert typed(decode_table(encoded, 0)) == typed(pika.data.decode_table(encoded, 0))
    nan = table([(b"f", b"d" + struct.pack(">d", float("nan")))])
    with pytest.raises(ValueError, match="NaN"):
        pika.data.decode_table(nan, 0)
    with pytest.raises(Undecodable, match="float"):
        decode_table(nan, 0)


# ---------------------------------------------------------------------------- depth


def test_nesting_up_to_the_limit_decodes_as_pika_decodes_it() -> None:
    encoded = nested(MAX_DEPTH)
    assert typed(decode_table(encoded, 0)) == typed(pika.data.decode_table(encoded, 0))


def test_a_table_nested_thousands_deep_is_undecodable_not_a_recursion_error() -> None:
    """The issue's case: pika raises ``RecursionError``; ours names the limit."""
    encoded = nested(5000)
    with pytest.raises(RecursionError):
        pika.data.decode_table(encoded, 0)
    with pytest.raises(Undecodable, match=f"nested deeper than {MAX_DEPTH}"):
        decode_table(encoded, 0)
    with pytest.raises(Undecodable, match="nested deeper"):
        decode_table(nested(MAX_DEPTH + 1), 0)


def test_arrays_count_as_levels() -> None:
    encoded = table([])
    for _ in range(MAX_DEPTH):
        encoded = table([(b"a", b"A" + long_bytes(b"F" + encoded))])
    with pytest.raises(Undecodable, match="nested deeper"):
        decode_table(encoded, 0)


def test_the_limit_keeps_pika_far_from_its_recursion_limit() -> None:
    """What ours accepts, pika decodes too, even from a deep call stack."""
    assert sys.getrecursionlimit() // 2 > 2 * MAX_DEPTH + 50


# -------------------------------------------------------------------------- fuzzing


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_decode_or_are_undecodable(data: bytes) -> None:
    """No other exception, and when ours decodes, pika decodes the same (ours is stricter:
    it refuses lengths that run past the end, which pika cuts short)."""
    mine = ours(data)
    if not isinstance(mine, Undecodable):
        assert typed(pika_decode(data)) == typed(mine)
        assert objects(mine[0]) <= len(data)


@FUZZ
@given(tables, st.data())
def test_truncated_tables_are_undecodable(encoded: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(Undecodable):
        decode_table(encoded[:cut], 0)


@FUZZ
@given(tables, st.data())
def test_mutated_tables_decode_or_are_undecodable(encoded: bytes, data: st.DataObject) -> None:
    """A byte or a few changed anywhere (sizes, type octets, values): decoded within the
    bytes given, with no more objects than bytes, or ``Undecodable``."""
    mutable = bytearray(encoded)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(mutable) - 1))
        mutable[at] = data.draw(st.integers(0, 255))
    mutated = bytes(mutable)
    mine = ours(mutated)
    if not isinstance(mine, Undecodable):
        assert mine[1] <= len(mutated)
        assert objects(mine[0]) <= len(mutated)
        assert typed(pika_decode(mutated)) == typed(mine)


@FUZZ
@given(st.integers(1, 2**32 - 1))
def test_a_huge_announced_size_is_refused_at_once(size: int) -> None:
    """A size field claiming gigabytes over a few bytes: refused before anything is read."""
    data = struct.pack(">I", size) + b"\x01kS" + struct.pack(">I", size)
    if size > len(data) - 4:
        with pytest.raises(Undecodable, match="runs past the end"):
            decode_table(data, 0)


# ------------------------------------------------------- whole deliveries, through the wire


def _delivery_stream(headers: bytes, body: bytes) -> bytes:
    """One delivery to (1, "ctag") whose headers are ``headers`` (raw), then a heartbeat
    (an empty body has no body frame, as a broker sends it)."""
    deliver = pika.frame.Method(1, pika.spec.Basic.Deliver(
        consumer_tag="ctag", delivery_tag=3, exchange="", routing_key="q")).marshal()
    flags = (1 << 13) | (1 << 7)
    props = struct.pack(">HHQH", 60, 0, len(body), flags) + headers + b"\x02id"
    header = struct.pack(">BHI", 2, 1, len(props)) + props + b"\xce"
    body_frame = struct.pack(">BHI", 3, 1, len(body)) + body + b"\xce" if body else b""
    return deliver + header + body_frame + pika.frame.Heartbeat().marshal()


def _feed(stream: bytes, cut: int) -> tuple[list[tuple[Any, ...]], bytes, int]:
    """``stream`` fed in pieces of ``cut`` bytes: the calls, what pika got, bytes held."""
    calls: list[tuple[Any, ...]] = []
    to_pika: list[bytes] = []
    inbound = InboundDeliveries(to_pika.append, pika.spec.FRAME_MAX_SIZE)
    inbound.register(1, "ctag", lambda *args: calls.append(args))
    taken = 0
    for at in range(0, len(stream), cut):
        inbound.feed(stream[at:at + cut])
        taken += inbound.bytes
        inbound.bytes = 0
    assert taken + sum(map(len, to_pika)) + inbound.held == len(stream)
    return calls, b"".join(to_pika), inbound.held


@FUZZ
@given(tables, st.binary(max_size=64), st.integers(1, 64))
def test_every_well_formed_delivery_is_taken_with_pikas_headers(
    encoded: bytes, body: bytes, cut: int,
) -> None:
    """Any table, fed in any pieces: taken once, with the headers pika decodes, or (where
    pika's decoder fails) taken as unfit with headers None; pika gets only the heartbeat."""
    calls, to_pika, held = _feed(_delivery_stream(encoded, body), cut)
    [args] = calls
    theirs = pika_decode(encoded)
    if isinstance(theirs, BaseException):
        assert args[5] is None
        assert args[10] is not None
    else:
        assert typed(args[5]) == typed(theirs[0])
        assert args[10] is None
    assert (args[7], args[9]) == ("id", body)
    assert to_pika == pika.frame.Heartbeat().marshal()
    assert held == 0


@FUZZ
@given(tables, st.data())
def test_mutated_and_truncated_deliveries_never_raise_out_of_the_decoder(
    encoded: bytes, data: st.DataObject,
) -> None:
    """Bytes changed anywhere in a delivery's frames (sizes, types, frame ends), or the
    stream cut short: ``feed`` never raises; every byte is taken, held or handed to pika
    (which reports what is malformed its own way); nothing is held beyond the stream."""
    stream = bytearray(_delivery_stream(encoded, b"body"))
    for _ in range(data.draw(st.integers(0, 4))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    end = data.draw(st.integers(1, len(stream)))
    calls, _to_pika, held = _feed(bytes(stream[:end]), data.draw(st.integers(1, 64)))
    assert len(calls) <= 1
    assert held <= end
