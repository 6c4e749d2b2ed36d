"""Which ways a park can end in failure stop the consumer: pure.

A message that failed for good is copied to the parking queue and acked only once the copy
is confirmed. When the copy is not confirmed, the original must not be passed over while its
channel lives (a later multiple ack would cover it): the consumer halts with
``ParkingFailed``. When the consuming link itself went, nothing is lost: the broker has the
original back and delivers it again; that is no failure of the message.
"""

from __future__ import annotations

import enum


class ParkEnd(enum.Enum):
    """How a park that was not confirmed ended."""

    LINK_LOST = "link-lost"
    """The link the copy was sent on went (the consuming channel's, or the forwarder's)."""
    REFUSED = "refused"
    """The parking queue returned or nacked the copy past the nack retries."""
    TIMED_OUT = "timed-out"
    """No confirm within the park's timeout."""


def parking_failure(
    end: ParkEnd, *, consuming_link_up: bool, parking_queue: str | None, detail: str,
    timeout: float,
) -> str | None:
    """Why the park is fatal (the ``ParkingFailed`` reason), or None when it is not: the
    consuming link went, so the original is the broker's again. ``consuming_link_up``: the
    link the original came on is still the consumer's, and usable."""
    if end is ParkEnd.LINK_LOST:
        if not consuming_link_up:
            return None
        return f"the parking channel closed: {detail}"
    if end is ParkEnd.REFUSED:
        return f"parking queue {parking_queue!r} refused it: {detail}"
    return f"no confirm from the parking queue within {timeout:.0f} s"
