"""The application side of the dedup tests: an effect that writes one ledger row per handled
message, through the inbox's transaction (SQL stores) or into a list (memory store), and a
way to open a store of each kind from a string, for consumer processes."""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Callable

from sdk import Delivery
from sdk.dedup import MemoryStore, PostgresStore, SQLiteStore, Store, Transaction

Before = Callable[[Delivery], None]


def open_store(kind: str, location: str) -> Store:
    if kind == "sqlite":
        return SQLiteStore(location)
    if kind == "postgres":
        return PostgresStore(location)
    raise ValueError(f"a store shared between processes is sqlite or postgres, not {kind!r}")


class Ledger:
    """Effects of every consumer of one test, read back as (message id, actor) rows."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._memory: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._sql("CREATE TABLE IF NOT EXISTS ledger (msg TEXT, actor TEXT)")

    def _sql(self, sql: str) -> list[tuple[object, ...]]:
        """A statement on a connection of the test's own, beside the consumers'."""
        if isinstance(self.store, SQLiteStore):
            db = sqlite3.connect(self.store.path)
            try:
                with db:
                    return db.execute(sql).fetchall()
            finally:
                db.close()
        if isinstance(self.store, PostgresStore):
            import psycopg

            with psycopg.connect(self.store.dsn, autocommit=True) as pg:
                cur = pg.execute(sql)
                return cur.fetchall() if cur.description else []
        return []

    @property
    def _p(self) -> str:
        return "%s" if isinstance(self.store, PostgresStore) else "?"

    def effect(self, actor: str, before: Before | None = None
               ) -> Callable[[Delivery, Transaction], None]:
        def write(delivery: Delivery, tx: Transaction) -> None:
            if before is not None:
                before(delivery)
            row = (str(delivery.message_id), actor)
            if tx.connection is None:
                tx.on_commit(lambda: self._append(row))
            else:
                tx.execute(f"INSERT INTO ledger (msg, actor) VALUES ({self._p}, {self._p})", row)

        return write

    def _append(self, row: tuple[str, str]) -> None:
        with self._lock:
            self._memory.append(row)

    def rows(self) -> list[tuple[str, str]]:
        if isinstance(self.store, MemoryStore):
            with self._lock:
                return list(self._memory)
        return [(str(m), str(a)) for m, a in self._sql("SELECT msg, actor FROM ledger")]

    def counts(self) -> Counter[str]:
        return Counter(m for m, _ in self.rows())
