"""A PostgreSQL store (psycopg 3, the ``postgres`` extra): for consumers on several hosts, and
for effects that already live in PostgreSQL, so that effect and record commit together.

A frozen holder. A batch holds row locks (on the records it inserted, on rows its effects
wrote, and at its end a share lock on the epoch row) until it commits. If the active consumer
is frozen in the middle of a batch, its session waits "idle in transaction" and its
successor's inserts of the same records wait on it. So every session of a store carries an
``application_name`` of ``sac-dedup:<token>``, the token random per store; the epoch row
records the token of its holder; and an epoch claim, in the same statement that raises the
epoch, ends (``pg_terminate_backend``) the previous holder's sessions that are idle inside a
transaction. Such a transaction could never commit after the claim (the epoch check at its
commit refuses it); the woken zombie finds its session gone, tries again on a new one and
is fenced (``StaleEpoch``). Sessions executing a statement are left alone: they are not
waiting for a frozen client, and reach that check by themselves; this also keeps a claim
from ending a concurrent claim. Ending a session needs the role's own sessions (or
membership of the role, or ``pg_signal_backend``): consumers of one queue connect as one
role. Sessions are also opened with ``idle_in_transaction_session_timeout``, the bound when
nothing else applies.
"""

from __future__ import annotations

import os
import re
import secrets
from typing import Any

from .._errors import ConfigurationError, StoreUnavailable
from ._sql import EPOCHS, RECORDS, SqlStore

APPLICATION = "sac-dedup:"
"""Prefix of the ``application_name`` of every store session; the store's token follows."""

CLAIM_LOCK_TIMEOUT = 2.0
"""How long a claim waits for a row lock (an ended holder's lock goes within milliseconds);
past it the claim fails like any store failure and the inbox tries again."""

CLAIM_STATEMENT_TIMEOUT = 10.0
"""A bound on the whole claim statement, for what nobody foresaw."""

_SCHEMA_LOCK = 0x5AC_DED0  # pg_advisory_xact_lock key: one process creates the tables


def _conninfo(dsn: str) -> dict[str, str] | None:
    """The DSN's parameters as libpq reads them (keyword form or URL, several hosts
    included); None without psycopg. Raises ``ConfigurationError`` when it does not parse,
    naming libpq's reason with every quoted fragment left out (one may be a password)."""
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    try:
        return {key: str(value) for key, value in conninfo_to_dict(dsn).items()
                if value is not None}
    except ProgrammingError as exc:
        reason = re.sub(r'"[^"]*"', '"..."', str(exc).strip().splitlines()[0])
        raise ConfigurationError(f"PostgresStore DSN does not parse: {reason}") from None


def mask_dsn(dsn: str) -> str:
    """The DSN without its password, safe to log: its parameters in keyword form, the
    password (if any) as ``***``. Never raises: an unparsable DSN is shown as such."""
    try:
        params = _conninfo(dsn)
    except ConfigurationError:
        return "(a DSN that does not parse)"
    if params is None:
        return "(DSN not shown: psycopg is not installed)"
    from psycopg.conninfo import make_conninfo

    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **params)


def merged_options(dsn_options: str | None, ours: str) -> str:
    """libpq ``options`` holding the user's (the DSN's, else ``PGOPTIONS``, which libpq reads
    only when the DSN has none) and then ours: a ``search_path``, role or timeout the user
    set still applies, and for a setting both name ours, later on the line, wins."""
    theirs = dsn_options if dsn_options is not None else os.environ.get("PGOPTIONS", "")
    return f"{theirs.strip()} {ours}".strip()


