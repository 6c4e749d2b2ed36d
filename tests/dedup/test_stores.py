"""Each dedup store against its real backend: epochs, the commit protocol, retention, and
the errors a bad path, DSN or schema gives before any message is consumed."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sac.sdk import SchemaMismatch, StaleEpoch, StoreUnavailable
from sac.sdk.dedup import SCHEMA_VERSION, MemoryStore, PostgresStore, Retention, SQLiteStore, Store
from sac.sdk.dedup._store import Duplicate
from tests.dedup.conftest import SQL_STORES, StoreFactory, new_database

if TYPE_CHECKING:
    from sac.server import LocalPostgres

Q = "orders"


def effect_table(store: Store) -> None:
    """A table of the application's own, written through the inbox transaction."""
    if isinstance(store, MemoryStore):
        return
    with store.transaction("setup", f"setup-{os.urandom(4).hex()}", 0) as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS effects (msg TEXT)")


def effects(store: Store) -> list[str]:
    assert not isinstance(store, MemoryStore)
    with store.transaction("read", f"read-{os.urandom(4).hex()}", 0) as tx:
        return [row[0] for row in tx.execute("SELECT msg FROM effects").fetchall()]


def write_effect(store: Store, tx: Any, msg: str) -> None:
    if not isinstance(store, MemoryStore):
        p = "%s" if isinstance(store, PostgresStore) else "?"
        tx.execute(f"INSERT INTO effects (msg) VALUES ({p})", (msg,))


def test_epochs_grow_by_one_per_claim_and_per_queue(store: Store) -> None:
    assert store.current_epoch(Q) == 0
    assert [store.claim_epoch(Q) for _ in range(3)] == [1, 2, 3]
    assert store.claim_epoch("other") == 1
    assert store.current_epoch(Q) == 3


