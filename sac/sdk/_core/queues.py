"""Reading the broker's PRECONDITION_FAILED text into the argument that differs.

RabbitMQ says, for example::

    PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/':
    received the value 'quorum' of type 'longstr' but current is none

which we turn into ``("x-queue-type", "quorum", None)`` so that the error can name it.
"""

from __future__ import annotations

import re

import attrs

_INEQUIVALENT = re.compile(
    r"inequivalent arg '(?P<arg>[^']+)' for queue '(?P<queue>.*?)' in vhost '(?P<vhost>.*?)': "
    r"received (?:the value )?(?P<received>.+?)(?: of type '\w+')? but current is "
    r"(?:the value )?(?P<current>.+?)(?: of type '\w+')?$",
    re.DOTALL,
)


@attrs.frozen
class Inequivalent:
    argument: str
    queue: str
    received: str | None
    current: str | None


def _value(raw: str) -> str | None:
    raw = raw.strip()
    if raw == "none":
        return None
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1]
    return raw


def parse_inequivalent(reply_text: str) -> Inequivalent | None:
    """The mismatched argument named in a PRECONDITION_FAILED reply, or None."""
    match = _INEQUIVALENT.search(reply_text)
    if match is None:
        return None
    return Inequivalent(
        argument=match["arg"],
        queue=match["queue"],
        received=_value(match["received"]),
        current=_value(match["current"]),
    )


# ---------------------------------------------------------------------------- broker series

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@attrs.frozen(order=True)
class BrokerVersion:
    """The RabbitMQ version a connection reached (``connection.start``'s ``version``
    property): what the SDK adapts its arguments to where 4.0 differs from 3.x."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: object) -> BrokerVersion | None:
        """From the server property (``"4.0.5"``, as text or bytes); None when it names no
        version (another broker, a proxy that rewrites it)."""
        if isinstance(text, bytes):
            text = text.decode("ascii", errors="replace")
        match = _VERSION.match(text) if isinstance(text, str) else None
        if match is None:
            return None
        return cls(int(match[1]), int(match[2]), int(match[3] or 0))

    @property
    def mirrors_queues(self) -> bool:
        """Classic mirrored queues exist (3.x); 4.0 removed them, and with them any meaning of
        ``x-cancel-on-ha-failover`` (accepted there, and ignored)."""
        return self.major < 4

    @property
    def knows_unlimited_deliveries(self) -> bool:
        """``x-delivery-limit = -1`` means no limit (4.0 on). RabbitMQ 3.10 accepts -1 too but
        reads it as a limit below one delivery: a message returned once is dead-lettered
        (dropped without a target), as measured on 3.10.8; there no limit is no argument."""
        return self.major >= 4


UNLIMITED = -1
"""``QueueSettings.delivery_limit``: no delivery limit at all."""


def delivery_limit_argument(limit: int | None, broker: BrokerVersion | None) -> int | None:
    """The ``x-delivery-limit`` to declare for ``limit`` on ``broker``, or None to send none.

    ``UNLIMITED`` is ``-1`` where the broker knows it (4.0, whose quorum queues otherwise
    default to a limit of 20) and no argument on 3.x (no default limit there, and -1 would
    dead-letter at the first return). ``broker`` None: not known, taken as 4.0 or later."""
    if limit == UNLIMITED and broker is not None and not broker.knows_unlimited_deliveries:
        return None
    return limit


def consume_arguments(queue_type: str, broker: BrokerVersion | None,
                      priority: int | None) -> dict[str, object] | None:
    """The ``basic.consume`` arguments: ``x-priority`` when one is set, and
    ``x-cancel-on-ha-failover`` only where it means something (a classic queue on a 3.x
    broker, which may be mirrored: the consumer is then told when its master moves, instead
    of waiting on a master that is gone). ``broker`` None: not known, taken as 3.x, where
    the argument matters and any later broker ignores it."""
    arguments: dict[str, object] = {}
    if queue_type == "classic" and (broker is None or broker.mirrors_queues):
        arguments["x-cancel-on-ha-failover"] = True
    if priority is not None:
        arguments["x-priority"] = priority
    return arguments or None


# ---------------------------------------------------------------------------- queue types

_ONLY_TYPE = {
    "x-dead-letter-strategy": "quorum", "x-delivery-limit": "quorum",
    "x-quorum-initial-group-size": "quorum", "x-quorum-target-group-size": "quorum",
    "x-max-priority": "classic", "x-queue-mode": "classic", "x-queue-version": "classic",
    "x-max-age": "stream", "x-stream-max-segment-size-bytes": "stream",
}
"""Arguments only one queue type takes: a queue that has one is of that type."""


def type_hint(mismatch: Inequivalent, wanted_type: str) -> str | None:
    """What a mismatch says of the queue's type, when the broker named another argument.

    Why: RabbitMQ names the first argument that differs, and checks ``x-queue-type`` last,
    so asking for ``type="classic"`` on an existing quorum queue is reported as
    ``x-dead-letter-strategy``. The type is the difference a user needs to read; when the
    queue holds an argument only one type takes, that type is known; None otherwise."""
    if mismatch.argument == "x-queue-type":
        return None
    if mismatch.current is not None:
        current_type = _ONLY_TYPE.get(mismatch.argument)
        if current_type is not None and current_type != wanted_type:
            return (f"the queue is a {current_type} queue ({mismatch.argument} is an argument "
                    f"only {current_type} queues take) and the settings ask for "
                    f"type={wanted_type!r}")
    return None
