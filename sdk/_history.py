"""Recording what a publisher or consumer did, in the history format chaos runs use
(``docs/history.md``): one JSON object per line with ``ts``, ``actor`` and ``type``, the
event's fields after them. The events are the contract's (``sac.history``), which the checker
reads with the same definitions.

Publishers and consumers take ``recorder=None`` by default and test for it before building
an event, so an unrecorded client pays one comparison per step.

A message id is recorded under its canonical text (``_core.ids.id_key``), the same text the
dedup stores record: an id another client published with a NUL or in octets that are not
UTF-8 (pika hands those over as ``bytes``) is a message like any other, never an event that
cannot be written. The recorder does it, not the contract: the rule is the dedup stores', and
the contract imports nothing of the SDK.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, overload

from ..history import HistoryEvent, event_of, fields_of, to_line
from ._core.ids import id_key


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

    @overload
    def record(self, event: HistoryEvent, /) -> None: ...

    @overload
    def record(self, event: str, /, **fields: Any) -> None: ...

    def record(self, event: HistoryEvent | str, /, **fields: Any) -> None:
        """Writes ``event`` (``record(Deliver(msg=..., ...))``), stamped with the time and
        this recorder's actor.

        The older form ``record("deliver", msg=..., ...)`` builds the same event, so it is
        held to the same contract: a kind or a field ``sac.history`` does not define, or a
        required one missing, raises ``sac.history.UnknownEvent``."""
        if isinstance(event, str):
            msg = fields.get("msg")
            if isinstance(msg, str | bytes):
                fields["msg"] = id_key(msg)
            event = event_of(event, fields)
        else:
            if fields:
                raise TypeError(f"record({type(event).__name__}(...)) takes no fields of "
                                f"its own: {', '.join(fields)}")
            msg = getattr(event, "msg", None)
            if isinstance(msg, str) and (key := id_key(msg)) != msg:
                event = event_of(event.KIND, {**fields_of(event), "msg": key})
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
