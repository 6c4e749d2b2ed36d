"""A previous holder of a queue's epoch, in a process of its own, for the store tests of what
a successor's claim does to it.

Usage: python -m tests.dedup.holder_process KIND LOCATION QUEUE MESSAGE. It claims the
queue's epoch (so the store records it as the holder), opens a batch and writes MESSAGE's
record in it (holding the write lock on SQLite, the record's row lock on PostgreSQL), prints
``holding``, waits for a line on stdin, then commits and prints ``committed``, or ``failed``
and the error's class.

It stays a test helper, apart from the chaos suite's actors: it drives the store's own
interface (``claim_epoch``, ``batch``) with no broker and no consumer, to pin down what a
claim does to a holder at the store level; a workload actor is an SDK consumer or publisher.
"""

from __future__ import annotations

import sys

from sac.sdk.dedup import PostgresStore, SQLiteStore, Store


def open_store(kind: str, location: str) -> Store:
    if kind == "sqlite":
        return SQLiteStore(location)
    if kind == "postgres":
        return PostgresStore(location)
    raise ValueError(f"a store shared between processes is sqlite or postgres, not {kind!r}")


def main() -> None:
    kind, location, queue, message = sys.argv[1:5]
    store = open_store(kind, location)
    store.open()
    epoch = store.claim_epoch(queue)
    try:
        with store.batch(queue, epoch, "holder") as batch:
            with batch.message(message):
                pass
            print("holding", flush=True)
            sys.stdin.readline()
        print("committed", flush=True)
    except Exception as exc:  # noqa: BLE001 - what the test asserts on
        print(f"failed {type(exc).__name__}", flush=True)


if __name__ == "__main__":
    main()
