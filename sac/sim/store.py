"""A dedup store in virtual time: the SDK's ``MemoryStore`` behind faults.

It is a real ``sdk`` ``Store`` (an ``Inbox`` can use it as is, every call immediate in
virtual time) and it also answers the world's asynchronous calls (``commit_later``,
``claim_later``), which finish after a latency, so that a slow store is one whose commit
completes much later. Faults:

- *down* (``fail_for``): every call raises the SDK's ``StoreUnavailable``; a commit still in
  flight when the store goes down fails too, and is *ambiguous*: drawn at random, it was
  applied after all (the database committed, the answer was lost) or not;
- *slow* (``slow_for``): calls take ``latency`` more seconds.

Fencing is the memory store's own: a commit carries its epoch and is refused with
``StaleEpoch`` when a newer epoch was claimed before it *completes*, which is when the
real SQL stores decide too (the successor's claim ends the old holder's transaction).

``ledger`` lists every committed effect with its virtual time: one entry per message id is
the exactly-once invariant.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
from collections.abc import Callable, Iterator, Sequence

import attrs

from sac.sdk._errors import StaleEpoch, StoreUnavailable
from sac.sdk.dedup import MemoryStore, Retention, Store
from sac.sdk.dedup._store import Batch, Duplicate
from .clock import EventQueue
from .harness import CommitDone, EpochClaimed
from .trace import Trace


@attrs.frozen(kw_only=True)
class LedgerEntry:
    t: float
    queue: str
    message_id: str
    epoch: int
    consumer: str | None


class SimStore(Store):
    def __init__(self, events: EventQueue, rng: random.Random, trace: Trace, *,
                 latency: tuple[float, float] = (0.0005, 0.003),
                 ambiguous: float = 0.5) -> None:
        self.events = events
        self.rng = rng
        self.trace = trace
        self.latency = latency
        self.ambiguous = ambiguous
        self.inner = MemoryStore()
        self.down_until = -math.inf
        self.down_since = -math.inf
        self.slow_until = -math.inf
        self.slow_latency = 0.0
        self.ledger: list[LedgerEntry] = []

    # ------------------------------------------------------------------ faults

    def fail_for(self, duration: float) -> None:
        if not self.is_down():
            self.down_since = self.events.now
        self.down_until = max(self.down_until, self.events.now + duration)
        self.trace.record("store_down", until=self.down_until)

    def slow_for(self, duration: float, latency: float) -> None:
        self.slow_until = max(self.slow_until, self.events.now + duration)
        self.slow_latency = latency
        self.trace.record("store_slow", until=self.slow_until, latency=latency)

    def is_down(self) -> bool:
        return self.events.now < self.down_until

    def _check(self) -> None:
        if self.is_down():
            raise StoreUnavailable(f"{self.description} is down (simulated) until "
                                   f"t={self.down_until:.3f}")

    def call_latency(self) -> float:
        """How long one call takes now (longer while the store is slow)."""
        return self._delay()

    def _delay(self) -> float:
        extra = self.slow_latency if self.events.now < self.slow_until else 0.0
        return self.rng.uniform(*self.latency) + extra

    # ------------------------------------------------------------------ the Store interface

    @property
    def description(self) -> str:
        return "simulated memory store"

    def open(self) -> None:
        self._check()

    def close(self) -> None:
        pass

    def claim_epoch(self, queue: str) -> int:
        self._check()
        epoch = self.inner.claim_epoch(queue)
        self.trace.record("epoch_claimed", queue=queue, epoch=epoch)
        return epoch

    def adopt_epoch(self, queue: str, epoch: int) -> int:
        self._check()
        return self.inner.adopt_epoch(queue, epoch)

    def current_epoch(self, queue: str) -> int:
        self._check()
        return self.inner.current_epoch(queue)

    def seen(self, queue: str, message_id: str) -> bool:
        self._check()
        return self.inner.seen(queue, message_id)

    @contextlib.contextmanager
    def batch(self, queue: str, epoch: int, consumer: str | None = None) -> Iterator[Batch]:
        """A transaction, which completes now. One that was under way when the store went
        down (within one call's latency) is ambiguous, as in ``commit_later``: it fails,
        and was applied or not, drawn at random."""
        applied = False
        if self.is_down():
            slowest = self.latency[1] + (self.slow_latency if self.events.now < self.slow_until
                                         else 0.0)
            in_flight = self.events.now - self.down_since <= slowest
            applied = in_flight and self.rng.random() < self.ambiguous
            if not applied:
                self._check()
        with self.inner.batch(queue, epoch, consumer) as batch:
            yield batch
            for message_id, tx in batch.transactions:
                tx.on_commit(functools.partial(self._record, queue, message_id, epoch,
                                               consumer))
        if applied:
            self.trace.record("commit_failed", queue=queue, ids=tuple(
                m for m, _ in batch.transactions), applied=True)
            raise StoreUnavailable(f"{self.description} went down during the commit "
                                   f"(simulated; applied)")

    def purge(self, retention: Retention, now: float | None = None) -> int:
        self._check()
        return self.inner.purge(retention, self.events.now if now is None else now)

    def records(self, queue: str) -> list[tuple[str, int, str | None, float]]:
        """The ledger of ``queue`` with virtual commit times."""
        return [(e.message_id, e.epoch, e.consumer, e.t) for e in self.ledger
                if e.queue == queue]

    def _record(self, queue: str, message_id: str, epoch: int, consumer: str | None) -> None:
        self.ledger.append(LedgerEntry(t=self.events.now, queue=queue, message_id=message_id,
                                       epoch=epoch, consumer=consumer))
        self.trace.record("effect_committed", queue=queue, id=message_id, epoch=epoch,
                          consumer=consumer)

    # ------------------------------------------------------------------ in virtual time

    def commit_later(self, queue: str, epoch: int, consumer: str,
                     message_ids: Sequence[str], done: Callable[[CommitDone], None],
                     token: object = None) -> None:
        """Stage ``message_ids`` now, commit them when the store answers; ``done`` gets the
        outcome then."""
        ids = tuple(message_ids)
        if self.is_down():
            error = StoreUnavailable(f"{self.description} is down (simulated)")
            self.events.after(self._delay(), lambda: done(CommitDone(token=token, error=error)))
            return
        self.events.after(self._delay(),
                          lambda: done(self._complete(queue, epoch, consumer, ids, token)))

    def _complete(self, queue: str, epoch: int, consumer: str, ids: tuple[str, ...],
                  token: object) -> CommitDone:
        if self.is_down():
            applied = self.rng.random() < self.ambiguous
            if applied:
                self._apply(queue, epoch, consumer, ids, token)
            self.trace.record("commit_failed", queue=queue, ids=ids, applied=applied)
            return CommitDone(token=token, error=StoreUnavailable(
                f"{self.description} went down during the commit (simulated; "
                f"{'applied' if applied else 'not applied'})"))
        return self._apply(queue, epoch, consumer, ids, token)

    def _apply(self, queue: str, epoch: int, consumer: str, ids: tuple[str, ...],
               token: object) -> CommitDone:
        committed: list[str] = []
        duplicates: list[str] = []
        try:
            with self.inner.batch(queue, epoch, consumer) as batch:
                for message_id in ids:
                    try:
                        with batch.message(message_id) as tx:
                            tx.on_commit(functools.partial(self._record, queue, message_id,
                                                           epoch, consumer))
                    except Duplicate:
                        duplicates.append(message_id)
                        continue
                    committed.append(message_id)
        except StaleEpoch as exc:
            self.trace.record("commit_fenced", queue=queue, epoch=epoch, ids=ids)
            return CommitDone(token=token, error=exc)
        late = [m for m in committed if m in batch.late_duplicates]
        return CommitDone(token=token, committed=tuple(m for m in committed if m not in late),
                          duplicates=tuple(duplicates + late))

    def claim_later(self, queue: str, done: Callable[[EpochClaimed], None],
                    token: object = None) -> None:
        def finish() -> None:
            try:
                done(EpochClaimed(token=token, epoch=self.claim_epoch(queue)))
            except StoreUnavailable as exc:
                done(EpochClaimed(token=token, error=exc))

        self.events.after(self._delay(), finish)
