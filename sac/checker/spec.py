"""The constants of ``sac/checker/SPEC.md`` that both engines share.

Both engines must produce the same JSON, so every name, list and edge that the verdict depends
on lives here once: the Python engine and the Spark engine import them instead of each
spelling them out (a typo in one copy would be a disagreement that no review catches).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any, Final

from sac.history import (
    ANOMALIES as ALL_ANOMALIES,
)
from sac.history import (
    KINDS,
    MESSAGE_ANOMALIES,
    MESSAGE_KINDS,
    Ack,
    Active,
    Commit,
    Confirm,
    ConnectionLost,
    Deliver,
    DuplicateSkipped,
    Evict,
    FaultStart,
    Nack,
    Publish,
    Reject,
    Retransmit,
    Return,
)

RUN_FILE: Final = "run.json"
EVENTS_DIR: Final = "events"
EVENTS_GLOB: Final = "*.jsonl"
EFFECTS_FILE: Final = "effects.jsonl"
HIDDEN_PREFIXES: Final = (".", "_")
"""Event files whose names start so are not read (Hadoop's and so Spark's listing rule)."""

EFFECTS_SOURCE_FILE: Final = "effects.jsonl"
"""``effects_source`` when the run has an ``effects.jsonl``."""
EFFECTS_SOURCE_EVENTS: Final = "events"
"""``effects_source`` when the effects are the ``commit`` events."""

MESSAGE_EVENT_TYPES: Final = MESSAGE_KINDS
"""Event types that carry (and require) a ``msg`` string."""
KNOWN_EVENT_TYPES: Final = frozenset(KINDS) - {Evict.KIND}
"""Any other type is counted in ``unknown_events`` and otherwise ignored: so is ``evict``, which
tells how a guarded consumer took over, not what happened to a message."""
UNORDERED_EVENTS: Final = (Retransmit.KIND, Nack.KIND, Return.KIND)
"""An id with one of these is not in the ``reordered`` check: its place in the queue is not
its publisher's order (sent again, refused, unroutable). So is an id with a ``reject`` whose
``requeue`` is not ``true``: parked (a replay brings it back later, under the same id)."""
CLIENT_CANCEL: Final = "client"
"""``by`` of a ``cancelled`` event the consumer asked for: a graceful hand-back (SPEC)."""
QUEUE_EVENTS: Final = (Publish.KIND, Active.KIND)
"""Events whose ``queue`` is read: a message's queue, and the queue a consumer claimed. A
history where none names a queue holds nothing to check (an input error)."""

ANOMALIES: Final = tuple(sorted(MESSAGE_ANOMALIES))
"""Names in the ``anomalies`` map, in the (sorted) order they are listed for an id."""

TOLERABLE: Final = tuple(ALL_ANOMALIES)
"""The anomalies ``run.json``'s ``tolerates`` may name; ``valid`` needs each at 0 otherwise."""

COUNT_KEYS: Final = (
    Publish.KIND,
    Retransmit.KIND,
    Confirm.KIND,
    Nack.KIND,
    Return.KIND,
    Deliver.KIND,
    "redelivered",
    DuplicateSkipped.KIND,
    Commit.KIND,
    "commit_rejected_stale",
    "commit_rejected_duplicate",
    Ack.KIND,
    Reject.KIND,
    ConnectionLost.KIND,
    FaultStart.KIND,
)
"""Keys of ``counts``. Most are event types; these are not:"""
REDELIVERED: Final = "redelivered"
"""``deliver`` events with ``redelivered`` true."""
COMMIT_REJECTED_WHY: Final = {
    "stale-epoch": "commit_rejected_stale",
    "duplicate": "commit_rejected_duplicate",
}
"""``commit_rejected`` events are counted by their ``why``; other reasons are not counted."""

DEFAULT_ACTIVITY_GAP_S: Final = 1.0
CONCURRENCY_GAP_S: Final = 0.0
UNKNOWN_QUEUE: Final = ""
"""The queue of an id without a publish event that names one."""

PERCENTILES: Final = (50, 95, 99)
HISTOGRAM_EDGES_MS: Final = (
    0,
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1000,
    2000,
    5000,
    10000,
    30000,
    60000,
)
"""Bin ``i`` holds ``edges[i] <= x < edges[i+1]``; the last bin ``x >= 60000``; below 0: bin 0."""

SUMMARY_TOTALS: Final = ("published", "confirmed", "effects", *ALL_ANOMALIES)
"""Keys of ``summary.json``'s ``totals``: sums of the counts of the same name."""


def nearest_rank(pct: int, n: int) -> int:
    """The 0-based index of the ``pct`` percentile in ``n`` sorted values (nearest rank).

    Integer arithmetic, so that both engines pick the same element for every ``n``
    (``ceil(pct * n / 100)`` in floats drifts for some ``n``).

    >>> nearest_rank(50, 2), nearest_rank(99, 100), nearest_rank(95, 1)
    (0, 98, 0)
    """
    if n <= 0:
        raise ValueError(f"no rank in {n} values")
    return (pct * n + 99) // 100 - 1


def histogram_bin(x_ms: float) -> int:
    """The latency histogram bin of ``x_ms`` (negative values count in bin 0)."""
    return max(bisect.bisect_right(HISTOGRAM_EDGES_MS, x_ms) - 1, 0)


def comparable(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """``verdict`` as both engines must produce it: without ``engine`` and without the
    malformed lines' ``error`` texts (which may differ). Compare with
    ``json.dumps(comparable(v), sort_keys=True)``."""
    same = {key: value for key, value in verdict.items() if key != "engine"}
    malformed = verdict.get("malformed")
    if isinstance(malformed, Mapping):
        same["malformed"] = {
            **malformed,
            "lines": [
                {key: value for key, value in line.items() if key != "error"}
                for line in malformed.get("lines", [])
            ],
        }
    return same
