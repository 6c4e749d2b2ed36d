"""The consumer's decisions as one state machine, without I/O: events in, actions out.

Both consumer faces are shells around it: they turn broker and handler events into calls of
the methods below and carry out the actions these return, in order. A deterministic
simulator drives it directly, with virtual time and a simulated inbox. Time is passed in
(``now``, seconds on any monotonic clock), never read; randomness (retry jitter) comes from
the ``rng`` given at construction.

Events (methods; each returns the actions to carry out, usually none)
---------------------------------------------------------------------
``start(now)``
    the client starts connecting.
``deliver(delivery)``
    a delivery arrived on the current channel (the hot path: no ``now``, no allocation).
``refuse(delivery, error)``
    a delivery no handler may see (``error`` says why: its headers do not decode, say). It
    takes its turn like any other; when its turn comes (the runs before it reported) it is
    parked at once, unrun (``Park`` with 0 attempts), and acked only once its copy is
    confirmed, as a message that failed for good. Costs nothing on ``deliver``'s path.
``dispatch(now)``
    the shell may hand work to the worker: after a ``Wake``, once the read that brought the
    deliveries is over, so one ``Run`` takes all of them (up to ``batch``).
``ran(run, done, failed, now)``
    the worker finished ``run``: its first ``done`` deliveries succeeded (handler returned,
    or, with an inbox, their effects are committed: durable), then ``failed`` (an exception)
    ended it at delivery ``done``, or None. Deliveries after those were not run: the worker
    stops early when the shell tells it that ``live(generation)`` turned false. For the
    inbox this is *commit done*.
``commit_failed(run, error, now, fenced=...)``
    the inbox refused the whole ``Run``: fenced (``StaleEpoch``: a newer consumer holds the
    queue), else the store stayed unavailable past the inbox's own bounded retry. Nothing of
    the run committed; the consumer halts (even if the run's channel is gone: it was
    replaced, or the store is gone), unless stopping anyway.
``parked(now)`` / ``park_failed(now, error)``
    the parking queue confirmed the copy / did not take it (refused, timed out, or the link
    went: after ``channel_lost`` that is no error, the broker has the original back).
``subscribed(now)``
    consume-ok: a subscription is in place (at start, after a reconnect, after a cancel).
``standing_by(now)``
    connected, but not subscribing: a guarded consumer that does not lead (role waiting).
``subscribe_failed(now, error)``
    a ``Subscribe`` attempt failed (not through a lost channel).
``server_cancel(now)``
    the broker cancelled the subscription (queue deleted, mirrored queue failed over); the
    channel is still open.
``channel_lost(now)``
    the channel (or its connection) is gone: a new generation begins. Tags of the old one
    are never acked; the broker gives their messages back.
``confirmed_active(now)`` / ``demoted(now)``
    the broker named this consumer as the active one / named another one while this one
    thought itself active (the management API, read by ``roles.RoleWatch``).
``stop(now)`` / ``finish(now)`` / ``closed(now)``
    a graceful stop begins (nothing more is taken or started) / goes on once nothing is in
    flight (``busy`` false) or the shell's patience ran out / is complete (the link is
    closed). How it hands over is the ``handover`` given at construction (``Handover``).
``tick(now)``
    time passed: retries and resubscribes that are due.
``pause(now)`` / ``resume(now)``
    start no new work (a guarded consumer's ZooKeeper session is suspended): the run under
    way ends after its delivery in hand, what arrives waits; acks of what is done still go
    out / start work again.

Actions (what the shell carries out, through ``dispatch.carry_out``)
--------------------------------------------------------------------
``Wake``
    call ``dispatch(now)`` soon (after the current read).
``Run(deliveries, generation, activation, seq, barrier, attempt)``
    run the handler for each delivery in order, or the inbox's ``process_batch`` on them
    (``activation`` tells it when to claim a new epoch), stopping early once
    ``live(generation)`` is false (the shell tells the worker: it never reads the machine);
    report ``ran`` or ``commit_failed``. Runs are run one after another in ``seq`` order; up
    to ``pipeline`` of them are handed out at once, and the worker skips those its
    ``Admission`` refuses (their deliveries come back).
``Ack(tag, multiple, count)`` / ``Reject(tag, requeue)``
    on the current channel (``sdk._core.acks``). An ``Ack`` is only ever for deliveries
    whose run reported success (or whose parked copy was confirmed), on the generation they
    came on, in tag order; a ``multiple`` ack covers nothing that is not done.
``RetryLater(delivery, error, attempts, delay, at)``
    a delivery failed ``attempts`` times; it runs again, alone and in place (unacked, nothing
    behind it runs meanwhile), when ``tick`` passes ``at``.
``Park(delivery, error, attempts, target)``
    it failed for good: with ``target`` QUEUE copy it to the parking queue, confirmed, then
    report ``parked``/``park_failed``; DEAD_LETTER is followed by its ``Reject`` (requeue
    false) in the same list; NONE by a ``Halt``. Log it in every case.
``ResubscribeLater(at, attempt)`` then ``Subscribe(attempt)``
    consume again after a server cancel, when ``tick`` passes ``at``.
``Release``
    stopping, after the last run ended and its acks (``Handover.CLOSE``): close the channel
    with the subscription still in place, sending no ``basic.cancel``. The broker then takes
    back, in one step, every delivery this channel holds unacked (prefetched, not started,
    or arrived since the stop began), puts them at the head of the queue in the order they
    were delivered, and only then makes the next consumer active: its first message is the
    first one this consumer did not finish.
``Cancel``
    the same point with ``Handover.CANCEL`` (an order that breaks at each handover, kept only
    for the chaos suite's weakening): cancel the subscription, then close. The broker makes the next
    consumer active at the cancel, while this one's prefetched messages are still checked
    out to it; they come back at the close, behind what the next one already took.
``RoleChanged(old, new, activation)``
    the consumer's role changed (``sdk._core.roles``).
``Halt(why=why, error=error, delivery=delivery,
                                                    attempts=attempts)``
    the consumer cannot go on: stop it (the shell calls ``stop``) and raise the error from
    ``wait``/``run``. Nothing of the failing run is acked.
``Replaced``
    only with ``rejoins``: the inbox refused a run of the current channel (fenced) because a
    newer leader took over: give the channel up (nothing in hand is acked) and let the guard
    contend again, instead of halting.

What a checker reads off the actions: every ``Ack`` follows the ``ran``/``parked`` that
made its deliveries done, within the same call or a later one, never across a
``channel_lost``; ``busy``, ``in_flight``, ``waiting`` and ``unacked_done`` say what is in
hand at any point.

Not decided here: a failing dedup store is retried inside the inbox (``Inbox.store_retry``,
one ``Retry``); the machine sees the run's final outcome. Reconnecting is ``_recovery.py``'s;
the machine sees ``channel_lost`` and the next ``subscribed``.
"""

