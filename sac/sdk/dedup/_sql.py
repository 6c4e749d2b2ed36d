"""What the SQLite and PostgreSQL stores share: the tables, the commit protocol, purging.

The commit protocol. Messages are committed in batches (one store transaction, one fsync,
for what the consumer has waiting); each message's effect runs inside a savepoint, then:

1. its record is inserted (``ON CONFLICT DO NOTHING``): no row inserted means another
   consumer committed this message first, so its savepoint is rolled back: ``Duplicate``
   (or ``StaleEpoch``, if a newer epoch exists: a replaced consumer learns that it was
   replaced, not merely that its successor handled this message);
2. at the end of the batch the queue's epoch is read (``FOR SHARE`` on PostgreSQL, so that
   a claim waits for this commit; on SQLite the batch already holds the one write lock, so
   no claim can slip in): newer than ours means we were replaced, so everything is rolled
   back: ``StaleEpoch``;
3. commit, then the ``on_commit`` callbacks.

That is the SQLite store's batch. The PostgreSQL store keeps the order (a message's record
is written before its effect can commit, and refuses a second one) but takes the records of
the whole batch first, in the round trip that looks them up, and sends everything else in
pipeline mode without waiting for answers, the epoch check with the commit: two round
trips a batch (``postgres._PipelinedBatch``). A statement that fails there refuses the
whole batch (``BatchRefused``), and the inbox tries each message alone.

Nothing is locked before a batch's first write. After it, a batch holds locks (SQLite's
one write lock; PostgreSQL row locks on the records it took) until it commits or rolls back: a
consumer frozen in the middle of a batch holds them for as long as it is frozen. Its
successor deals with that when it claims its epoch, which it does only once the broker has
made it the active consumer, so that the holder recorded with the old epoch is known to be
replaced: the PostgreSQL store ends the old holder's sessions that wait inside a
transaction, the SQLite store kills the old holder if it is frozen and holds the write lock
(see the stores). If a claim slips in on SQLite between a batch's first read and its first
write, SQLite refuses the write (busy snapshot) and the inbox tries the batch again.
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .._errors import ClosedError, SchemaMismatch, StaleEpoch, StoreUnavailable
from ._store import (
    SCHEMA_VERSION,
    Batch,
    BatchRefused,
    Duplicate,
    Retention,
    Store,
    Transaction,
    now_or,
)

META = "sac_dedup_meta"
EPOCHS = "sac_dedup_epochs"
RECORDS = "sac_dedup_records"

SCHEMA = (
    f"CREATE TABLE {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"CREATE TABLE {EPOCHS} (queue TEXT PRIMARY KEY, epoch BIGINT NOT NULL, holder TEXT)",
    f"CREATE TABLE {RECORDS} (queue TEXT NOT NULL, message_id TEXT NOT NULL, "
    "epoch BIGINT NOT NULL, consumer TEXT, committed_at DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (queue, message_id))",
    f"CREATE INDEX {RECORDS}_age ON {RECORDS} (committed_at)",
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (f"ALTER TABLE {EPOCHS} ADD COLUMN holder TEXT",),
}
"""What brings a store of version n to n + 1, in place, on ``open``: additive only, so that
a consumer of the older version still running beside it keeps working (its claims leave the
holder empty, and an empty holder is never ended or killed)."""


LOOKUP_CHUNK = 500
"""Ids per lookup statement (SQLite allows 32 766 parameters, PostgreSQL 65 535)."""


class SqlStore(Store):
    """A store on one DB-API connection (plus one more for purging), guarded by a lock: one
    transaction at a time, which is what a single active consumer needs."""

    placeholder = "?"
    lock_epoch_row = ""
    claim_guard = ""
    """A ``WITH`` clause yielding one row (named ``guard``) that the claim and the adoption
    evaluate before raising the epoch; its parameters come from ``_guard_params``."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._purge_conn: Any = None
        self._lock = threading.RLock()
        self._purge_lock = threading.Lock()
        p = self.placeholder
        self._sql_insert_record = (
            f"INSERT INTO {RECORDS} (queue, message_id, epoch, consumer, committed_at) "
            f"VALUES ({p}, {p}, {p}, {p}, {p}) ON CONFLICT (queue, message_id) DO NOTHING")
        self._sql_epoch = f"SELECT epoch FROM {EPOCHS} WHERE queue = {p}{self.lock_epoch_row}"
        self._sql_seen = f"SELECT 1 FROM {RECORDS} WHERE queue = {p} AND message_id = {p}"
        # INSERT ... SELECT, so that the guard runs first; "WHERE true" keeps SQLite from
        # reading ON CONFLICT as a join constraint.
        source = " FROM guard" if self.claim_guard else ""
        self._sql_claim = (
            f"{self.claim_guard}INSERT INTO {EPOCHS} (queue, epoch, holder) "
            f"SELECT {p}, 1, {p}{source} WHERE true ON CONFLICT (queue) "
            f"DO UPDATE SET epoch = {EPOCHS}.epoch + 1, holder = excluded.holder "
            "RETURNING epoch")
        self._sql_adopt = (
            f"{self.claim_guard}INSERT INTO {EPOCHS} (queue, epoch, holder) "
            f"SELECT {p}, {p}, {p}{source} WHERE true ON CONFLICT (queue) "
            f"DO UPDATE SET epoch = excluded.epoch, holder = excluded.holder "
            f"WHERE {EPOCHS}.epoch <= excluded.epoch RETURNING epoch")

    # ------------------------------------------------------------------ dialect

    @abc.abstractmethod
    def _connect(self) -> Any:
        """A new connection in autocommit mode (we send BEGIN and COMMIT ourselves); raises
        ``StoreUnavailable`` naming the cause."""

    @abc.abstractmethod
    def _begin_schema(self, conn: Any) -> None:
        """Start the transaction that creates or checks the tables, exclusively."""

    @abc.abstractmethod
    def _table_exists(self, conn: Any, name: str) -> bool: ...

    def _usable(self, conn: Any) -> bool:
        return conn is not None

    def _outage(self, exc: BaseException, conn: Any) -> bool:
        """Whether ``exc``, raised by a statement on ``conn``, is the store failing (lost
        connection, lock not granted in time, disk full) rather than the statement."""
        return not self._usable(conn)

    def _data_errors(self) -> tuple[type[BaseException], ...]:
        """The driver's errors for data a statement or a commit refused (SQLSTATE classes
        22, data exception, and 23, integrity constraint violation)."""
        return ()

    def message_fault(self, exc: BaseException) -> bool:
        return isinstance(exc, BatchRefused) or (
            isinstance(exc, self._data_errors()) and not self._outage(exc, self._conn))

    def missing_tables(self, names: Sequence[str]) -> list[str]:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise ClosedError(f"dedup store {self.description} is not open")
            missing = [name for name in names if not self._table_exists(conn, name)]
        return missing

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"dedup store {self.description}: {exc}")

    def _delete_batch_sql(self, condition: str) -> str:
        raise NotImplementedError

    @abc.abstractmethod
    def _holder(self) -> str | None:
        """How the epoch row names this store's user as the epoch's holder."""

    def _guard_params(self, queue: str, epoch: int | None) -> tuple[Any, ...]:
        """Parameters of ``claim_guard``; ``epoch`` is the one adopted, None for a claim."""
        return ()

    def _raise_epoch(self, conn: Any, queue: str, sql: str, params: tuple[Any, ...]) -> Any:
        """Run the claim or adoption statement; the row it returns (None: refused)."""
        return conn.execute(sql, params).fetchone()

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        with self._lock:
            if self._conn is None:
                conn = self._connect()
                try:
                    self._prepare_schema(conn)
                except BaseException:
                    conn.close()
                    raise
                self._conn = conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        with self._purge_lock:
            if self._purge_conn is not None:
                self._purge_conn.close()
                self._purge_conn = None

    def _prepare_schema(self, conn: Any) -> None:
        # A plain read first: the usual case (tables there, current version) then takes no
        # lock, so a store opens even while another process holds the write lock (on SQLite
        # a frozen one, that this store's claim may have to remove).
        if self._schema_version(conn) == SCHEMA_VERSION:
            return
        self._begin_schema(conn)
        try:
            found = self._schema_version(conn)
            if found is None:
                for statement in SCHEMA:
                    conn.execute(statement)
                conn.execute(
                    f"INSERT INTO {META} (key, value) VALUES ({self.placeholder}, "
                    f"{self.placeholder})", ("schema_version", str(SCHEMA_VERSION)))
            elif found in MIGRATIONS:
                for version in range(found, SCHEMA_VERSION):
                    for statement in MIGRATIONS[version]:
                        conn.execute(statement)
                conn.execute(
                    f"UPDATE {META} SET value = {self.placeholder} "
                    f"WHERE key = {self.placeholder}", (str(SCHEMA_VERSION), "schema_version"))
            elif found != SCHEMA_VERSION:
                raise SchemaMismatch(self.description, found, SCHEMA_VERSION)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _schema_version(self, conn: Any) -> int | None:
        """The version of the tables; None when there are none; 0 for tables from before
        the version was kept."""
        if self._table_exists(conn, META):
            row = conn.execute(f"SELECT value FROM {META} WHERE key = {self.placeholder}",
                               ("schema_version",)).fetchone()
            return int(row[0]) if row is not None else 0
        if self._table_exists(conn, RECORDS) or self._table_exists(conn, EPOCHS):
            return 0
        return None

    def _connection(self) -> Any:
        """The open connection; a broken one is replaced once (the server restarted)."""
        if self._conn is None:
            raise ClosedError(f"dedup store {self.description} is not open")
        if not self._usable(self._conn):
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = self._connect()
        return self._conn

    # ------------------------------------------------------------------ epochs

    def claim_epoch(self, queue: str) -> int:
        with self._lock:
            conn = self._connection()
            params = (*self._guard_params(queue, None), queue, self._holder())
            return int(self._raise_epoch(conn, queue, self._sql_claim, params)[0])

    def adopt_epoch(self, queue: str, epoch: int) -> int:
        with self._lock:
            conn = self._connection()
            params = (*self._guard_params(queue, epoch), queue, epoch, self._holder())
            row = self._raise_epoch(conn, queue, self._sql_adopt, params)
            if row is None:
                raise StaleEpoch(queue, epoch, self.current_epoch(queue))
            return int(row[0])

    def holder(self, queue: str) -> str | None:
        """Who claimed or adopted the queue's current epoch, as that store named itself."""
        with self._lock:
            conn = self._connection()
            row = conn.execute(
                f"SELECT holder FROM {EPOCHS} WHERE queue = {self.placeholder}", (queue,)
            ).fetchone()
            return None if row is None else row[0]

    def current_epoch(self, queue: str) -> int:
        with self._lock:
            conn = self._connection()
            row = conn.execute(
                f"SELECT epoch FROM {EPOCHS} WHERE queue = {self.placeholder}", (queue,)
            ).fetchone()
            return 0 if row is None else int(row[0])

    # ------------------------------------------------------------------ records

    def seen(self, queue: str, message_id: str) -> bool:
        with self._lock:
            conn = self._connection()
            return conn.execute(self._sql_seen, (queue, message_id)).fetchone() is not None

    @contextlib.contextmanager
    def batch(
        self, queue: str, epoch: int, consumer: str | None = None
    ) -> Iterator[Batch]:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            batch = _SqlBatch(self, conn, queue, epoch, consumer)
            try:
                yield batch
                # Also when nothing is staged: a replaced consumer whose every message was
                # found committed by its successor learns that it was replaced.
                self._check_epoch(conn, queue, epoch)
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        batch.run_after_commit()

    def _check_epoch(self, conn: Any, queue: str, epoch: int) -> None:
        row = conn.execute(self._sql_epoch, (queue,)).fetchone()
        current = 0 if row is None else int(row[0])
        if current > epoch:
            raise StaleEpoch(queue, epoch, current)

    def records(self, queue: str) -> list[tuple[str, int, str | None, float]]:
        with self._lock:
            conn = self._connection()
            rows = conn.execute(
                f"SELECT message_id, epoch, consumer, committed_at FROM {RECORDS} "
                f"WHERE queue = {self.placeholder} ORDER BY committed_at, message_id",
                (queue,)).fetchall()
            return [(str(m), int(e), c, float(t)) for m, e, c, t in rows]

    # ------------------------------------------------------------------ retention

    def purge(self, retention: Retention, now: float | None = None) -> int:
        """Deletes in batches of ``retention.batch``, each its own short transaction on the
        purge connection, so a consumer's commit waits for one batch at most."""
        p = self.placeholder
        dropped = 0
        with self._purge_lock:
            if self._purge_conn is None or not self._usable(self._purge_conn):
                self._purge_conn = self._connect()
            conn = self._purge_conn
            if retention.max_age is not None:
                cutoff = now_or(now) - retention.max_age
                sql = self._delete_batch_sql(f"committed_at < {p}")
                while (n := conn.execute(sql, (cutoff, retention.batch)).rowcount) > 0:
                    dropped += n
            if retention.max_records is not None:
                queues = [r[0] for r in conn.execute(
                    f"SELECT DISTINCT queue FROM {RECORDS}").fetchall()]
                for queue in queues:
                    row = conn.execute(
                        f"SELECT committed_at FROM {RECORDS} WHERE queue = {p} "
                        f"ORDER BY committed_at DESC LIMIT 1 OFFSET {p}",
                        (queue, retention.max_records - 1)).fetchone()
                    if row is None:
                        continue
                    sql = self._delete_batch_sql(f"queue = {p} AND committed_at < {p}")
                    while (n := conn.execute(
                            sql, (queue, row[0], retention.batch)).rowcount) > 0:
                        dropped += n
        return dropped


