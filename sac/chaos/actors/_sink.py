"""The idempotent sink every chaos consumer writes its effects to: one table, ``chaos_effects``,
in the same database as the inbox's records, so an effect and its dedup record commit (or roll
back) together. After a run the table is the ground truth (``effects.jsonl``): a message id in
it twice was processed twice, whatever the consumers' own events say.

The table has no unique key on purpose: the weakened configurations (dedup off, the
redelivered-flag-only lookup) must be able to write a duplicate for the checker to find.

A sink is named by a location: ``sqlite:<path>`` (a file shared by the consumer processes of
one host) or a ``postgresql://`` DSN (the store consumers on several hosts share), both of
which can back the inbox; or ``file:<path>``, JSON lines appended without a transaction (the
format of ``effects.jsonl``), for consumers without the inbox that must keep up with a fast
publisher (a SQLite commit per message costs milliseconds).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sac.sdk import PostgresStore, SQLiteStore, Store, Transaction

TABLE = "chaos_effects"
SCHEMA = f"CREATE TABLE IF NOT EXISTS {TABLE} (msg TEXT NOT NULL, actor TEXT NOT NULL, " \
         "epoch BIGINT, ts DOUBLE PRECISION NOT NULL)"
_INSERT = f"INSERT INTO {TABLE} (msg, actor, epoch, ts) VALUES (?, ?, ?, ?)"


class Sink:
    def __init__(self, location: str) -> None:
        self.location = location
        self.postgres = location.startswith(("postgresql://", "postgres://"))
        self.lines = location.startswith("file:")
        if not self.postgres and not self.lines and not location.startswith("sqlite:"):
            raise ValueError(f"a sink is sqlite:<path>, file:<path> or a postgresql:// DSN, "
                             f"not {location!r}")
        self.placeholder = "%s" if self.postgres else "?"

    @property
    def path(self) -> Path:
        return Path(self.location.removeprefix("sqlite:").removeprefix("file:"))

    @property
    def transactional(self) -> bool:
        """Whether an effect can commit with the inbox's record (a database, not a file)."""
        return not self.lines

    def store(self, *, evict_frozen_holder: bool = True) -> Store:
        """The inbox's store on the same database."""
        if self.postgres:
            return PostgresStore(self.location)
        if self.lines:
            raise ValueError(f"the sink {self.location} is a file: it has no store")
        return SQLiteStore(self.path, evict_frozen_holder=evict_frozen_holder)

    def insert_sql(self) -> str:
        """The insert in the store's own placeholder style (for ``Transaction.execute``)."""
        return _INSERT.replace("?", self.placeholder)

    def write_in(self, tx: Transaction, msg: str, actor: str) -> None:
        """One effect inside the inbox's transaction: it commits with the dedup record."""
        tx.execute(self.insert_sql(), (msg, actor, tx.epoch, time.time()))

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement (``?`` placeholders) in a transaction of its own."""
        if self.lines:
            raise ValueError(f"the sink {self.location} is a file: no SQL")
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
        if self.lines:
            self.path.touch()
        else:
            self._execute(SCHEMA)

    def write(self, msg: str, actor: str, epoch: int | None, ts: float) -> None:
        """One effect on its own: what a consumer without the inbox does."""
        if self.lines:
            line = json.dumps({"msg": msg, "actor": actor, "epoch": epoch, "ts": ts},
                              separators=(",", ":"))
            with self.path.open("a", encoding="utf-8") as out:  # one write(2), O_APPEND
                out.write(line + "\n")
        else:
            self._execute(_INSERT, (msg, actor, epoch, ts))

    def _lines(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as lines:
            return [json.loads(line) for line in lines if line.endswith("\n")]

    def seen(self, msg: str) -> bool:
        if self.lines:
            return any(row["msg"] == msg for row in self._lines())
        return bool(self._execute(f"SELECT 1 FROM {TABLE} WHERE msg = ? LIMIT 1", (msg,)))

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every effect, in the order they were made (by ``ts``, then ``msg``, ``actor``)."""
        if self.lines:
            yield from sorted(self._lines(), key=lambda r: (r["ts"], r["msg"], r["actor"]))
            return
        query = f"SELECT msg, actor, epoch, ts FROM {TABLE} ORDER BY ts, msg, actor"
        for msg, actor, epoch, ts in self._execute(query):
            yield {"msg": msg, "actor": actor, "epoch": epoch, "ts": ts}

    def handled(self, actor: str) -> list[str]:
        """The ids ``actor`` made an effect for, in order."""
        return [row["msg"] for row in self.rows() if row["actor"] == actor]

    def distinct(self) -> set[str]:
        if self.lines:
            return {str(row["msg"]) for row in self._lines()}
        return {str(row[0]) for row in self._execute(f"SELECT DISTINCT msg FROM {TABLE}")}

    def count(self) -> int:
        """How many distinct messages have an effect (polled while a run goes on)."""
        if self.lines:
            return len(self.distinct())
        return int(self._execute(f"SELECT COUNT(DISTINCT msg) FROM {TABLE}")[0][0])

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