def test_claims_from_many_connections_never_repeat(make_store: StoreFactory) -> None:
    stores = [make_store() for _ in range(4)]
    for s in stores:
        s.open()
    claimed: list[int] = []
    lock = threading.Lock()

    def claim(s: Store) -> None:
        for _ in range(25):
            epoch = s.claim_epoch(Q)
            with lock:
                claimed.append(epoch)

    threads = [threading.Thread(target=claim, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(claimed) == list(range(1, 101))


def test_an_epoch_from_outside_is_adopted_unless_older(store: Store) -> None:
    assert store.adopt_epoch(Q, 10) == 10
    assert store.adopt_epoch(Q, 10) == 10  # the same election, adopted again
    with pytest.raises(StaleEpoch) as caught:
        store.adopt_epoch(Q, 5)
    assert (caught.value.epoch, caught.value.current) == (5, 10)
    assert store.claim_epoch(Q) == 11


def test_commit_writes_effect_and_record_together(store: Store) -> None:
    effect_table(store)
    epoch = store.claim_epoch(Q)
    with store.transaction(Q, "m-1", epoch, "consumer-a") as tx:
        write_effect(store, tx, "m-1")
    assert store.seen(Q, "m-1")
    assert not store.seen("other", "m-1")
    [(msg, rec_epoch, consumer, ts)] = store.records(Q)
    assert (msg, rec_epoch, consumer) == ("m-1", epoch, "consumer-a")
    assert abs(ts - time.time()) < 60
    if not isinstance(store, MemoryStore):
        assert effects(store) == ["m-1"]


def test_a_failing_effect_leaves_neither_effect_nor_record(store: Store) -> None:
    effect_table(store)
    epoch = store.claim_epoch(Q)

    def broken_handler() -> None:
        with store.transaction(Q, "m-1", epoch) as tx:
            write_effect(store, tx, "m-1")
            raise RuntimeError("handler broke")

    with pytest.raises(RuntimeError, match="handler broke"):
        broken_handler()
    assert not store.seen(Q, "m-1")
    if not isinstance(store, MemoryStore):
        assert effects(store) == []


def test_a_second_commit_of_one_message_is_refused_and_rolled_back(store: Store) -> None:
    effect_table(store)
    epoch = store.claim_epoch(Q)
    with store.transaction(Q, "m-1", epoch) as tx:
        write_effect(store, tx, "m-1")
    ran = []

    def again() -> None:
        with store.transaction(Q, "m-1", epoch) as tx:
            ran.append(True)
            write_effect(store, tx, "m-1")

    with pytest.raises(Duplicate):
        again()
    if isinstance(store, MemoryStore):
        assert not ran  # the memory store cannot roll back, so it checks first
    elif isinstance(store, PostgresStore):
        assert not ran  # it takes the record before the effect runs
        assert effects(store) == ["m-1"]
    else:
        assert ran
        assert effects(store) == ["m-1"]
    assert len(store.records(Q)) == 1


def test_a_commit_from_an_older_epoch_is_refused(make_store: StoreFactory) -> None:
    """Two consumers on their own connections: the old one's commit, begun before the new
    one claimed, is refused after the claim, and it held no lock that delayed the claim."""
    old, new = make_store(), make_store()
    old.open()
    new.open()
    effect_table(old)
    old_epoch = old.claim_epoch(Q)
    new_epochs: list[int] = []

    def zombie() -> None:
        with old.transaction(Q, "m-1", old_epoch) as tx:
            # Inside its handler, the new consumer claims and commits meanwhile.
            began = time.monotonic()
            new_epochs.append(new.claim_epoch(Q))
            with new.transaction(Q, "m-2", new_epochs[0]) as tx2:
                write_effect(new, tx2, "m-2")
            assert time.monotonic() - began < 5
            write_effect(old, tx, "m-1")

    if isinstance(old, PostgresStore):
        # The claim ends the old one's session if it waits inside its transaction: the store
        # fails under it, and tried again (as the inbox does) it learns it was replaced.
        # Caught while a pipelined statement still runs, its commit meets the epoch check.
        with pytest.raises((StoreUnavailable, StaleEpoch)) as first:
            zombie()
        caught = first
        if first.type is StoreUnavailable:
            with pytest.raises(StaleEpoch) as caught, old.transaction(
                    Q, "m-1", old_epoch) as tx:
                write_effect(old, tx, "m-1")
    else:
        with pytest.raises(StaleEpoch) as caught:
            zombie()
    new_epoch = new_epochs[0]
    assert (caught.value.epoch, caught.value.current) == (old_epoch, new_epoch)
    assert not old.seen(Q, "m-1")
    assert new.seen(Q, "m-2")
    if not isinstance(old, MemoryStore):
        assert effects(old) == ["m-2"]


def test_purge_by_age_and_by_count(store: Store) -> None:
    epoch = store.claim_epoch(Q)
    for n in range(5):
        with store.transaction(Q, f"m-{n}", epoch):
            pass
    with store.transaction("other", "x", epoch):
        pass
    assert store.purge(Retention(max_age=3600, max_records=3, batch=1)) == 2
    assert [r[0] for r in store.records(Q)] == ["m-2", "m-3", "m-4"]
    assert store.seen("other", "x")
    later = time.time() + 7200
    assert store.purge(Retention(max_age=3600, batch=2), now=later) == 4
    assert store.records(Q) == []
    assert not store.seen(Q, "m-4")


def test_retention_settings_are_validated() -> None:
    from sac.sdk import ConfigurationError

    with pytest.raises(ConfigurationError, match="max_age"):
        Retention(max_age=0)
    with pytest.raises(ConfigurationError, match="max_records"):
        Retention(max_records=2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="interval"):
        Retention(interval=-1)
    assert Retention(max_age=None, max_records=10).max_records == 10


# ---------------------------------------------------------------------- bad input


def test_sqlite_path_in_a_missing_directory(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "nope" / "dedup.db")
    with pytest.raises(StoreUnavailable, match=r"directory .*nope does not exist"):
        store.open()


def test_sqlite_path_that_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreUnavailable, match="does not exist"):
        SQLiteStore(tmp_path / "file" / "dedup.db").open()
    # /proc refuses new files even to root.
    with pytest.raises(StoreUnavailable, match="proc"):
        SQLiteStore("/proc/dedup.db").open()
    if os.geteuid() != 0:  # root ignores permission bits
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(StoreUnavailable, match="not writable"):
            SQLiteStore(locked / "dedup.db").open()


def test_sqlite_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "dedup.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreUnavailable, match=r"dedup\.db"):
        SQLiteStore(path).open()


def test_postgres_dsn_that_does_not_connect(postgres: LocalPostgres) -> None:
    dsn = new_database(postgres, "bad")
    wrong = dsn.replace(dsn.split("://")[1].split("@")[0], "sac:wrong-password-42")
    with pytest.raises(StoreUnavailable, match="does not connect") as caught:
        PostgresStore(wrong).open()
    assert "wrong-password-42" not in str(caught.value)
    nothing = "postgresql://sac:pw@127.0.0.1:9/postgres"
    with pytest.raises(StoreUnavailable, match="does not connect"):
        PostgresStore(nothing, connect_timeout=2).open()


def old_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest,
              statements: list[str]) -> Store:
    """A store on a file or database made by ``statements`` (tables of another version)."""
    if kind == "sqlite":
        path = tmp_path / "old.db"
        with sqlite3.connect(path) as db:
            for sql in statements:
                db.execute(sql)
        db.close()
        return SQLiteStore(path)
    import psycopg

    dsn = new_database(request.getfixturevalue("postgres"), "old")
    with psycopg.connect(dsn, autocommit=True) as pg:
        for sql in statements:
            pg.execute(sql)
    return PostgresStore(dsn)


