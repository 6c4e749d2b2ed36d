"""The ZooKeeper guard's decisions, without I/O: session states and election results in,
what the consumer must do out.

A guarded consumer subscribes to its queue only while it leads its group's election in
ZooKeeper, and the token it got when it won fences every commit it makes through its inbox
(the inbox adopts the token as the queue's epoch; a commit from an older epoch is refused).
The shell (``sac/sdk/guard.py``, kazoo) reports what happens; this machine says what follows.

Session states, as kazoo documents them (``KazooState``), and what they mean here
---------------------------------------------------------------------------------
``CONNECTED``
    the session is alive: a leader works.
``SUSPENDED``
    the connection is gone but the session may still be alive: "operate in a safe mode ...
    a client should not assume that locks are valid". This consumer may still lead, and may
    already have been replaced. So it starts no new work (``Pause``): deliveries already
    running finish (their commits are fenced by the token if a successor took over), new
    ones wait in hand. Acks of finished work still go out: the effects are durable.
``CONNECTED`` again (after ``SUSPENDED``, the session intact)
    still the leader with the same token: ``Resume``.
``LOST``
    the session expired or was closed: its ephemeral election node is gone, and a successor
    may lead already. ``Abandon``: give the channel up (which cancels the subscription; the
    broker requeues every unacked delivery, the in-flight ones too, none of them acked), and
    contend again once kazoo has a new session (``CONNECTED``).

Kazoo calls its state listeners on its connection thread and they must not block: the
shell only hands each state to the consumer's loop, where this machine runs.

The fencing token, and why it only grows
----------------------------------------
Contenders create ephemeral sequential nodes under the group's election node; the one with
the lowest sequence number leads (kazoo's ``Lock`` recipe). The token is the leader's node's
``czxid``: the ZooKeeper transaction id that created it. Zxids are assigned by the ensemble's
leader in one total order (the high 32 bits are the ZooKeeper leader's epoch, so they grow
across ZooKeeper elections too), and a sequential child's sequence number follows the same
creation order within its parent. When contender L wins, every node with a lower sequence
number is gone (that is what winning is), and every node created afterwards gets a larger
zxid. So the next winner's node was created after L's node: its czxid is larger. Unlike the
sequence number, the czxid also keeps growing when someone deletes and recreates the group's
nodes (a sequence counter would restart at zero and every later token would be refused), and
it sits far above the small numbers a store's own epoch counter hands out, so a queue can move
from unguarded to guarded consumers (not back, and never a mix: the store's counter would
then hand out numbers a later czxid could equal).
"""

from __future__ import annotations

import enum
import json
import random
from collections.abc import Callable, Sequence

import attrs

from .backoff import Backoff


