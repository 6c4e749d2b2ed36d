"""A consumer in a process of its own, for tests that freeze or kill it.

Usage: python -m tests.sdk.consumer_process FACE QUEUE OUT_FILE [--hold] [--no-signals]
    [--crash-on BODY] [--delivery-limit N]
(URLs in SAC_AMQP_URLS, heartbeat in SAC_HEARTBEAT). Prints its role changes on stdout, one
per line, and appends every handled message id to OUT_FILE.

``--hold``: the first handler prints ``handling <id>`` and does not return before a line
arrives on stdin, so a test can signal the process while a handler runs. ``--no-signals``:
the blocking face runs ``run(handle_signals=False)``. ``--crash-on BODY``: the process ends at
once (``os._exit(3)``, a crash) when it is handed a message with that body.
``--delivery-limit N``: the queue is declared with that delivery limit. When ``run()``
returns, the process prints ``returned`` and exits 0.
"""

from __future__ import annotations

import asyncio
import os
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
    options = sys.argv[4:]
    hold = "--hold" in options
    crash_on = options[options.index("--crash-on") + 1].encode() \
        if "--crash-on" in options else None
    limit = int(options[options.index("--delivery-limit") + 1]) \
        if "--delivery-limit" in options else None
    held: list[str] = []
    queue_settings = QueueSettings(queue) if limit is None else \
        QueueSettings(queue, delivery_limit=limit)
    settings = ConsumerSettings(ConnectionSettings.from_env(), queue_settings)
    sink = out.open("a", buffering=1)

    def announce(role: Role) -> None:
        print(role.value, flush=True)

    def handle(delivery: Delivery) -> None:
        if delivery.body == crash_on:
            os._exit(3)
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
