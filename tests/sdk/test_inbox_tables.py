"""An effect's table that the store's database lacks: named when the consumer starts (the
inbox's ``tables=``), and, when not declared, a set-up fault that stops the consumer with
every message unacked, not a poison message per message (a thousand orders would otherwise
each be retried for seconds and parked)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from sac.sdk import (
    Backoff,
    ConnectionSettings,
    ConsumerSettings,
    Delivery,
    QueueSettings,
    StoreError,
    StoreUnavailable,
)
from sac.sdk.dedup import Inbox, PostgresStore, SQLiteStore, Store, Transaction
from sac.server import LocalCluster
from tests.dedup.conftest import SQL_STORES, store_factory
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace, PublisherFace
from tests.sdk.test_inbox import named, publish, ready_messages


@pytest.fixture(params=SQL_STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    made: Store = store_factory(str(request.param), tmp_path, request)()
    return made


def insert_order(delivery: Delivery, tx: Transaction) -> None:
    mark = "?" if type(tx.connection).__module__.startswith("sqlite3") else "%s"
    tx.execute(f"INSERT INTO orders (id, body) VALUES ({mark}, {mark})",
               (tx.message_id, bytes(delivery.body).decode()))


def create_orders(store: Store) -> None:
    """As the application's own migration would, on the store's database."""
    ddl = "CREATE TABLE orders (id TEXT PRIMARY KEY, body TEXT)"
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as db, db:
            db.execute(ddl)
        return
    import psycopg

    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.dsn, autocommit=True) as pg:
        pg.execute(ddl)


def test_a_missing_effect_table_is_named_before_anything_is_consumed(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: Callable[..., PublisherFace], consumers: Callable[..., ConsumerFace],
    store: Store,
) -> None:
    ids = publish(publishers, face, conn, queue, 3)
    inbox = Inbox(store, insert_order, tables=["orders"])
    early = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue), inbox=inbox)
    with pytest.raises(StoreError, match=r"has no table 'orders', which the effect writes"):
        early.start()
    assert ready_messages(cluster, queue.name) == len(ids)  # nothing was taken

    create_orders(store)
    inbox = Inbox(store, insert_order, tables=["orders"])
    c = consumers(face, ConsumerSettings(named(conn, queue, "b"), queue), inbox=inbox).start()
    wait_until(lambda: c.stats.acked == len(ids), 30, "every order handled")
    assert inbox.stats.committed == len(ids)


def test_an_effect_on_a_missing_table_stops_the_consumer_and_parks_nothing(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    publishers: Callable[..., PublisherFace], consumers: Callable[..., ConsumerFace],
    store: Store,
) -> None:
    quick = Backoff(initial=0.05, maximum=0.2, max_attempts=None, max_elapsed=1.0)
    inbox = Inbox(store, insert_order, store_retry=quick)
    c = consumers(face, ConsumerSettings(named(conn, queue, "a"), queue), inbox=inbox).start()
    ids = publish(publishers, face, conn, queue, 5)
    error = c.ended(60)
    assert isinstance(error, StoreUnavailable)
    assert "orders" in str(error)
    assert c.stats.rejected == 0
    wait_until(lambda: ready_messages(cluster, queue.name) == len(ids), 30,
               "every message back in the queue")
    parking = queue.parking()
    assert parking is not None
    assert ready_messages(cluster, parking.name) == 0
