"""The publisher's outbox as a state machine without I/O: every decision between "publish this"
and "the broker has it" (what goes out, what comes back after a loss and in what order, which
nacked message waits for a retry and how long, when a ``connection.blocked`` or a confirm wait
has lasted too long, when a close is over), and none of the sockets, futures or timers.

The machine is driven by events (method calls) and answers with actions (a list, in the order
they are to be carried out). Time is an argument (``now``, seconds on any monotonic clock the
driver likes: the asyncio shell passes ``loop.time()``, a simulator its virtual clock) and the
random source for jitter is injected, so the same events give the same actions, with no asyncio
at all. The asyncio shell is ``sac.sdk.publisher.AsyncPublisher``; a simulator drives this class
directly.

Events
------
``accept(handover, now, timed=False)``
    Publish requested: the caller hands over a frozen ``HandOver`` (at most ``room``
    messages to one exchange and routing key, for one waiter); the machine keeps a ``Held``
    record of each message (``seq``: first-publish order; sends, nacks, whether its caller
    heard) and queues them. No action: call ``flush()``
    when convenient (the asyncio shell once per loop iteration, so that everything handed over
    in one iteration goes out in one batch; a simulator right away). ``timed=True``: the
    callers wait for the confirm at most ``confirm_timeout`` (then ``ConfirmTimeout``).
``flush()``
    Send what may go now.
``link_up(now)``
    A channel in confirm mode is ready (first connect or reconnect): delivery tags restart at 1.
``link_lost(closed=None)``
    The channel or connection is gone; everything unconfirmed goes back in first-publish order,
    to be sent again with the retransmission mark. ``closed=BrokerClose(code, text)``: the
    broker closed the channel with that reply. When the reply says a publish caused it, the
    messages it names fail instead of going out again (and closing the next channel too): a
    publish to an exchange that does not exist or may not be written to (403, 404) fails the
    messages to that exchange; a message over the broker's ``max_message_size`` (406,
    "message size S is larger than configured max size M") fails every message over M, and M
    is learnt (``broker_max_size``): ``oversized`` refuses a message over it before it is sent.
``acked(tag, multiple, now)`` / ``nacked(tag, multiple, now)``
    ``basic.ack`` / ``basic.nack`` on the current channel.
``returned(message_id, reason)``
    ``basic.return`` (the ack of that message follows).
``blocked(now)`` / ``unblocked(now)``
    ``connection.blocked`` / ``connection.unblocked``.
``tick(now)``
    The time asked for by the last ``SetTimer`` has come.
``start()``
    The client starts (a second start is a ``LifecycleError``); ``link_up`` makes it running.
``close(now, timeout)``
    Close requested: no more accepts; what is outstanding may still be confirmed until
    ``now + timeout``, then fails with ``Unconfirmed``. ``Closed`` says when it is over.
``give_up(error)``
    The link cannot come back (the reconnect policy is spent, wrong credentials...):
    everything outstanding fails with ``error``.

Actions
-------
``Send(held)``
    Write these messages (``held[i].message``), in this order, on the current channel
    (their delivery tags follow the ones sent before on it). One with ``sends > 1`` goes out
    again after a loss or a nack: it carries the header ``x-sac-retransmit`` with the value
    ``sends - 1``.
``Confirmed(held)``
    The broker confirmed these: each caller not ``told`` yet learns its message id.
``Failed(held, error)``
    Tell this caller its publish failed with ``error`` (a ``PublishError``, ``Unconfirmed``,
    or the ``give_up`` error). The entry has left the outbox, except after ``BlockedTimeout``
    or ``ConfirmTimeout`` for a message already sent: that one stays tracked (the broker may
    still take it) and may still be confirmed later.
``Nacked(held)``, ``Returned(message_id)``
    What the broker said, for histories and statistics; what follows is the machine's business.
``SetTimer(at)``
    Call ``tick`` at time ``at`` (replaces the previous timer; ``None``: no timer needed).
``Recycle(why)``
    Abandon the current link although it works (only nacks for ``nack_stall_timeout``): the
    machine already counts it as lost; report ``link_lost`` as for any loss (it is then a
    no-op) and reconnect. Always the last action of its list, so a driver that reports the
    loss at once (re-entering the machine) has nothing of the old list left to carry out.
``Closed(unconfirmed)``
    The close is over; ``unconfirmed`` lists the ids that stayed unconfirmed (then each of
    those callers got ``Failed(..., Unconfirmed)``).

A message's size (``HandOver.sizes``, its body's bytes: what the broker's ``max_message_size``
counts) is checked with ``oversized(message_id, size, limit)`` before it is accepted.

What a checker reads: ``Outcomes`` folds the actions into the confirmed and failed ids;
``outstanding_ids()`` lists what the machine still holds; ``lifecycle.phase`` says whether the
client is starting, running, closing, closed or failed; ``stats()`` counts publishes,
retransmissions, confirms, nacks and returns.
"""

