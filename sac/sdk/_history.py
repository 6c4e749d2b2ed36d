"""Recording what a publisher or consumer did, in the history format chaos runs use
(``docs/history.md``): one JSON object per line with ``ts``, ``actor`` and ``type``, the
event's fields after them. The events are the contract's (``sac.history``), which the checker
reads with the same definitions.

Publishers and consumers take ``recorder=None`` by default and test for it before building
an event, so an unrecorded client pays one comparison per step.

A message id is recorded under its canonical text (``recorded_id``, ``_core.ids.id_key``),
the same text the dedup stores record: an id another client published with a NUL or in
octets that are not UTF-8 (pika hands those over as ``bytes``) is a message like any other,
never an event that cannot be written. The call site that builds the event turns the id into
that text, since only it knows whether it holds a raw id (the contract's ``msg`` is ``str``)
or one already canonical (the inbox's key): the mapping escapes an escaped id again, so it is
applied exactly once. The rule is the dedup stores', and the contract imports nothing of the
SDK.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Final, Self

from sac.history import EVENTS, HistoryEvent, to_line
from ._core.ids import id_key

_EVENT_TYPES: Final = frozenset(EVENTS)


def recorded_id(message_id: str | bytes | None) -> str | None:
    """The text a history records for a message id as a client holds it: its canonical text
    (``id_key``), ``None`` for a message without one."""
    return None if message_id is None else id_key(message_id)


def _octets(value: object) -> str:
    """JSON for the ``bytes`` a field may hold (an id pika could not decode, in a reason)."""
    if isinstance(value, bytes | bytearray):
        return id_key(bytes(value))
    raise TypeError(f"a history event cannot hold {type(value).__name__}")


class HistoryRecorder:
    """Appends events of one actor to a JSONL file. Thread-safe; flushed on ``close``."""

    def __init__(self, path: Path | str, actor: str, *, flush_every: int = 1000) -> None:
        self.path = Path(path)
        self.actor = actor
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()
        self._flush_every = flush_every
        self._unflushed = 0

    def record(self, event: HistoryEvent, /) -> None:
        """Writes ``event`` (``record(Deliver(msg=..., ...))``), stamped with the time and
        this recorder's actor. Its message id is already its canonical text
        (``recorded_id``): the recorder writes it as it is, since canonicalising twice would
        escape an escaped id again."""
        if type(event) not in _EVENT_TYPES:
            raise TypeError(f"record() takes a sac.history event such as Deliver(...), "
                            f"not {type(event).__name__}")
        line = json.dumps(to_line(event, ts=time.time(), actor=self.actor),
                          separators=(",", ":"), default=_octets) + "\n"
        with self._lock:
            if self._file is None:
                raise ValueError(f"history {self.path} is closed")
            self._file.write(line)
            self._unflushed += 1
            if self._unflushed >= self._flush_every:
                self._file.flush()
                self._unflushed = 0

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()
                self._unflushed = 0

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
