"""Whatever another client puts in a message cannot stop an inbox consumer.

Messages are published here with raw pika (not our publisher, which only sends ids it made),
through the real broker, to both faces with each store. A message id the store cannot hold
as it came (a NUL character, bytes that are not UTF-8) is recorded under its canonical text
form (``sac.sdk.dedup.id_key``), so it is handled once like any other; the messages behind
it are handled once, the consumer keeps running, and its history stays readable JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pika
import pytest

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
    publishers(face, PublisherSettings(conn, queue=queue)).start().close()


def publish_raw(url: str, queue: str, messages: Sequence[RawMessage]) -> None:
    """Each message as another client would publish it, confirmed by the broker."""
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for message_id, headers, body in messages:
            channel.basic_publish(
                "", queue, body,
                pika.BasicProperties(message_id=message_id, headers=headers, delivery_mode=2))


def history_messages(path: Path) -> list[str]:
    """The ``msg`` of every ``commit`` event of a history file (each line must be JSON)."""
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [str(event["msg"]) for event in events if event["type"] == "commit"]


def test_an_id_with_a_nul_or_not_utf8_neither_stops_an_inbox_nor_the_messages_behind(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: MakePublisher, consumers: Callable[..., ConsumerFace],
    make_store: StoreFactory, tmp_path: Path,
) -> None:
    declare(publishers, face, conn, queue)
    hostile: list[str | bytes] = ["nul\x00inside", b"\xff\xfenot-utf8", "sac-id:looks-escaped"]
    good = [f"good-{i}" for i in range(5)]
    publish_raw(cluster.urls()[0], queue.name,
                [(mid, None, b"x") for mid in [*hostile, *good]])
    ledger = Ledger(make_store())
    recorder = HistoryRecorder(tmp_path / "a.jsonl", "a", flush_every=1)
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
