"""The SDK's consumer engine (``sdk._core.consuming``) with an ``Inbox`` over the simulated
store, as a simulated client: one consumer *process*, which a fault may stop (a graceful
handover), kill, or restart, and which a supervisor starts again after it halted.

A dumb translator, as ``sdk._consumer_engine`` is a shell: frames become the machine's events
(deliveries, consume-ok, server cancels, lost links), its actions become frames (acks,
rejects, consumes, cancels), timers and runs, through the SDK's one dispatcher
(``sdk._core.dispatch.carry_out``: this client is a ``ConsumerShell``). A run goes to the
worker, which is the real ``Inbox`` driven step by step in virtual time
(``Inbox.batch_steps``): each try of a batch takes one store latency, and a failing store's
backoff lets the rest of the world go on, as the worker thread of a real consumer does. A
park publishes the copy on a confirm-mode channel of its own and reports the confirm, as
``sdk._forward`` does.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from sac.sdk._core import consuming as c
from sac.sdk._core.acks import Ack, Reject
from sac.sdk._core.backoff import Backoff
from sac.sdk._core.dispatch import carry_out
from sac.sdk._core.poison import parking_headers
from sac.sdk._core.queues import consume_arguments
from sac.sdk._delivery import Delivery, delivery_count
from sac.sdk._errors import (
    ConnectError,
    ParkingFailed,
    SacError,
    StaleEpoch,
    StoreUnavailable,
)
from sac.sdk._settings import PARK_NACK_RETRY, ConsumerSettings
from sac.sdk.dedup import Inbox, LookupPolicy, Transaction
from sac.sdk.dedup.inbox import STORE_RETRY
from . import methods as m
from .harness import Action as WorldAction
from .harness import Event, Restart, Stop
from .invariants import Span
from .publisher import declare
from .shell import Shell, earliest
from .store import SimStore

Effect = Callable[[Delivery, Transaction], None]

PARK_CHANNEL = 2


class ProcessDies(BaseException):
    """Raised by an effect: the consumer's process dies on the spot (a segfault, an OOM
    kill), whatever the SDK would catch; its supervisor starts it again."""


@attrs.frozen(kw_only=True)
class RoleSeen:
    """The consumer process's role changed at ``t`` (``RoleChanged``)."""

    t: float
    process: str
    old: str
    new: str
    activation: int


@attrs.frozen(kw_only=True)
class Halted:
    """The consumer process halted at ``t`` (``Halt``, or a reconnect given up)."""

    t: float
    process: str
    why: str
    error: str


@attrs.define(kw_only=True)
class _Work:
    """The run the worker has in hand: its tries, one store latency each."""

    run: c.Run[Delivery]
    at: float
    steps: Any = None


@attrs.define(kw_only=True)
class _Parking:
    park: c.Park[Delivery]
    link: str
    tag: int
    began: float
    nacks: int = 0
    at: float | None = None
    """When to send the copy again after a nack."""