class _SqlBatch(Batch):
    """Each message inside a savepoint, so that one failed effect or duplicate undoes only
    its own writes."""

    def __init__(self, store: SqlStore, conn: Any, queue: str, epoch: int,
                 consumer: str | None) -> None:
        super().__init__(queue, epoch, consumer)
        self._store = store
        self._conn = conn

    def seen(self, message_id: str) -> bool:
        # Inside the transaction: this batch's own records count too.
        return self._conn.execute(
            self._store._sql_seen, (self.queue, message_id)).fetchone() is not None

    def committed_among(self, message_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        p = self._store.placeholder
        for start in range(0, len(message_ids), LOOKUP_CHUNK):
            chunk = message_ids[start:start + LOOKUP_CHUNK]
            rows = self._conn.execute(
                f"SELECT message_id FROM {RECORDS} WHERE queue = {p} AND message_id IN "
                f"({', '.join([p] * len(chunk))})", (self.queue, *chunk)).fetchall()
            found.update(row[0] for row in rows)
        return found

    @contextlib.contextmanager
    def message(self, message_id: str) -> Iterator[Transaction]:
        """What fails because the store fails (also inside the effect: its statements run on
        our connection) raises ``StoreUnavailable``, so that the whole batch is tried again
        instead of this message being rejected as if its effect were at fault."""
        conn = self._conn
        store = self._store
        try:
            conn.execute("SAVEPOINT sac_message")
        except Exception as exc:
            raise store.unavailable(exc) from exc
        tx = Transaction(conn, self.queue, message_id, self.epoch)
        try:
            yield tx
            inserted = conn.execute(
                store._sql_insert_record,
                (self.queue, message_id, self.epoch, self.consumer, time.time())).rowcount
            if inserted == 0:
                # Rare: tell a replaced consumer that it was replaced, not merely that its
                # successor handled this message.
                store._check_epoch(conn, self.queue, self.epoch)
                raise Duplicate(message_id)
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK TO SAVEPOINT sac_message")
                conn.execute("RELEASE SAVEPOINT sac_message")
            except Exception as undo:  # noqa: BLE001 - the connection is gone
                raise store.unavailable(undo) from exc
            if isinstance(exc, Exception) and store._outage(exc, conn):
                raise store.unavailable(exc) from exc
            raise
        try:
            conn.execute("RELEASE SAVEPOINT sac_message")
        except Exception as exc:
            raise store.unavailable(exc) from exc
        self._stage(message_id, tx)
