"""Deliberately broken engines, to show that the simulator can fail: each is the real
engine with one decision taken away, as a small subclass here (never in ``sac/sdk/``), and
each must be caught by an invariant within a budget of schedules
(``tests/sim/test_variants.py``). ``sac sim --variant NAME`` runs one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from sac.sdk._core.acks import Ack
from sac.sdk._core.consuming import Action, Actions, Cancel, ConsumerMachine, Run
from sac.sdk._core.outbox import Held, Outbox
from sac.sdk._delivery import Delivery
from sac.sdk.dedup._store import Batch
from .publisher import PublisherClient
from .store import SimStore
from .workload import REAL, Engines


class NoRetransmit(Outbox[bytes, None]):
    """After a lost link, what was unconfirmed is forgotten: never sent again, its caller
    never told."""

    def _lose_window(self) -> None:
        self._window.channel_lost()


class NoMark(PublisherClient):
    """A message sent again goes out without ``x-sac-retransmit``, so a consumer's inbox
    does not know it may be a copy."""

    def mark(self, entry: Held[bytes, None]) -> int | None:
        return None


class LostNackRetry(Outbox[bytes, None]):
    """A nacked message is dropped instead of waiting for its retry (its caller never
    told)."""

    def _retry_nacked(self, entry: Held[bytes, None], now: float, actions: list[Any]) -> None:
        self._held -= 1


class AckOnDispatch(ConsumerMachine[Delivery]):
    """Acks a batch when it hands it to the worker, before the inbox committed it."""

    def dispatch(self, now: float) -> Actions[Delivery]:
        actions: list[Action[Delivery]] = list(super().dispatch(now))
        runs = [a for a in actions if isinstance(a, Run)]
        if runs:
            last = runs[-1].deliveries[-1].delivery_tag
            actions.insert(0, Ack(tag=last, multiple=True, count=len(runs[-1].deliveries)))
        return actions


class NoIdleFlush(ConsumerMachine[Delivery]):
    """Acks only full batches: an idle consumer sits on the acks of what it finished."""

    def _free(self) -> Actions[Delivery]:
        return super()._free() if self.waiting else ()


class CancelAtStop(ConsumerMachine[Delivery]):
    """Cancels its subscription as soon as a graceful stop begins, with a run maybe still in
    hand: the broker makes the next consumer active while this one still works, and two
    consumers overlap (``clean_handovers`` must see it)."""

    def stop(self, now: float) -> Actions[Delivery]:
        actions: list[Action[Delivery]] = list(super().stop(now))
        if self._subscribed:
            self._subscribed = False
            actions.append(Cancel())
        return actions


class StaleGeneration(ConsumerMachine[Delivery]):
    """A lost channel does not end its runs: their deliveries are acked on the next
    channel, where their tags name other messages."""

    def channel_lost(self, now: float) -> Sequence[Action[Delivery]]:
        actions = super().channel_lost(now)
        self.generation -= 1
        return actions


class Unfenced(SimStore):
    """The store checks no epoch: a replaced consumer's batch commits (under the epoch of
    the day)."""

    @contextlib.contextmanager
    def batch(self, queue: str, epoch: int, consumer: str | None = None) -> Iterator[Batch]:
        with super().batch(queue, self.inner.current_epoch(queue), consumer) as batch:
            yield batch


def _broken(description: str, **engines: Any) -> Engines:
    return Engines(description=description, **engines)


VARIANTS: dict[str, Engines] = {
    "real": REAL,
    "no-retransmit": _broken("what was unconfirmed when a link was lost is forgotten",
                             outbox=NoRetransmit),
    "no-mark": _broken("a message sent again lacks x-sac-retransmit", publisher=NoMark),
    "lost-nack-retry": _broken("a nacked message is dropped, not retried",
                               outbox=LostNackRetry),
    "ack-before-commit": _broken("a batch is acked when handed to the inbox",
                                 machine=AckOnDispatch),
    "cancel-at-stop": _broken("a graceful stop cancels before its last run ended",
                              machine=CancelAtStop),
    "no-idle-flush": _broken("acks go out only in full batches, never when idle",
                             machine=NoIdleFlush),
    "stale-generation-ack": _broken("a lost channel's runs are acked on the next channel",
                                    machine=StaleGeneration),
    "no-fencing": _broken("the store checks no epoch", store=Unfenced),
}
"""Name -> the engines a run uses (``real``: the SDK's own)."""
