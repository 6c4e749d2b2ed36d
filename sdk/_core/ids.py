"""Time-ordered message ids (UUID version 7 layout).

Ids sort by creation time, which keeps dedup indexes append-mostly and makes a history
readable; a per-process counter keeps them strictly increasing within one millisecond.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable


class MessageIds:
    """Generates strictly increasing UUIDv7 strings. Thread-safe."""

    def __init__(
        self,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        random_bits: Callable[[int], int] = lambda n: int.from_bytes(os.urandom(8)) >> (64 - n),
    ) -> None:
        self._clock_ms = clock_ms
        self._random_bits = random_bits
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
        value = (ms & ((1 << 48) - 1)) << 80
        value |= 0x7 << 76
        value |= seq << 64
        value |= 0b10 << 62
        value |= self._random_bits(62)
        return str(uuid.UUID(int=value))


new_message_id = MessageIds()
