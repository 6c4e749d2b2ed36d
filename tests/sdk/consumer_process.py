"""A consumer in a process of its own, for tests that freeze or kill it.

Usage: python -m tests.sdk.consumer_process FACE QUEUE OUT_FILE [--hold] [--no-signals]
(URLs in SAC_AMQP_URLS, heartbeat in SAC_HEARTBEAT). Prints its role changes on stdout, one
per line, and appends every handled message id to OUT_FILE.

``--hold``: the first handler prints ``handling <id>`` and does not return before a line
arrives on stdin, so a test can signal the process while a handler runs. ``--no-signals``:
the blocking face runs ``run(handle_signals=False)``. When ``run()`` returns, the process
prints ``returned`` and exits 0.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from sdk import (
    AsyncConsumer,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    QueueSettings,
    Role,
)


def main() -> None:
    face, queue, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    hold = "--hold" in sys.argv[4:]
    held: list[str] = []
    settings = ConsumerSettings(ConnectionSettings.from_env(), QueueSettings(queue))
    sink = out.open("a", buffering=1)

    def announce(role: Role) -> None:
        print(role.value, flush=True)

    def handle(delivery: Delivery) -> None:
        if hold and not held:
            held.append(str(delivery.message_id))
            print(f"handling {delivery.message_id}", flush=True)
            sys.stdin.readline()
        sink.write(f"{delivery.message_id}\n")

    if face == "blocking":
        consumer = Consumer(settings, handle, on_role_change=announce)
        consumer.run(handle_signals="--no-signals" not in sys.argv[4:])
        print("returned", flush=True)
    else:

        async def ahandle(delivery: Delivery) -> None:
            handle(delivery)

        async def run() -> None:
            async with AsyncConsumer(settings, ahandle, on_role_change=announce) as consumer:
                await consumer.wait()

        asyncio.run(run())


if __name__ == "__main__":
    main()