from __future__ import annotations

import collections
import enum
import random
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import attrs

from .._errors import MissingMessageId, Poison, UnfitMessage
from .acks import Ack, AckBatcher, Reject
from .backoff import Backoff
from .poison import Park as ParkStep
from .poison import after_failure
from .roles import Change, Role, RoleTracker


class Tagged(Protocol):
    @property
    def delivery_tag(self) -> int: ...


D = TypeVar("D", bound=Tagged)


def permanent_failure(exc: Exception) -> bool:
    """No retry cures it (``Poison`` raised by the handler, a message without an id, an
    ``UnfitMessage`` found while running it): the message is parked at once. Both faces and
    the simulator pass this as ``permanent``."""
    return isinstance(exc, Poison | MissingMessageId | UnfitMessage)


class Parking(enum.Enum):
    """Where a message that failed for good goes."""

    QUEUE = "queue"
    """Copied to the parking queue, confirmed, then acked."""
    DEAD_LETTER = "dead-letter"
    """Rejected without requeue: the broker dead-letters it into the queue's exchange."""
    NONE = "none"
    """Nowhere: the consumer halts and the message stays in the queue."""


class Handover(enum.Enum):
    """How a graceful stop hands the queue to the next consumer (``finish``).

    Measured on RabbitMQ 3.10.8 (a quorum queue with single active consumer, 3 000 messages,
    prefetch 100 and 1 000, the stopping consumer and the leader on the same node or not):
    ``basic.cancel`` makes the broker activate the next consumer at once, with the stopping
    one's prefetched messages still checked out to it (``rabbit_fifo`` keeps a cancelled
    consumer's messages until they are settled or its channel goes), so they come back
    behind what the next one took: 2 breaks of the order per handover, a prefetch-worth
    each. A channel closed with its subscription in place is one command for the queue: its
    unacked messages are returned at the head (the *returns*, served before everything
    else) sorted by delivery order, then the next consumer is activated; the next one's
    first delivery is the first message not acked, and the rest follow in order, with
    prefetch 100 or 1 000 alike. A ``basic.nack`` (requeue) of the unstarted ones first does
    not help: the broker hands them straight back to this still-active consumer."""

    CLOSE = "close"
    """Acks of what is done, then the channel closed without cancelling (``Release``): the
    queue's order holds across the handover."""
    CANCEL = "cancel"
    """Acks, ``basic.cancel``, then the close (``Cancel``): breaks the order at every
    handover that leaves prefetched messages behind. Only for the chaos suite's weakening
    (``reordered`` must be caught)."""


