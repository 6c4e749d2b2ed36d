"""A consumer with an inbox, in a process of its own, for tests that freeze or kill it.

Usage: python -m tests.dedup.inbox_process FACE QUEUE STORE_KIND STORE_LOCATION ACTOR
(URLs in SAC_AMQP_URLS, heartbeat in SAC_HEARTBEAT). Its effect writes ledger rows. It prints
``active`` when it becomes the active consumer, and, for the message named by
``SAC_TEST_PAUSE_ON``, ``paused <id>`` inside the effect and then waits for a line on stdin
before writing (once); for the message named by ``SAC_TEST_HOLD_AFTER_COMMIT``, ``committed <id>``
after the commit of its batch, before the ack, and then waits on stdin (the test kills it
there). ``SAC_TEST_PAUSE_AFTER_WRITE=<n>``: once, in the first batch of at least n messages,
after the n-th message's effect wrote (so the batch's transaction holds what the writes of
its first n messages locked), prints ``wrote <id> <ids of the earlier messages of the batch>``
and waits on stdin. Exits 3 when it was fenced (``StaleEpoch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator

from sdk import (
    AsyncConsumer,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    QueueSettings,
    Role,
    StaleEpoch,
)
from sdk.dedup import Inbox, Transaction
from sdk.dedup._store import Batch
from tests.dedup.ledger import Ledger, open_store


def main() -> None:
    face, queue, kind, location, actor = sys.argv[1:6]
    pause_on = os.environ.get("SAC_TEST_PAUSE_ON")
    hold_after = os.environ.get("SAC_TEST_HOLD_AFTER_COMMIT")
    pause_after = int(os.environ.get("SAC_TEST_PAUSE_AFTER_WRITE", "0"))
    settings = ConsumerSettings(ConnectionSettings.from_env(), QueueSettings(queue),
                                consumer_name=actor, prefetch=10)
    store = open_store(kind, location)
    ledger = Ledger(open_store(kind, location))

    paused: list[str] = []

    def before(delivery: Delivery) -> None:
        # Once: a batch tried again (its session was ended while paused) runs it again.
        if delivery.message_id == pause_on and pause_on not in paused:
            paused.append(pause_on)
            print(f"paused {delivery.message_id}", flush=True)
            sys.stdin.readline()

    current: list[Batch] = []
    real = store.batch

    @contextlib.contextmanager
    def watched(queue: str, epoch: int, consumer: str | None = None) -> Iterator[Batch]:
        with real(queue, epoch, consumer) as batch:
            current[:] = [batch]
            yield batch
        if hold_after and hold_after in batch.staged:  # committed, not yet acked
            print(f"committed {hold_after}", flush=True)
            sys.stdin.readline()

    store.batch = watched  # type: ignore[method-assign]
    write = ledger.effect(actor, before)
    wrote: list[str] = []

    def effect(delivery: Delivery, tx: Transaction) -> None:
        write(delivery, tx)
        earlier = current[0].staged
        if pause_after and not wrote and len(earlier) + 1 >= pause_after:
            wrote.append(str(delivery.message_id))
            print(f"wrote {delivery.message_id} {' '.join(earlier)}", flush=True)
            sys.stdin.readline()

    inbox = Inbox(store, effect)

    def announce(role: Role) -> None:
        print(role.value, flush=True)

    try:
        if face == "blocking":
            Consumer(settings, inbox, on_role_change=announce).run()
        else:

            async def run() -> None:
                async with AsyncConsumer(settings, inbox, on_role_change=announce) as consumer:
                    await consumer.wait()

            asyncio.run(run())
    except StaleEpoch as exc:
        print(f"fenced {exc.epoch} {exc.current}", flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
