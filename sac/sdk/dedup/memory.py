"""A bounded in-memory store: for tests and for a single process whose effects live in the
same process. It forgets everything when the process ends, and it cannot roll back what an
effect already did, so it checks for a duplicate both before the effect runs and when
committing. An effect that registers its change with ``tx.on_commit`` is applied under the
store's lock only when the commit is accepted: that is the memory store's transaction.

Every consumer of a memory store lives in its one process, so a freeze (SIGSTOP) stops the
active consumer and its successor alike: no frozen holder can stall a live one here. A batch
takes the store's lock only to commit, never while an effect runs."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator

from .._errors import ConfigurationError, StaleEpoch
from ._store import Batch, Duplicate, Retention, Store, Transaction, now_or

_Record = tuple[int, str | None, float]


class MemoryStore(Store):
    """Keeps at most ``max_records`` records per queue (oldest dropped first)."""

    def __init__(self, max_records: int = 100_000) -> None:
        if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
            raise ConfigurationError(
                f"MemoryStore max_records must be a positive integer, got {max_records!r}")
        self.max_records = max_records
        self._lock = threading.Lock()
        self._records: dict[str, collections.OrderedDict[str, _Record]] = {}
        self._epochs: dict[str, int] = {}

    @property
    def description(self) -> str:
        return f"memory (max {self.max_records} records per queue)"

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def claim_epoch(self, queue: str) -> int:
        with self._lock:
            epoch = self._epochs.get(queue, 0) + 1
            self._epochs[queue] = epoch
            return epoch

    def adopt_epoch(self, queue: str, epoch: int) -> int:
        with self._lock:
            current = self._epochs.get(queue, 0)
            if epoch < current:
                raise StaleEpoch(queue, epoch, current)
            self._epochs[queue] = epoch
            return epoch

    def current_epoch(self, queue: str) -> int:
        with self._lock:
            return self._epochs.get(queue, 0)

    def seen(self, queue: str, message_id: str) -> bool:
        with self._lock:
            records = self._records.get(queue)
            return records is not None and message_id in records

    @contextlib.contextmanager
    def batch(
        self, queue: str, epoch: int, consumer: str | None = None
    ) -> Iterator[Batch]:
        batch = _MemoryBatch(self, queue, epoch, consumer)
        yield batch
        with self._lock:
            current = self._epochs.get(queue, 0)
            if epoch < current:  # also with nothing staged (see SqlStore.batch)
                raise StaleEpoch(queue, epoch, current)
            records = self._records.setdefault(queue, collections.OrderedDict())
            now = time.time()
            for message_id, tx in batch.transactions:
                if message_id in records:  # another consumer of this process was quicker
                    batch.late_duplicates.add(message_id)
                    continue
                tx.run_after_commit()  # a failing callback leaves no record: it retries
                records[message_id] = (epoch, consumer, now)
            while len(records) > self.max_records:
                records.popitem(last=False)

    def purge(self, retention: Retention, now: float | None = None) -> int:
        cutoff = None if retention.max_age is None else now_or(now) - retention.max_age
        dropped = 0
        with self._lock:
            for records in self._records.values():
                if cutoff is not None:
                    while records and next(iter(records.values()))[2] < cutoff:
                        records.popitem(last=False)
                        dropped += 1
                if retention.max_records is not None:
                    while len(records) > retention.max_records:
                        records.popitem(last=False)
                        dropped += 1
        return dropped

    def records(self, queue: str) -> list[tuple[str, int, str | None, float]]:
        with self._lock:
            return [(mid, e, c, t) for mid, (e, c, t) in self._records.get(queue, {}).items()]


class _MemoryBatch(Batch):
    def __init__(self, store: MemoryStore, queue: str, epoch: int,
                 consumer: str | None) -> None:
        super().__init__(queue, epoch, consumer)
        self._store = store

    def seen(self, message_id: str) -> bool:
        return message_id in self._staged_ids or self._store.seen(self.queue, message_id)

    def message(self, message_id: str) -> contextlib.AbstractContextManager[Transaction]:
        store = self._store
        if message_id in self._staged_ids or store.seen(self.queue, message_id):
            current = store.current_epoch(self.queue)
            if current > self.epoch:
                raise StaleEpoch(self.queue, self.epoch, current)
            raise Duplicate(message_id)
        return _MemoryMessage(self, message_id)


class _MemoryMessage(Transaction):
    """One message of a memory batch: its transaction, and the context manager around its
    effect, staged when the effect returns (one object a message)."""

    __slots__ = ("_batch",)

    def __init__(self, batch: _MemoryBatch, message_id: str) -> None:
        super().__init__(None, batch.queue, message_id, batch.epoch)
        self._batch = batch

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is None:
            self._batch._stage(self.message_id, self)
