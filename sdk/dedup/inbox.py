"""The idempotent inbox: run a handler's effect at most once per message id, and never after
the consumer was replaced.

Give a consumer an ``Inbox`` instead of a plain handler::

    def effect(delivery: Delivery, tx: Transaction) -> None:
        tx.execute("INSERT INTO orders (id, body) VALUES (?, ?)",
                   (delivery.message_id, delivery.body))

    store = SQLiteStore("/var/lib/app/dedup.db")
    Consumer(settings, Inbox(store, effect)).run()

Per message: maybe look the id up (``LookupPolicy``); run the effect inside the store's
transaction; write the record and check the epoch in the same transaction; commit; only then
does the consumer ack. What the consumer has waiting (up to ``ack_batch`` messages) commits
in one transaction: one fsync for the batch, each effect in a savepoint of its own.

Each time the consumer becomes the active one it claims a new epoch (or adopts one from
``epoch_source``, e.g. a ZooKeeper election); a commit from an older epoch is refused with
``StaleEpoch`` and the consumer stops without acking.
"""

from __future__ import annotations

import concurrent.futures
import enum
import logging
import threading
from collections.abc import Callable, Sequence

import attrs

from .._delivery import Delivery
from .._errors import MissingMessageId, StaleEpoch
from .._history import HistoryRecorder
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

    DEFAULT = "flagged"
    """Look up only a message that may be a copy: ``redelivered``, carrying
    ``x-delivery-count``, or marked as a retransmission by our publisher. A message that is
    none of these was never handed to a consumer before, so a lookup cannot find it (unless a
    publisher other than ours sent it twice)."""
    ALWAYS = "always"
    """Look up every message: also catches duplicates from publishers that do not mark their
    retransmissions."""
    NEVER = "never"
    """Never look up: only for effects written entirely through the store's transaction."""


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
    ) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store must be a sac dedup Store, got {type(store).__name__}")
        if not callable(effect):
            raise TypeError(f"effect must be callable, got {type(effect).__name__}")
        if not isinstance(policy, LookupPolicy):
            raise TypeError(f"policy must be a LookupPolicy, got {policy!r}")
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
        self._lookups = self._claims = self._stale = 0

    @property
    def epoch(self) -> int:
        """The epoch this consumer holds (0 before its first activation)."""
        return self._epoch

    @property
    def stats(self) -> InboxStats:
        return InboxStats(self._committed, self._dup_lookup, self._dup_commit, self._lookups,
                          self._claims, self._stale)

    @property
    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        """The one thread the asyncio face runs store work on (a store connection is used by
        one thread at a time, and messages commit in delivery order)."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="sac-inbox")
        return self._executor

    def bind(self, queue: str, consumer: str | None, recorder: HistoryRecorder | None) -> None:
        if self.queue is not None and self.queue != queue:
            raise ValueError(f"this inbox already serves queue {self.queue!r}")
        self.queue = queue
        self.consumer = consumer
        self.recorder = recorder

    def open(self) -> None:
        """Open the store (raises ``StoreUnavailable``/``SchemaMismatch``) and start purging."""
        self.store.open()
        self._closing.clear()
        if self._purger is None:
            self._purger = threading.Thread(target=self._purge_loop, name="sac-dedup-purge",
                                            daemon=True)
            self._purger.start()

    def close(self) -> None:
        self._closing.set()
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

    def activate(self) -> int:
        """Claim (or adopt) the epoch for a new activation of this consumer."""
        queue = self._queue()
        if self.epoch_source is not None:
            epoch = self.store.adopt_epoch(queue, int(self.epoch_source()))
        else:
            epoch = self.store.claim_epoch(queue)
        self._epoch = epoch
        self._claims += 1
        if self.recorder is not None:
            self.recorder.record("active", queue=queue, epoch=epoch)
        return epoch

    def process(self, delivery: Delivery, activation: int) -> Outcome:
        """``process_batch`` of one message; raises what its effect raised."""
        [result] = self.process_batch([delivery], activation)
        if isinstance(result, Exception):
            raise result
        return result

    def process_batch(
        self, deliveries: Sequence[Delivery], activation: int
    ) -> list[Outcome | Exception]:
        """Run each message's effect at most once per message id, all in one store
        transaction (one commit for the batch; each effect isolated in a savepoint).

        Returns, per delivery in order: ``COMMITTED``, ``DUPLICATE`` (ack it, its effect
        was committed before) or the exception its effect raised (reject it; nothing of it
        was committed). ``activation`` changes each time the consumer becomes active; the
        first batch of a new activation claims the epoch first. Raises ``StaleEpoch`` when
        this consumer was replaced: nothing of the batch was committed, ack none of it.
        """
        queue = self._queue()
        if activation != self._activation:
            self.activate()
            self._activation = activation
        store = self.store
        rec = self.recorder
        policy = self.policy
        epoch = self._epoch
        results: list[Outcome | Exception] = []
        try:
            with store.batch(queue, epoch, self.consumer) as batch:
                for delivery in deliveries:
                    results.append(self._one(batch, delivery, queue, policy))
        except StaleEpoch:
            self._stale += 1
            if rec is not None:
                for delivery, result in zip(deliveries, results, strict=False):
                    if result is Outcome.COMMITTED:
                        rec.record("commit_rejected", msg=delivery.message_id, epoch=epoch,
                                   why="stale-epoch")
            raise
        except Exception as exc:  # noqa: BLE001 - the commit failed: requeue them all
            log.error("committing %d message(s) to %s failed: %s", len(deliveries),
                      store.description, exc)
            return [exc] * len(deliveries)
        for i, delivery in enumerate(deliveries):
            if results[i] is not Outcome.COMMITTED:
                continue
            if delivery.message_id in batch.late_duplicates:
                results[i] = Outcome.DUPLICATE
                self._dup_commit += 1
                if rec is not None:
                    rec.record("commit_rejected", msg=delivery.message_id, epoch=epoch,
                               why="duplicate")
                continue
            self._committed += 1
            if rec is not None:
                rec.record("commit", msg=delivery.message_id, epoch=epoch)
        return results

    def _one(self, batch: Batch, delivery: Delivery, queue: str,
             policy: LookupPolicy) -> Outcome | Exception:
        message_id = delivery.message_id
        if not message_id:
            return MissingMessageId(queue, delivery.delivery_tag)
        rec = self.recorder
        if policy is LookupPolicy.ALWAYS or (
            policy is LookupPolicy.DEFAULT and delivery.maybe_duplicate
        ):
            self._lookups += 1
            if batch.seen(message_id):
                self._dup_lookup += 1
                if rec is not None:
                    rec.record("duplicate_skipped", msg=message_id,
                               why="redelivered-seen" if delivery.redelivered else "id-seen")
                return Outcome.DUPLICATE
        try:
            with batch.message(message_id) as tx:
                self.effect(delivery, tx)
        except Duplicate:
            self._dup_commit += 1
            if rec is not None:
                rec.record("commit_rejected", msg=message_id, epoch=batch.epoch,
                           why="duplicate")
            return Outcome.DUPLICATE
        except StaleEpoch:
            raise
        except Exception as exc:  # noqa: BLE001 - the consumer logs it and requeues
            return exc
        return Outcome.COMMITTED

    def _queue(self) -> str:
        if self.queue is None:
            raise RuntimeError("the inbox is not bound to a consumer's queue yet")
        return self.queue
