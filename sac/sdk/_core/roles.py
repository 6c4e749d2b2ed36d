"""Is this consumer the single active one, or waiting?

The broker does not tell a consumer that it became active (RabbitMQ 3.10 sends no
notification), so a consumer counts as active from its first delivery on the current
subscription. With a management URL, ``RoleWatch`` reads the API's answer (which consumer the
broker made active) into an earlier confirmation, on an empty queue too, and into the news
that the broker named another consumer while this one still thought itself active. Any loss
of the subscription (server cancel, connection lost) makes it a candidate again.
"""

from __future__ import annotations

import enum

import attrs


class Role(enum.Enum):
    STOPPED = "stopped"
    CONNECTING = "connecting"
    WAITING = "waiting"
    ACTIVE = "active"
    STOPPING = "stopping"


@attrs.frozen
class Change:
    old: Role
    new: Role


class RoleTracker:
    """The consumer's role; every method returns the change it caused, or None."""

    def __init__(self) -> None:
        self.role = Role.STOPPED
        self.subscriptions = 0
        """How many times it subscribed: each one is a new chance to become active."""

    def _to(self, new: Role) -> Change | None:
        if new is self.role:
            return None
        change = Change(self.role, new)
        self.role = new
        return change

    def connecting(self) -> Change | None:
        if self.role is Role.STOPPING:
            return None
        return self._to(Role.CONNECTING)

    def subscribed(self) -> Change | None:
        self.subscriptions += 1
        if self.role is Role.ACTIVE:
            return None  # its first delivery came in the same read as its consume-ok
        return self._to(Role.WAITING)

    def standing_by(self) -> Change | None:
        """Connected, not subscribed: a guarded consumer waits for its leadership."""
        if self.role is Role.STOPPING:
            return None
        return self._to(Role.WAITING)

    def delivered(self) -> Change | None:
        # CONNECTING too: with a backlog, the first deliveries arrive in the same read as
        # the consume-ok and are taken before the subscribe call returns.
        if self.role in (Role.WAITING, Role.CONNECTING):
            return self._to(Role.ACTIVE)
        return None

    def confirmed_active(self) -> Change | None:
        """The broker named this consumer's tag as the active one (while subscribed)."""
        return self._to(Role.ACTIVE) if self.role is Role.WAITING else None

    def demoted(self) -> Change | None:
        """The broker named another consumer as the active one while this one thought itself
        active: it waits again (its next delivery makes it active, a new activation)."""
        return self._to(Role.WAITING) if self.role is Role.ACTIVE else None

    def lost(self) -> Change | None:
        """Subscription gone (cancel or connection loss): it will subscribe again."""
        return self.connecting()

    def stopping(self) -> Change | None:
        return self._to(Role.STOPPING)

    def stopped(self) -> Change | None:
        return self._to(Role.STOPPED)


class Verdict(enum.Enum):
    """What an answer of the management API means for this consumer."""

    ACTIVE = "active"
    """The broker named this consumer: it is the active one (no delivery needed)."""
    LOST = "lost"
    """The broker named another consumer while this one thought itself active."""
    GONE = "gone"
    """The queue does not exist while this consumer is subscribed to it: the subscription is
    an orphan. (Seen here: a quorum queue deleted, and no ``basic.cancel`` reached its
    consumer, in 2 of 20 deletions on RabbitMQ 3.10.8; without a management URL such a
    consumer waits on nothing for good.)"""


MISSING_ANSWERS = 2
"""Answers in a row saying the queue does not exist before it counts as gone."""


@attrs.frozen
class Sighting:
    """One answer of the management API, and when its question was sent."""

    asked_at: float
    own_tag: str
    """This consumer's tag when the question was sent."""
    own_status: str | None
    """How the API lists that tag: ``single_active``, ``waiting``, or None (not listed)."""
    others_active: tuple[str, ...]
    """Other consumers the API lists as the active one."""
    by_queue_tag: bool = False
    """Several consumers' entries claimed the role and the queue's own field chose (it lags
    further: ``QUEUE_TAG_LAG``)."""


QUEUE_TAG_LAG = 5.0
"""Seconds the queue's own ``single_active_consumer_tag`` may lag behind the broker's change
beyond the statistics' age: a quorum queue refreshes it on its tick (RabbitMQ's
``quorum_tick_interval``, 5 s by default; measured here: 4-5 s after a switch)."""


class RoleWatch:
    """Reads the management API's answers into role changes, allowing for their age.

    What the API reports is up to ``lag`` seconds old (the broker's statistics interval:
    ``collect_statistics_interval`` and its management agent's finest sample step), and it
    may keep listing a consumer that is gone, so:

    - this consumer's own tag listed as the active one is proof whatever its age, as long as
      the tag is still this consumer's subscription (a tag is never reused): a waiting
      consumer becomes active;
    - the role is lost only when the API lists this consumer as not active and exactly one
      other as active, in an answer asked at least ``lag`` after this consumer became active
      (an older one may show the consumer it took over from), or ``lag + QUEUE_TAG_LAG``
      when the queue's own field had to choose between several entries claiming the role
      (RabbitMQ 4.0 keeps the entry of a consumer a higher priority one took over from);
    - an answer about a subscription that has ended since means nothing, and so does one
      that names nobody, or several others;
    - ``MISSING_ANSWERS`` answers in a row saying the queue does not exist, while subscribed
      with the same tag, mean the subscription is an orphan: the consumer must subscribe
      again (declaring the queue anew), as after a server cancel.
    """

    def __init__(self, lag: float) -> None:
        self.lag = lag
        self._active_since: float | None = None
        self._missing = 0

    def changed(self, role: Role, now: float) -> None:
        """The consumer's role changed at ``now`` (on the poll's clock)."""
        self._active_since = now if role is Role.ACTIVE else None

    def judge(self, seen: Sighting, role: Role, tag: str | None) -> Verdict | None:
        """What ``seen`` means for a consumer now in ``role`` and subscribed as ``tag``."""
        self._missing = 0
        if tag is None or seen.own_tag != tag:
            return None
        if seen.own_status == ACTIVE_STATUS:
            return Verdict.ACTIVE if role is Role.WAITING else None
        since = self._active_since
        age = self.lag + (QUEUE_TAG_LAG if seen.by_queue_tag else 0.0)
        if (role is Role.ACTIVE and seen.own_status is not None
                and len(seen.others_active) == 1
                and since is not None and seen.asked_at >= since + age):
            return Verdict.LOST
        return None

    def missing(self, own_tag: str, tag: str | None) -> Verdict | None:
        """The API answered a question asked as ``own_tag`` that the queue does not exist;
        the consumer is now subscribed as ``tag``."""
        if tag is None or own_tag != tag:
            self._missing = 0
            return None
        self._missing += 1
        if self._missing < MISSING_ANSWERS:
            return None
        self._missing = 0
        return Verdict.GONE


ACTIVE_STATUS = "single_active"