class Why(enum.Enum):
    """Why a consumer halts."""

    FENCED = "fenced"
    STORE_UNAVAILABLE = "store-unavailable"
    NOWHERE_TO_PARK = "nowhere-to-park"
    PARKING_FAILED = "parking-failed"
    NOT_RESUBSCRIBED = "not-resubscribed"


class Stage(enum.Enum):
    RUNNING = "running"
    HALTED = "halted"
    """Halt returned: nothing more is taken; waiting for ``stop``."""
    STOPPING = "stopping"
    CLOSED = "closed"


RUNNING = Stage.RUNNING
_ACTIVE = Role.ACTIVE
"""Module constants for the per-message paths: an enum member read through its class costs
three times a global's."""


@attrs.frozen(kw_only=True)
class Wake:
    pass


WAKE = Wake()


@attrs.frozen(eq=False, kw_only=True)
class Run(Generic[D]):
    deliveries: Sequence[D]
    generation: int
    activation: int
    seq: int
    """Runs are numbered in the order they are handed out (and must be run)."""
    barrier: int
    """The ``seq`` of the last run known to have ended early when this one was handed
    out: a worker that saw a later one end early skips this one (``Admission``)."""
    attempt: int = 1
    """1 for a first run; n for the (n-1)th retry of its single delivery."""


class Admission:
    """The worker's half of pipelining. Several runs may be handed out at once, and the
    worker runs them in order; when one ends early (a failure, the inbox's refusal, a stop
    or a lost channel cutting it short), the runs handed out before the machine learned of
    it must not run: the machine takes their deliveries back when it hears of it. So the
    worker skips every run whose ``barrier`` is older than the last run it saw end early."""

    __slots__ = ("_after",)

    def __init__(self) -> None:
        self._after = 0

    def admits(self, run: Run[Any]) -> bool:
        return run.barrier >= self._after

    def ran(self, run: Run[Any], done: int) -> None:
        """``done`` of ``run``'s deliveries succeeded (0 when the inbox refused it)."""
        if done < len(run.deliveries):
            self._after = run.seq


@attrs.frozen(kw_only=True)
class RetryLater(Generic[D]):
    delivery: D
    error: Exception
    attempts: int
    """How many runs failed so far."""
    delay: float
    at: float


@attrs.frozen(kw_only=True)
class Park(Generic[D]):
    delivery: D
    error: Exception
    attempts: int
    target: Parking


@attrs.frozen(kw_only=True)
class ResubscribeLater:
    at: float
    attempt: int


@attrs.frozen(kw_only=True)
class Subscribe:
    attempt: int


@attrs.frozen(kw_only=True)
class Cancel:
    pass


CANCEL = Cancel()


@attrs.frozen(kw_only=True)
class Release:
    pass


RELEASE = Release()


@attrs.frozen(kw_only=True)
class RoleChanged:
    old: Role
    new: Role
    activation: int
    """How many times the consumer became active (the inbox claims an epoch for each)."""


@attrs.frozen(kw_only=True)
class Replaced:
    pass


REPLACED = Replaced()


@attrs.frozen(kw_only=True)
class Halt(Generic[D]):
    why: Why
    error: Exception | None
    delivery: D | None = None
    attempts: int = 0


Action = (Wake | Run[D] | Ack | Reject | RetryLater[D] | Park[D] | ResubscribeLater | Subscribe
          | Cancel | Release | RoleChanged | Halt[D] | Replaced)
Actions = Sequence[Action[D]]
NONE: tuple[()] = ()


