"""What a parked message's headers say, read as untrusted input, and how much of a parking
queue a listing takes.

A parking queue holds what anyone could publish to it (and what a consumer copied from any
publisher), so each ``x-sac-parked-*`` header is read on its own: one present but not of its
type (a string for the time, a table for the reason, a number past the year 9999) has its
field named in ``invalid`` and read as absent, and the message is still listed with all
else it says. Nothing here raises on a header's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from .poison import (
    AT_HEADER,
    ATTEMPTS_HEADER,
    ERROR_HEADER,
    QUEUE_HEADER,
    REASON_HEADER,
    REPLAYED_HEADER,
    origin_of,
    reason_of,
    text,
)

LATEST_AT_MS: Final = 253_402_300_799_000
"""9999-12-31T23:59:59Z in Unix milliseconds: the last time a ``datetime`` can show."""

ORDER_WINDOW: Final = 1_000
"""A listing takes every message of a parking queue holding up to this many (shown or
not), so that all go back in their order; see ``to_take``."""


@attrs.frozen
class ParkedFields:
    reason: str
    error: str | None
    origin: str | None
    attempts: int | None
    parked_at_ms: int | None
    invalid: tuple[str, ...]
    """The fields above whose header is present but not of its type, in their order."""


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parked_fields(headers: Mapping[str, Any] | None) -> ParkedFields:
    """The fields of a parked message's ``headers``, each valid or None (and named in
    ``invalid`` when the header was there)."""
    headers = headers or {}
    invalid = [field for field, name in
               (("reason", REASON_HEADER), ("error", ERROR_HEADER), ("origin", QUEUE_HEADER))
               if name in headers and text(headers[name]) is None]
    attempts = _count(headers.get(ATTEMPTS_HEADER))
    if ATTEMPTS_HEADER in headers and (attempts is None or attempts < 0):
        invalid.append("attempts")
        attempts = None
    at = _count(headers.get(AT_HEADER))
    if AT_HEADER in headers and (at is None or not 0 <= at <= LATEST_AT_MS):
        invalid.append("parked_at")
        at = None
    reason = reason_of(headers)
    if "reason" in invalid:
        reason = f"unknown ({REASON_HEADER} is not text)"
    return ParkedFields(
        reason=reason,
        error=text(headers.get(ERROR_HEADER)),
        origin=origin_of(headers),
        attempts=attempts,
        parked_at_ms=at,
        invalid=tuple(invalid),
    )


def to_take(count: int, limit: int) -> int:
    """How many of a parking queue's ``count`` messages a listing of ``limit`` takes.

    RabbitMQ 3.10 has no way to read a quorum queue's message and leave it where it is: a
    listing takes each one (``basic.get``) and gives it back, and the broker puts what is
    given back at the end of the queue. Taken all, they go back in their order; taken
    only the first ``limit``, those move behind the rest. So a listing takes them all, up to
    ``ORDER_WINDOW`` or ``limit`` if that is more; past that it takes what it shows. One
    ``basic.get`` at a time: 10 000 took 24 to 31 s on the 3-node test cluster (two shared
    cores), so the window is a thousand, a few seconds."""
    return count if count <= max(limit, ORDER_WINDOW) else limit


MAX_REPLAYS: Final = 2**31 - 1
"""The most ``x-sac-replayed`` counts to: what AMQP's 32-bit integer holds."""


def next_replay(headers: Mapping[str, Any] | None) -> int:
    """The ``x-sac-replayed`` a replayed copy carries: one more than the parked message's.
    A value that is not a count of ours (not an integer, negative, or ``MAX_REPLAYS`` and
    more: one past 2**63 - 1 cannot be sent at all) starts again at 1: the replay must go
    out, and the header's presence is what makes an inbox look the message up."""
    value = _count((headers or {}).get(REPLAYED_HEADER))
    if value is None or not 0 <= value < MAX_REPLAYS:
        return 1
    return value + 1
