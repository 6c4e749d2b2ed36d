"""A publisher process: ``python -m sac.chaos.actors.publisher``, its ``PublisherActor`` on stdin.

Publishes at a steady rate through the SDK's blocking ``Publisher`` (confirms, a window,
retransmission after a lost connection, nacks retried), recording its history. The pacing
is the workload's, not a wait for an event: a chaos run wants messages in flight while the
faults happen. Prints ``{"event": "done", "confirmed": n, "failed": {...}}`` and exits 0
once every message is settled; a message the SDK gave up on is counted by its error's type
and makes the exit status 1 (it is not lost: it was never confirmed).
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
import time
from collections import Counter
from pathlib import Path

from sac.sdk import (
    ConnectionSettings,
    HistoryRecorder,
    Publisher,
    PublisherSettings,
)
from . import PublisherActor, end_with_runner, say


def main(spec: PublisherActor) -> int:
    end_with_runner()
    events = Path(spec.run_dir) / "events" / f"{spec.actor}.jsonl"
    recorder = HistoryRecorder(events, spec.actor, flush_every=1)
    connection = ConnectionSettings(urls=spec.urls, heartbeat=spec.heartbeat,
                                    name=f"sac-chaos-{spec.actor}")
    settings = PublisherSettings(connection, window=spec.window,
                                 queue=spec.queue_settings())
    failed: Counter[str] = Counter()
    confirmed = 0
    interval = 1.0 / spec.rate
    with Publisher(settings, recorder=recorder) as publisher:
        say("started")
        futures: list[concurrent.futures.Future[str]] = []
        start = time.monotonic()
        for i in range(spec.messages):
            due = start + i * interval
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            body = json.dumps({"n": i, "t": time.time()}).encode()
            futures.append(publisher.send(body, message_id=f"{spec.actor}-{i + 1:06d}"))
        for future in futures:
            try:
                future.result()
                confirmed += 1
            except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
                failed[type(exc).__name__] += 1
    recorder.close()
    say("done", confirmed=confirmed, failed=dict(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(PublisherActor.from_stdin()))
