"""The embedded default: one SQLite file in WAL mode, shared by the consumers of one host.

``synchronous=FULL``: a commit is on disk before the consumer acks, which is the whole point.
WAL lets readers (lookups, a waiting consumer's claim check) run beside the one writer.

A frozen holder. SQLite has one writer at a time, and a batch holds the write lock from its
first write to its commit. If the active consumer is frozen (SIGSTOP, a debugger, a frozen
cgroup) in the middle of a batch, nothing but its end releases the lock, and its successor's
epoch claim would wait for as long as the freeze lasts. So the claim asks for the lock in
short slices, and while it is refused looks up who holds it (``/proc/locks``): if that is the
process recorded as the holder of the queue's epoch when the claim began, on this host and
boot, it is frozen, and no newer epoch was claimed since, the claim kills it (SIGKILL) and
goes on. Its batch could never commit after the claim anyway; the kernel releases its lock,
and SQLite discards the uncommitted batch. A running holder, a holder of another queue, a
holder that claimed after this claim began (a newer consumer stopped in a debugger while
this claim waited), or any other process is waited for: see ``sac/sdk/_core/lock_holder.py``
for the rules.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from .._core.lock_holder import Claim, ProcessId, Verdict
from .._errors import ConfigurationError, StoreUnavailable
from ._evict import evict_frozen_holder, this_process
from ._sql import EPOCHS, RECORDS, SqlStore

log = logging.getLogger("sac.dedup")

# Primary result codes that say the database could not do the work, whatever the statement:
# BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL.
_OUTAGES = frozenset({5, 6, 7, 8, 10, 13, 14, 15})
_BUSY = 5

CLAIM_SLICE = 0.05
"""How long one try of a claim waits for the write lock before looking at who holds it."""


class SQLiteStore(SqlStore):
    """``path`` is the database file; it is created (with its tables) if missing, and its
    directory must exist and be writable. ``busy_timeout`` bounds how long a commit or a
    claim waits for another process's write.

    ``evict_frozen_holder`` (on by default): an epoch claim kills the previous holder of the
    queue's epoch when that process is frozen while holding the write lock (see above).
    Turn it off if the consumers of a queue may be frozen on purpose and must survive it;
    then a successor waits for the freeze to end (``busy_timeout``, then the inbox's
    ``store_retry``), and the zombie is fenced when it commits.

        SQLiteStore("/var/lib/app/dedup.db", evict_frozen_holder=False)
    """

    placeholder = "?"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        evict_frozen_holder: bool = True,
    ) -> None:
        if not isinstance(path, str | os.PathLike) or not str(path):
            raise ConfigurationError(f"SQLiteStore path must be a file path, got {path!r}")
        if busy_timeout <= 0:
            raise ConfigurationError(
                f"SQLiteStore busy_timeout must be positive, got {busy_timeout!r}")
        if not isinstance(evict_frozen_holder, bool):
            raise ConfigurationError(
                f"SQLiteStore evict_frozen_holder must be a bool, got {evict_frozen_holder!r}")
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self.evict_frozen_holder = evict_frozen_holder
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
            # the first message). SQLite checks read-only before locking, so "busy" proves
            # it as well: another process is writing, maybe a frozen one that our claim
            # will remove.
            conn.execute(f"PRAGMA busy_timeout = {round(CLAIM_SLICE * 1000)}")
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
            conn.execute(f"PRAGMA busy_timeout = {round(self.busy_timeout * 1000)}")
        except sqlite3.Error as exc:
            conn.close()
            hint = "" if os.access(where, os.W_OK) else f" ({where} is not writable)"
            raise StoreUnavailable(
                f"dedup store {self.description} is not writable{hint}: {exc}") from exc
        return conn

    def _holder(self) -> str | None:
        me = this_process()
        return None if me is None else str(me)

    def _raise_epoch(self, conn: Any, queue: str, sql: str, params: tuple[Any, ...]) -> Any:
        # An adoption's parameters are (queue, epoch, holder): the epoch it adopts.
        self._begin_claim(conn, queue, params[-2] if sql == self._sql_adopt else None)
        try:
            row = conn.execute(sql, params).fetchone()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return row

    def _begin_claim(self, conn: Any, queue: str, adopting: int | None) -> None:
        """Take the write lock for a claim (or the adoption of epoch ``adopting``), in
        slices, removing a frozen holder that holds it (``evict_frozen_holder``): only the
        holder recorded when the claim began, and only while the queue's epoch is still the
        one read then. Past ``busy_timeout``, fails as any other busy statement does."""
        deadline = time.monotonic() + self.busy_timeout
        conn.execute(f"PRAGMA busy_timeout = {round(CLAIM_SLICE * 1000)}")
        try:
            claim = None
            if self.evict_frozen_holder:
                holder, epoch = self._epoch_row(conn, queue)
                claim = Claim(epoch, ProcessId.parse(holder), adopting)
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if not _busy(exc) or time.monotonic() >= deadline:
                        raise
                if claim is not None:
                    self._evict(conn, queue, claim)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {round(self.busy_timeout * 1000)}")

    @staticmethod
    def _epoch_row(conn: Any, queue: str) -> tuple[str | None, int]:
        """The queue's recorded holder and epoch: a plain read, which WAL lets run beside
        the writer a claim waits for."""
        row = conn.execute(f"SELECT holder, epoch FROM {EPOCHS} WHERE queue = ?",
                           (queue,)).fetchone()
        return (None, 0) if row is None else (row[0], int(row[1]))

    def _evict(self, conn: Any, queue: str, claim: Claim) -> None:
        verdict, owner = evict_frozen_holder(Path(f"{self.path}-shm"), claim,
                                             lambda: self._epoch_row(conn, queue)[1])
        if verdict is Verdict.KILL:
            log.warning("%s: killed process %s, the frozen holder of epoch %s of queue %r, "
                        "which held the write lock; claiming the next epoch",
                        self.description, owner, claim.epoch, queue)
        else:
            log.debug("%s: waiting for the write lock held by %s: %s", self.description,
                      owner, verdict.value)

    def _outage(self, exc: BaseException, conn: Any) -> bool:
        code = getattr(exc, "sqlite_errorcode", None)
        return isinstance(exc, sqlite3.Error) and code is not None and code & 0xFF in _OUTAGES

    def _data_errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.DataError, sqlite3.IntegrityError)

    def setup_fault(self, exc: BaseException) -> bool:
        text = str(exc)
        return isinstance(exc, sqlite3.OperationalError) and (
            text.startswith(("no such table", "no such column")) or " has no column named "
            in text)

    def _begin_schema(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def _table_exists(self, conn: Any, name: str) -> bool:
        return conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone() is not None

    def _delete_batch_sql(self, condition: str) -> str:
        return (f"DELETE FROM {RECORDS} WHERE rowid IN "
                f"(SELECT rowid FROM {RECORDS} WHERE {condition} LIMIT ?)")


def _busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == _BUSY
