"""The idempotent inbox: run a handler's effect at most once per message id, and never after
the consumer was replaced.

Give a consumer an ``Inbox`` instead of a plain handler::

    def effect(delivery: Delivery, tx: Transaction) -> None:
        tx.execute("INSERT INTO orders (id, body) VALUES (?, ?)",
                   (tx.message_id, delivery.body))

    store = SQLiteStore("/var/lib/app/dedup.db")
    Consumer(settings, Inbox(store, effect, tables=["orders"])).run()

Per message: maybe look the id up (``LookupPolicy``); run the effect inside the store's
transaction; write the record and check the epoch in the same transaction; commit; only then
does the consumer ack. What the consumer has waiting (up to ``ack_batch`` messages) commits
in one transaction: one fsync for the batch, each effect in a savepoint of its own.

Each time the consumer becomes the active one it claims a new epoch (or adopts one from
``epoch_source``, e.g. a ZooKeeper election); a commit from an older epoch is refused with
``StaleEpoch`` and the consumer stops without acking.

Any message id is recorded under its canonical text (``id_key``): an id another client
published with a NUL character, or in octets that are not UTF-8, is handled like any other
(once), on every store; ``tx.message_id`` is that text.

A store that fails (a database restarting, a lock held too long) is not the messages' fault:
rejecting them would redeliver them at once, count a delivery each time, and a queue's
delivery limit would dead-letter (or drop) good messages within seconds of an outage. So the
batch is retried, its messages held unacked, with bounded backoff and jitter
(``store_retry``); when that is exhausted the consumer stops with ``StoreUnavailable`` and the
broker gives the messages back to the queue, counted once.
"""

from __future__ import annotations

import concurrent.futures
import enum
import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Sequence

import attrs

from sac.history import Active, Commit, CommitRejected, DuplicateSkipped, HistoryEvent
from .._core.backoff import Backoff
from .._core.ids import id_key
from .._core.retry import Interrupted, Retry, drive
from .._delivery import Delivery
from .._errors import MissingMessageId, StaleEpoch, StoreError, StoreUnavailable
from .._history import HistoryRecorder, recorded_id
from ._store import Batch, Duplicate, Retention, Store, Transaction

log = logging.getLogger("sac.dedup")

Effect = Callable[[Delivery, Transaction], None]


class LookupPolicy(enum.Enum):
    """When to look a message id up before running the effect.

    The record is written in every case, and a SQL store's unique key refuses a second
    record even without a lookup (rolling the effect back). The lookup is what keeps an
    effect that the store cannot roll back (the memory store, a call to another system) from
    running twice, and it saves running the effect for a duplicate.
    """

    ALWAYS = "always"
    """Look up every message before its effect runs (the default). Needed for effects the
    store cannot roll back: a copy is not always flagged. ``sac sim`` found one: a publish
    held on a silent link can reach the broker *after* its marked retransmission and arrive
    with ``redelivered`` false, no delivery count and no mark."""
    FLAGGED = "flagged"
    """Look up only a message that may be a copy: ``redelivered``, carrying
    ``x-delivery-count``, or marked as a retransmission by our publisher. Saves a read per
    fresh message; only for effects written entirely through the store's transaction (the
    record's unique key refuses the unflagged copy's commit and rolls its effect back)."""
    NEVER = "never"
    """Never look up: only for effects written entirely through the store's transaction."""
    DEFAULT = "always"
    """``ALWAYS`` (an alias: the same member)."""


def _looks_up(policy: LookupPolicy, delivery: Delivery) -> bool:
    return policy is LookupPolicy.ALWAYS or (
        policy is LookupPolicy.FLAGGED and delivery.maybe_duplicate)


class Outcome(enum.Enum):
    COMMITTED = "committed"
    DUPLICATE = "duplicate"


@attrs.frozen
class InboxStats:
    committed: int
    duplicates_looked_up: int
    duplicates_at_commit: int
    lookups: int
    epochs_claimed: int
    stale: int
    store_retries: int = 0
    """Batches tried again because the store failed (their messages stayed unacked)."""


STORE_RETRY = Backoff(initial=0.1, maximum=5.0, max_attempts=None, max_elapsed=60.0)
"""How long a batch waits for a failing store: a restart or failover of the database fits in
a minute; far below the broker's consumer timeout for unacked messages (30 min)."""


class _Isolate:
    """A batch's commit was refused for one message's data: try each message alone."""


class _CommitRefused(Exception):
    """The store refused a batch's commit for what its messages wrote
    (``Store.message_fault``); ``__cause__`` is its error. Only the commit is judged so: the
    same error from claiming the epoch or from the lookup is the store's, never a
    message's."""


