"""A previous holder of a queue's epoch, in a process of its own, for the store tests of what
a successor's claim does to it.

Usage: python -m tests.dedup.holder_process KIND LOCATION QUEUE MESSAGE. It claims the
queue's epoch (so the store records it as the holder), opens a batch and writes MESSAGE's
record in it (holding the write lock on SQLite, the record's row lock on PostgreSQL), prints
``holding``, waits for a line on stdin, then commits and prints ``committed``, or ``failed``
and the error's class.
"""

from __future__ import annotations

import sys

from tests.dedup.ledger import open_store


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