class SessionState(enum.Enum):
    """kazoo's ``KazooState`` (same values), without importing kazoo."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


def fencing_token(czxid: int) -> int:
    """The token of an election node created by transaction ``czxid`` (see the module
    docstring for why it only grows)."""
    if isinstance(czxid, bool) or not isinstance(czxid, int) or czxid <= 0:
        raise ValueError(f"an election node's czxid is a positive integer, got {czxid!r}")
    return czxid


@attrs.frozen(kw_only=True)
class GroupPaths:
    """Where a group lives in ZooKeeper: contenders under ``election``, the current leader's
    record in ``leader``."""

    group: str

    @property
    def election(self) -> str:
        return f"{self.group}/election"

    @property
    def leader(self) -> str:
        return f"{self.group}/leader"


@attrs.frozen(kw_only=True)
class LeaderRecord:
    """What a leader writes into its group's ``leader`` node when it wins: its token and who
    it is. The next leader reads it before writing its own, so it knows whom it replaced
    (the seam for evicting a frozen predecessor's connection: a later step asks the
    management API to close ``connection`` when ``token`` is older than its own)."""

    token: int
    consumer: str | None = None
    """``ConsumerSettings.consumer_name``."""
    connection: str | None = None
    """The AMQP connection name the SDK gave the leader's connection."""
    host: str | None = None
    pid: int | None = None

    def encode(self) -> bytes:
        return json.dumps(attrs.asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> LeaderRecord | None:
        """The record in ``data``; None when there is none or it is not one of ours (an
        empty node, another program's data): a missing record never stops a leader."""
        if not data:
            return None
        try:
            raw = json.loads(data)
        except ValueError:
            return None
        if not isinstance(raw, dict):
            return None
        token = raw.get("token")
        if isinstance(token, bool) or not isinstance(token, int):
            return None
        texts = {k: raw.get(k) if isinstance(raw.get(k), str) else None
                 for k in ("consumer", "connection", "host")}
        pid = raw.get("pid")
        return cls(token=token, pid=pid if isinstance(pid, int) and not isinstance(pid, bool)
                   else None, **texts)


@attrs.frozen(kw_only=True)
class Leadership:
    """This consumer leads its group: the fencing token its commits carry, its election
    node, and the record of the leader before it (None for a group's first leader)."""

    token: int
    node: str
    previous: LeaderRecord | None = None


@attrs.frozen(kw_only=True)
class GuardStatus:
    """What a guarded consumer knows about its standing (``Consumer.guard``)."""

    session: SessionState
    leadership: Leadership | None
    """None while it contends (or after it stopped)."""
    paused: bool
    """No new work starts: the session is not connected."""


def lease_mismatch(asked_ms: int, negotiated_ms: int, hosts: str) -> str | None:
    """Why a negotiated session timeout is not the one asked for, or None. ZooKeeper clamps
    the timeout a client asks for to its bounds (``minSessionTimeout``, 2 x tickTime by
    default; ``maxSessionTimeout``, 20 x tickTime): a clamped lease would make takeover
    slower (or a leader's lease shorter) than configured, silently."""
    if negotiated_ms == asked_ms:
        return None
    bound = "below the server's minimum" if asked_ms < negotiated_ms else \
        "above the server's maximum"
    hint = ("lower the server's tickTime (minSessionTimeout is 2 x tickTime by default) or "
            "ask for more" if asked_ms < negotiated_ms else
            "raise the server's maxSessionTimeout or ask for less")
    return (f"GuardSettings.session_timeout={asked_ms / 1000:g} s is {bound}: ZooKeeper at "
            f"{hosts} granted {negotiated_ms / 1000:g} s; {hint}")


# ---------------------------------------------------------------------------------- actions

@attrs.frozen(kw_only=True)
class Contend:
    """Join the election (a new node) as attempt ``attempt``; report ``won``/``failed``."""

    attempt: int


@attrs.frozen(kw_only=True)
class ContendLater:
    """Contend as ``attempt`` when ``tick`` passes ``at`` (a failed attempt, with jitter)."""

    attempt: int
    at: float


@attrs.frozen(kw_only=True)
class Withdraw:
    """Give up attempt ``attempt``: cancel it if it still waits, delete its node if it won."""

    attempt: int


@attrs.frozen(kw_only=True)
class Lead:
    """Subscribe: this consumer leads with ``leadership.token``."""

    leadership: Leadership


@attrs.frozen(kw_only=True)
class Pause:
    """Start no new work; what runs finishes."""


@attrs.frozen(kw_only=True)
class Resume:
    """Start work again."""


@attrs.frozen(kw_only=True)
class Abandon:
    """Give the channel up (the subscription with it), acking nothing in hand."""

    why: str


@attrs.frozen(kw_only=True)
class GiveUp:
    """Joining the election kept failing while connected (``GuardSettings.retry`` spent):
    the consumer stops with ``error``."""

    error: Exception
    attempts: int


PAUSE = Pause()
RESUME = Resume()
GuardAction = Contend | ContendLater | Withdraw | Lead | Pause | Resume | Abandon | GiveUp


class Standing(enum.Enum):
    NEW = "new"
    CONTENDING = "contending"
    LEADING = "leading"
    STOPPED = "stopped"


class GuardMachine:
    """One guarded consumer's standing in its group. Events in, actions out; time passed in.

    Events: ``start``, ``session(state)``, ``won(attempt, leadership)``,
    ``failed(attempt, error)``, ``fenced`` (the store refused this leader's token: a newer
    leader exists), ``tick``, ``stop``.
    """

    def __init__(self, retry: Backoff, rng: Callable[[], float] = random.random) -> None:
        self._retry = retry
        self._rng = rng
        self.standing = Standing.NEW
        self.session = SessionState.CONNECTED
        """The shell starts the machine once its client holds a session."""
        self.attempt = 0
        self.leadership: Leadership | None = None
        self.paused = False
        self._rejoin = False
        """Contend again at the next ``CONNECTED`` (the session was lost meanwhile)."""
        self._failures = 0
        self._first_failure = 0.0
        self._due: float | None = None

    @property
    def leading(self) -> bool:
        return self.standing is Standing.LEADING

    @property
    def status(self) -> GuardStatus:
        return GuardStatus(session=self.session, leadership=self.leadership, paused=self.paused)

    @property
    def deadline(self) -> float | None:
        """When ``tick`` has something to do, if ever."""
        return self._due

    def start(self, now: float) -> Sequence[GuardAction]:
        if self.standing is not Standing.NEW:
            return ()
        self.standing = Standing.CONTENDING
        actions: list[GuardAction] = []
        if self.session is not SessionState.CONNECTED:  # it changed while the shell started
            self.paused = True
            actions.append(PAUSE)
        if self.session is SessionState.LOST:
            self._rejoin = True
        else:
            actions.append(self._contend())
        return actions

    def session_changed(self, state: SessionState, now: float) -> Sequence[GuardAction]:
        previous, self.session = self.session, state
        if state is previous or self.standing in (Standing.NEW, Standing.STOPPED):
            return ()
        actions: list[GuardAction] = []
        if state is SessionState.CONNECTED:
            if self.paused:
                self.paused = False
                actions.append(RESUME)
            if self._rejoin:
                self._rejoin = False
                actions.append(self._contend())
            return actions
        if not self.paused:
            self.paused = True
            actions.append(PAUSE)
        if state is SessionState.LOST:
            actions += self._step_down("the ZooKeeper session was lost (expired or closed): "
                                       "a successor may lead already")
            self._rejoin = True
        return actions

    def won(self, attempt: int, leadership: Leadership, now: float) -> Sequence[GuardAction]:
        if attempt != self.attempt or self.standing is not Standing.CONTENDING:
            return [Withdraw(attempt=attempt)]  # an attempt given up meanwhile: its node goes
        self.standing = Standing.LEADING
        self.leadership = leadership
        self._failures = 0
        return [Lead(leadership=leadership)]

    def failed(self, attempt: int, error: Exception, now: float) -> Sequence[GuardAction]:
        if attempt != self.attempt or self.standing is not Standing.CONTENDING:
            return ()
        if self.session is not SessionState.CONNECTED:
            self._rejoin = True  # the connection went: contend once it is back
            return ()
        self._failures += 1
        if self._failures == 1:
            self._first_failure = now
        delay = self._retry.delay(self._failures, now - self._first_failure, self._rng)
        if delay is None:
            self.standing = Standing.STOPPED
            return [GiveUp(error=error, attempts=self._failures)]
        self._due = now + delay
        return [ContendLater(attempt=self.attempt + 1, at=self._due)]

    def fenced(self, now: float) -> Sequence[GuardAction]:
        """A commit under this leader's token was refused: a newer token exists, so this
        consumer no longer leads, whatever its session says. Step down and contend again."""
        if self.standing is not Standing.LEADING:
            return ()
        actions = self._step_down("the store holds a newer token than this leader's")
        if self.session is SessionState.CONNECTED:
            actions.append(self._contend())
        else:
            self._rejoin = True
        return actions

    def tick(self, now: float) -> Sequence[GuardAction]:
        if self._due is None or now < self._due or self.standing is not Standing.CONTENDING:
            return ()
        self._due = None
        if self.session is not SessionState.CONNECTED:
            self._rejoin = True
            return ()
        return [self._contend()]

    def stop(self, now: float) -> Sequence[GuardAction]:
        standing, self.standing = self.standing, Standing.STOPPED
        self.leadership = None
        self._due = None
        if standing in (Standing.CONTENDING, Standing.LEADING):
            return [Withdraw(attempt=self.attempt)]
        return ()

    def _contend(self) -> Contend:
        self.attempt += 1
        self._due = None
        return Contend(attempt=self.attempt)

    def _step_down(self, why: str) -> list[GuardAction]:
        """Leading or not: give up the current attempt; a leader also abandons its work."""
        actions: list[GuardAction] = []
        if self.standing is Standing.LEADING:
            actions.append(Abandon(why=why))
        if self.standing in (Standing.CONTENDING, Standing.LEADING):
            actions.append(Withdraw(attempt=self.attempt))
        self.standing = Standing.CONTENDING
        self.leadership = None
        self._due = None
        return actions
