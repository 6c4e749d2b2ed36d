"""End-to-end demo: one queue, two consumers, exactly one of them works.

Boots a fresh local 3-node cluster (RabbitMQ 4.0, the default), then, with the SDK only:

1. two consumers subscribe to a quorum queue with single active consumer, on different nodes;
2. a publisher on the third node publishes with confirms: every message reaches exactly one
   consumer, the active one, and the other stays waiting;
3. the active consumer stops gracefully; the publisher sends more; the waiting consumer takes
   over, and no message is lost or handled twice.

Tears everything down at the end, also on failure. It needs no cluster of its own: it starts
one, so it runs only where ``sac server up`` would (RabbitMQ installed, see the README).

    python recipes/demo.py                      # 1000 messages, a cluster named "demo"
    python recipes/demo.py --messages 200 --name demo2
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from sac.recipe_kit import BadInput, Parser, positive, run
from sac.sdk import (
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    Publisher,
    PublisherSettings,
    QueueSettings,
    Role,
)
from sac.server import LocalCluster, ServerError


class DemoConsumer:
    """A blocking SDK consumer running in a thread, counting what it handles."""

    def __init__(self, label: str, urls: list[str], queue: QueueSettings,
                 progress: threading.Condition) -> None:
        self.label = label
        self.node = urls[0].split("@")[1].split("/")[0]
        self.handled: list[str] = []
        self.progress = progress
        conn = ConnectionSettings(urls=urls, name=f"sac-demo-{label}")
        self.consumer = Consumer(ConsumerSettings(conn, queue), self.handle,
                                 on_role_change=self.announce)
        self.thread = threading.Thread(target=self.consumer.run, name=label, daemon=True)

    def announce(self, role: Role) -> None:
        if role in (Role.WAITING, Role.ACTIVE, Role.STOPPED):
            print(f"  {self.label} on {self.node}: {role.value}", flush=True)

    def handle(self, delivery: Delivery) -> None:
        with self.progress:
            self.handled.append(str(delivery.message_id))
            self.progress.notify_all()

    def start(self) -> None:
        self.consumer.start()
        self.thread.start()

    def stop(self) -> None:
        self.consumer.stop()
        self.thread.join(30)


def run_demo(messages: int = 1000, name: str = "demo", home: Path | None = None) -> int:
    started = time.monotonic()
    print(f"starting a 3-node RabbitMQ cluster {name!r} ...", flush=True)
    with LocalCluster(name=name, nodes=3, home=home) as cluster:
        broker = cluster.broker()
        print(f"cluster up in {time.monotonic() - started:.1f} s: {broker['product']} "
              f"{broker['version']} ({broker['metadata_store']}), "
              f"{', '.join(cluster.display_urls())}")
        urls = cluster.urls()
        queue = QueueSettings(f"demo-{uuid.uuid4().hex[:8]}")
        print(f"queue {queue.name}: quorum, single active consumer")
        progress = threading.Condition()
        consumers = [
            DemoConsumer("consumer-a", urls[1:] + urls[:1], queue, progress),
            DemoConsumer("consumer-b", urls[2:] + urls[:2], queue, progress),
        ]
        for consumer in consumers:
            consumer.start()

        def handled() -> int:
            return sum(len(c.handled) for c in consumers)

        pub_conn = ConnectionSettings(urls=urls, name="sac-demo-publisher")
        ok = True
        with Publisher(PublisherSettings(pub_conn, queue=queue)) as publisher:
            t0 = time.monotonic()
            ids = publisher.publish_many(f"message {i}".encode() for i in range(messages))
            print(f"published {messages}, confirmed {len(ids)} in "
                  f"{time.monotonic() - t0:.2f} s")
            with progress:
                progress.wait_for(lambda: handled() >= messages, 60)
            active = next((c for c in consumers if c.handled), None)
            for c in consumers:
                print(f"  {c.label}: {c.consumer.role.value}, handled {len(c.handled)}")
            ok = active is not None and len(active.handled) == messages

            if active is not None:
                print(f"graceful handover: stopping {active.label} ...")
                t1 = time.monotonic()
                active.stop()
                more = publisher.publish_many(f"after {i}".encode() for i in range(messages // 2))
                ids += more
                with progress:
                    progress.wait_for(lambda: handled() >= len(ids), 60)
                print(f"  handed over and drained in {time.monotonic() - t1:.2f} s")

        for consumer in consumers:
            consumer.stop()
        counts = Counter(i for c in consumers for i in c.handled)
        missing = len(set(ids) - set(counts))
        duplicated = sum(1 for n in counts.values() if n > 1)
        for c in consumers:
            print(f"  {c.label}: handled {len(c.handled)}")
        print(f"published {len(ids)}; missing {missing}; handled twice {duplicated}")
        ok = ok and missing == 0 and duplicated == 0
        print("RESULT: " + ("OK: one consumer at a time, nothing lost, nothing twice"
                            if ok else "FAILED"))
    print(f"cluster torn down; total {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(description="Boots a local 3-node RabbitMQ cluster, shows one queue with "
                    "two consumers of which exactly one works, hands over gracefully, and "
                    "tears the cluster down.",
                    epilog="exit status: 0 shown (nothing lost, nothing twice), 1 not, 2 bad "
                    "input (one line on stderr)")
    parser.add_argument("--messages", type=positive(int), default=1000,
                        help="messages to publish before the handover (default: 1000; half "
                        "as many after it)")
    parser.add_argument("--name", default="demo",
                        help="the cluster's name (default: demo); it must not be running")
    parser.add_argument("--home", type=Path, default=None, metavar="DIR",
                        help="the state directory root (default: $SAC_HOME or .sac)")
    args = parser.parse_args(argv)
    try:
        return run_demo(args.messages, args.name, args.home)
    except ServerError as exc:  # a cluster of that name already up, RabbitMQ missing...
        raise BadInput(str(exc)) from None


if __name__ == "__main__":
    raise SystemExit(run(main))
