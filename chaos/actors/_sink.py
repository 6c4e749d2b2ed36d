"""The idempotent sink every chaos consumer writes its effects to: one table, ``chaos_effects``,
in the same database as the inbox's records, so an effect and its dedup record commit (or roll
back) together. After a run the table is the ground truth (``effects.jsonl``): a message id in
it twice was processed twice, whatever the consumers' own events say.

The table has no unique key on purpose: the weakened configurations (dedup off, the
redelivered-flag-only lookup) must be able to write a duplicate for the checker to find.

A sink is named by a location: ``sqlite:<path>`` (a file shared by the consumer processes of
one host) or a ``postgresql://`` DSN (the store consumers on several hosts share).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sdk import PostgresStore, SQLiteStore, Store

TABLE = "chaos_effects"
SCHEMA = f"CREATE TABLE IF NOT EXISTS {TABLE} (msg TEXT NOT NULL, actor TEXT NOT NULL, " \
         "epoch BIGINT, ts DOUBLE PRECISION NOT NULL)"
_INSERT = f"INSERT INTO {TABLE} (msg, actor, epoch, ts) VALUES (?, ?, ?, ?)"


class Sink:
    def __init__(self, location: str) -> None:
        self.location = location
        self.postgres = location.startswith(("postgresql://", "postgres://"))
        if not self.postgres and not location.startswith("sqlite:"):
            raise ValueError(f"a sink is sqlite:<path> or a postgresql:// DSN, not {location!r}")
        self.placeholder = "%s" if self.postgres else "?"

    @property
    def path(self) -> Path:
        return Path(self.location.removeprefix("sqlite:"))

    def store(self, *, evict_frozen_holder: bool = True) -> Store:
        """The inbox's store on the same database."""
        if self.postgres:
            return PostgresStore(self.location)
        return SQLiteStore(self.path, evict_frozen_holder=evict_frozen_holder)

    def insert_sql(self) -> str:
        """The insert in the store's own placeholder style (for ``Transaction.execute``)."""
        return _INSERT.replace("?", self.placeholder)

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement (``?`` placeholders) in a transaction of its own."""
        if self.postgres:
            import psycopg

            with psycopg.connect(self.location, autocommit=True) as pg:
                cursor = pg.execute(sql.replace("?", "%s"), params)
                return cursor.fetchall() if cursor.description else []
        db = sqlite3.connect(self.path, timeout=30.0)
        try:
            with db:
                return db.execute(sql, params).fetchall()
        finally:
            db.close()

    def create(self) -> None:
        self._execute(SCHEMA)

    def write(self, msg: str, actor: str, epoch: int | None, ts: float) -> None:
        """One effect on its own: what a consumer without the inbox does."""
        self._execute(_INSERT, (msg, actor, epoch, ts))

    def seen(self, msg: str) -> bool:
        return bool(self._execute(f"SELECT 1 FROM {TABLE} WHERE msg = ? LIMIT 1", (msg,)))

    def rows(self) -> Iterator[dict[str, Any]]:
        query = f"SELECT msg, actor, epoch, ts FROM {TABLE} ORDER BY ts, msg, actor"
        for msg, actor, epoch, ts in self._execute(query):
            yield {"msg": msg, "actor": actor, "epoch": epoch, "ts": ts}

    def distinct(self) -> set[str]:
        return {str(row[0]) for row in self._execute(f"SELECT DISTINCT msg FROM {TABLE}")}

    def dump(self, path: Path, commits: dict[tuple[str, str], list[float]]) -> int:
        """Write ``effects.jsonl``; returns the number of rows.

        A row's own ``ts`` is when its effect ran, inside a transaction that may commit much
        later (a consumer frozen in a batch commits its earlier rows when thawed). The
        checker needs the commit: each row takes the time of its actor's ``commit`` event
        for that message (``commits``: sorted times per (actor, msg), paired in order), and
        keeps its own only when there is none (the process died before recording it)."""
        count = 0
        used: dict[tuple[str, str], int] = {}
        with path.open("w", encoding="utf-8") as out:
            for row in self.rows():
                key = (row["actor"], row["msg"])
                times = commits.get(key, [])
                n = used.get(key, 0)
                if n < len(times):
                    row["ts"] = times[n]
                    used[key] = n + 1
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
                count += 1
        return count


def holding_locks(connection: Any) -> bool:
    """Whether the store transaction on ``connection`` has written anything yet (so that a
    consumer frozen now holds locks its successor needs). PostgreSQL assigns a transaction id
    at the first write; for SQLite this is not needed and is taken as true."""
    if connection is None or isinstance(connection, sqlite3.Connection):
        return True
    row = connection.execute("SELECT pg_current_xact_id_if_assigned() IS NOT NULL").fetchone()
    return bool(row[0])
