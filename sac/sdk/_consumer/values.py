"""The values a consumer's faces hand out: its counts, and the role callback's type."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from .._core.roles import Role

RoleCallback = Callable[[Role], None]


@attrs.frozen(kw_only=True)
class ConsumerStats:
    delivered: int
    acked: int
    rejected: int
    handler_errors: int
    reconnects: int
    resubscribes: int
    retried: int = 0
    """Handler runs made again for a message that failed (in place, unacked)."""
    parked: int = 0
    """Messages moved to the parking queue (or rejected into the dead-letter exchange)."""
