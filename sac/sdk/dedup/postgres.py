"""A PostgreSQL store (psycopg 3, the ``postgres`` extra): for consumers on several hosts, and
for effects that already live in PostgreSQL, so that effect and record commit together.

A batch costs two round trips whatever its size (``_PipelinedBatch``): one takes the records
of all its messages (which is also the lookup), one commits; effects' statements go in
between in pipeline mode, unanswered. A batch holding a copy of a committed message costs
one more (its first take bets that every id is new, and starts again when one is not).

A frozen holder. A batch holds row locks (on the records it took, from its start, on rows
its effects wrote, and at its end a share lock on the epoch row) until it commits. If the
active consumer is frozen in the middle of a batch, its session waits for its client inside
the transaction and its successor's take of the same records waits on it. So every session
of a store carries an ``application_name`` of ``sac-dedup:<token>``, the token random per
store; the epoch row records the token of its holder; and an epoch claim, in the same
statement that raises the epoch, ends (``pg_terminate_backend``) the previous holder's
sessions that wait for their client inside a transaction: "idle in transaction" between
batches' round trips, or "active" waiting on ``ClientRead`` while a pipelined batch's
statements are sent ahead of its sync (the server counts a statement without its Sync as
still running; the batch's ``application_name`` carries ``BATCHING`` for its transaction, so
that a session merely receiving a statement is never taken for one). Such a transaction
could never commit after the claim (the epoch check at its commit refuses it); the woken
zombie finds its session gone, tries again on a new one and is fenced (``StaleEpoch``).
Sessions executing a statement are left alone: they are not waiting for a frozen client, and
reach that check by themselves; this also keeps a claim from ending a concurrent claim.
Ending a session needs the role's own sessions (or membership of the role, or
``pg_signal_backend``): consumers of one queue connect as one role. Sessions are also opened
with ``idle_in_transaction_session_timeout``, the bound when nothing else applies.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from .._errors import ConfigurationError, StaleEpoch, StoreUnavailable
from ._sql import EPOCHS, LOOKUP_CHUNK, RECORDS, SqlStore
from ._store import Batch, BatchRefused, Duplicate, Transaction

APPLICATION = "sac-dedup:"
"""Prefix of the ``application_name`` of every store session; the store's token follows."""

BATCHING = ":batch"
"""Suffix of a session's ``application_name`` for the length of a pipelined batch (set for
its transaction only): what tells the claim's guard that a session "active" while waiting
on its client is a batch whose statements are in flight, not a statement being received."""

CLAIM_LOCK_TIMEOUT = 2.0
"""How long a claim waits for a row lock (an ended holder's lock goes within milliseconds);
past it the claim fails like any store failure and the inbox tries again."""

CLAIM_STATEMENT_TIMEOUT = 10.0
"""A bound on the whole claim statement, for what nobody foresaw."""