class PostgresStore(SqlStore):
    """``dsn`` is a libpq connection string or ``postgresql://`` URL. The tables are created
    on first use in the DSN's database (the role needs CREATE there once), in the schema its
    ``search_path`` names: the DSN's ``options`` (or ``PGOPTIONS``) are kept, the store's own
    ``-c idle_in_transaction_session_timeout`` added after them; ``application_name`` is the
    store's (it names the session for the claim)."""

    placeholder = "%s"
    lock_epoch_row = " FOR SHARE"
    # The previous holder's sessions waiting inside a transaction, ended before the epoch
    # moves on; "newer" is true for a claim, and for an adoption only when it raises the
    # epoch (a refused one must not end the live holder's sessions).
    claim_guard = (
        "WITH guard AS (SELECT count(pg_terminate_backend(a.pid)) AS ended "
        f"FROM {EPOCHS} e JOIN pg_stat_activity a "
        f"ON a.application_name = '{APPLICATION}' || e.holder "
        "WHERE e.queue = %s AND (%s::bigint IS NULL OR e.epoch < %s::bigint) "
        "AND a.application_name <> %s AND a.pid <> pg_backend_pid() "
        "AND a.state IN ('idle in transaction', 'idle in transaction (aborted)') "
        "AND pg_has_role(a.usesysid, 'MEMBER')) ")

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
        self._params = _conninfo(dsn)  # a DSN that does not parse fails here, in one line
        self.dsn = dsn
        self._shown = f"postgres:{mask_dsn(dsn)}"  # in every retry's log line: parsed once
        self.connect_timeout = connect_timeout
        self.idle_in_transaction_timeout = idle_in_transaction_timeout
        self.token = secrets.token_hex(8)
        """Names this store's sessions (``application_name``) and its epochs (``holder``)."""
        super().__init__()

    def __repr__(self) -> str:
        return f"PostgresStore({self.description!r})"

    @property
    def description(self) -> str:
        return self._shown

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
                application_name=f"{APPLICATION}{self.token}",
                options=merged_options(
                    None if self._params is None else self._params.get("options"),
                    f"-c idle_in_transaction_session_timeout="
                    f"{int(self.idle_in_transaction_timeout * 1000)}"),
            )
        except psycopg.Error as exc:
            # psycopg's message can quote the conninfo; keep only its first line, no password.
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreUnavailable(
                f"dedup store {self.description} does not connect: "
                f"{reason.replace(self.dsn, mask_dsn(self.dsn))}") from None

    def _holder(self) -> str:
        return self.token

    def _guard_params(self, queue: str, epoch: int | None) -> tuple[Any, ...]:
        return (queue, epoch, epoch, f"{APPLICATION}{self.token}")

    def _raise_epoch(self, conn: Any, queue: str, sql: str, params: tuple[Any, ...]) -> Any:
        # One autocommit statement, never a transaction left open between round trips:
        # a claim is never "idle in transaction", so a concurrent claim cannot end it.
        conn.execute("SELECT set_config('lock_timeout', %s, false), "
                     "set_config('statement_timeout', %s, false)",
                     (f"{round(CLAIM_LOCK_TIMEOUT * 1000)}ms",
                      f"{round(CLAIM_STATEMENT_TIMEOUT * 1000)}ms"))
        try:
            return conn.execute(sql, params).fetchone()
        finally:
            if self._usable(conn):
                conn.execute("RESET lock_timeout")
                conn.execute("RESET statement_timeout")

    def _usable(self, conn: Any) -> bool:
        return conn is not None and not conn.closed and not conn.broken

    def _outage(self, exc: BaseException, conn: Any) -> bool:
        # OperationalError: the connection, the server going away, a serialization failure
        # or deadlock (the transaction's fault, not the statement's), a cancelled query.
        import psycopg

        return isinstance(exc, psycopg.OperationalError) or not self._usable(conn)

    def _data_errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.DataError, psycopg.IntegrityError)

    def setup_fault(self, exc: BaseException) -> bool:
        import psycopg.errors

        return isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn)

    def _begin_schema(self, conn: Any) -> None:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))

    def _table_exists(self, conn: Any, name: str) -> bool:
        return conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None

    def _delete_batch_sql(self, condition: str) -> str:
        return (f"DELETE FROM {RECORDS} WHERE ctid IN "
                f"(SELECT ctid FROM {RECORDS} WHERE {condition} LIMIT %s)")
