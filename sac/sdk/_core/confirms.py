"""The publisher's confirm window: what is in flight, what a confirm settles, what to resend.

Delivery tags count from 1 on each channel, so the window maps the current channel's tags to
messages; when the channel or connection is lost every unconfirmed message comes back, in the
order it was first published, to be retransmitted with the same id on the next channel.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

import attrs

M = TypeVar("M")


@attrs.define(eq=False, kw_only=True)
class InFlight(Generic[M]):
    """The window's record of one message between ``basic.publish`` and its confirm:
    mutable bookkeeping (sends, nacks, a return) beside ``message``, the driver's payload."""

    seq: int
    """Per-publisher publish order (also the history's ``seq``)."""
    message_id: str
    message: M
    sends: int = 0
    """How many times it went out; more than one means a retransmission."""
    nacks: int = 0
    returned: str | None = None
    """Set by ``basic.return``: why the broker could not route it."""


class ConfirmWindow(Generic[M]):
    """At most ``size`` messages unconfirmed on the current channel."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"window size must be >= 1, got {size}")
        self.size = size
        self._by_tag: dict[int, InFlight[M]] = {}
        self._by_id: dict[str, InFlight[M]] = {}
        self._next_tag = 1

    def __len__(self) -> int:
        return len(self._by_tag)

    def __iter__(self) -> Iterator[InFlight[M]]:
        return iter(self._by_tag.values())

    def has_room(self) -> bool:
        return len(self._by_tag) < self.size

    def sent(self, item: InFlight[M]) -> int:
        """Record that ``item`` was just published on the current channel; its tag."""
        tag = self._next_tag
        self._next_tag += 1
        item.sends += 1
        self._by_tag[tag] = item
        self._by_id[item.message_id] = item
        return tag

    def _settle(self, tag: int, multiple: bool) -> list[InFlight[M]]:
        if multiple:
            # Tags enter the dict in increasing order: stop at the first one past ``tag``
            # instead of scanning the whole window on every ack.
            tags = []
            for t in self._by_tag:
                if t > tag:
                    break
                tags.append(t)
        else:
            tags = [tag] if tag in self._by_tag else []
        settled = []
        for t in tags:
            item = self._by_tag.pop(t)
            self._by_id.pop(item.message_id, None)
            settled.append(item)
        return settled

    def acked(self, tag: int, multiple: bool) -> list[InFlight[M]]:
        """The messages a ``basic.ack`` confirms (check ``returned`` on each)."""
        return self._settle(tag, multiple)

    def nacked(self, tag: int, multiple: bool) -> list[InFlight[M]]:
        """The messages a ``basic.nack`` refuses; their ``nacks`` count goes up."""
        items = self._settle(tag, multiple)
        for item in items:
            item.nacks += 1
        return items

    def returned(self, message_id: str, reason: str) -> bool:
        """Mark a message ``basic.return`` sent back; its ack follows. False if unknown."""
        item = self._by_id.get(message_id)
        if item is None:
            return False
        item.returned = reason
        return True

    def channel_lost(self) -> list[InFlight[M]]:
        """Everything unconfirmed, in first-publish order; tags restart for the next channel."""
        items = sorted(self._by_tag.values(), key=lambda i: i.seq)
        self._by_tag.clear()
        self._by_id.clear()
        self._next_tag = 1
        return items