@attrs.define
class _Failing(Generic[D]):
    """The delivery whose run failed: waiting for its retry (``at``), running again
    (``at`` None), or being parked (``parking``). Nothing behind it runs meanwhile."""

    delivery: D
    generation: int
    attempts: int
    first_at: float
    at: float | None = None
    parking: bool = False


@attrs.define
class _Resubscribing:
    began: float
    attempt: int
    at: float | None
    """When the next ``Subscribe`` is due; None while one is under way."""


@attrs.define
class Counts:
    delivered: int = 0
    handler_errors: int = 0
    retried: int = 0
    parked: int = 0
    resubscribes: int = 0


class ConsumerMachine(Generic[D]):
    """One consumer's state: what waits, what runs, what is done but unacked, its role."""

    def __init__(
        self,
        *,
        batch: int,
        retry: Backoff,
        resubscribe: Backoff,
        parking: Parking,
        permanent: Callable[[Exception], bool] = lambda _exc: False,
        rng: Callable[[], float] = random.random,
        pipeline: int | None = 1,
        rejoins: bool = False,
        handover: Handover = Handover.CLOSE,
    ) -> None:
        self.batch = batch
        self._handover = handover
        self._rejoins = rejoins
        """A guarded consumer: a fenced run is not the end (the guard contends again)."""
        self._pipeline = pipeline
        """Runs handed out at once at most (None: no limit). One keeps each run as large as
        what waits (an inbox commits a run in one transaction); more keep a worker in
        another thread busy without waiting for the machine between runs."""
        self._retry = retry
        self._resubscribe = resubscribe
        self._parking = parking
        self._permanent = permanent
        self._rng = rng
        self._acks = AckBatcher(batch)
        self._roles = RoleTracker()
        self.stage = Stage.RUNNING
        self.paused = False
        """No new work starts (``pause``); see ``live``."""
        self.generation = 0
        """Bumped by every lost channel: runs and tags of an older one are stale."""
        self.activation = 0
        self.counts = Counts()
        self._waiting: collections.deque[D] = collections.deque()
        self._runs: collections.deque[Run[D]] = collections.deque()
        """Handed out, not reported yet, in order."""
        self._seq = 0
        self._barrier = 0
        self._failing: _Failing[D] | None = None
        self._resubscribing: _Resubscribing | None = None
        self._subscribed = False
        self._woken = False
        self._unfit: dict[int, Exception] = {}
        """Tags (of this generation) of deliveries to park unrun, and why (``refuse``)."""

    # ------------------------------------------------------------------ views

    @property
    def role(self) -> Role:
        return self._roles.role

    @property
    def subscriptions(self) -> int:
        """How many times a subscription was made (the first one declares nothing again)."""
        return self._roles.subscriptions

    @property
    def busy(self) -> bool:
        """A run or a park is under way (a stop waits for it to end)."""
        return bool(self._runs) or (self._failing is not None and self._failing.at is None)

    @property
    def in_flight(self) -> int:
        """Runs handed out and not reported yet."""
        return len(self._runs)

    @property
    def waiting(self) -> int:
        """Deliveries taken but not handed to the worker yet."""
        return len(self._waiting)

    @property
    def unacked_done(self) -> int:
        """Deliveries done whose ack has not been returned yet."""
        return self._acks.pending

    @property
    def deadline(self) -> float | None:
        """The earliest time ``tick`` has something to do, if any."""
        times = [t for t in (self._failing.at if self._failing is not None else None,
                             self._resubscribing.at if self._resubscribing is not None else None)
                 if t is not None]
        return min(times) if times else None

    def live(self, generation: int) -> bool:
        """Whether a run of ``generation`` should go on to its next delivery. Read on the
        machine's own thread only: a shell whose runs execute elsewhere tells them when this
        turns false (the SDK's ``Ticket.cut``)."""
        return self.stage is RUNNING and not self.paused and generation == self.generation

    # ------------------------------------------------------------------ events

    def start(self, now: float) -> Actions[D]:
        return self._changed(self._roles.connecting())

    def deliver(self, delivery: D) -> Actions[D]:
        self.counts.delivered += 1
        actions: Actions[D] = NONE
        if self._roles.role is not _ACTIVE:
            actions = self._changed(self._roles.delivered())
        if self.stage is not RUNNING:
            return actions  # not taken: it goes back to the queue with the channel
        self._waiting.append(delivery)
        if self._woken or self._failing is not None or self.paused or not self._room():
            return actions
        self._woken = True
        return [*actions, WAKE]

    def refuse(self, delivery: D, error: Exception) -> Actions[D]:
        if self.stage is RUNNING:  # else it is not taken (``deliver``): nothing to remember
            self._unfit[delivery.delivery_tag] = error
        return self.deliver(delivery)

    def dispatch(self, now: float) -> Actions[D]:
        self._woken = False
        if self._failing is not None or self.stage is not Stage.RUNNING or self.paused:
            return NONE
        return self._next_runs()

    def ran(self, run: Run[D], done: int, failed: Exception | None, now: float) -> Actions[D]:
        if not self._runs or self._runs[0] is not run:
            return NONE  # taken back already (it was handed out before one ended early)
        self._runs.popleft()
        deliveries = run.deliveries
        abandoned = self._ended_early(run) if done < len(deliveries) else ()
        failing = self._failing
        if failing is not None and run.attempt > 1 and failed is None:
            self._failing = None  # the retry succeeded, or was cut short (then it comes back)
        if run.generation != self.generation or self.stage is Stage.CLOSED:
            # Its channel is gone: the broker has those messages back.
            self._take_back((), abandoned)
            return self._free()
        actions: list[Action[D]] = []
        if done:
            actions += self._acks.done_many([d.delivery_tag for d in deliveries[:done]])
        if failed is not None:
            self._take_back(deliveries[done + 1:], abandoned)
            actions += self._failed(deliveries[done], failed, run, now)
            return actions
        self._take_back(deliveries[done:], abandoned)  # cut short: a stop was asked for
        return [*actions, *self._free()]

    def commit_failed(
        self, run: Run[D], error: Exception, now: float, *, fenced: bool
    ) -> Actions[D]:
        if not self._runs or self._runs[0] is not run:
            return NONE
        self._runs.popleft()
        self._ended_early(run)
        failing = self._failing
        if failing is not None and run.attempt > 1:
            self._failing = None
        if fenced and self._rejoins and self.stage is Stage.RUNNING:
            if run.generation != self.generation:
                return self._free()  # its channel was given up already: nothing more to do
            return [*self._acks.flush(), REPLACED]
        # Whatever channel the run came on: a fenced consumer was replaced, and a store
        # that stays unavailable fails every run after this one too.
        if self.stage is Stage.RUNNING:
            return self._halt(Why.FENCED if fenced else Why.STORE_UNAVAILABLE, error)
        return self._free()  # stopping anyway: left unacked, not an error

    def parked(self, now: float) -> Actions[D]:
        failing = self._failing
        if failing is None or not failing.parking or failing.generation != self.generation:
            return NONE
        self._failing = None
        self.counts.parked += 1
        if self.stage is Stage.CLOSED:
            return NONE
        return [*self._acks.done(failing.delivery.delivery_tag), *self._free()]

    def park_failed(self, now: float, error: Exception) -> Actions[D]:
        failing = self._failing
        if failing is None or not failing.parking:
            return NONE
        self._failing = None
        if failing.generation != self.generation or self.stage is not Stage.RUNNING:
            # The channel went first (the broker has it back), or stopping: nothing after
            # it runs, so no later ack covers it.
            return self._free()
        # On a live channel the message must not be passed over: a later multiple ack
        # would cover it.
        return self._halt(Why.PARKING_FAILED, error, failing.delivery, failing.attempts)

    def subscribed(self, now: float) -> Actions[D]:
        self._subscribed = True
        if self._resubscribing is not None:
            self._resubscribing = None
            self.counts.resubscribes += 1
        return self._changed(self._roles.subscribed())

    def standing_by(self, now: float) -> Actions[D]:
        return self._changed(self._roles.standing_by())

    def subscribe_failed(self, now: float, error: Exception) -> Actions[D]:
        state = self._resubscribing
        if state is None or self.stage is not Stage.RUNNING:
            return NONE
        state.attempt += 1
        return self._next_subscribe(state, now, error)

    def server_cancel(self, now: float) -> Actions[D]:
        self._subscribed = False
        actions = [*self._changed(self._roles.lost())]
        if self.stage is not Stage.RUNNING:
            return actions
        actions += self._acks.flush()  # acks of what is done still count on this channel
        state = self._resubscribing = _Resubscribing(now, 1, None)
        return [*actions, *self._next_subscribe(state, now, None)]

    def channel_lost(self, now: float) -> Actions[D]:
        self.generation += 1
        self._subscribed = False
        self._acks.channel_lost()
        self._waiting.clear()
        self._unfit.clear()
        self._failing = None
        self._resubscribing = None  # the reconnect subscribes again
        if self.stage is Stage.RUNNING:
            return self._changed(self._roles.lost())
        return NONE

    def confirmed_active(self, now: float) -> Actions[D]:
        return self._changed(self._roles.confirmed_active())

    def demoted(self, now: float) -> Actions[D]:
        return self._changed(self._roles.demoted())

    def stop(self, now: float) -> Actions[D]:
        if self.stage in (Stage.STOPPING, Stage.CLOSED):
            return NONE
        self.stage = Stage.STOPPING
        self._waiting.clear()  # never started: back to the queue with the channel
        self._resubscribing = None
        if self._failing is not None and self._failing.at is not None:
            self._failing = None  # waiting for a retry: left unacked
        actions = [*self._changed(self._roles.stopping())]
        if not self._runs:
            actions += self._acks.flush()
        return actions

    def finish(self, now: float) -> Actions[D]:
        """The stop goes on once nothing is in flight (or a start failed, or the shell's
        patience ran out): acks for what is done, then the channel is closed with the
        subscription in place (``Release``; ``Handover.CANCEL``: cancelled first, ``Cancel``);
        nothing later is run or acked. Handing over only now keeps it clean: the broker makes
        the next consumer active only once this one's last handler ended, and (``Release``)
        only once what this one held is back at the head of the queue, in order."""
        if self.stage is Stage.CLOSED:
            return NONE
        self.stage = Stage.CLOSED
        self._waiting.clear()
        self._runs.clear()
        self._failing = None
        self._resubscribing = None
        actions: list[Action[D]] = [*self._acks.flush()]
        if self._subscribed:
            self._subscribed = False
            actions.append(CANCEL if self._handover is Handover.CANCEL else RELEASE)
        return actions

    def closed(self, now: float) -> Actions[D]:
        self.stage = Stage.CLOSED
        return self._changed(self._roles.stopped())

    def pause(self, now: float) -> Actions[D]:
        self.paused = True
        return NONE

    def resume(self, now: float) -> Actions[D]:
        if not self.paused:
            return NONE
        self.paused = False
        if self.stage is not Stage.RUNNING:
            return NONE
        if self._failing is not None:
            return self.tick(now)  # its retry, if it fell due meanwhile
        return self._next_runs()

    def tick(self, now: float) -> Actions[D]:
        actions: list[Action[D]] = []
        failing = self._failing
        if (failing is not None and failing.at is not None and now >= failing.at
                and not self._runs and not self.paused):
            failing.at = None
            if self.stage is Stage.RUNNING:
                self.counts.retried += 1
                actions.append(self._hand_out([failing.delivery], failing.attempts + 1))
            else:
                self._failing = None
        state = self._resubscribing
        if state is not None and state.at is not None and now >= state.at:
            state.at = None
            actions.append(Subscribe(attempt=state.attempt))
        return actions

    # ------------------------------------------------------------------ decisions

    def _room(self) -> bool:
        return self._pipeline is None or len(self._runs) < self._pipeline

    def _hand_out(self, deliveries: list[D], attempt: int = 1) -> Run[D]:
        self._seq += 1
        run = Run(deliveries=deliveries, generation=self.generation,
                  activation=self.activation, seq=self._seq, barrier=self._barrier,
                  attempt=attempt)
        self._runs.append(run)
        return run

    def _next_runs(self) -> list[Action[D]]:
        """Runs of what waits, up to ``batch`` deliveries each, while the pipeline has room;
        an unfit delivery ends the run before it, and is parked once nothing runs."""
        runs: list[Action[D]] = []
        waiting = self._waiting
        while waiting and self._room():
            if self._unfit:
                error = self._unfit.get(waiting[0].delivery_tag)
                if error is not None:
                    if self._runs:
                        break  # its turn comes when the runs before it reported
                    del self._unfit[waiting[0].delivery_tag]
                    failing = self._failing = _Failing(waiting.popleft(), self.generation, 0,
                                                       0.0)
                    return [*runs, *self._park(failing, error)]
                ahead = 0
                for delivery in waiting:
                    if ahead == self.batch or delivery.delivery_tag in self._unfit:
                        break
                    ahead += 1
                taken = [waiting.popleft() for _ in range(ahead)]
            elif len(waiting) <= self.batch:
                taken = list(waiting)
                waiting.clear()
            else:
                taken = [waiting.popleft() for _ in range(self.batch)]
            runs.append(self._hand_out(taken))
        return runs

    def _free(self) -> Actions[D]:
        """A run ended: the next ones, or (idle) the acks of what is done."""
        if self._failing is not None:
            return NONE
        if self._waiting and self.stage is Stage.RUNNING and not self.paused:
            runs = self._next_runs()
            if runs:
                return runs
        if self._runs or self.stage is Stage.CLOSED:
            return NONE
        return self._acks.flush()

    def _ended_early(self, run: Run[D]) -> list[Run[D]]:
        """``run`` ended early: the runs handed out after it are skipped by the worker
        (``Admission``); they are taken back here."""
        self._barrier = run.seq
        abandoned = list(self._runs)
        self._runs.clear()
        return abandoned

    def _take_back(self, rest: Sequence[D], abandoned: Sequence[Run[D]]) -> None:
        """Deliveries handed out but not run go back to the head of the line, in order."""
        if self.stage is not Stage.RUNNING:
            return  # never started: back to the queue with the channel
        back = [*rest]
        for run in abandoned:
            if run.generation == self.generation:
                back += run.deliveries
        if back:
            self._waiting.extendleft(reversed(back))

    def _failed(self, delivery: D, error: Exception, run: Run[D], now: float) -> Actions[D]:
        self.counts.handler_errors += 1
        failing = self._failing
        if failing is None or failing.delivery is not delivery:
            failing = self._failing = _Failing(delivery, run.generation, 1, now)
        else:
            failing.attempts += 1
        if self.stage is not Stage.RUNNING:
            self._failing = None  # stopping: left unacked, it comes back to the queue
            return self._free()
        step = after_failure(self._retry, failing.attempts, now - failing.first_at,
                             self._permanent(error), self._rng)
        if not isinstance(step, ParkStep):
            # Acks of what is done go out now: nothing else runs while this one waits.
            failing.at = now + step.delay
            return [*self._acks.flush(),
                    RetryLater(delivery=delivery, error=error, attempts=failing.attempts,
                               delay=step.delay, at=failing.at)]
        return self._park(failing, error)

    def _park(self, failing: _Failing[D], error: Exception) -> Actions[D]:
        """``failing`` leaves the queue for good: parked, dead-lettered, or the consumer
        halts (nowhere to put it)."""
        delivery = failing.delivery
        park = Park(delivery=delivery, error=error, attempts=failing.attempts,
                    target=self._parking)
        if self._parking is Parking.QUEUE:
            failing.parking = True
            return [*self._acks.flush(), park]
        self._failing = None
        if self._parking is Parking.DEAD_LETTER:
            self.counts.parked += 1
            return [park, *self._acks.failed(delivery.delivery_tag, requeue=False),
                    *self._free()]
        return [park, *self._halt(Why.NOWHERE_TO_PARK, error, delivery, failing.attempts)]

    def _halt(self, why: Why, error: Exception | None, delivery: D | None = None,
              attempts: int = 0) -> Actions[D]:
        if self.stage is Stage.RUNNING:
            self.stage = Stage.HALTED
        self._waiting.clear()
        self._unfit.clear()
        self._resubscribing = None
        # What is done is acked: a fenced batch refuses only its own messages.
        return [*self._acks.flush(), Halt(why=why, error=error, delivery=delivery,
                                                    attempts=attempts)]

    def _next_subscribe(
        self, state: _Resubscribing, now: float, error: Exception | None
    ) -> Actions[D]:
        delay = self._resubscribe.delay(state.attempt, now - state.began, self._rng)
        if delay is None:
            self._resubscribing = None
            return self._halt(Why.NOT_RESUBSCRIBED, error, attempts=state.attempt - 1)
        state.at = now + delay
        return [ResubscribeLater(at=state.at, attempt=state.attempt)]

    def _changed(self, change: Change | None) -> Actions[D]:
        if change is None:
            return NONE
        if change.new is Role.ACTIVE:
            self.activation += 1
        return [RoleChanged(old=change.old, new=change.new, activation=self.activation)]
