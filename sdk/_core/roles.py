"""Is this consumer the single active one, or waiting?

The broker does not tell a consumer that it became active (RabbitMQ 3.10 sends no
notification), so a consumer counts as active from its first delivery on the current
subscription; the management API's ``single_active_consumer_ctag`` may confirm it earlier.
Any loss of the subscription (server cancel, connection lost) makes it a candidate again.
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
        """The broker named this consumer's tag as the active one."""
        return self.delivered()

    def lost(self) -> Change | None:
        """Subscription gone (cancel or connection loss): it will subscribe again."""
        return self.connecting()

    def stopping(self) -> Change | None:
        return self._to(Role.STOPPING)

    def stopped(self) -> Change | None:
        return self._to(Role.STOPPED)
