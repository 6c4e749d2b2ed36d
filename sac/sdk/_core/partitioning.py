"""Which partition a key's messages go to: pure, and simple enough to write again in any
language (a publisher that is not ours must route a key exactly as ours does).

``partition_of(key, count)`` is Lamping and Veach's jump consistent hash ("A Fast, Minimal
Memory, Consistent Hash Algorithm", 2014) of the key's digest: the first 8 bytes of the
SHA-256 of the key's UTF-8 octets, read as a big-endian unsigned integer.

Why hash on the client rather than in the broker (RabbitMQ's consistent-hash exchange):

- the mapping is a function of the key and the count alone, the same after a broker restart
  or a binding re-made in another order, and the same on every broker version; a key that
  changed queue behind our back would break its order silently;
- jump hash spreads keys evenly (a consistent-hash ring with one point per queue does not),
  and a partition count grown from ``n`` to ``n + 1`` moves only the keys that now belong to
  the new partition, about ``1 / (n + 1)`` of them, which is what makes growing the count a
  procedure that can keep each key's order;
- it needs no plugin enabled on the broker, and a test or the checker can tell which
  partition any key belongs to.

The price: a publisher in another language carries these dozen lines (the docs give them,
with test vectors).
"""

from __future__ import annotations

import hashlib

_MASK = (1 << 64) - 1
_LCG = 2862933555777941757


def key_digest(key: str | bytes) -> int:
    """The 64-bit digest a key is placed by: SHA-256 of its UTF-8 octets (a ``str`` that is
    not valid Unicode, a lone surrogate, is refused), first 8 bytes, big-endian."""
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return int.from_bytes(hashlib.sha256(raw).digest()[:8], "big")


def jump(digest: int, count: int) -> int:
    """Jump consistent hash: the bucket in ``0 .. count - 1`` for a 64-bit ``digest``."""
    if count < 1:
        raise ValueError(f"a partition count must be at least 1, got {count}")
    if not 0 <= digest <= _MASK:
        raise ValueError("a digest is a 64-bit unsigned integer")
    bucket, candidate = -1, 0
    while candidate < count:
        bucket = candidate
        digest = (digest * _LCG + 1) & _MASK
        candidate = int((bucket + 1) * (float(1 << 31) / float((digest >> 33) + 1)))
    return bucket


def partition_of(key: str | bytes, count: int) -> int:
    """The partition, in ``0 .. count - 1``, that ``key``'s messages go to."""
    return jump(key_digest(key), count)
