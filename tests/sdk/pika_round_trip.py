"""One real round trip through ``sac/sdk/_wire``, run by ``test_pika_versions.py`` in a process of
its own with one pika release first on the path.

``python -m tests.sdk.pika_round_trip VERSION URL QUEUE``: checks that the pika imported is
``VERSION`` and that the hook module imports; publishes a small and a multi-frame message with
our own frame encoding and waits for their confirms; consumes both through ``Link`` so that our
decoder (not pika's) hands them over; then drops the connection the way the heartbeat watchdog
does. Prints one JSON line of what it saw; exits non-zero with the reason on any failure.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pika
import pika.exceptions

from sac.sdk import ConnectionSettings, QueueSettings
from sac.sdk._transport import Link, LinkLost, open_link
from sac.sdk._wire import pika_hooks
from sac.sdk._wire.frames import encode_header, encode_id, encode_publish

STEP = 10.0  # seconds any one step may take
BODIES = {"small": b"hello", "large": bytes(range(256)) * 1200}  # 300 kB: several frames


async def round_trip(url: str, queue: str) -> dict[str, Any]:
    lost: list[LinkLost] = []

    def on_lost(_link: Link, reason: LinkLost) -> None:
        lost.append(reason)

    settings = ConnectionSettings(urls=url, name=f"pika-{pika.__version__}")
    link = await open_link(url, settings, "pika-versions", on_lost)
    channel = link.channel
    assert channel is not None
    assert link.frames is not None
    await link.declare_queue(QueueSettings(queue, parking_queue=None))

    confirmed: asyncio.Queue[Any] = asyncio.Queue()
    await link.rpc(lambda cb: channel.confirm_delivery(
        lambda frame: confirmed.put_nowait(frame.method), callback=cb), "confirm.select")
    method = encode_publish("", queue, True)
    for mid, body in BODIES.items():
        link.frames.write(method, encode_header(len(body), encode_id(mid)), body)
    confirms: dict[int, str] = {}  # delivery tag -> Ack or Nack; one may confirm several
    while len(confirms) < len(BODIES):
        answer = await asyncio.wait_for(confirmed.get(), STEP)
        tags = range(1, answer.delivery_tag + 1) if answer.multiple else [answer.delivery_tag]
        confirms.update({tag: type(answer).__name__ for tag in tags if tag not in confirms})

    ours: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
    by_pika: list[bytes] = []
    tag = "pika-versions"
    link.take_deliveries(tag, lambda *args: ours.put_nowait(args))
    await link.rpc(lambda cb: channel.basic_consume(
        queue, lambda _ch, _m, _p, body: by_pika.append(body), consumer_tag=tag, callback=cb),
        "basic.consume")
    delivered = [await asyncio.wait_for(ours.get(), STEP) for _ in BODIES]
    for args in delivered:
        channel.basic_ack(args[0])
    seen = {args[7]: args[9] for args in delivered}  # message id -> body

    link.conn.sac_drop(pika.exceptions.AMQPHeartbeatTimeout("dropped by the test"))
    await asyncio.wait_for(asyncio.shield(link.closed), STEP)
    return {
        "pika": pika.__version__,
        "hooks": len(pika_hooks.HOOKS),
        "confirms": [confirms[tag] for tag in sorted(confirms)],
        "decoded_by_us": sorted(seen),
        "bodies_equal": seen == BODIES,
        "redelivered": [args[1] for args in delivered],
        "decoded_by_pika": len(by_pika),
        "dropped": [reason.reason for reason in lost],
    }


def main(argv: list[str]) -> int:
    version, url, queue = argv
    if pika.__version__ != version:
        print(f"expected pika {version}, imported {pika.__version__} from {pika.__file__}")
        return 2
    print(json.dumps(asyncio.run(round_trip(url, queue))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
