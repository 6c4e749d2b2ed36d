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