STALE_EPOCH = "SAC01"
"""The SQLSTATE a pipelined batch's epoch check raises (a class no PostgreSQL error uses)."""

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
        f"ON a.application_name IN ('{APPLICATION}' || e.holder, "
        f"'{APPLICATION}' || e.holder || '{BATCHING}') "
        "WHERE e.queue = %s AND (%s::bigint IS NULL OR e.epoch < %s::bigint) "
        "AND a.application_name NOT IN (%s, %s) AND a.pid <> pg_backend_pid() "
        "AND (a.state IN ('idle in transaction', 'idle in transaction (aborted)') "
        "OR (a.state = 'active' AND a.wait_event = 'ClientRead' "
        f"AND a.application_name LIKE '%%{BATCHING}')) "
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
        self._epoch_checks: dict[tuple[str, int], str] = {}
        self.token = secrets.token_hex(8)
        """Names this store's sessions (``application_name``) and its epochs (``holder``)."""
        self.batching_name = f"{APPLICATION}{self.token}{BATCHING}"
        """The sessions' ``application_name`` for the length of a pipelined batch."""
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
                # Nothing prepared behind the effects' backs: in pipeline mode a statement
                # psycopg prepares in a batch that then fails is remembered as prepared but
                # is not, and every later batch fails on "prepared statement does not
                # exist", which reads as the messages' own fault (and parks them).
                prepare_threshold=None,
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
        return (queue, epoch, epoch, f"{APPLICATION}{self.token}",
                f"{APPLICATION}{self.token}{BATCHING}")

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

        return (isinstance(exc, psycopg.OperationalError) and not self._aborted(exc)) \
            or not self._usable(conn)

    @staticmethod
    def _aborted(exc: BaseException) -> bool:
        """A statement skipped because an earlier one of its pipeline failed (psycopg
        counts it an OperationalError): that earlier statement's fault, not an outage."""
        import psycopg

        return isinstance(exc, psycopg.errors.PipelineAborted)

    def epoch_check(self, queue: str, epoch: int) -> str:
        """A statement that takes the epoch row's share lock (so that a claim waits for
        the commit it precedes) and fails with ``STALE_EPOCH`` when a newer epoch than
        ``epoch`` exists: sent with ``COMMIT`` under one sync, it keeps a replaced
        consumer's batch from committing without an answer to wait for first. A ``DO``
        block takes no parameters: the queue goes in as a quoted literal, the epoch as a
        number; built once per queue and epoch."""
        key = (queue, epoch)
        check = self._epoch_checks.get(key)
        if check is None:
            from psycopg import sql

            literal = sql.Literal(queue).as_string(None)
            body = (f"DECLARE current bigint; BEGIN SELECT epoch INTO current FROM {EPOCHS} "
                    f"WHERE queue = {literal} FOR SHARE; IF current > {int(epoch)} THEN "
                    f"RAISE EXCEPTION USING ERRCODE = '{STALE_EPOCH}', "
                    "MESSAGE = current::text; END IF; END")
            tag = "$sac$"
            while tag in body:
                tag = tag[:-1] + "x$"
            check = self._epoch_checks[key] = f"DO {tag}{body}{tag}"
        return check

    @contextlib.contextmanager
    def batch(
        self, queue: str, epoch: int, consumer: str | None = None
    ) -> Iterator[Batch]:
        """Pipelined (``_PipelinedBatch``): one round trip to take the records (and look
        them up), one to commit (the pipeline's closing sync)."""
        import psycopg

        with self._lock:
            conn = self._connection()
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")  # what an interrupted batch left open
            batch: _PipelinedBatch | None = None
            try:
                with conn.pipeline() as pipeline:
                    batch = _PipelinedBatch(self, conn, pipeline, queue, epoch, consumer)
                    batch.begin()
                    try:
                        yield batch
                    except BaseException:
                        batch.rollback()
                        raise
                    batch.finish()
            except StoreUnavailable:
                raise
            except Exception as exc:
                if batch is not None and batch.finishing:
                    batch.refuse(exc)
                if self._outage(exc, conn):
                    raise self.unavailable(exc) from exc
                raise
        batch.run_after_commit()

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


_INSERT = (
    f"INSERT INTO {RECORDS} (queue, message_id, epoch, consumer, committed_at) "
    "SELECT %s, m, %s, %s, %s + (n - 1) * 1e-6 "
    "FROM unnest(%b::text[]) WITH ORDINALITY AS r(m, n){source}")
"""A batch's records, all new (``_PipelinedBatch._take_new``): one that exists fails it."""
_TAKE = f"{_INSERT} ON CONFLICT (queue, message_id) DO NOTHING RETURNING message_id"
"""A batch's records taken where free (``_PipelinedBatch._take``)."""
_NAMED = ", (SELECT set_config('application_name', %s, true)) AS named(name)"
"""Joined to the take's rows: the session's name set by the same statement, once."""