from __future__ import annotations

import bisect
import collections
import heapq
import random
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, assert_never, cast

import attrs

from .._errors import (
    BlockedTimeout,
    ConfirmTimeout,
    MessageNacked,
    MessageReturned,
    MessageTooLarge,
    PublishError,
    SacError,
    Unconfirmed,
)
from .backoff import Backoff
from .checks import at_least, flag, kind, positive
from .confirms import ConfirmWindow, InFlight
from .congestion import SendLimit
from .lifecycle import Lifecycle, Phase

P = TypeVar("P")
W = TypeVar("W")

_RECHECK = 0.05
"""Blocked-timeout checks come at least this far apart (seconds)."""


@attrs.frozen(kw_only=True)
class HandOver(Generic[P, W]):
    """Messages one caller hands over at once, to one exchange and routing key: the value a
    driver builds (once per call, not per message) and ``accept`` takes.

    The messages are columns, ``message_ids[i]``, ``messages[i]`` (the driver's payload: the
    shell's encoded frames) and ``sizes[i]`` (the body's bytes: what the broker's
    ``max_message_size`` counts), so that handing over a thousand messages builds no value
    per message: the only per-message object is the machine's own ``Held`` record. ``waiter``
    is whoever waits for their outcomes (the machine never looks at it, nor at a payload)."""

    message_ids: Sequence[str]
    messages: Sequence[P]
    sizes: Sequence[int]
    exchange: str = ""
    routing_key: str = ""
    waiter: W | None = None

    def __attrs_post_init__(self) -> None:
        """A driver's mistake, not a setting: said at once rather than as a ``zip`` error
        in the middle of ``accept``."""
        ids, messages, sizes = len(self.message_ids), len(self.messages), len(self.sizes)
        if not ids == messages == sizes:
            raise ValueError(f"a hand-over needs as many message_ids, messages and sizes; "
                             f"got {ids}, {messages} and {sizes}")


@attrs.define(eq=False, kw_only=True)
class Held(InFlight[P], Generic[P, W]):
    """The machine's record of one accepted message: where it stands (sends, nacks, the
    broker's return, whether its caller heard). Mutable, since it is bookkeeping, not a
    value; actions hand these records to the driver to read, never to change."""

    size: int
    """Its body's bytes: what the broker's ``max_message_size`` counts."""
    handover: HandOver[P, W]
    """The hand-over it came in: its exchange, routing key and waiter."""
    submitted: float = 0.0
    """When it was accepted (``connection.blocked`` bounds the wait from here)."""
    first_nack: float | None = None
    """When the broker first refused it (its nack budget runs from here)."""
    told: bool = False
    """Its caller already heard an outcome (the message may still be tracked)."""


@attrs.frozen(kw_only=True)
class BrokerClose:
    """The broker's reply when it closed the channel (``channel.close``)."""

    code: int
    text: str