def schema_version(store: Store) -> str:
    assert isinstance(store, SQLiteStore | PostgresStore)
    with store.transaction("read", f"read-{os.urandom(4).hex()}", 0) as tx:
        return str(tx.execute("SELECT value FROM sac_dedup_meta WHERE key = 'schema_version'"
                              ).fetchone()[0])


@pytest.mark.parametrize("kind", SQL_STORES)
@pytest.mark.parametrize("old", ["unversioned", "version-0"])
def test_a_schema_from_an_older_version_is_refused_untouched(
    kind: str, old: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    statements = ["CREATE TABLE sac_dedup_records (queue TEXT, message_id TEXT)"]
    if old == "version-0":
        statements += ["CREATE TABLE sac_dedup_meta (key TEXT PRIMARY KEY, value TEXT)",
                       "INSERT INTO sac_dedup_meta VALUES ('schema_version', '0')"]
    store = old_store(kind, tmp_path, request, statements)
    with pytest.raises(SchemaMismatch) as caught:
        store.open()
    assert (caught.value.found, caught.value.wanted) == (0, SCHEMA_VERSION)
    assert "schema version 0" in str(caught.value)
    store.close()
    # Untouched: no table was added to the old schema.
    if kind == "sqlite":
        with sqlite3.connect(tmp_path / "old.db") as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        db.close()
        assert "sac_dedup_epochs" not in tables


VERSION_1 = [
    "CREATE TABLE sac_dedup_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE sac_dedup_epochs (queue TEXT PRIMARY KEY, epoch BIGINT NOT NULL)",
    "CREATE TABLE sac_dedup_records (queue TEXT NOT NULL, message_id TEXT NOT NULL, "
    "epoch BIGINT NOT NULL, consumer TEXT, committed_at DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (queue, message_id))",
    "CREATE INDEX sac_dedup_records_age ON sac_dedup_records (committed_at)",
    "INSERT INTO sac_dedup_epochs VALUES ('orders', 7)",
    "INSERT INTO sac_dedup_records VALUES ('orders', 'm-1', 7, 'a', 1700000000.0)",
]


def tables_of_version_1(kind: str, tmp_path: Path, request: pytest.FixtureRequest,
                        marked: int) -> Store:
    """A store with the tables of version 1 (one epoch, one record), marked as ``marked``."""
    return old_store(kind, tmp_path, request, [
        *VERSION_1, f"INSERT INTO sac_dedup_meta VALUES ('schema_version', '{marked}')"])


@pytest.mark.parametrize("kind", SQL_STORES)
def test_a_version_1_store_is_migrated_in_place_on_open(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The tables of version 1 gain the epoch's holder; epochs and records are kept."""
    store = tables_of_version_1(kind, tmp_path, request, 1)
    store.open()
    assert schema_version(store) == str(SCHEMA_VERSION) == "2"
    assert store.current_epoch(Q) == 7
    assert store.seen(Q, "m-1")
    assert isinstance(store, SQLiteStore | PostgresStore)
    assert store.holder(Q) is None  # claimed by a version that did not record it
    assert store.claim_epoch(Q) == 8
    assert store.holder(Q) is not None
    store.close()


@pytest.mark.parametrize("kind", SQL_STORES)
def test_a_store_of_a_newer_version_is_refused(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = tables_of_version_1(kind, tmp_path, request, 3)
    with pytest.raises(SchemaMismatch) as caught:
        store.open()
    assert (caught.value.found, caught.value.wanted) == (3, SCHEMA_VERSION)
    store.close()
