"""A PostgreSQL store (psycopg 3, the ``postgres`` extra): for consumers on several hosts, and
for effects that already live in PostgreSQL, so that effect and record commit together.

Sessions are opened with ``idle_in_transaction_session_timeout``: a consumer frozen in the
middle of a commit must not hold its row locks forever.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .._errors import ConfigurationError, StoreUnavailable
from ._sql import RECORDS, SqlStore

_SCHEMA_LOCK = 0x5AC_DED0  # pg_advisory_xact_lock key: one process creates the tables


def mask_dsn(dsn: str) -> str:
    """The DSN without its password, safe to log."""
    if "://" in dsn:
        parts = urllib.parse.urlsplit(dsn)
        if parts.password is not None:
            host = parts.hostname or ""
            port = f":{parts.port}" if parts.port else ""
            user = urllib.parse.quote(parts.username or "")
            return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
        return dsn
    return " ".join("password=***" if w.startswith("password=") else w for w in dsn.split())


class PostgresStore(SqlStore):
    """``dsn`` is a libpq connection string or ``postgresql://`` URL. The tables are created
    on first use in the DSN's database (the role needs CREATE there once)."""

    placeholder = "%s"
    lock_epoch_row = " FOR SHARE"

    def __init__(
        self,
        dsn: str,
        *,
        connect_timeout: float = 5.0,
        idle_in_transaction_timeout: float = 60.0,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigurationError("PostgresStore needs a DSN (a non-empty string)")
        if connect_timeout <= 0 or idle_in_transaction_timeout <= 0:
            raise ConfigurationError("PostgresStore timeouts must be positive")
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self.idle_in_transaction_timeout = idle_in_transaction_timeout
        super().__init__()

    def __repr__(self) -> str:
        return f"PostgresStore({self.description!r})"

    @property
    def description(self) -> str:
        return f"postgres:{mask_dsn(self.dsn)}"

    def _connect(self) -> Any:
        try:
            import psycopg
        except ImportError as exc:
            raise StoreUnavailable(
                "PostgresStore needs psycopg 3: pip install 'sac[postgres]'") from exc
        try:
            return psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout)),
                options=(f"-c idle_in_transaction_session_timeout="
                         f"{int(self.idle_in_transaction_timeout * 1000)}"),
            )
        except psycopg.Error as exc:
            # psycopg's message can quote the conninfo; keep only its first line, no password.
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreUnavailable(
                f"dedup store {self.description} does not connect: "
                f"{reason.replace(self.dsn, mask_dsn(self.dsn))}") from None

    def _usable(self, conn: Any) -> bool:
        return conn is not None and not conn.closed and not conn.broken

    def _outage(self, exc: BaseException, conn: Any) -> bool:
        # OperationalError: the connection, the server going away, a serialization failure
        # or deadlock (the transaction's fault, not the statement's), a cancelled query.
        import psycopg

        return isinstance(exc, psycopg.OperationalError) or not self._usable(conn)

    def _begin_schema(self, conn: Any) -> None:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))

    def _table_exists(self, conn: Any, name: str) -> bool:
        return conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None

    def _delete_batch_sql(self, condition: str) -> str:
        return (f"DELETE FROM {RECORDS} WHERE ctid IN "
                f"(SELECT ctid FROM {RECORDS} WHERE {condition} LIMIT %s)")
