"""Message ids: the time-ordered ones our publishers make (UUID version 7 layout), and the
canonical text form under which any id a publisher sent is recorded (``id_key``).

Ids sort by creation time, which keeps dedup indexes append-mostly and makes a history
readable; a per-process counter keeps them strictly increasing within one millisecond.

Every published message gets one, so the text is built cheaply: the part that only changes
with the millisecond (``tttttttt-tttt-7``) is formatted once per millisecond, the counter's
three hex digits come from a table, and the 62 random bits from one ``getrandbits`` call.
"""

from __future__ import annotations

import os
import random
import threading
import time
import urllib.parse
from collections.abc import Callable

_MS_MASK = (1 << 48) - 1
_VARIANT = 1 << 63  # the top bits of the last 64 are "10": RFC 4122 variant
_SEQ_TEXT = [f"{seq:03x}-" for seq in range(1 << 12)]


class _ProcessRandom:
    """Fast random bits from a generator seeded by the OS, reseeded in a forked child so
    that two processes never draw the same sequence (ids need uniqueness, not secrecy)."""

    def __init__(self) -> None:
        self._rng = random.Random(os.urandom(16))
        # Bound once: reseeding changes the generator's state, not the generator.
        self.getrandbits = self._rng.getrandbits
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._rng.seed(os.urandom(16))

    def __call__(self, bits: int) -> int:
        return self._rng.getrandbits(bits)


def _clock_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageIds:
    """Generates strictly increasing UUIDv7 strings. Thread-safe."""

    def __init__(
        self,
        clock_ms: Callable[[], int] = _clock_ms,
        random_bits: Callable[[int], int] | None = None,
    ) -> None:
        self._clock_ms = clock_ms
        if random_bits is None:
            random_bits = _ProcessRandom().getrandbits
        self._random_bits = random_bits
        self._lock = threading.Lock()
        self._last_ms = -1
        self._seq = 0
        self._prefix = ""

    def _new_ms(self, ms: int) -> None:
        self._last_ms = ms
        ms &= _MS_MASK
        self._prefix = f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-7"

    def __call__(self) -> str:
        with self._lock:
            now = self._clock_ms()
            if now > self._last_ms:
                self._new_ms(now)
                self._seq = self._random_bits(11)  # random start leaves room to count up
            else:
                self._seq += 1
                if self._seq >= 1 << 12:  # 4096 ids in one ms: borrow the next millisecond
                    self._new_ms(self._last_ms + 1)
                    self._seq = 0
            prefix, seq = self._prefix, self._seq
        # The same text as str(uuid.UUID(...)): 8-4-4-4-12 lower-case hex digits.
        tail = (self._random_bits(62) | _VARIANT).to_bytes(8, "big").hex()
        return f"{prefix}{_SEQ_TEXT[seq]}{tail[:4]}-{tail[4:]}"

    def many(self, count: int) -> list[str]:
        """``count`` ids, the same as ``count`` calls in a row (increasing, after every id
        handed out before), for one lock and one clock reading."""
        runs: list[tuple[str, int, int]] = []  # (prefix, first counter, last counter + 1)
        if count <= 0:
            return []
        with self._lock:
            now = self._clock_ms()
            if now > self._last_ms:
                self._new_ms(now)
                seq = self._random_bits(11)
            else:
                seq = self._seq + 1
            while True:
                if seq >= 1 << 12:  # as in __call__: borrow the next millisecond
                    self._new_ms(self._last_ms + 1)
                    seq = 0
                take = min(count, (1 << 12) - seq)
                runs.append((self._prefix, seq, seq + take))
                count -= take
                seq += take
                if not count:
                    break
            self._seq = seq - 1
        bits = self._random_bits
        ids: list[str] = []
        for prefix, first, end in runs:
            for seq_text in _SEQ_TEXT[first:end]:
                tail = (bits(62) | _VARIANT).to_bytes(8, "big").hex()
                ids.append(f"{prefix}{seq_text}{tail[:4]}-{tail[4:]}")
        return ids


new_message_id = MessageIds()


ESCAPED_ID_PREFIX = "sac-id:"
"""Starts the canonical form of an id that is not recorded as it came (see ``id_key``)."""


def id_key(message_id: str | bytes) -> str:
    """The text under which a message id is recorded: in every dedup store and in histories.

    AMQP's ``message_id`` is a string of up to 255 octets, any octets: pika hands one that is
    not UTF-8 over as ``bytes``, and one with a NUL character as a ``str`` that PostgreSQL's
    ``text`` cannot hold. Such an id is still a message's id, so it is mapped, not refused:
    an id that is UTF-8 without NUL and does not start with ``ESCAPED_ID_PREFIX`` is its own
    key (records written before this form existed stay valid); any other is the prefix
    followed by its octets percent-encoded (every octet but ``A-Za-z0-9_.-~``). The mapping is
    one-to-one (two different ids never share a record, so one is never skipped as the
    other's duplicate), the same for a ``str`` and its UTF-8 octets (one id on the wire), and
    its result is printable ASCII when escaped (safe to log). ``str`` ids that no wire can
    carry (lone surrogates, e.g. from ``MessageIdFrom``) are escaped by their surrogate-passed
    octets.
    """
    if isinstance(message_id, str):
        if "\x00" not in message_id and not message_id.startswith(ESCAPED_ID_PREFIX):
            if message_id.isascii():  # every id our publisher writes: no encoding to check
                return message_id
            try:
                message_id.encode("utf-8")
            except UnicodeEncodeError:
                pass
            else:
                return message_id
        raw = message_id.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(message_id)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return id_key(text)
    return ESCAPED_ID_PREFIX + urllib.parse.quote_from_bytes(raw, safe="")
