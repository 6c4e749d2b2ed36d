"""A consumer in a process of its own, for tests that freeze or kill it.

Usage: python -m tests.sdk.consumer_process FACE QUEUE OUT_FILE (URLs in SAC_AMQP_URLS,
heartbeat in SAC_HEARTBEAT). Prints its role changes on stdout, one per line, and appends
every handled message id to OUT_FILE.
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
    settings = ConsumerSettings(ConnectionSettings.from_env(), QueueSettings(queue))
    sink = out.open("a", buffering=1)

    def announce(role: Role) -> None:
        print(role.value, flush=True)

    def handle(delivery: Delivery) -> None:
        sink.write(f"{delivery.message_id}\n")

    if face == "blocking":
        Consumer(settings, handle, on_role_change=announce).run()
    else:

        async def ahandle(delivery: Delivery) -> None:
            handle(delivery)

        async def run() -> None:
            async with AsyncConsumer(settings, ahandle, on_role_change=announce) as consumer:
                await consumer.wait()

        asyncio.run(run())


if __name__ == "__main__":
    main()
