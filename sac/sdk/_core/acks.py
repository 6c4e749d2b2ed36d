"""When the consumer acknowledges, and how.

Handlers run one at a time in delivery order, so after a handler returns every earlier
delivery is settled and one ``basic.ack`` with ``multiple`` can cover a batch: the batch is
sent when it is full or when no further delivery is waiting, so an idle consumer never sits on
acks. A message that must leave the queue without being handled (no parking queue, a
dead-letter exchange instead) first flushes the acks before it, then is rejected without
requeue, so the broker dead-letters it; a parked message is simply acked.
"""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class Ack:
    """``basic.ack`` of ``tag`` (and, with ``multiple``, of every earlier unacked tag)."""

    tag: int
    multiple: bool
    count: int = attrs.field(default=1, eq=False)
    """How many deliveries this ack settles (for counting only: two acks of the same tags
    are equal)."""


@attrs.frozen(kw_only=True)
class Reject:
    """``basic.reject`` of ``tag``: ``requeue`` false dead-letters it."""

    tag: int
    requeue: bool


Action = Ack | Reject


class AckBatcher:
    """Turns handler outcomes into ack/reject frames for one channel."""

    def __init__(self, batch: int) -> None:
        if batch < 1:
            raise ValueError(f"ack batch must be >= 1, got {batch}")
        self.batch = batch
        self._pending: list[int] = []

    @property
    def pending(self) -> int:
        """Handled deliveries whose ack has not been sent yet."""
        return len(self._pending)

    def done(self, tag: int) -> list[Action]:
        self._pending.append(tag)
        if len(self._pending) >= self.batch:
            return self.flush()
        return []

    def done_many(self, tags: list[int]) -> list[Action]:
        """``done`` for each of ``tags`` (in order), at most one ack."""
        self._pending += tags
        if len(self._pending) >= self.batch:
            return self.flush()
        return []

    def failed(self, tag: int, requeue: bool = True) -> list[Action]:
        return [*self.flush(), Reject(tag=tag, requeue=requeue)]

    def flush(self) -> list[Action]:
        if not self._pending:
            return []
        tag = self._pending[-1]
        count = len(self._pending)
        self._pending.clear()
        return [Ack(tag=tag, multiple=count > 1, count=count)]

    def channel_lost(self) -> list[int]:
        """Tags handled but never acked: the broker will redeliver them (dedup catches them)."""
        lost, self._pending = self._pending, []
        return lost
