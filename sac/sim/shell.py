"""The transport half of a simulated SDK client: what pika and ``sdk._recovery`` do for a real
one, in virtual time. One link at a time; a loss is noticed as the real client notices it (a
reset, an EOF, a ``connection.close``, or nothing heard for two heartbeat intervals). Which
node to connect to, how long to wait before a reconnect and between its attempts, and when to
give up are the SDK's own decisions (``sdk._core.reconnects``), not a copy of them.

A subclass (``sim.consumer``, ``sim.publisher``) says what it sets up on a new link, what a
frame means to its machine, and what a lost link leaves behind; it decides nothing else. The
consumer's also implements ``sdk._core.dispatch.ConsumerShell``, as the SDK's engine does, and
carries the machine's actions out through the same dispatcher.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from sac.sdk._core.attempts import Attempts
from sac.sdk._core.queues import BrokerVersion
from sac.sdk._core.reconnects import Reconnects
from sac.sdk._errors import ConnectError
from sac.sdk._settings import ConnectionSettings
from . import harness as h
from . import methods as m

MISSED_HEARTBEATS = 2
"""A link heard from for this many heartbeat intervals is dead (pika's checker)."""


def earliest(*times: float | None) -> float | None:
    """The earliest of the times that are set."""
    best = None
    for t in times:
        if t is not None and (best is None or t < best):
            best = t
    return best


class Shell:
    """Keeps one link up for an engine. Entry points (``start``, ``receive``, ``tick``)
    collect the actions of one call in ``out``."""

    def __init__(self, name: str, connection: ConnectionSettings, rng: random.Random) -> None:
        self.name = name
        self.connection = connection
        self.rng = rng
        self.heartbeat = float(connection.heartbeat)
        self.out: list[h.Action] = []
        self.link: str | None = None
        """The current link's name (``name#n``, one per connection made)."""
        self.up = False
        """Set up and working (``ready`` was called, no loss since)."""
        self.closing = False
        self.recover = True
        """Reconnect after a loss (a stopping client does not)."""
        self._reconnecting = Reconnects(connection.reconnect, self.heartbeat)
        self._plan: Attempts | None = None
        self._began = 0.0
        self._connect_at: float | None = None
        self._reopen_at: float | None = None
        """When a reconnect begins that waits after a link that died at once (``Flaps``)."""
        self._heard = 0.0
        self._links = 0
        self.broker: BrokerVersion | None = None
        """The version the last link's broker named (``connection.start``)."""
        self.losses: list[tuple[float, str, str]] = []
        """(time, link, why) of every loss of a working link."""

    @property
    def reconnects(self) -> int:
        """Working links lost and reconnected from."""
        return self._reconnecting.reconnects

    # ------------------------------------------------------------------ what subclasses say

    def setup(self, now: float) -> None:
        """The handshake is done on ``self.link``: send what sets the link up."""
        raise NotImplementedError

    def frame(self, now: float, channel: int, method: object) -> None:
        """A frame for the engine."""
        raise NotImplementedError

    def dropped(self, now: float, why: str) -> None:
        """The working link is gone: tell the engine."""
        raise NotImplementedError

    def failed(self, now: float, error: ConnectError) -> None:
        """The reconnect policy is spent."""
        raise NotImplementedError

    def closed(self, now: float) -> None:
        """The link closed at our request."""
        raise NotImplementedError

    def due(self) -> float | None:
        """When the engine wants ``work`` called."""
        return None

    def work(self, now: float) -> None:
        """The engine's time has come (timers, the worker)."""

    def busy(self) -> bool:
        """Whether the engine has something under way (else its ticks are housekeeping)."""
        return False

    # ------------------------------------------------------------------ helpers for them

    def send(self, channel: int, method: object) -> None:
        if self.link is not None:
            self.out.append(h.Send(link=self.link, channel=channel, method=method))

    def ready(self, now: float) -> None:
        """The link is set up: what the next loss reconnects from."""
        plan = self._plan
        if plan is not None:
            self._reconnecting.up(plan.index, now)
        self._plan = None
        self.up = True

    def open(self, now: float, *, retry: bool) -> None:
        nodes = [f"node{n}" for n in range(len(self.connection.urls))]
        self._plan = self._reconnecting.attempts(nodes, retry=retry)
        self._began = now
        self._connect(now)

    def close(self, now: float) -> None:
        """Close the link (``connection.close``), or at once when there is none."""
        self.closing = True
        self._connect_at = None
        self._reopen_at = None
        self._plan = None
        if self.link is not None and self.up:
            self.send(0, m.ConnectionClose())
            return
        if self.link is not None:  # still opening: just go
            self.out.append(h.Disconnect(link=self.link))
            self.link = None
        self.closed(now)

    def abandon(self, now: float, why: str) -> None:
        """Drop the link as lost although it works (the engine said so)."""
        if self.link is not None:
            self.out.append(h.Disconnect(link=self.link))
        self._lost(now, why)

    def crash(self) -> None:
        """The process dies: the socket closes, nothing more is done."""
        if self.link is not None:
            self.out.append(h.Disconnect(link=self.link))
        self.link = None
        self.up = False
        self._plan = None
        self._connect_at = None
        self._reopen_at = None

    # ------------------------------------------------------------------ the Client protocol

    def receive(self, now: float, event: h.Event) -> Sequence[h.Action]:
        self.out = []
        if getattr(event, "link", None) != self.link or self.link is None:
            return self.out  # an older link's last words
        self._heard = now
        if isinstance(event, h.ConnectionRefused):
            self.link = None
            self._attempt_failed(now, "connection refused")
        elif isinstance(event, h.ConnectionLost):
            self._lost(now, event.reason)
        elif isinstance(event, h.Received):
            method = event.method
            if isinstance(method, m.Heartbeat):
                pass
            elif isinstance(method, m.ConnectionOpenOk):
                self.broker = BrokerVersion.parse(method.version)
                self.setup(now)
            elif isinstance(method, m.ConnectionCloseOk):
                self.link = None
                self.up = False
                self.closed(now)
            elif isinstance(method, m.ConnectionClose):
                self.send(0, m.ConnectionCloseOk())
                self._lost(now, f"closed by the broker: {method.reply_text}")
            else:
                self.frame(now, event.channel, method)
        return self.out

    def tick(self, now: float) -> Sequence[h.Action]:
        self.out = []
        if self._reopen_at is not None and now >= self._reopen_at:
            self._reopen_at = None
            self.open(now, retry=True)
        elif self._connect_at is not None and now >= self._connect_at:
            self._connect_at = None
            self._connect(now)
        elif self.link is not None and now >= self._heard + MISSED_HEARTBEATS * self.heartbeat:
            self.abandon(now, "missed heartbeats")
        due = self.due()
        if due is not None and now >= due:
            self.work(now)
        return self.out

    def next_tick(self) -> float | None:
        check = None if self.link is None else self._heard + MISSED_HEARTBEATS * self.heartbeat
        return earliest(self._reopen_at, self._connect_at, self.due(), check)

    def idle(self) -> bool:
        """Only the heartbeat check is pending: not work (``World`` may go idle)."""
        return (self._connect_at is None and self._reopen_at is None and self._plan is None
                and not self.busy()
                and (self.link is None or self.up))

    # ------------------------------------------------------------------ the mechanism

    def _connect(self, now: float) -> None:
        plan = self._plan
        assert plan is not None
        self._heard = now  # the handshake gets as long as a silent link
        self._links += 1
        self.link = f"{self.name}#{self._links}"
        self.out.append(h.Connect(link=self.link, node=plan.index, heartbeat=self.heartbeat))

    def _attempt_failed(self, now: float, cause: str) -> None:
        plan = self._plan
        if plan is None:
            return
        delay = plan.failed(cause, now - self._began, self.rng.random)
        if delay is None:
            self._plan = None
            self.failed(now, ConnectError(plan.summary(now - self._began), plan.causes()))
        elif delay <= 0:
            self._connect(now)
        else:
            self._connect_at = now + delay

    def _lost(self, now: float, why: str) -> None:
        link, self.link = self.link, None
        if self.closing:
            self.up = False
            self.closed(now)
            return
        if self._plan is not None:  # still opening: one failed attempt
            self._attempt_failed(now, why)
            return
        if not self.up or link is None:
            return
        self.up = False
        self.losses.append((now, link, why))
        self.dropped(now, why)
        if self.closing or not self.recover:
            return
        step = self._reconnecting.lost(now, self.rng.random)
        if step.wait > 0:
            self._reopen_at = now + step.wait
        else:
            self.open(now, retry=True)
