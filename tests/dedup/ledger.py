"""The application side of the dedup tests: an effect that writes one row per handled message
through the inbox's transaction into the chaos suite's sink (``sac.chaos.actors.Sink``, the table
its consumer actors write), or into a list (memory store), read back as (message id, actor)
rows. Consumers in this process and consumer actors in their own write the same ledger."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from sac.chaos.actors import Sink
from sac.sdk import Delivery
from sac.sdk.dedup import PostgresStore, SQLiteStore, Store, Transaction

Before = Callable[[Delivery], None]


def sink_location(store: Store) -> str | None:
    """The ``Sink`` location of a SQL store's database (what ``ConsumerActor.sink`` takes);
    None for the memory store."""
    if isinstance(store, SQLiteStore):
        return f"sqlite:{store.path}"
    if isinstance(store, PostgresStore):
        return store.dsn
    return None


class Ledger:
    """Effects of every consumer of one test, read back as (message id, actor) rows."""

    def __init__(self, store: Store) -> None:
        self.store = store
        location = sink_location(store)
        self.sink = None if location is None else Sink(location)
        self._memory: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        if self.sink is not None:
            self.sink.create()  # on a connection of the test's own, beside the consumers'

    def effect(self, actor: str, before: Before | None = None
               ) -> Callable[[Delivery, Transaction], None]:
        def write(delivery: Delivery, tx: Transaction) -> None:
            if before is not None:
                before(delivery)
            msg = tx.message_id  # the id as the store records it (see dedup.id_key)
            if self.sink is None:
                tx.on_commit(lambda: self._append((msg, actor)))
            else:
                self.sink.write_in(tx, msg, actor)

        return write

    def _append(self, row: tuple[str, str]) -> None:
        with self._lock:
            self._memory.append(row)

    def rows(self) -> list[tuple[str, str]]:
        if self.sink is None:
            with self._lock:
                return list(self._memory)
        return [(str(row["msg"]), str(row["actor"])) for row in self.sink.rows()]

    def counts(self) -> Counter[str]:
        return Counter(m for m, _ in self.rows())
