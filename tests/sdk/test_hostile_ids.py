"""Whatever another client puts in a message cannot stop an inbox consumer.

Messages are published here with raw pika (not our publisher, which only sends ids it made),
through the real broker, to both faces with each store. A message id the store cannot hold
as it came (a NUL character, bytes that are not UTF-8) is recorded under its canonical text
form (``sac.sdk.dedup.id_key``), so it is handled once like any other; the messages behind
it are handled once, the consumer keeps running, and its history stays readable JSON.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pika
import pika.data
import pika.exceptions
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sac.sdk import (
    Backoff,
    ConnectionSettings,
    ConsumerSettings,
    HistoryRecorder,
    PublisherSettings,
    QueueSettings,
    Role,
)
from sac.sdk.dedup import Inbox, id_key
from sac.server import LocalCluster
from tests.dedup.conftest import StoreFactory
from tests.dedup.ledger import Ledger
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace, PublisherFace

MakePublisher = Callable[..., PublisherFace]
RawMessage = tuple[str | bytes | None, dict[str, Any] | None, bytes]
"""(message id as pika sends it, header table, body)."""
SHORT_STORE_RETRY = Backoff(initial=0.1, maximum=0.5, max_attempts=None, max_elapsed=5.0)
"""A store that keeps failing ends the consumer within seconds (it would take a minute)."""


def declare(publishers: MakePublisher, face: str, conn: ConnectionSettings,
            queue: QueueSettings) -> None:
    """The queue as our clients declare it (a publisher's start declares it)."""
    pub = publishers(face, PublisherSettings(conn, queue=queue))
    pub.start()
    pub.close()


def publish_raw(url: str, queue: str, messages: Sequence[RawMessage]) -> None:
    """Each message as another client would publish it, confirmed by the broker."""
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for message_id, headers, body in messages:
            channel.basic_publish(
                "", queue, body,
                pika.BasicProperties(message_id=message_id, headers=headers, delivery_mode=2))


def recording(path: Path, request: pytest.FixtureRequest) -> HistoryRecorder:
    """A history file, closed after the test (added before the consumers' cleanup, so that
    it is closed after they stopped)."""
    recorder = HistoryRecorder(path, "a", flush_every=1)
    request.addfinalizer(recorder.close)
    return recorder


def history_messages(path: Path) -> list[str]:
    """The ``msg`` of every ``commit`` event of a history file (each line must be JSON)."""
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [str(event["msg"]) for event in events if event["type"] == "commit"]


def test_an_id_with_a_nul_or_not_utf8_neither_stops_an_inbox_nor_the_messages_behind(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
    make_store: StoreFactory, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    declare(publishers, face, conn, queue)
    hostile: list[str | bytes] = ["nul\x00inside", b"\xff\xfenot-utf8", "sac-id:looks-escaped"]
    good = [f"good-{i}" for i in range(5)]
    publish_raw(cluster.urls()[0], queue.name,
                [(mid, None, b"x") for mid in [*hostile, *good]])
    ledger = Ledger(make_store())
    recorder = recording(tmp_path / "a.jsonl", request)
    inbox = Inbox(make_store(), ledger.effect("a"), store_retry=SHORT_STORE_RETRY)
    c = consumers(face, ConsumerSettings(conn, queue), recorder=recorder, inbox=inbox).start()
    expected = {id_key(mid) for mid in [*hostile, *good]}
    wait_until(lambda: c.stats.acked >= len(expected) or c.role is Role.STOPPED, 60,
               "every message acked")
    assert c.role is Role.ACTIVE, f"the consumer stopped: {c.ended(1)!r}"
    c.stop()
    recorder.close()
    counts = ledger.counts()
    assert set(counts) == expected
    assert [m for m, n in counts.items() if n > 1] == []
    assert sorted(history_messages(tmp_path / "a.jsonl")) == sorted(expected)


@pytest.mark.parametrize("message_id", ["plain-id", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
                                        "ünïcödé ids", "with\\backslash", "100%"])
def test_an_ordinary_id_is_its_own_key(message_id: str) -> None:
    """Records written before ids had a canonical form stay valid: an id that every store
    holds as it is maps to itself."""
    assert id_key(message_id) == message_id


def test_every_distinct_id_has_a_distinct_storable_key() -> None:
    ids: list[str | bytes] = ["a\x00b", "a%00b", b"a\xffb", "a\udcffb", "sac-id:a",
                              "sac-id:sac-id%3Aa", b"a\x00b", "", b"\xff"]
    keys = [id_key(mid) for mid in ids]
    assert len(set(keys)) == len(ids) - 1  # "a\x00b" and b"a\x00b" are one id on the wire
    assert id_key("a\x00b") == id_key(b"a\x00b")
    for key in keys:
        assert "\x00" not in key
        key.encode("utf-8")  # no lone surrogate: every store can hold it


# ---------------------------------------------------------------------- fuzz

FUZZ_EXAMPLES = int(os.environ.get("SAC_FUZZ_EXAMPLES", "3"))
"""Examples per face and store: a few in ``make test``; a longer run sets more, e.g.
``SAC_FUZZ_EXAMPLES=200 pytest tests/sdk/test_hostile_ids.py -k fuzz``."""
MAX_HEADER_OCTETS = 100_000
"""A content header must fit in one frame (``frame_max``, 128 KiB by default)."""
HEADERS_WE_READ = ["x-delivery-count", "x-death", "x-sac-retransmit", "x-sac-replayed",
                   "x-sac-parked-at", "x-sac-parked-reason", "x-sac-parked-attempts",
                   "x-sac-parked-from", "x-first-death-queue", "x-order-id"]
"""Names the SDK reads: a publisher may set them to anything."""

_keys = st.one_of(st.sampled_from(HEADERS_WE_READ), st.text(max_size=20))
_int32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 63 - 1), _int32,
    st.text(max_size=200), st.binary(max_size=200),
    st.builds(lambda raw, places: Decimal(raw).scaleb(-places), _int32,
              st.integers(0, 9)),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1)),
)
_arrays = st.one_of(st.lists(_int32, min_size=1000, max_size=5000),
                    st.lists(st.text(max_size=3), min_size=1000, max_size=3000))
