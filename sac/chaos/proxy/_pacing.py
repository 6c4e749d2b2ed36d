"""How long to hold data and how to cut it, without I/O: the latency, bandwidth and slicer
toxics' arithmetic. ``random.Random`` is passed in so tests can fix the draw."""

from __future__ import annotations

import random

#: bandwidth sends at most this many seconds' worth of bytes at a time (Toxiproxy: 100 ms).
BANDWIDTH_TICK = 0.1


def latency_delay(latency_ms: int, jitter_ms: int, rng: random.Random) -> float:
    """Seconds to hold one chunk: latency ± a uniform jitter, never below zero."""
    jitter = rng.uniform(-jitter_ms, jitter_ms) if jitter_ms > 0 else 0.0
    return max(0.0, (latency_ms + jitter) / 1000.0)


def bandwidth_plan(nbytes: int, rate_kb_s: int) -> list[tuple[int, float]]:
    """``(piece size, seconds to wait before sending it)`` for ``nbytes`` at ``rate`` KB/s
    (1 KB = 1000 bytes). The waits add up to ``nbytes / rate``, so the last byte leaves no
    sooner than that; rate <= 0 is unlimited."""
    if nbytes <= 0:
        return []
    if rate_kb_s <= 0:
        return [(nbytes, 0.0)]
    per_second = rate_kb_s * 1000
    piece = max(1, int(per_second * BANDWIDTH_TICK))
    plan = []
    for start in range(0, nbytes, piece):
        size = min(piece, nbytes - start)
        plan.append((size, size / per_second))
    return plan


def slice_sizes(nbytes: int, average: int, variation: int, rng: random.Random) -> list[int]:
    """Sizes summing to ``nbytes``: each ``average`` ± up to ``variation``, at least 1.
    ``average <= 0`` leaves the chunk whole."""
    if nbytes <= 0:
        return []
    if average <= 0:
        return [nbytes]
    sizes = []
    left = nbytes
    while left > 0:
        size = average + (rng.randint(-variation, variation) if variation > 0 else 0)
        size = min(left, max(1, size))
        sizes.append(size)
        left -= size
    return sizes


def draws_toxic(toxicity: float, rng: random.Random) -> bool:
    """Whether a connection gets a toxic of this toxicity (drawn once per connection)."""
    return toxicity >= 1.0 or rng.random() < toxicity