class _PipelinedBatch(Batch):
    """A batch in psycopg's pipeline mode: statements are sent without waiting for their
    answers, so that a batch costs two round trips whatever its size.

    The first round trip takes the batch's records: ``BEGIN`` and one insert of a record for
    every id the batch will stage (``lookup``), a plain insert that fails if any record
    exists (``_take_new``), then, only if one did, ``ON CONFLICT DO NOTHING RETURNING``
    after a rollback (nothing was written yet). An id that one does not return was
    committed before (the lookup's answer, and a ``Duplicate`` for an
    id that was not looked up, before its effect runs); an id it returns is this batch's,
    its record row-locked until the commit. That is the protocol's order (the record is
    written before anyone else's can be), only earlier: a consumer that replaced a frozen
    one waits on the frozen batch's records in this very insert, until that batch ends
    (ended by the claim's guard, or, with fencing off, committed late), and then finds
    those ids taken. The effects' statements are sent unanswered, each message's inside a
    savepoint taken the first time its effect asks for the connection (an effect that
    writes nothing costs no statement). The second round trip ends the batch: the records
    of ids not staged (a failed effect, what followed it) are deleted, the epoch is checked
    (a share lock on the epoch row, so that a claim waits for this commit; ``STALE_EPOCH``
    when a newer epoch exists) and ``COMMIT`` is sent, all under one sync.

    A statement that fails aborts the transaction, and its error comes back only at the
    commit, not saying which message sent it: the batch is rolled back and ``BatchRefused``
    raised, and the inbox tries each message alone (a batch of one raises the error
    itself). An effect that raises on its own is undone alone, by its savepoint.

    While its statements are in flight the session counts as "active" (waiting on
    ``ClientRead``), not "idle in transaction": the batch's ``application_name`` carries
    ``BATCHING`` so that the claim's guard ends such a session of the previous holder too.
    """

    def __init__(self, store: PostgresStore, conn: Any, pipeline: Any, queue: str,
                 epoch: int, consumer: str | None) -> None:
        super().__init__(queue, epoch, consumer)
        self._store = store
        self._conn = conn
        self._pipeline = pipeline
        self._taken: set[str] = set()
        """Ids whose records this batch inserted (row-locked until it ends)."""
        self._found: set[str] = set()
        """Ids whose records were there when this batch went to take them."""
        self._tried = 0
        """Messages whose effect ran: a batch that tried one can blame a failure on it."""
        self._refused: BaseException | None = None
        """A statement of an effect failed: nothing of the batch can commit."""
        self._named = False
        self.finishing = False
        """The batch's end was sent: what fails now refuses the batch (``refuse``)."""

    def begin(self) -> None:
        self._conn.execute("BEGIN")

    def _name(self) -> None:
        """Name the session a batch's for its transaction (``BATCHING``), before the
        statements that lock anything: with the first take, or on its own."""
        if not self._named:
            self._named = True
            self._conn.execute("SELECT set_config('application_name', %s, true)",
                               (self._store.batching_name,))

    def _take(self, message_ids: list[str]) -> set[str]:
        """Insert the records of ``message_ids`` (distinct), waiting for the answer: which
        this batch now holds. Their times keep the batch's order, a microsecond apart, so
        that the ledger (``records``) lists them in the order they were delivered."""
        now = time.time()
        if self._named:
            rows = self._conn.execute(
                _TAKE.format(source=""),
                (self.queue, self.epoch, self.consumer, now, message_ids)).fetchall()
        else:  # the session's name for the batch set in the same statement
            self._named = True
            rows = self._conn.execute(
                _TAKE.format(source=_NAMED),
                (self.queue, self.epoch, self.consumer, now, message_ids,
                 self._store.batching_name)).fetchall()
        taken = {row[0] for row in rows}
        self._taken |= taken
        self._found.update(m for m in message_ids if m not in taken)
        return taken

    def _take_new(self, message_ids: list[str]) -> None:
        """``_take`` for the batch's first statement, betting that every id is new (the
        rule: a copy is the exception): a plain insert, without ``ON CONFLICT`` and
        ``RETURNING``, costs the server about half the work per record (measured: 6 against
        14 µs). One record that exists fails it; the batch, which holds nothing yet, then
        starts again with ``_take``, one round trip more."""
        import psycopg

        conn = self._conn
        self._named = True  # the session's name for the batch set in the same statement
        conn.execute(_INSERT.format(source=_NAMED),
                     (self.queue, self.epoch, self.consumer, time.time(), message_ids,
                      self._store.batching_name))
        try:
            self._pipeline.sync()
        except psycopg.errors.UniqueViolation:
            conn.execute("ROLLBACK")
            self.begin()
            self._named = False
            self._take(message_ids)
        else:
            self._taken.update(message_ids)

    def lookup(self, looked_up: Sequence[str], staging: Sequence[str]) -> set[str]:
        """Takes the records of ``staging`` (one round trip with ``BEGIN``): an id not
        taken was committed before. ``looked_up`` outside ``staging`` are looked up."""
        fresh = [m for m in dict.fromkeys(staging)
                 if m not in self._taken and m not in self._found]
        if fresh and not (self._taken or self._found or self._tried or self._named):
            self._take_new(fresh)
        elif fresh:
            self._take(fresh)
        rest = [m for m in looked_up if m not in self._taken and m not in self._found]
        found = {m for m in looked_up if m in self._found}
        return found | (self.committed_among(rest) if rest else set())

    def seen(self, message_id: str) -> bool:
        if message_id in self._staged_ids or message_id in self._found:
            return True
        if message_id in self._taken:
            return False  # this batch's own record, not committed yet
        return self._conn.execute(
            self._store._sql_seen, (self.queue, message_id)).fetchone() is not None

    def committed_among(self, message_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        # Never prepared: a generic plan made while the table was small scans it all (the
        # lookup then grows with the table); planned each time, it reads the index.
        cursors: list[Any] = [
            self._conn.execute(
                f"SELECT message_id FROM {RECORDS} WHERE queue = %s "
                "AND message_id = ANY(%b::text[])",
                (self.queue, list(message_ids[start:start + LOOKUP_CHUNK])), prepare=False)
            for start in range(0, len(message_ids), LOOKUP_CHUNK)]
        for cursor in cursors:
            found.update(row[0] for row in cursor.fetchall())
        return found - self._taken

    def message(self, message_id: str) -> contextlib.AbstractContextManager[Transaction]:
        """Raises ``Duplicate`` at once (the effect does not run) for an id committed
        before or staged earlier in this batch; an id ``lookup`` was not told of is taken
        here, with a round trip of its own."""
        if self._refused is not None:
            raise BatchRefused("a statement of this batch failed") from self._refused
        if message_id in self._staged_ids or message_id in self._found:
            raise Duplicate(message_id)
        if message_id not in self._taken and not self._take([message_id]):
            raise Duplicate(message_id)
        self._tried += 1
        return _Message(self, message_id)

    def _send(self, statement: str) -> None:
        """One statement of ours, unanswered. An error psycopg raises here is the answer to
        an earlier statement (an effect's): the batch is refused at the commit."""
        import psycopg

        try:
            self._conn.execute(statement)
        except psycopg.Error as exc:
            store = self._store
            if store._outage(exc, self._conn) and not store._aborted(exc):
                raise store.unavailable(exc) from exc
            if self._refused is None:
                self._refused = exc

    def done(self, tx: _Message) -> None:
        if tx.saved:
            self._send("RELEASE SAVEPOINT sac_message")
        self._stage(tx.message_id, tx)

    def failed(self, tx: _Message, exc: BaseException) -> None:
        """An effect raised. A failing store is not the message's: the batch is tried
        again. A statement that failed (psycopg's error) aborted the transaction: the batch
        is refused at the commit. Anything else the effect raised is undone alone."""
        import psycopg

        store = self._store
        if isinstance(exc, Exception) and store._outage(exc, self._conn) \
                and not store._aborted(exc):
            raise store.unavailable(exc) from exc
        if isinstance(exc, psycopg.Error):
            if self._refused is None or store._aborted(self._refused):
                self._refused = exc
        elif tx.saved:
            self._send("ROLLBACK TO SAVEPOINT sac_message")
            self._send("RELEASE SAVEPOINT sac_message")

    def finish(self) -> None:
        """Send the end of the batch, answered at the pipeline's closing sync: drop the
        records of what was not staged, check the epoch, commit."""
        self.finishing = True
        if self._refused is not None:
            raise self._refused
        self._name()
        conn = self._conn
        unstaged = [m for m in self._taken if m not in self._staged_ids]
        if unstaged:
            conn.execute(f"DELETE FROM {RECORDS} WHERE queue = %s "
                         "AND message_id = ANY(%b::text[])", (self.queue, unstaged))
        conn.execute(self._store.epoch_check(self.queue, self.epoch))
        conn.execute("COMMIT")

    def refuse(self, raised: Exception) -> NoReturn:
        """The end of the batch failed (``raised``, out of pipeline mode now): roll back
        and raise what refused it."""
        import psycopg

        conn = self._conn
        store = self._store
        if store._usable(conn):
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
        # A statement skipped for an earlier one's failure: that failure is the cause.
        exc = self._refused if store._aborted(raised) and self._refused else raised
        if isinstance(exc, psycopg.Error) and exc.sqlstate == STALE_EPOCH:
            current = int(exc.diag.message_primary or 0)
            raise StaleEpoch(self.queue, self.epoch, current) from None
        if store._outage(exc, conn) and not store._aborted(exc):
            raise store.unavailable(exc) from exc
        if store.setup_fault(exc) or (self._tried <= 1 and store.message_fault(exc)):
            raise exc  # the set-up's (tried again), or the one message's own failure
        raise BatchRefused(
            f"a statement of a batch of {self._tried} message(s) failed ({exc}); each "
            "message is tried alone") from exc

    def rollback(self) -> None:
        with contextlib.suppress(Exception):
            with contextlib.suppress(Exception):
                self._pipeline.sync()  # what was sent: answered, or aborted by a failure
            self._conn.execute("ROLLBACK")
            self._pipeline.sync()


class _Message(Transaction):
    """One message of a pipelined batch: its transaction, and the context manager around
    its effect (one object a message: it is made for every message). It takes the
    message's savepoint the first time the effect asks for the connection: an effect that
    writes nothing sends nothing."""

    __slots__ = ("_batch", "saved")

    def __init__(self, batch: _PipelinedBatch, message_id: str) -> None:
        super().__init__(batch._conn, batch.queue, message_id, batch.epoch)
        self._batch = batch
        self.saved = False

    @property
    def connection(self) -> Any:
        if not self.saved:
            self.saved = True
            self._connection.execute("SAVEPOINT sac_message")
        return self._connection

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is None:
            self._batch.done(self)
        else:
            self._batch.failed(self, exc)
