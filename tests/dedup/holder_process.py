"""A previous holder of a queue's epoch, in a process of its own, for the store tests of what
a successor's claim does to it.

Usage: python -m tests.dedup.holder_process KIND LOCATION QUEUE MESSAGE [ROUNDS [EPOCH]]. It
claims the queue's epoch, or adopts EPOCH as a guarded consumer does (so the store records
it as the holder), opens a batch and writes MESSAGE's
record in it (holding the write lock on SQLite, the record's row lock on PostgreSQL), prints
``holding``, waits for a line on stdin, then commits and prints ``committed``, or ``failed``
and the error's class; ROUNDS times (default 1), each with a new claim, MESSAGE-1, -2...
when more than one.

``python -m tests.dedup.holder_process claim LOCATION QUEUE BUSY_TIMEOUT`` is a successor
instead: it claims the queue's epoch in a SQLite store, logging what the claim decides about
the write lock's owner (``log LEVEL text``, the ``sac.dedup`` logger), then prints ``claimed
N`` or ``failed`` and the error's class.

It stays a test helper, apart from the chaos suite's actors: it drives the store's own
interface (``claim_epoch``, ``batch``) with no broker and no consumer, to pin down what a
claim does to a holder at the store level; a workload actor is an SDK consumer or publisher.
"""

from __future__ import annotations

import logging
import sys

from sac.sdk.dedup import PostgresStore, SQLiteStore, Store


def open_store(kind: str, location: str) -> Store:
    if kind == "sqlite":
        return SQLiteStore(location)
    if kind == "postgres":
        return PostgresStore(location)
    raise ValueError(f"a store shared between processes is sqlite or postgres, not {kind!r}")


def hold(kind: str, location: str, queue: str, message: str, rounds: int,
         adopt: int | None) -> None:
    store = open_store(kind, location)
    store.open()
    for round_ in range(1, rounds + 1):
        epoch = store.claim_epoch(queue) if adopt is None else store.adopt_epoch(queue, adopt)
        try:
            with store.batch(queue, epoch, "holder") as batch:
                with batch.message(message if rounds == 1 else f"{message}-{round_}"):
                    pass
                print("holding", flush=True)
                sys.stdin.readline()
            print("committed", flush=True)
        except Exception as exc:  # noqa: BLE001 - what the test asserts on
            print(f"failed {type(exc).__name__}", flush=True)


def claim(location: str, queue: str, busy_timeout: float) -> None:
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING,
                        format="log %(levelname)s %(message)s")
    logging.getLogger("sac.dedup").setLevel(logging.DEBUG)
    store = SQLiteStore(location, busy_timeout=busy_timeout)
    store.open()
    try:
        print(f"claimed {store.claim_epoch(queue)}", flush=True)
    except Exception as exc:  # noqa: BLE001 - what the test asserts on
        print(f"failed {type(exc).__name__}", flush=True)


def main() -> None:
    if sys.argv[1] == "claim":
        claim(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        kind, location, queue, message = sys.argv[1:5]
        rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 1
        hold(kind, location, queue, message, rounds,
             int(sys.argv[6]) if len(sys.argv) > 6 else None)


if __name__ == "__main__":
    main()