"""Huge arrays (each element is five octets or more on the wire)."""


def _nested(depth: int, leaf: Any) -> Any:
    for level in range(depth):
        leaf = [leaf] if level % 2 else {"n": leaf}
    return leaf


_values = st.one_of(
    st.recursive(_leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(_keys, inner, max_size=5)),
        max_leaves=30),
    _arrays,
    st.builds(_nested, st.integers(1, 50), _leaves),
)


def _encodes(headers: dict[str, Any] | None) -> bool:
    if headers is None:
        return True
    pieces: list[bytes] = []
    try:
        return pika.data.encode_table(pieces, headers) < MAX_HEADER_OCTETS
    except (pika.exceptions.UnsupportedAMQPFieldException, struct.error, ValueError):
        return False  # pika cannot send it at all (a key over 255 octets, a decimal too wide)


_ids = st.one_of(
    st.none(), st.just(""), st.text(max_size=60),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=255).filter(
        lambda t: len(t.encode()) <= 255),
    st.binary(max_size=255), st.sampled_from(["\x00", "a\x00b", "\x1b[31mred", "sac-id:x"]),
)
_messages = st.tuples(
    _ids, st.one_of(st.none(), st.dictionaries(_keys, _values, max_size=6)).filter(_encodes),
    st.binary(max_size=4096),
)


def test_fuzz_whatever_another_client_publishes_the_messages_behind_are_handled_once(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
    make_store: StoreFactory, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """Random ids, header tables (every field type pika encodes, nesting, huge arrays, the
    names the SDK reads) and bodies, from another client, in front of well-formed messages:
    each well-formed one is handled exactly once, every message is settled (none goes round
    the queue for ever) and the consumer never stops."""
    declare(publishers, face, conn, queue)
    ledger = Ledger(make_store())
    history = tmp_path / "a.jsonl"
    recorder = recording(history, request)
    inbox = Inbox(make_store(), ledger.effect("a"), store_retry=SHORT_STORE_RETRY)
    c = consumers(face, ConsumerSettings(conn, queue), recorder=recorder, inbox=inbox).start()
    url = cluster.urls()[0]
    good: list[str] = []
    published: list[RawMessage] = []

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(_messages, min_size=1, max_size=3))
    def example(hostile: list[RawMessage]) -> None:
        behind = [f"good-{uuid.uuid4()}" for _ in range(2)]
        good.extend(behind)
        messages = [*hostile, *((mid, None, b"ok") for mid in behind)]
        published.extend(messages)
        publish_raw(url, queue.name, messages)
        # Every message settled (handled, skipped as a duplicate, or parked; each is acked
        # once), none going round (requeued again and again), the consumer still there.
        wait_until(lambda: c.stats.acked >= len(published) or c.role is Role.STOPPED, 60,
                   "every message acked")
        assert c.role is Role.ACTIVE, f"the consumer stopped: {c.ended(1)!r}"
        assert set(good) <= set(ledger.counts())

    example()
    c.stop()
    recorder.close()
    counts = ledger.counts()
    assert {m: counts[m] for m in good} == dict.fromkeys(good, 1)
    for line in history.read_text(encoding="utf-8").splitlines():
        json.loads(line)  # every event written, as JSON
