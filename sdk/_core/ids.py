"""Time-ordered message ids (UUID version 7 layout).

Ids sort by creation time, which keeps dedup indexes append-mostly and makes a history
readable; a per-process counter keeps them strictly increasing within one millisecond.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable

_VERSION_AND_VARIANT = (0x7 << 76) | (0b10 << 62)
_MS_MASK = (1 << 48) - 1


class _ProcessRandom:
    """Fast random bits from a generator seeded by the OS, reseeded in a forked child so
    that two processes never draw the same sequence (ids need uniqueness, not secrecy)."""

    def __init__(self) -> None:
        self._rng = random.Random(os.urandom(16))
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._rng.seed(os.urandom(16))

    def __call__(self, bits: int) -> int:
        return self._rng.getrandbits(bits)


class MessageIds:
    """Generates strictly increasing UUIDv7 strings. Thread-safe."""

    def __init__(
        self,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        random_bits: Callable[[int], int] | None = None,
    ) -> None:
        self._clock_ms = clock_ms
        self._random_bits = random_bits if random_bits is not None else _ProcessRandom()
        self._lock = threading.Lock()
        self._last_ms = -1
        self._seq = 0

    def __call__(self) -> str:
        with self._lock:
            now = self._clock_ms()
            if now > self._last_ms:
                self._last_ms = now
                self._seq = self._random_bits(11)  # random start leaves room to count up
            else:
                self._seq += 1
                if self._seq >= 1 << 12:  # 4096 ids in one ms: borrow the next millisecond
                    self._last_ms += 1
                    self._seq = 0
            ms, seq = self._last_ms, self._seq
        value = ((ms & _MS_MASK) << 80) | (seq << 64) | _VERSION_AND_VARIANT
        h = f"{value | self._random_bits(62):032x}"  # the same text as str(uuid.UUID(...))
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


new_message_id = MessageIds()