_EXCHANGE_IN_REPLY = re.compile(r"exchange '(?P<name>(?:[^']|'(?! in vhost))*)' in vhost")
_SIZE_IN_REPLY = re.compile(
    r"message size (?P<size>\d+) is larger than (?:configured )?max size (?P<limit>\d+)")


def refused_exchange(closed: BrokerClose) -> str | None:
    """The exchange a publish was refused for (404: it does not exist; 403: it may not be
    written to), or None when the close says nothing of the kind."""
    if closed.code not in (403, 404):
        return None
    match = _EXCHANGE_IN_REPLY.search(closed.text)
    return None if match is None else match["name"]


def refused_size(closed: BrokerClose) -> tuple[int, int] | None:
    """``(size, limit)`` when the broker closed the channel because a message's body was
    over its ``max_message_size`` (406 PRECONDITION_FAILED, RabbitMQ 3.10 to 4.x)."""
    if closed.code != 406:
        return None
    match = _SIZE_IN_REPLY.search(closed.text)
    return None if match is None else (int(match["size"]), int(match["limit"]))


@attrs.frozen
class OutboxPolicy:
    """The publisher settings the machine decides with (see ``PublisherSettings``)."""

    window: int = attrs.field(validator=at_least(1))
    nack_backoff: Backoff = attrs.field(validator=kind(Backoff))
    throttle_on_nack: bool = attrs.field(default=True, validator=flag)
    nack_stall_timeout: float = attrs.field(default=2.0, validator=positive)
    blocked_timeout: float = attrs.field(default=60.0, validator=positive)
    confirm_timeout: float = attrs.field(default=60.0, validator=positive)


# ------------------------------------------------------------------------------- actions
# Frozen values: a driver matches on them (``match action: case Send(held=held): ...``) and
# ends with ``case _: assert_never(action)``, so an action it does not carry out is a type
# error. Each is built once per batch (``Send``, ``Confirmed``) or per rare event, never
# per message.


@attrs.frozen(kw_only=True)
class Send:
    held: list[Held[Any, Any]]


@attrs.frozen(kw_only=True)
class Confirmed:
    held: list[Held[Any, Any]]


@attrs.frozen(kw_only=True)
class Failed:
    held: Held[Any, Any]
    error: BaseException


@attrs.frozen(kw_only=True)
class Nacked:
    held: list[Held[Any, Any]]


@attrs.frozen(kw_only=True)
class Returned:
    message_id: str


@attrs.frozen(kw_only=True)
class SetTimer:
    at: float | None


@attrs.frozen(kw_only=True)
class Recycle:
    why: str


@attrs.frozen(kw_only=True)
class Closed:
    unconfirmed: list[str]


Action = Send | Confirmed | Failed | Nacked | Returned | SetTimer | Recycle | Closed


@attrs.frozen(kw_only=True)
class OutboxStats:
    published: int
    retransmitted: int
    confirmed: int
    nacked: int
    returned: int


