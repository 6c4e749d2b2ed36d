"""Publisher confirms on one channel, and how RabbitMQ words them.

A channel in confirm mode numbers its publishes 1, 2, ...; each becomes *confirmed* (every
queue it was routed to committed it, or it was routed nowhere) or *rejected* (a queue
refused it). The channel collects the outcomes that arrive while it handles one event and
then sends them the way ``rabbit_channel:send_confirms_and_nacks`` does (3.10):

- one confirm alone: ``basic.ack`` without ``multiple``;
- otherwise every outcome below the lowest still-unconfirmed number (and below the lowest
  outcome of the other kind) is folded into one ``multiple`` frame carrying the highest of
  them, the rest go one by one;
- acks first, then nacks (nacks are always coalesced, even alone).

So how acks are coalesced depends on timing: the honesty test compares confirms per tag.
"""

from __future__ import annotations

from .methods import BasicAck, BasicNack


class ConfirmChannel:
    def __init__(self) -> None:
        self.next_seq = 1
        self._waiting: dict[int, set[str]] = {}
        """seq -> queues that have not committed it yet."""
        self._confirmed: list[int] = []
        self._rejected: list[int] = []

    def published(self, queues: list[str]) -> int:
        """Number the next publish; routed nowhere means confirmed at once."""
        seq = self.next_seq
        self.next_seq += 1
        if queues:
            self._waiting[seq] = set(queues)
        else:
            self._confirmed.append(seq)
        return seq

    def unconfirmed(self) -> list[int]:
        return sorted(self._waiting)

    def committed(self, seq: int, queue: str) -> None:
        pending = self._waiting.get(seq)
        if pending is None:
            return
        pending.discard(queue)
        if not pending:
            del self._waiting[seq]
            self._confirmed.append(seq)

    def refused(self, seq: int) -> None:
        if self._waiting.pop(seq, None) is not None:
            self._rejected.append(seq)

    def flush(self) -> list[BasicAck | BasicNack]:
        """The frames for what was collected since the last flush."""
        confirmed, rejected = self._confirmed, self._rejected
        self._confirmed, self._rejected = [], []
        frames: list[BasicAck | BasicNack] = []
        if len(confirmed) == 1:
            frames.append(BasicAck(delivery_tag=confirmed[0], multiple=False))
        elif confirmed:
            frames += self._coalesce(confirmed, rejected, nack=False)
        if rejected:
            frames += self._coalesce(rejected, confirmed, nack=True)
        return frames

    def _coalesce(self, seqs: list[int], others: list[int],
                  *, nack: bool) -> list[BasicAck | BasicNack]:
        ordered = sorted(set(seqs))
        cutoff = min(self._waiting) if self._waiting else ordered[-1] + 1
        cutoff = min([cutoff, *others])
        below = [s for s in ordered if s < cutoff]
        rest = [s for s in ordered if s >= cutoff]

        def frame(seq: int, multiple: bool) -> BasicAck | BasicNack:
            if nack:
                return BasicNack(delivery_tag=seq, multiple=multiple, requeue=False)
            return BasicAck(delivery_tag=seq, multiple=multiple)

        frames = [frame(below[-1], True)] if below else []
        return frames + [frame(s, False) for s in rest]
