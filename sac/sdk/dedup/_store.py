"""What every dedup store does, and the small types the inbox and the stores share.

A store keeps two things per queue: the *records* (one per message id whose effect was
committed) and the *epoch* (a number that grows each time a consumer becomes the active one).
A commit carries the committer's epoch and is refused when a newer one exists, which is what
keeps a replaced consumer (paused, declared dead, but still running its handler) from applying
its effect after its successor did.

A batch holds the store's locks from its first write to its commit, so a consumer frozen in
the middle of a batch holds them while it is frozen. What a store does so that this cannot
stall the consumer that replaced it is said by each store: the epoch row names its holder,
and a claim (made only once the broker has handed the queue over) deals with the old one.
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from .._errors import ConfigurationError

SCHEMA_VERSION = 2
"""Version of the tables the SQL stores create. An older version that can be brought up to
date is migrated in place on ``open`` (version 1: the epoch's holder was not recorded); any
other version is refused."""


class Duplicate(Exception):
    """Raised inside a store transaction when the message's record already exists: the
    transaction (and the effect written through it) is rolled back."""


class BatchRefused(Exception):
    """Raised by a batch's commit when one of its messages failed in a way the store can
    only undo with the whole batch (a statement of an effect that the PostgreSQL store sent
    without waiting for its answer failed, which aborts its transaction): nothing of the
    batch was committed, and ``Store.message_fault`` is true for it, so the inbox tries
    each message alone and finds the one at fault. ``__cause__`` is what failed."""


def _positive(*, integer: bool, optional: bool) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        kinds = (int,) if integer else (int, float)
        if not isinstance(value, kinds) or isinstance(value, bool) or value <= 0:
            what = "integer" if integer else "number"
            raise ConfigurationError(
                f"Retention.{attribute.name} must be a positive {what}"
                f"{' or None' if optional else ''}, got {value!r}"
            )
    return check


@attrs.frozen
class Retention:
    """How long records stay, which is the window within which a duplicate is caught.

    A duplicate that arrives after its record was purged runs again. Broker redeliveries
    arrive within seconds to minutes; a publisher retransmission within its reconnect time.
    The default keeps a week of records, and at most ``max_records`` per queue when set.
    Purging runs on its own connection in small batches (``batch`` rows per transaction), so
    consumers wait at most for one batch.
    """

    max_age: float | None = attrs.field(default=7 * 24 * 3600.0,
                                        validator=_positive(integer=False, optional=True))
    max_records: int | None = attrs.field(default=None,
                                          validator=_positive(integer=True, optional=True))
    interval: float = attrs.field(default=60.0, validator=_positive(integer=False, optional=False))
    batch: int = attrs.field(default=1000, validator=_positive(integer=True, optional=False))


class Transaction:
    """What an inbox handler writes its effect through. For the SQL stores ``connection`` is
    the store's own connection inside the transaction that will also hold the dedup record;
    for the memory store it is ``None`` (the effect cannot be rolled back). ``message_id`` is
    the id as the store records it (``id_key``: text any store can hold, whatever octets the
    publisher sent)."""

    __slots__ = ("_after", "_connection", "epoch", "message_id", "queue")

    def __init__(self, connection: Any, queue: str, message_id: str, epoch: int) -> None:
        self._connection = connection
        self.queue = queue
        self.message_id = message_id
        self.epoch = epoch
        self._after: list[Callable[[], None]] | None = None
        """Made by the first ``on_commit``: most effects register nothing."""

    @property
    def connection(self) -> Any:
        """The store's connection, inside the batch's transaction (``None``: memory store).
        A store may prepare something the first time an effect asks for it (PostgreSQL: the
        message's savepoint, so that an effect that writes nothing costs nothing)."""
        return self._connection

    def on_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` only if this transaction commits: the way to apply an in-process
        effect with the memory store (atomically with its record, under the store's lock).
        With a SQL store it runs right after the commit (not atomically with it)."""
        if self._after is None:
            self._after = []
        self._after.append(action)

    def run_after_commit(self) -> None:
        if self._after is not None:
            for action in self._after:
                action()

    def execute(self, sql: str, params: Any = ()) -> Any:
        """Run one statement in the transaction (the store's own placeholder style:
        ``?`` for SQLite, ``%s`` for PostgreSQL) and return its cursor."""
        if self.connection is None:
            raise TypeError("the memory store has no SQL connection")
        return self.connection.execute(sql, params)


class Batch(abc.ABC):
    """Messages staged in one store transaction. ``message()`` wraps one message's effect:
    an exception inside (the effect failed) or ``Duplicate``/``StaleEpoch`` on its exit
    undoes that message only; the others stay staged. ``staged`` lists what will commit.

    A store may learn of a statement's failure only at the commit (the PostgreSQL store
    sends effects' statements without waiting for their answers): it then commits nothing
    and raises ``BatchRefused``, and the caller tries each message alone, where every
    failure is found at the message's own exit as above."""

    def __init__(self, queue: str, epoch: int, consumer: str | None) -> None:
        self.queue = queue
        self.epoch = epoch
        self.consumer = consumer
        self.staged: list[str] = []
        self._staged_ids: set[str] = set()
        """``staged`` as a set: a message asks whether its id was staged earlier."""
        self.late_duplicates: set[str] = set()
        """Staged ids found committed by another consumer at commit time (memory store):
        their records and ``on_commit`` actions were dropped."""
        self.transactions: list[tuple[str, Transaction]] = []

    @abc.abstractmethod
    def message(self, message_id: str) -> contextlib.AbstractContextManager[Transaction]: ...

    @abc.abstractmethod
    def seen(self, message_id: str) -> bool:
        """Committed before, or staged earlier in this batch."""

    def committed_among(self, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` were committed before this batch: the inbox looks a
        whole batch up at once, so that looking every message up costs one read a batch,
        not one a message. Stores override this with one query; this default asks each."""
        return {message_id for message_id in message_ids if self.seen(message_id)}

    def lookup(self, looked_up: Sequence[str], staging: Sequence[str]) -> set[str]:
        """Which of ``looked_up`` were committed before this batch, told first every id the
        batch will try to stage (``staging``, in order): a store may take their records at
        once, in the same round trip (PostgreSQL), so that what it finds committed is
        refused before its effect runs and what it takes waits for nobody later. This
        default looks ``looked_up`` up (``committed_among``) and takes nothing."""
        return self.committed_among(looked_up)

    def _stage(self, message_id: str, tx: Transaction) -> None:
        self.staged.append(message_id)
        self._staged_ids.add(message_id)
        self.transactions.append((message_id, tx))

    def run_after_commit(self) -> None:
        late = self.late_duplicates
        for message_id, tx in self.transactions:
            if message_id not in late:
                tx.run_after_commit()


class Store(abc.ABC):
    """The store interface. All methods are blocking and thread-safe; ``open`` must be called
    before the others and raises ``StoreUnavailable`` or ``SchemaMismatch`` when the store
    cannot be used."""

    @abc.abstractmethod
    def open(self) -> None:
        """Connect, create the tables if missing, check their version."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """Where the store is, safe to log (no password)."""

    def message_fault(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by a batch's commit, is the store refusing what the
        batch's messages wrote (a constraint, a value out of range) rather than the store
        failing: waiting does not mend it, so the inbox finds the message at fault instead
        of retrying the batch. False here: the memory store refuses nothing."""
        return False

    def setup_fault(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by an effect, is the database's set-up (a table or column
        the effect writes does not exist) rather than the message: every message would fail
        the same way, so the batch is tried again under ``store_retry`` (a migration may be
        running) and the consumer then stops with ``StoreUnavailable``, its messages unacked,
        instead of parking the queue one message at a time. False here."""
        return False

    def missing_tables(self, names: Sequence[str]) -> list[str]:
        """Those of ``names`` the store's database has no table for (the store is open).
        The memory store has no tables: naming any is a mistake."""
        if names:
            raise ConfigurationError(
                f"dedup store {self.description} has no tables: Inbox(tables=...) is for the "
                "SQLite and PostgreSQL stores")
        return []

    @abc.abstractmethod
    def claim_epoch(self, queue: str) -> int:
        """Atomically raise the queue's epoch by one, record this store's user as its
        holder, and return it. Call it only when the broker has just made this consumer the
        active one: the SQL stores then end what the previous holder still holds."""

    @abc.abstractmethod
    def adopt_epoch(self, queue: str, epoch: int) -> int:
        """Make ``epoch`` (from outside, e.g. a ZooKeeper election) the queue's epoch; raises
        ``StaleEpoch`` if the store already has a newer one."""

    @abc.abstractmethod
    def current_epoch(self, queue: str) -> int:
        """0 when no consumer ever claimed one."""

    @abc.abstractmethod
    def seen(self, queue: str, message_id: str) -> bool:
        """Whether the message's effect was committed (and not yet purged)."""

    @abc.abstractmethod
    def batch(
        self, queue: str, epoch: int, consumer: str | None = None
    ) -> contextlib.AbstractContextManager[Batch]:
        """One store transaction for several messages (one commit, one fsync for all). On a
        clean exit: check the epoch and commit everything staged, or raise ``StaleEpoch``
        after rolling all of it back."""

    @contextlib.contextmanager
    def transaction(
        self, queue: str, message_id: str, epoch: int, consumer: str | None = None
    ) -> Iterator[Transaction]:
        """A batch of one: run the effect inside; on a clean exit, check the epoch, write the
        record and commit, all or nothing. Raises ``StaleEpoch`` or ``Duplicate`` (after
        rolling back); an exception from inside rolls back and propagates."""
        with self.batch(queue, epoch, consumer) as batch, batch.message(message_id) as tx:
            yield tx

    @abc.abstractmethod
    def purge(self, retention: Retention, now: float | None = None) -> int:
        """Delete records outside the retention; returns how many."""

    @abc.abstractmethod
    def records(self, queue: str) -> list[tuple[str, int, str | None, float]]:
        """(message id, epoch, consumer, committed at) of every record of the queue, oldest
        first: the ledger a checker reads back."""

    def __enter__(self) -> Store:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def now_or(now: float | None) -> float:
    return time.time() if now is None else now

