"""The SDK's publisher engine (``sdk._core.outbox``) as a simulated client.

A dumb translator, as ``sdk.publisher.AsyncPublisher`` is a shell: confirms, nacks, returns
and ``connection.blocked`` become the outbox's events; its actions become ``basic.publish``
frames (a message sent again carries ``x-sac-retransmit`` = how many times it went out
before, as the real shell writes it), timers and a recycled link. The application on top
has message ``i`` to publish from ``release[i]`` on, hands each over as soon as the window
has room for it, and closes once it handed over the last.

What the checker reads: ``outcomes`` (the outbox's own account: confirmed and failed ids),
``wire`` (every publish written, with its link, delivery tag and mark) and ``heard`` (every
confirm and nack received), so that the invariants judge the engine from the outside.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, assert_never

from sac.sdk._core.lifecycle import Phase
from sac.sdk._core.outbox import (
    Action,
    Closed,
    Confirmed,
    Failed,
    HandOver,
    Held,
    Nacked,
    Outbox,
    Outcomes,
    Recycle,
    Returned,
    Send,
    SetTimer,
)
from sac.sdk._delivery import RETRANSMIT_HEADER
from sac.sdk._errors import ConnectError
from sac.sdk._settings import PublisherSettings, QueueSettings
from . import methods as m
from .harness import Action as WorldAction
from .invariants import Sent, Settled
from .shell import Shell, earliest


def declare(shell: Shell, queue: QueueSettings) -> None:
    """Declare the queue and its parking queue as the SDK does (its own arguments, for the
    broker version the link reached)."""
    parking = queue.parking()
    if parking is not None:
        shell.send(1, m.QueueDeclare(queue=parking.name, arguments=parking.arguments(shell.broker)))
    shell.send(1, m.QueueDeclare(queue=queue.name, arguments=queue.arguments(shell.broker)))


class PublisherClient(Shell):
    def __init__(self, name: str, settings: PublisherSettings, release: Sequence[float],
                 rng: random.Random, *, outbox: type[Outbox[bytes, None]] = Outbox) -> None:
        super().__init__(name, settings.connection, rng)
        if settings.queue is None:
            raise ValueError("the simulated publisher needs settings.queue")
        self.settings = settings
        self.queue: QueueSettings = settings.queue
        self.box: Outbox[bytes, None] = outbox(settings.outbox_policy(), rng=rng.random)
        self.release = sorted(release)
        self.ids = [f"{name}-{i:04d}" for i in range(len(self.release))]
        self.accepted = 0
        self.outcomes = Outcomes()
        self.wire: list[Sent] = []
        self.heard: list[Settled] = []
        self.finished = False
        self.failure: BaseException | None = None
        self._tags: dict[str, int] = {}
        self._timer: float | None = None

    # ------------------------------------------------------------------ the Client protocol

    def start(self, now: float) -> Sequence[WorldAction]:
        self.out = []
        self.box.start()
        self.open(now, retry=False)
        self._feed(now)
        return self.out

    def receive(self, now: float, event: Any) -> Sequence[WorldAction]:
        out = super().receive(now, event)
        self._feed(now)
        return out

    def tick(self, now: float) -> Sequence[WorldAction]:
        out = super().tick(now)
        self._feed(now)
        return out

    # ------------------------------------------------------------------ the shell's hooks

    def setup(self, now: float) -> None:
        self.send(1, m.ChannelOpen())
        self.send(1, m.ConfirmSelect())
        declare(self, self.queue)

    def frame(self, now: float, channel: int, method: object) -> None:
        link = self.link
        assert link is not None
        if isinstance(method, m.QueueDeclareOk):
            if method.queue == self.queue.name and not self.up:
                self.ready(now)
                self._tags[link] = 0
                self._carry_out(now, self.box.link_up(now))
        elif isinstance(method, m.BasicAck):
            self.heard.append(Settled(link=link, tag=method.delivery_tag,
                                      multiple=method.multiple, ack=True))
            self._carry_out(now, self.box.acked(method.delivery_tag, method.multiple, now))
        elif isinstance(method, m.BasicNack):
            self.heard.append(Settled(link=link, tag=method.delivery_tag,
                                      multiple=method.multiple, ack=False))
            self._carry_out(now, self.box.nacked(method.delivery_tag, method.multiple, now))
        elif isinstance(method, m.BasicReturn):
            mid = method.properties.message_id or ""
            self._carry_out(now, self.box.returned(mid, method.reply_text))
        elif isinstance(method, m.ConnectionBlocked):
            self._carry_out(now, self.box.blocked(now))
        elif isinstance(method, m.ConnectionUnblocked):
            self._carry_out(now, self.box.unblocked(now))
        elif isinstance(method, m.ChannelClose):
            self.abandon(now, f"channel closed by the broker: {method.reply_text}")

    def dropped(self, now: float, why: str) -> None:
        self._carry_out(now, self.box.link_lost())

    def failed(self, now: float, error: ConnectError) -> None:
        self.failure = error
        self._carry_out(now, self.box.give_up(error))
        self.finished = True

    def closed(self, now: float) -> None:
        self.finished = True

    def due(self) -> float | None:
        return earliest(self._timer, self._release())

    def work(self, now: float) -> None:
        if self._timer is not None and now >= self._timer:
            self._timer = None
            self._carry_out(now, self.box.tick(now))

    def busy(self) -> bool:
        return self.due() is not None

    def _release(self) -> float | None:
        """When the application has its next message (None: it handed over all, or it
        waits for room)."""
        if self.accepted >= len(self.ids) or self.box.room <= 0 or self.finished:
            return None
        return self.release[self.accepted]

    # ------------------------------------------------------------------ carrying out

    def _feed(self, now: float) -> None:
        """The application: hand over as much as there is room for, close when done."""
        box = self.box
        if self.finished or box.lifecycle.phase not in (Phase.STARTING, Phase.RUNNING):
            return
        room = 0
        while (room < box.room and self.accepted + room < len(self.ids)
               and self.release[self.accepted + room] <= now):
            room += 1
        if room > 0:
            ids = self.ids[self.accepted:self.accepted + room]
            bodies = [mid.encode() for mid in ids]
            self.accepted += room
            box.accept(HandOver(message_ids=ids, messages=bodies,
                                sizes=[len(body) for body in bodies],
                                routing_key=self.queue.name), now)
            self._carry_out(now, box.flush())
        if self.accepted == len(self.ids) and box.lifecycle.phase is Phase.RUNNING:
            self._carry_out(now, box.close(now, self.settings.close_timeout))

    def _carry_out(self, now: float, actions: Sequence[Action]) -> None:
        self.outcomes.record(actions)
        for action in actions:
            match action:
                case Send(held=held):
                    self._write(now, held)
                case SetTimer(at=at):
                    self._timer = at
                case Recycle(why=why):
                    self.abandon(now, why)
                case Closed():
                    self.close(now)
                case Confirmed() | Failed() | Nacked() | Returned():
                    pass  # outcomes, recorded above
                case _:
                    assert_never(action)

    def _write(self, now: float, entries: Sequence[Held[bytes, None]]) -> None:
        link = self.link
        if link is None:
            return  # gone meanwhile: counted as sent, they go out again after the loss
        mandatory = self.settings.mandatory
        for entry in entries:
            mark = self.mark(entry)
            headers = None if mark is None else {RETRANSMIT_HEADER: mark}
            properties = m.Properties(message_id=entry.message_id, headers=headers)
            self.send(1, m.BasicPublish(exchange=entry.handover.exchange,
                                        routing_key=entry.handover.routing_key,
                                        body=entry.message, properties=properties,
                                        mandatory=mandatory))
            tag = self._tags[link] = self._tags.get(link, 0) + 1
            self.wire.append(Sent(link=link, tag=tag, message_id=entry.message_id, mark=mark))

    def mark(self, entry: Held[bytes, None]) -> int | None:
        """The retransmission header, as ``sdk.publisher`` writes it."""
        return entry.sends - 1 if entry.sends > 1 else None
