"""The embedded default: one SQLite file in WAL mode, shared by the consumers of one host.

``synchronous=FULL``: a commit is on disk before the consumer acks, which is the whole point.
WAL lets readers (lookups, a waiting consumer's claim check) run beside the one writer.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from .._errors import ConfigurationError, StoreUnavailable
from ._sql import RECORDS, SqlStore

# Primary result codes that say the database could not do the work, whatever the statement:
# BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL.
_OUTAGES = frozenset({5, 6, 7, 8, 10, 13, 14, 15})


class SQLiteStore(SqlStore):
    """``path`` is the database file; it is created (with its tables) if missing, and its
    directory must exist and be writable. ``busy_timeout`` bounds how long a commit waits for
    another process's write."""

    placeholder = "?"

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        if not isinstance(path, str | os.PathLike) or not str(path):
            raise ConfigurationError(f"SQLiteStore path must be a file path, got {path!r}")
        if busy_timeout <= 0:
            raise ConfigurationError(
                f"SQLiteStore busy_timeout must be positive, got {busy_timeout!r}")
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        super().__init__()

    @property
    def description(self) -> str:
        return f"sqlite:{self.path}"

    def _connect(self) -> Any:
        where = self.path.parent
        if not where.is_dir():
            raise StoreUnavailable(
                f"dedup store {self.description}: directory {where} does not exist")
        if self.path.is_dir():
            raise StoreUnavailable(f"dedup store {self.description}: the path is a directory")
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreUnavailable(
                f"dedup store {self.description} cannot be opened: {exc}") from exc
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            conn.execute("PRAGMA synchronous=FULL")
            if str(mode).lower() != "wal":
                raise StoreUnavailable(
                    f"dedup store {self.description}: WAL mode refused (got {mode})")
            # Proves that we can write here (a read-only file or directory fails now, not at
            # the first message).
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            conn.close()
            hint = "" if os.access(where, os.W_OK) else f" ({where} is not writable)"
            raise StoreUnavailable(
                f"dedup store {self.description} is not writable{hint}: {exc}") from exc
        return conn

    def _outage(self, exc: BaseException, conn: Any) -> bool:
        code = getattr(exc, "sqlite_errorcode", None)
        return isinstance(exc, sqlite3.Error) and code is not None and code & 0xFF in _OUTAGES

    def _begin_schema(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def _table_exists(self, conn: Any, name: str) -> bool:
        return conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone() is not None

    def _delete_batch_sql(self, condition: str) -> str:
        return (f"DELETE FROM {RECORDS} WHERE rowid IN "
                f"(SELECT rowid FROM {RECORDS} WHERE {condition} LIMIT ?)")