class ConsumerClient(Shell):
    def __init__(self, name: str, settings: ConsumerSettings, store: SimStore, effect: Effect,
                 rng: random.Random, *, restart_after: float = 1.0,
                 effect_time: tuple[float, float] = (0.002, 0.02),
                 store_retry: Backoff = STORE_RETRY,
                 machine: type[c.ConsumerMachine[Delivery]] = c.ConsumerMachine,
                 inbox: type[Inbox] = Inbox,
                 lookup: LookupPolicy = LookupPolicy.DEFAULT) -> None:
        super().__init__(name, settings.connection, rng)
        self.lookup = lookup
        self.settings = settings
        self.store = store
        self.effect = effect
        self.restart_after = restart_after
        self.effect_time = effect_time
        self.store_retry = store_retry
        self._machine_type = machine
        self._inbox_type = inbox
        self.lives = 0
        self.roles: list[RoleSeen] = []
        self.halts: list[Halted] = []
        self.spans: list[Span] = []
        """Every run the worker had in hand (``sim.invariants.clean_handovers``)."""
        self.graceful_stops: list[tuple[str, float]] = []
        self.taken_away: list[tuple[str, float]] = []
        """(process, when) of each lost link or server cancel: the broker took the queue
        away, whatever the process was doing."""
        self.now = 0.0
        self.alive = False
        self.restart_at: float | None = None
        self._new_life()

    def _new_life(self) -> None:
        """A fresh process: nothing of the last one's memory survives."""
        self.lives += 1
        self.process = f"{self.name}.{self.lives}"
        s = self.settings
        self.machine = self._machine_type(
            batch=s.ack_batch, retry=s.retry, resubscribe=s.connection.reconnect,
            parking=s.queue.parking_target, permanent=c.permanent_failure, rng=self.rng.random)
        self.inbox = self._inbox_type(self.store, self.effect, policy=self.lookup,
                                      store_retry=self.store_retry,
                                      clock=lambda: self.now, rng=self.rng.random)
        self.session = self.inbox.session(queue=s.queue.name, consumer=self.process,
                                          recorder=None)
        self.tag: str | None = None
        self._tags = 0
        self.stopping = False
        self.cancel_pending = False
        self.finished = False
        """The stop's ``finish`` was carried out."""
        self.stop_by: float | None = None
        self.restart_wanted = False
        self.failure: BaseException | None = None
        self._work: _Work | None = None
        self._handed: collections.deque[c.Run[Delivery]] = collections.deque()
        """Runs handed to the worker, not begun (the machine may pipeline them)."""
        self._admission = c.Admission()
        self._dispatch_at: float | None = None
        self._parking: _Parking | None = None
        self._park_link: str | None = None
        self._park_tags = 0
        self.closing = False
        self.recover = True

    # ------------------------------------------------------------------ the Client protocol

    def start(self, now: float) -> Sequence[WorldAction]:
        self.out = []
        self.now = now
        self._begin(now)
        return self.out

    def receive(self, now: float, event: Event) -> Sequence[WorldAction]:
        self.now = now
        if isinstance(event, Stop | Restart):
            self.out = []
            if isinstance(event, Restart):
                if not self.alive:
                    self._end_or_restart(now)
                else:  # still stopping: started again once it is done
                    self.restart_wanted = True
            elif self.alive:
                self.restart_wanted = False
                if event.kill:
                    self._kill(now)
                elif not self.stopping:
                    self.graceful_stops.append((self.process, now))
                    self._stop(now)
                    self._settle(now)
            else:
                self.restart_at = None  # stopped already: stays down until told
            return self.out
        if not self.alive:
            return ()
        out = super().receive(now, event)
        self._settle(now)
        return out

    def tick(self, now: float) -> Sequence[WorldAction]:
        self.now = now
        if not self.alive:
            self.out = []
            if self.restart_at is not None and now >= self.restart_at:
                self._end_or_restart(now)
            return self.out
        out = super().tick(now)
        self._settle(now)
        return out

    def next_tick(self) -> float | None:
        if not self.alive:
            return self.restart_at
        return super().next_tick()

    def idle(self) -> bool:
        return self.alive and super().idle()

    # ------------------------------------------------------------------ the process

    def _begin(self, now: float) -> None:
        self.alive = True
        self.restart_at = None
        self._carry_out(now, self.machine.start(now))
        self.open(now, retry=False)

    def _end_or_restart(self, now: float) -> None:
        self.restart_at = None
        self._new_life()
        self._begin(now)

    def _stop(self, now: float) -> None:
        """A graceful stop, as ``ConsumerEngine.stop``: let the run in hand finish, then
        ``finish`` (acks, then ``Release``: the close with the subscription in place, or
        ``Cancel`` with ``Handover.CANCEL``, whose answer is waited for), each wait bounded
        by ``stop_timeout``; then close. Whether the machine cancels at ``stop`` or at
        ``finish`` is its decision: a cancel under way is waited for either way."""
        if self.stopping:
            return
        self.stopping = True
        self.finished = False
        self.stop_by = now + self.settings.stop_timeout
        self.recover = False
        self._carry_out(now, self.machine.stop(now))
        self.inbox.interrupt()
        if self._work is not None and self._work.steps is not None:
            self._work.at = now  # the store backoff's wait ends at once
        if not self.up:
            self.cancel_pending = False

    def _kill(self, now: float) -> None:
        self.crash()
        self.alive = False
        self.restart_at = None

    def _exited(self, now: float) -> None:
        self.alive = False
        self.restart_at = now + self.restart_after if self.restart_wanted else None

    def _settle(self, now: float) -> None:
        """After every event: a stop goes on once nothing is in hand and no cancel is
        unanswered, or when its time is up."""
        if not self.stopping or not self.alive or self.closing:
            return
        late = self.stop_by is not None and now >= self.stop_by
        if not self.finished:
            if (self.cancel_pending or self.machine.busy) and not late:
                return
            self.finished = True
            self.stop_by = now + self.settings.stop_timeout
            self._carry_out(now, self.machine.finish(now))
            if self.cancel_pending:
                return
        elif self.cancel_pending and not late:
            return
        self.close(now)

    # ------------------------------------------------------------------ the shell's hooks

    def setup(self, now: float) -> None:
        self._park_link = None
        s = self.settings
        self.send(1, m.ChannelOpen())
        declare(self, s.queue)
        self.send(1, m.BasicQos(prefetch_count=s.prefetch))
        self._consume()

    def _consume(self) -> None:
        self._tags += 1
        self.tag = f"{self.process}-{self._tags}"
        queue = self.settings.queue
        arguments: dict[str, Any] = dict(
            consume_arguments(queue.type, self.broker, self.settings.priority) or {})
        self.send(1, m.BasicConsume(queue=queue.name, consumer_tag=self.tag, arguments=arguments))

    def frame(self, now: float, channel: int, method: object) -> None:
        if channel == PARK_CHANNEL:
            self._park_frame(now, method)
        elif isinstance(method, m.BasicDeliver):
            self._carry_out(now, self.machine.deliver(self._delivery(method)))
        elif isinstance(method, m.BasicConsumeOk):
            if method.consumer_tag == self.tag:
                if not self.up:
                    self.ready(now)
                self._carry_out(now, self.machine.subscribed(now))
        elif isinstance(method, m.BasicCancel):
            if method.consumer_tag == self.tag:
                self.taken_away.append((self.process, now))
                self._carry_out(now, self.machine.server_cancel(now))
        elif isinstance(method, m.BasicCancelOk):
            self.cancel_pending = False
        elif isinstance(method, m.ChannelClose):
            self.abandon(now, f"channel closed by the broker: {method.reply_text}")

    def _delivery(self, method: m.BasicDeliver) -> Delivery:
        props = method.properties
        headers = dict(props.headers or {})
        return Delivery(body=method.body, message_id=props.message_id, headers=headers,
                        redelivered=method.redelivered, delivery_count=delivery_count(headers),
                        queue=self.settings.queue.name, routing_key=method.routing_key,
                        exchange=method.exchange, content_type=props.content_type,
                        correlation_id=props.correlation_id, delivery_tag=method.delivery_tag)

    def dropped(self, now: float, why: str) -> None:
        self.taken_away.append((self.process, now))
        self.cancel_pending = False
        self._park_link = None
        parking, self._parking = self._parking, None
        self._carry_out(now, self.machine.channel_lost(now))
        if parking is not None:
            self._park_failed(now, parking.park, why)

    def failed(self, now: float, error: ConnectError) -> None:
        self._halt(now, "connect", error)

    def closed(self, now: float) -> None:
        self._carry_out(now, self.machine.closed(now))
        self._exited(now)

    def due(self) -> float | None:
        return earliest(self._dispatch_at, self.machine.deadline, self.stop_by,
                        None if self._work is None else self._work.at,
                        None if self._parking is None else self._parking.at)

    def busy(self) -> bool:
        return self.due() is not None

    def work(self, now: float) -> None:
        if self._dispatch_at is not None and now >= self._dispatch_at:
            self._dispatch_at = None
            self._carry_out(now, self.machine.dispatch(now))
        deadline = self.machine.deadline
        if deadline is not None and now >= deadline:
            self._carry_out(now, self.machine.tick(now))
        work = self._work
        if work is not None and now >= work.at:
            self._try(now, work)
        parking = self._parking
        if parking is not None and parking.at is not None and now >= parking.at:
            parking.at = None
            self._publish_copy(now, parking)

    # ------------------------------------------------------------------ the worker

    def _try(self, now: float, work: _Work) -> None:
        """One try of the run in hand (``ConsumerEngine.execute`` for an inbox)."""
        run = work.run
        if work.steps is None:
            if not self.machine.live(run.generation):
                self._ran(now, 0, None, None)
                return
            work.steps = self.session.batch_steps(run.deliveries, run.activation)
        try:
            delay = next(work.steps)
        except ProcessDies:
            self._kill(now)
            self.restart_at = now + self.restart_after
            return
        except StopIteration as done:
            results = done.value
            count = len(results)
            last = results[-1] if count else None
            if isinstance(last, Exception):
                self._ran(now, count - 1, last, None)
            else:
                self._ran(now, count, None, None)
        except (StaleEpoch, StoreUnavailable) as exc:
            self._ran(now, 0, None, exc)
        else:
            work.at = now + delay + self._try_time(run)

    def _try_time(self, run: c.Run[Delivery]) -> float:
        """One try of a run: its effects, then the store's commit."""
        low, high = self.effect_time
        effects = sum(self.rng.uniform(low, high) for _ in run.deliveries)
        return effects + self.store.call_latency()

    def _ran(self, now: float, done: int, failed: Exception | None,
             refused: SacError | None) -> None:
        """The run in hand ended: the worker notes it (``Admission``) and reports it, then
        takes the next run it admits, as ``sdk._consumer_engine``'s workers do."""
        work, self._work = self._work, None
        assert work is not None
        run = work.run
        span = self.spans[-1]
        self.spans[-1] = attrs.evolve(span, end=now)
        self._admission.ran(run, done)
        if refused is None:
            actions = self.machine.ran(run, done, failed, now)
        else:
            actions = self.machine.commit_failed(run, refused, now,
                                                 fenced=isinstance(refused, StaleEpoch))
        self._carry_out(now, actions)
        self._next_run(now)

    def _next_run(self, now: float) -> None:
        while self._work is None and self._handed:
            run = self._handed.popleft()
            if self._admission.admits(run):
                self._work = _Work(run=run, at=now + self._try_time(run))
                self.spans.append(Span(process=self.process, start=now, end=None))

    # ------------------------------------------------------------------ parking

    def _park(self, now: float, park: c.Park[Delivery]) -> None:
        if park.target is not c.Parking.QUEUE:
            return
        link = self.link
        if link is None or not self.up:
            self._park_failed(now, park, "no link")
            return
        if self._park_link != link:
            self._park_link = link
            self._park_tags = 0
            self.send(PARK_CHANNEL, m.ChannelOpen())
            self.send(PARK_CHANNEL, m.ConfirmSelect())
        parking = self._parking = _Parking(park=park, link=link, tag=0, began=now)
        self._publish_copy(now, parking)

    def _publish_copy(self, now: float, parking: _Parking) -> None:
        park = parking.park
        delivery = park.delivery
        target = self.settings.queue.parking_queue
        assert target is not None
        headers = parking_headers(delivery.headers, park.error, delivery.queue, park.attempts,
                                  self.process, now)
        self._park_tags += 1
        parking.tag = self._park_tags
        message_id = delivery.message_id
        assert not isinstance(message_id, bytes), "the simulated publishers write text ids"
        self.send(PARK_CHANNEL, m.BasicPublish(
            exchange="", routing_key=target, body=delivery.body,
            properties=m.Properties(message_id=message_id, headers=headers), mandatory=True))

    def _park_frame(self, now: float, method: object) -> None:
        parking = self._parking
        if parking is None:
            return
        if isinstance(method, m.BasicReturn):
            self._parking = None
            self._park_failed(now, parking.park,
                              f"the parking queue refused the copy: {method.reply_text}")
        elif isinstance(method, m.BasicAck) and method.delivery_tag >= parking.tag:
            self._parking = None
            self._carry_out(now, self.machine.parked(now))
        elif isinstance(method, m.BasicNack) and method.delivery_tag >= parking.tag:
            parking.nacks += 1
            delay = PARK_NACK_RETRY.delay(parking.nacks, now - parking.began, self.rng.random)
            if delay is None:
                self._parking = None
                self._park_failed(now, parking.park,
                                  f"the parking queue nacked the copy {parking.nacks} times")
            else:
                parking.at = now + delay

    def _park_failed(self, now: float, park: c.Park[Delivery], why: str) -> None:
        error = ParkingFailed(self.settings.queue.name, park.delivery.message_id, why)
        self._carry_out(now, self.machine.park_failed(now, error))

    # ------------------------------------------------------------------ carrying out

    def _carry_out(self, now: float, actions: Sequence[c.Action[Delivery]]) -> None:
        self.now = now
        carry_out(actions, self)

    # ------------------------------------------------------------------ ConsumerShell

    def submit(self, run: c.Run[Delivery]) -> None:
        self._handed.append(run)
        self._next_run(self.now)

    def wake(self) -> None:
        self._dispatch_at = self.now

    def ack(self, ack: Ack) -> None:
        if self.up:
            self.send(1, m.BasicAck(delivery_tag=ack.tag, multiple=ack.multiple))

    def reject(self, reject: Reject) -> None:
        if self.up:
            self.send(1, m.BasicReject(delivery_tag=reject.tag, requeue=reject.requeue))

    def retry_later(self, retry: c.RetryLater[Delivery]) -> None:
        """Nothing to schedule: ``machine.deadline`` says when to tick."""

    def park(self, park: c.Park[Delivery]) -> None:
        self._park(self.now, park)

    def resubscribe_later(self, later: c.ResubscribeLater) -> None:
        """Nothing to schedule: ``machine.deadline`` says when to tick."""

    def subscribe(self, subscribe: c.Subscribe) -> None:
        if self.up:
            self._consume()

    def hand_over(self, handover: c.Cancel | c.Release) -> None:
        """Release: the close that follows ends the subscription (``connection.close`` sends
        no basic.cancel), as the real shell's does. Cancel: cancelled first, and the stop
        waits for its answer."""
        if isinstance(handover, c.Cancel) and self.up and self.tag is not None:
            self.cancel_pending = True
            self.send(1, m.BasicCancel(consumer_tag=self.tag))

    def role_changed(self, change: c.RoleChanged) -> None:
        self.roles.append(RoleSeen(t=self.now, process=self.process, old=change.old.value,
                                   new=change.new.value, activation=change.activation))

    def halt(self, halt: c.Halt[Delivery]) -> None:
        self._halt(self.now, halt.why.value, halt.error)

    def replaced(self, replaced: c.Replaced) -> None:
        """The simulated consumer has no guard: its machine is built without ``rejoins``, so
        a fenced run halts it (``Halt``) and ``Replaced`` never comes. One that did would
        mean the machine changed under the simulator: fail loudly rather than drop it."""
        raise AssertionError("Replaced from a machine built without rejoins")

    def _halt(self, now: float, why: str, error: BaseException | None) -> None:
        """The consumer cannot go on: it stops, and its supervisor starts it again."""
        self.halts.append(Halted(t=now, process=self.process, why=why, error=repr(error)))
        self.failure = error
        self._stop(now)
        self.restart_wanted = True
