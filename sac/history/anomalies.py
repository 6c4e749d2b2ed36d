"""The anomalies the checker finds in a history, each named once with what it means: the
verdict's keys (``sac.checker.verdict``), what ``run.json``'s ``tolerates`` may name, what
``sac check`` prints and what a chaos run expects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

Anomaly = Literal["lost", "duplicated", "unexpected", "concurrent", "reordered", "malformed"]
MessageAnomaly = Literal["lost", "duplicated", "unexpected", "concurrent", "reordered"]

LOST: Final = "lost"
DUPLICATED: Final = "duplicated"
UNEXPECTED: Final = "unexpected"
CONCURRENT: Final = "concurrent"
REORDERED: Final = "reordered"
MALFORMED: Final = "malformed"

ANOMALIES: Final[Mapping[Anomaly, str]] = {
    LOST: "confirmed, and no effect",
    DUPLICATED: "more than one effect",
    UNEXPECTED: "an effect for an id never published",
    CONCURRENT: "effects of two actors processed at overlapping times on one single-active "
                "queue",
    REORDERED: "on an ordered queue, an effect committed against its publisher's order",
    MALFORMED: "a line of the history that is not a well-formed event",
}
"""Every anomaly with its one-line meaning, in the order a verdict is told."""

MESSAGE_ANOMALIES: Final[tuple[MessageAnomaly, ...]] = (
    LOST, DUPLICATED, UNEXPECTED, CONCURRENT, REORDERED)
"""The anomalies of messages (each names ids): all but ``malformed``, which names lines."""