class Inbox:
    """Wraps an effect ``(delivery, tx) -> None`` for one consumer. The consumer opens it at
    start (so a bad store fails before any message is consumed) and closes it at stop."""

    def __init__(
        self,
        store: Store,
        effect: Effect,
        *,
        policy: LookupPolicy = LookupPolicy.DEFAULT,
        retention: Retention | None = None,
        epoch_source: Callable[[], int] | None = None,
        tables: Sequence[str] = (),
        store_retry: Backoff = STORE_RETRY,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store must be a sac dedup Store, got {type(store).__name__}")
        if not callable(effect):
            raise TypeError(f"effect must be callable, got {type(effect).__name__}")
        if not isinstance(policy, LookupPolicy):
            raise TypeError(f"policy must be a LookupPolicy, got {policy!r}")
        if not isinstance(store_retry, Backoff):
            raise TypeError(f"store_retry must be a Backoff, got {store_retry!r}")
        if isinstance(tables, str) or not all(isinstance(t, str) and t for t in tables):
            raise TypeError(f"tables must be a sequence of table names, got {tables!r}")
        self.tables = tuple(tables)
        """The tables the effect writes: checked when the consumer starts."""
        self.store_retry = store_retry
        self._interrupted = threading.Event()
        # The wait between tries ends early on interrupt(): a stopping consumer does not sit
        # out a store outage's backoff.
        # ``clock`` and ``rng`` are the retry's: a simulator passes virtual ones.
        self._retry = Retry(store_retry, clock, self._interrupted.wait,
                            interrupted=self._interrupted.is_set, rng=rng)
        self.store = store
        self.effect = effect
        self.policy = policy
        self.retention = Retention() if retention is None else retention
        self.epoch_source = epoch_source
        self.queue: str | None = None
        self.consumer: str | None = None
        self.recorder: HistoryRecorder | None = None
        self._activation = -1
        self._epoch = 0
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._purger: threading.Thread | None = None
        self._closing = threading.Event()
        self._committed = self._dup_lookup = self._dup_commit = 0
        self._lookups = self._claims = self._stale = self._retries = 0

    @property
    def epoch(self) -> int:
        """The epoch this consumer holds (0 before its first activation)."""
        return self._epoch

    @property
    def stats(self) -> InboxStats:
        return InboxStats(self._committed, self._dup_lookup, self._dup_commit, self._lookups,
                          self._claims, self._stale, self._retries)

    @property
    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        """The one thread the asyncio face runs store work on (a store connection is used by
        one thread at a time, and messages commit in delivery order)."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="sac-inbox")
        return self._executor

    def bind(self, queue: str, consumer: str | None, recorder: HistoryRecorder | None) -> None:
        """Serve ``queue`` for the consumer named ``consumer`` (an inbox serves one queue),
        recording into ``recorder``. A consumer calls ``session`` instead."""
        if self.queue is not None and self.queue != queue:
            raise ValueError(f"this inbox already serves queue {self.queue!r}")
        self.queue = queue
        self.consumer = consumer
        self.recorder = recorder

    def session(self, *, queue: str, consumer: str | None,
                recorder: HistoryRecorder | None) -> InboxSession:
        """The consumer's handle on this inbox: it binds the inbox to ``queue`` (raises
        ``ValueError`` if it serves another one) and takes each batch's epoch source with
        the batch, so the consumer sets nothing on the inbox itself."""
        self.bind(queue, consumer, recorder)
        return InboxSession(self)

    def open(self) -> None:
        """Open the store (raises ``StoreUnavailable``/``SchemaMismatch``), check the
        effect's ``tables`` exist (``StoreError`` naming those missing: without them every
        message would fail alike), and start purging."""
        self.store.open()
        missing = self.store.missing_tables(self.tables)
        if missing:
            self.store.close()
            raise StoreError(
                f"dedup store {self.store.description} has no table "
                f"{', '.join(repr(t) for t in missing)}, which the effect writes "
                "(Inbox(tables=...)): create it in the store's database before the consumer "
                "starts")
        self._closing.clear()
        if self._purger is None:
            self._purger = threading.Thread(target=self._purge_loop, name="sac-dedup-purge",
                                            daemon=True)
            self._purger.start()

    def interrupt(self) -> None:
        """Stop waiting for a failing store (the consumer is stopping): the batch in hand
        ends with ``StoreUnavailable`` at once, its messages unacked."""
        self._interrupted.set()

    def close(self) -> None:
        self._closing.set()
        self._interrupted.set()
        if self._purger is not None:
            self._purger.join(timeout=10)
            self._purger = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.store.close()

    def _purge_loop(self) -> None:
        while not self._closing.wait(self.retention.interval):
            try:
                dropped = self.store.purge(self.retention)
                if dropped:
                    log.info("purged %d dedup records from %s", dropped, self.store.description)
            except Exception:
                log.exception("purging %s failed; will try again", self.store.description)

    # ------------------------------------------------------------------ per message

    def activate(self, epoch_source: Callable[[], int] | None = None) -> int:
        """Claim (or adopt) the epoch for a new activation of this consumer: adopted from
        ``epoch_source`` (else the inbox's own ``epoch_source``) when there is one."""
        queue = self._queue()
        source = self.epoch_source if epoch_source is None else epoch_source
        if source is not None:
            epoch = self.store.adopt_epoch(queue, int(source()))
        else:
            epoch = self.store.claim_epoch(queue)
        self._epoch = epoch
        self._claims += 1
        if self.recorder is not None:
            self.recorder.record(Active(queue=queue, epoch=epoch))
        return epoch

    def process(self, delivery: Delivery, activation: int) -> Outcome:
        """``process_batch`` of one message; raises what its effect raised."""
        [result] = self.process_batch([delivery], activation)
        if isinstance(result, Exception):
            raise result
        return result

    def process_batch(
        self, deliveries: Sequence[Delivery], activation: int, *,
        epoch: Callable[[], int] | None = None,
    ) -> list[Outcome | Exception]:
        """Run each message's effect at most once per message id, all in one store
        transaction (one commit for the batch; each effect isolated in a savepoint).

        Returns, per delivery in order: ``COMMITTED``, ``DUPLICATE`` (ack it, its effect
        was committed before) or the exception its effect raised (nothing of it was
        committed), which ends the list: the deliveries after a failed one are not run (the
        consumer retries or parks the failed one first, which keeps the queue's order), and
        the list is then shorter than ``deliveries``. ``activation`` changes each time the
        consumer becomes active; the first batch of a new activation claims the epoch first
        (adopting it from ``epoch``, when given, instead of ``epoch_source``).
        Raises ``StaleEpoch`` when this consumer was replaced: nothing of the batch was
        committed, ack none of it. A failing store is tried again under ``store_retry``;
        raises ``StoreUnavailable`` when that is exhausted or ``interrupt()`` was called:
        ack none of it either.
        """
        return drive(self.batch_steps(deliveries, activation, epoch=epoch), self._retry.sleep)

    def batch_steps(
        self, deliveries: Sequence[Delivery], activation: int, *,
        epoch: Callable[[], int] | None = None,
    ) -> Generator[float, None, list[Outcome | Exception]]:
        """``process_batch`` as a generator: it yields each wait for a failing store instead
        of sleeping it, and returns (or raises) what ``process_batch`` does. A driver on
        virtual time (the simulator) lets the rest of the world go on between the tries."""
        queue = self._queue()

        def attempt() -> list[Outcome | Exception] | StaleEpoch | _Isolate:
            try:
                if activation != self._activation:
                    self.activate(epoch)
                    self._activation = activation
                return self._attempt(queue, deliveries)
            except StaleEpoch as exc:
                return exc  # this consumer was replaced: not a store failure to retry
            except _CommitRefused as refused:
                # The store refused what one of the messages wrote, at the commit (a
                # deferred constraint): not an outage that waiting mends. Alone in its
                # batch, that message failed (the consumer retries it, then parks it);
                # in a batch, each message is tried on its own to find which. Anything
                # else raised here is an outage, or the store's set-up: tried again
                # under store_retry.
                cause = refused.__cause__
                assert isinstance(cause, Exception)
                log.warning("%s refused a commit of %d message(s) for their data (%s)",
                            self.store.description, len(deliveries), cause)
                return [cause] if len(deliveries) == 1 else _Isolate()

        def retried(_failures: int, delay: float, exc: BaseException) -> None:
            self._retries += 1
            log.warning("committing %d message(s) to %s failed (%s); trying again in "
                        "%.2f s, the messages stay unacked", len(deliveries),
                        self.store.description, exc, delay)

        def give_up(failures: int, elapsed: float, exc: BaseException) -> BaseException:
            return StoreUnavailable(
                f"dedup store {self.store.description} failed {failures} time(s) over "
                f"{elapsed:.1f} s; {len(deliveries)} message(s) left unacked: {exc}")

        try:
            result = yield from self._retry.steps(attempt, give_up=give_up,
                                                  on_retry=retried)
        except Interrupted as exc:
            raise StoreUnavailable(
                f"dedup store {self.store.description} failed and the consumer is stopping; "
                f"{len(deliveries)} message(s) left unacked: {exc.__cause__}") from exc.__cause__
        if isinstance(result, StaleEpoch):
            raise result
        if isinstance(result, _Isolate):
            results: list[Outcome | Exception] = []
            for delivery in deliveries:
                [one] = yield from self.batch_steps([delivery], activation, epoch=epoch)
                results.append(one)
                if isinstance(one, Exception):
                    break  # as in a batch: what follows waits for this one
            return results
        return result

    def _attempt(
        self, queue: str, deliveries: Sequence[Delivery]
    ) -> list[Outcome | Exception]:
        """One try of ``process_batch``: history events only for what was committed (the
        duplicates found on the way are held in ``events`` until then; ``None`` when nothing
        records)."""
        store = self.store
        rec = self.recorder
        policy = self.policy
        epoch = self._epoch
        events: list[HistoryEvent] | None = None if rec is None else []
        results: list[Outcome | Exception] = []
        ran = False  # every effect ran: what fails now is the commit
        # The ids as every store holds them (and histories record them); "": none.
        keys = [id_key(d.message_id) if d.message_id else "" for d in deliveries]
        looks = [_looks_up(policy, d) for d in deliveries]
        try:
            with store.batch(queue, epoch, self.consumer) as batch:
                # One read for the batch (a store may take the records in it too); ids
                # staged in it are added as they commit.
                seen = batch.lookup(
                    [k for k, look in zip(keys, looks, strict=True) if k and look],
                    [k for k in keys if k])
                for delivery, key, look in zip(deliveries, keys, looks, strict=True):
                    result = self._one(batch, delivery, key, queue, look, seen, events)
                    results.append(result)
                    if isinstance(result, Exception):
                        break  # what follows waits: the consumer retries or parks this first
                ran = True
        except StaleEpoch:
            self._stale += 1
            if rec is not None:
                for delivery, result in zip(deliveries, results, strict=False):
                    if result is Outcome.COMMITTED:
                        rec.record(CommitRejected(msg=recorded_id(delivery.message_id),
                                                  epoch=epoch, why="stale-epoch"))
            raise
        except Exception as exc:
            if ran and store.message_fault(exc):
                raise _CommitRefused() from exc
            raise
        if rec is not None and events:
            for event in events:
                rec.record(event)
        late = batch.late_duplicates
        for i, result in enumerate(results):
            if result is not Outcome.COMMITTED:
                continue
            key = keys[i]  # recorded_id of the message id: committed ones have one
            if late and key in late:
                results[i] = Outcome.DUPLICATE
                self._dup_commit += 1
                if rec is not None:
                    rec.record(CommitRejected(msg=key, epoch=epoch, why="duplicate"))
                continue
            self._committed += 1
            if rec is not None:
                rec.record(Commit(msg=key, epoch=epoch))
        return results

    def _one(self, batch: Batch, delivery: Delivery, key: str, queue: str,
             look: bool, seen: set[str],
             events: list[HistoryEvent] | None) -> Outcome | Exception:
        """``key``: the message id as every store can hold it (``id_key``), whatever the
        publisher sent; empty without one. ``look``: the policy looks this one up."""
        if not key:
            return MissingMessageId(queue, delivery.delivery_tag)
        if look:
            self._lookups += 1
            if key in seen:
                self._dup_lookup += 1
                if events is not None:
                    events.append(DuplicateSkipped(
                        msg=key, why="redelivered-seen" if delivery.redelivered else "id-seen"))
                return Outcome.DUPLICATE
        try:
            with batch.message(key) as tx:
                self.effect(delivery, tx)
        except Duplicate:
            self._dup_commit += 1
            if events is not None:
                events.append(CommitRejected(msg=key, epoch=batch.epoch, why="duplicate"))
            return Outcome.DUPLICATE
        except (StaleEpoch, StoreUnavailable):
            raise  # not this message's fault: the whole batch is refused or tried again
        except Exception as exc:
            if self.store.setup_fault(exc):
                raise  # a missing table fails every message: the set-up's, tried again
            return exc
        seen.add(key)  # a second copy in this batch is a duplicate too
        return Outcome.COMMITTED

    def _queue(self) -> str:
        if self.queue is None:
            raise RuntimeError("the inbox is not bound to a consumer's queue yet")
        return self.queue


class InboxSession:
    """One consumer's use of an ``Inbox`` (``Inbox.session``): what the consumer calls, so it
    never sets anything on the user's inbox. The epoch source of a guarded consumer comes
    with each batch (``epoch``): the leadership the batch's channel was subscribed under."""

    __slots__ = ("inbox",)

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox

    @property
    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        return self.inbox.executor

    def open(self) -> None:
        self.inbox.open()

    def close(self) -> None:
        self.inbox.close()

    def interrupt(self) -> None:
        self.inbox.interrupt()

    def process_batch(
        self, deliveries: Sequence[Delivery], activation: int, *,
        epoch: Callable[[], int] | None = None,
    ) -> list[Outcome | Exception]:
        """``Inbox.process_batch``."""
        return self.inbox.process_batch(deliveries, activation, epoch=epoch)

    def batch_steps(
        self, deliveries: Sequence[Delivery], activation: int, *,
        epoch: Callable[[], int] | None = None,
    ) -> Generator[float, None, list[Outcome | Exception]]:
        """``Inbox.batch_steps``."""
        return self.inbox.batch_steps(deliveries, activation, epoch=epoch)
