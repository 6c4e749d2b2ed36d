"""What happened in a run, in virtual time: the record two runs of one seed must share."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import attrs

from .clock import EventQueue


@attrs.frozen(kw_only=True)
class Entry:
    t: float
    kind: str
    fields: tuple[tuple[str, Any], ...]

    def get(self, name: str) -> Any:
        return dict(self.fields).get(name)

    def __str__(self) -> str:
        said = " ".join(f"{k}={v!r}" for k, v in self.fields)
        return f"{self.t:.6f} {self.kind} {said}".rstrip()


class Trace:
    def __init__(self, clock: EventQueue) -> None:
        self._clock = clock
        self.entries: list[Entry] = []

    def record(self, kind: str, **fields: Any) -> None:
        self.entries.append(Entry(t=self._clock.now, kind=kind, fields=tuple(fields.items())))

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def of(self, *kinds: str) -> list[Entry]:
        return [e for e in self.entries if e.kind in kinds]

    def lines(self) -> list[str]:
        return [str(e) for e in self.entries]

    def digest(self) -> str:
        """A fingerprint of the whole run: equal digests, equal runs."""
        return hashlib.sha256("\n".join(self.lines()).encode()).hexdigest()