class Outbox(Generic[P, W]):
    """The outbox of one publisher (see the module docstring for events and actions).

    Example::

        box = Outbox(OutboxPolicy(window=100, nack_backoff=Backoff()), rng=random.random)
        box.start()
        box.link_up(now=0.0)
        box.accept(HandOver(message_ids=["id-1"], messages=[b"body"], sizes=[4]), now=0.0)
        [send] = box.flush()                    # Send(held=[...]): write it, delivery tag 1
        box.acked(1, multiple=False, now=0.1)   # [Confirmed(held=[...])]
    """

    def __init__(self, policy: OutboxPolicy, rng: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self._rng = rng
        self._window: ConfirmWindow[P] = ConfirmWindow(policy.window)
        self._limit = SendLimit(policy.window, policy.nack_backoff, rng)
        self._backlog: collections.deque[Held[P, W]] = collections.deque()
        self._parked: dict[int, Held[P, W]] = {}  # nacked, waiting for their retry (no throttle)
        self._parked_due: list[tuple[float, int]] = []  # (due, seq): a heap
        self._timed: dict[int, Held[P, W]] = {}  # seq -> entry whose caller's wait is bounded
        self._timed_due: list[tuple[float, int]] = []  # (deadline, seq): a heap
        self._returns = 0  # messages in flight marked by basic.return
        self._held = 0  # in the window, the backlog or parked: counted, for the hot path
        self._seq = 0
        self.lifecycle = Lifecycle("publisher")
        """The client's phase: the shell's ``start``/``close`` and this machine move it."""
        self.up = False
        """A channel in confirm mode is ready (``link_up``) and not lost since."""
        self.broker_max_size: int | None = None
        """The broker's ``max_message_size``, once a refusal told it (the AMQP handshake
        does not); None until then."""
        self.blocked_since: float | None = None
        self._blocked_check: float | None = None
        self._resume_at: float | None = None
        self._close_at: float | None = None
        self._timer: float | None = None
        self._timer_dirty = False
        self._last_ack = 0.0
        self._published = self._retransmitted = self._confirmed = 0
        self._nacked = self._returned = 0

    # ------------------------------------------------------------------ what it holds

    @property
    def outstanding(self) -> int:
        """Accepted and neither confirmed nor failed (in flight, waiting, or parked)."""
        return self._held

    @property
    def room(self) -> int:
        """How many more messages ``accept`` takes now."""
        return self.policy.window - self._held

    @property
    def in_flight(self) -> int:
        """Sent on the current channel and not yet confirmed or refused."""
        return len(self._window)

    @property
    def allowed_in_flight(self) -> int:
        """How many may be in flight now (fewer than the window after nacks)."""
        return self._limit.allowed

    def entries(self) -> list[Held[P, W]]:
        """Every entry still held: in flight (first-publish order), waiting, parked."""
        flying = cast("list[Held[P, W]]", sorted(self._window, key=_by_seq))
        return [*flying, *self._backlog, *self._parked.values()]

    def outstanding_ids(self) -> list[str]:
        return [entry.message_id for entry in self.entries()]

    def oversized(self, message_id: str, size: int, limit: int) -> MessageTooLarge | None:
        """The error for a message of ``size`` bytes when it is over ``limit`` (the
        publisher's setting) or over the broker's limit learnt from a refusal; None when it
        may go. Checked before it is accepted, so that it fails alone, never sent."""
        learnt = self.broker_max_size
        if learnt is not None and learnt < limit and size > learnt:
            return MessageTooLarge(message_id, (
                f"{size} bytes is over the broker's maximum message size of {learnt} bytes "
                f"(learnt when the broker refused a message over it)"))
        if size > limit:
            return MessageTooLarge(
                message_id, f"{size} bytes is over the maximum message size of {limit} bytes")
        return None

    def stats(self) -> OutboxStats:
        return OutboxStats(published=self._published, retransmitted=self._retransmitted,
                           confirmed=self._confirmed, nacked=self._nacked,
                           returned=self._returned)

    # ------------------------------------------------------------------ events

    def accept(self, handover: HandOver[P, W], now: float, timed: bool = False) -> None:
        """Queue the messages of ``handover`` (at most ``room``) in their order; then
        ``flush()``."""
        if self.lifecycle.phase is not Phase.RUNNING:
            self.lifecycle.check_usable("publish")  # starting is fine; otherwise the error
        count = len(handover.message_ids)
        if count > self.policy.window - self._held:
            raise ValueError(f"{count} messages offered, room for {self.room}")
        self._held += count
        first = self._seq + 1
        held = [Held(seq=seq, message_id=mid, message=message, size=size, handover=handover,
                     submitted=now)
                for seq, mid, message, size in zip(
                    range(first, first + count), handover.message_ids, handover.messages,
                    handover.sizes, strict=True)]
        self._seq += count
        self._backlog.extend(held)
        if timed:
            deadline = now + self.policy.confirm_timeout
            for record in held:
                self._timed[record.seq] = record
                heapq.heappush(self._timed_due, (deadline, record.seq))
            self._timer_dirty = True

    def flush(self) -> list[Action]:
        actions: list[Action] = []
        self._pump(actions)
        if self._timer_dirty:
            self._arm(actions)
        return actions

    def start(self) -> None:
        """The client starts (``LifecycleError`` if it did before); nothing goes out before
        ``link_up``."""
        self.lifecycle.start()

    def link_up(self, now: float) -> list[Action]:
        self.lifecycle.started()
        if self.up:  # a new channel without a word about the old one: it is gone all the same
            self._lose_window()
        self.up = True
        self.blocked_since = None  # a new connection starts unblocked
        self._blocked_check = None
        self._last_ack = now
        self._timer_dirty = True
        return self._settled([])

    def link_lost(self, closed: BrokerClose | None = None) -> list[Action]:
        actions: list[Action] = []
        if self.up:
            self.up = False
            self._lose_window()
        if closed is not None:
            self._refused(closed, actions)
        return self._settled(actions)

    def acked(self, tag: int, multiple: bool, now: float) -> list[Action]:
        if not self.up:
            return []
        self._last_ack = now
        settled = cast("list[Held[P, W]]", self._window.acked(tag, multiple))
        self._held -= len(settled)
        actions: list[Action] = []
        confirmed = settled
        if self._returns:
            confirmed = []
            for entry in settled:
                if entry.returned is None:
                    confirmed.append(entry)
                    continue
                self._returns -= 1
                self._returned += 1
                self._fail(entry, MessageReturned(entry.message_id, entry.returned), actions)
        if confirmed:
            self._confirmed += len(confirmed)
            actions.append(Confirmed(held=confirmed))
            if self._timed:
                for entry in confirmed:
                    self._timed.pop(entry.seq, None)
                self._timer_dirty = True
        limit = self._limit
        if limit.allowed < limit.window:  # recovering from nacks: widen, end a pause
            limit.acked(len(settled))
            if self._resume_at is not None:
                self._resume_at = None
                self._timer_dirty = True
        return self._settled(actions)

    def nacked(self, tag: int, multiple: bool, now: float) -> list[Action]:
        if not self.up:
            return []
        refused = cast("list[Held[P, W]]", self._window.nacked(tag, multiple))
        actions: list[Action] = []
        if refused:
            self._nacked += len(refused)
            actions.append(Nacked(held=refused))
        for entry in refused:
            if entry.returned is not None:
                self._returns -= 1
                entry.returned = None  # a retry may be routed: the broker returns it again
            self._retry_nacked(entry, now, actions)
        if self.policy.throttle_on_nack:
            self._throttle(now, actions)
        stalled = now - self._last_ack
        if stalled <= self.policy.nack_stall_timeout:
            return self._settled(actions)
        self._last_ack = now
        self.up = False
        self._lose_window()
        self._settled(actions)
        actions.append(Recycle(why=f"only nacks for {stalled:.1f} s: replacing the channel"))
        return actions

    def returned(self, message_id: str, reason: str) -> list[Action]:
        if self.up and self._window.returned(message_id, reason):
            self._returns += 1
            return [Returned(message_id=message_id)]
        return []

    def blocked(self, now: float) -> list[Action]:
        self.blocked_since = now
        self._blocked_check = now + self.policy.blocked_timeout
        self._timer_dirty = True
        return self._settled([])

    def unblocked(self, now: float) -> list[Action]:
        self.blocked_since = None
        self._blocked_check = None
        self._timer_dirty = True
        return self._settled([])

    def tick(self, now: float) -> list[Action]:
        actions: list[Action] = []
        self._timer = None
        self._timer_dirty = True
        if self._resume_at is not None and self._resume_at <= now:
            self._resume_at = None
            self._limit.resume()
        due = self._parked_due
        while due and due[0][0] <= now:
            _, seq = heapq.heappop(due)
            entry = self._parked.pop(seq, None)
            if entry is not None:
                self._requeue(entry)
        if self._blocked_check is not None and self._blocked_check <= now:
            self._expire_blocked(now, actions)
        waits = self._timed_due
        while waits and waits[0][0] <= now:
            _, seq = heapq.heappop(waits)
            timed = self._timed.pop(seq, None)
            if timed is not None:
                self._fail(timed, ConfirmTimeout(
                    timed.message_id,
                    f"no confirm within {self.policy.confirm_timeout:g} s"), actions)
        if self._close_at is not None and self._close_at <= now:
            self._finish_close(actions)
        return self._settled(actions)

    def close(self, now: float, timeout: float) -> list[Action]:
        """Only the first close does anything (``lifecycle.close()``); one before ``start``
        just ends the client."""
        if not self.lifecycle.close():
            return []
        self._close_at = now + timeout
        self._timer_dirty = True
        return self._settled([])

    def give_up(self, error: SacError) -> list[Action]:
        actions: list[Action] = []
        phase = self.lifecycle.phase
        if phase is Phase.CLOSED or phase is Phase.FAILED:
            return actions
        self.lifecycle.fail(error)  # ignored while closing: the close ends it below
        self.up = False
        for entry in self._drop_all():
            self._fail(entry, error, actions)
        self._clear_timers()
        return self._settled(actions)

    # ------------------------------------------------------------------ decisions

    def _settled(self, actions: list[Action]) -> list[Action]:
        """After any event: send what may go, end a close that has nothing left to wait
        for, and ask for the next tick if that changed."""
        self._pump(actions)
        if self.lifecycle.phase is Phase.CLOSING and not self.outstanding:
            self._finish_close(actions)
        if self._timer_dirty:
            self._arm(actions)
        return actions

    def _pump(self, actions: list[Action]) -> None:
        if not self.up or self.blocked_since is not None:
            return
        backlog = self._backlog
        window = self._window
        count = min(self._limit.allowed - len(window), len(backlog))
        if count <= 0:
            return
        batch = [backlog.popleft() for _ in range(count)]
        sent = window.sent
        again = 0
        for entry in batch:
            if entry.sends:
                again += 1
            sent(entry)
        self._retransmitted += again
        self._published += count - again
        actions.append(Send(held=batch))

    def _lose_window(self) -> None:
        """The channel is gone: what it had unconfirmed goes back in first-publish order,
        and the next channel starts from one message in flight (``SendLimit.restart``)."""
        if self.policy.throttle_on_nack:
            self._limit.restart()
        lost = cast("list[Held[P, W]]", self._window.channel_lost())
        for entry in lost:
            entry.returned = None  # sent again, it is routed (or returned) anew
        self._returns = 0
        if lost:
            self._backlog = collections.deque(sorted([*lost, *self._backlog], key=_by_seq))

    def _refused(self, closed: BrokerClose, actions: list[Action]) -> None:
        """The broker closed the channel over a publish: the messages its reply names fail,
        out of the outbox, since each would close the next channel too (and a reconnect
        would look like a success each time: a storm). The rest go out again."""
        reply = f"the broker closed the channel: {closed.code} {closed.text}"
        exchange = refused_exchange(closed)
        if exchange is not None:
            self._drop_where(lambda held: held.handover.exchange == exchange, lambda held: (
                PublishError(held.message_id, f"the broker refused the publish: "
                                               f"{closed.code} {closed.text}")), actions)
            return
        sized = refused_size(closed)
        if sized is None:
            return
        _size, limit = sized
        if self.broker_max_size is None or limit < self.broker_max_size:
            self.broker_max_size = limit
        self._drop_where(lambda held: held.size > limit, lambda held: MessageTooLarge(
            held.message_id,
            f"{held.size} bytes is over the broker's maximum message size of {limit} bytes "
            f"({reply})"), actions)

    def _drop_where(
        self,
        doomed: Callable[[Held[P, W]], bool],
        error: Callable[[Held[P, W]], BaseException],
        actions: list[Action],
    ) -> None:
        """Every message held and not in flight (the backlog, the parked) for which
        ``doomed`` holds leaves the outbox; each caller not told yet hears ``error``."""
        keep: collections.deque[Held[P, W]] = collections.deque()
        for entry in self._backlog:
            if doomed(entry):
                self._fail(entry, error(entry), actions)
                self._timed.pop(entry.seq, None)
            else:
                keep.append(entry)
        self._keep(keep)
        for seq, entry in list(self._parked.items()):
            if doomed(entry):
                del self._parked[seq]  # its heap item is skipped when due
                self._held -= 1
                self._fail(entry, error(entry), actions)
                self._timed.pop(seq, None)

    def _retry_nacked(self, entry: Held[P, W], now: float, actions: list[Action]) -> None:
        if entry.first_nack is None:
            entry.first_nack = now
        policy = self.policy
        delay = policy.nack_backoff.delay(entry.nacks, now - entry.first_nack, self._rng)
        if delay is None:
            why = f"nacked by the broker {entry.nacks} times"
            self._fail(entry, MessageNacked(entry.message_id, why), actions)
            self._held -= 1
            return
        if policy.throttle_on_nack:
            # Back in its place at once: the throttle's pause between probes is the backoff,
            # and the probe is always the oldest message waiting, so order holds.
            self._requeue(entry)
            return
        self._parked[entry.seq] = entry
        heapq.heappush(self._parked_due, (now + delay, entry.seq))
        self._timer_dirty = True

    def _throttle(self, now: float, actions: list[Action]) -> None:
        """After a nack: fewer messages in flight (see ``sac.sdk._core.congestion``); when a
        lone probe was nacked, nothing more goes out until the pause it returns is over."""
        pause = self._limit.nacked(len(self._window))
        if pause is not None:
            self._resume_at = now + pause
            self._timer_dirty = True
            self._expire_refused(now, actions)

    def _expire_refused(self, now: float, actions: list[Action]) -> None:
        """A probe was nacked again: the queue refuses, and the messages waiting behind the
        probe would have been refused too had they been sent. Their nack budget runs from
        now (or from their own first nack), so that ``nack_backoff.max_elapsed`` bounds how
        long a refusing queue holds them, as it did when each was sent and nacked itself."""
        policy = self.policy.nack_backoff
        keep: collections.deque[Held[P, W]] = collections.deque()
        for entry in self._backlog:
            if entry.first_nack is None:
                entry.first_nack = now
            elapsed = now - entry.first_nack
            if policy.exhausted(max(entry.nacks, 1), elapsed):
                why = (f"the broker nacked every message for {elapsed:.1f} s "
                       f"(nacked {entry.nacks} times itself)")
                self._fail(entry, MessageNacked(entry.message_id, why), actions)
            else:
                keep.append(entry)
        if len(keep) != len(self._backlog):
            self._keep(keep)

    def _requeue(self, entry: Held[P, W]) -> None:
        """Back into the backlog in first-publish order."""
        backlog = self._backlog
        if not backlog or entry.seq < backlog[0].seq:
            backlog.appendleft(entry)
            return
        keys = [e.seq for e in backlog]
        backlog.insert(bisect.bisect(keys, entry.seq), entry)

    def _expire_blocked(self, now: float, actions: list[Action]) -> None:
        """Every publish waiting longer than ``blocked_timeout`` under ``connection.blocked``
        fails. One never sent leaves the outbox; one sent before stays tracked, since the
        broker may still take it once it unblocks (a retry is then a duplicate the
        consumer's dedup catches)."""
        since = self.blocked_since
        if since is None:
            self._blocked_check = None
            return
        limit = self.policy.blocked_timeout

        def expired(entry: Held[P, W]) -> bool:
            return now - max(entry.submitted, since) >= limit

        def tell(entry: Held[P, W], what: str) -> None:
            self._fail(entry, BlockedTimeout(
                entry.message_id,
                f"the broker blocked publishing (connection.blocked, a resource alarm) "
                f"for over {limit:g} s; {what}",
            ), actions)

        keep: collections.deque[Held[P, W]] = collections.deque()
        for entry in self._backlog:
            if not entry.sends and expired(entry):
                tell(entry, "it was not sent")
            else:
                keep.append(entry)
        self._keep(keep)
        pending = []
        for entry in self.entries():
            if entry.told:
                continue
            if expired(entry):
                tell(entry, "it was sent and may still reach the queue once unblocked")
            else:
                pending.append(max(entry.submitted, since))
        self._blocked_check = max((min(pending) if pending else now) + limit, now + _RECHECK)
        self._timer_dirty = True

    def _keep(self, backlog: collections.deque[Held[P, W]]) -> None:
        """The backlog becomes ``backlog``: what it leaves out has left the outbox."""
        self._held -= len(self._backlog) - len(backlog)
        self._backlog = backlog

    def _fail(self, entry: Held[P, W], error: BaseException, actions: list[Action]) -> None:
        if not entry.told:
            entry.told = True
            actions.append(Failed(held=entry, error=error))

    def _drop_all(self) -> list[Held[P, W]]:
        """Everything held, emptied out: window (first-publish order), backlog, parked."""
        dropped = self.entries()
        self._window.channel_lost()
        self._returns = self._held = 0
        self._backlog.clear()
        self._parked.clear()
        self._parked_due.clear()
        self._timed.clear()
        self._timed_due.clear()
        return dropped

    def _finish_close(self, actions: list[Action]) -> None:
        leftovers = self.outstanding_ids()
        error = Unconfirmed(leftovers)
        for entry in self._drop_all():
            self._fail(entry, error, actions)
        self.lifecycle.closed()
        self.up = False
        self._clear_timers()
        actions.append(Closed(unconfirmed=leftovers))

    def _clear_timers(self) -> None:
        self._resume_at = self._blocked_check = self._close_at = None
        self._timer_dirty = True

    def _arm(self, actions: list[Action]) -> None:
        self._timer_dirty = False
        timed, waits = self._timed, self._timed_due
        while waits and waits[0][1] not in timed:
            heapq.heappop(waits)  # confirmed in time: nothing to wake up for
        times = [t for t in (self._resume_at, self._blocked_check, self._close_at)
                 if t is not None]
        if self._parked_due:
            times.append(self._parked_due[0][0])
        if waits:
            times.append(waits[0][0])
        at = min(times) if times else None
        if at != self._timer:
            self._timer = at
            actions.append(SetTimer(at=at))


def _by_seq(item: InFlight[Any]) -> int:
    return item.seq


class Outcomes:
    """What a checker needs from the actions: the ids confirmed and the ids whose caller was
    told a failure (with the error), in the order they came. Fold every action list in.

    A message told ``BlockedTimeout`` or ``ConfirmTimeout`` after it was sent may still be
    confirmed later: it is then in both.
    """

    def __init__(self) -> None:
        self.confirmed: dict[str, int] = {}
        """message id -> how many times it was confirmed (more than once is a bug)."""
        self.failed: dict[str, BaseException] = {}
        self.sent: list[tuple[str, int]] = []
        """(message id, sends) of every ``Send``, in order: ``sends > 1`` carried the mark."""
        self.closed: list[str] | None = None

    def record(self, actions: Iterable[Action]) -> None:
        for action in actions:
            match action:
                case Send(held=held):
                    self.sent.extend((record.message_id, record.sends) for record in held)
                case Confirmed(held=held):
                    for record in held:
                        mid = record.message_id
                        self.confirmed[mid] = self.confirmed.get(mid, 0) + 1
                case Failed(held=record, error=error):
                    self.failed[record.message_id] = error
                case Closed(unconfirmed=unconfirmed):
                    self.closed = list(unconfirmed)
                case Nacked() | Returned() | SetTimer() | Recycle():
                    pass  # what the broker said, or the driver's business: no outcome
                case _:
                    assert_never(action)
