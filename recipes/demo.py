"""End-to-end demo: one queue, two consumers, exactly one of them works.

Boots a fresh local 3-node cluster, declares a quorum queue with single active consumer,
attaches two consumers on different nodes, publishes with publisher confirms from a third,
and shows that every message reached exactly one consumer, which the broker also reports as
the single active one. Tears everything down at the end, also on failure.

Until the SDK lands (issue 3) this speaks pika directly; it will then use ``sdk``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from server import LocalCluster

QUEUE_ARGS = {"x-queue-type": "quorum", "x-single-active-consumer": True}


class DemoConsumer(threading.Thread):
    """A consumer with its own connection; records the id of every message it receives."""

    def __init__(self, label: str, url: str, queue: str, progress: threading.Condition) -> None:
        super().__init__(name=label, daemon=True)
        self.label = label
        self.url = url
        self.queue = queue
        self.received: list[str] = []
        self.subscribed = threading.Event()
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.consumer_tag = f"{label}-{uuid.uuid4().hex[:8]}"
        self.progress = progress

    def run(self) -> None:
        try:
            params = pika.URLParameters(self.url)
            params.client_properties = {"connection_name": f"sac-demo-{self.label}"}
            with pika.BlockingConnection(params) as conn:
                channel = conn.channel()
                channel.basic_qos(prefetch_count=100)
                channel.queue_declare(self.queue, durable=True, arguments=QUEUE_ARGS)
                channel.basic_consume(
                    self.queue, self._on_message, consumer_tag=self.consumer_tag
                )
                self.subscribed.set()
                while not self.stopping.is_set():
                    conn.process_data_events(time_limit=0.1)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
            self.subscribed.set()

    def _on_message(
        self, channel: BlockingChannel, method: Any, props: pika.BasicProperties, body: bytes
    ) -> None:
        channel.basic_ack(method.delivery_tag)
        with self.progress:
            self.received.append(str(props.message_id))
            self.progress.notify_all()


def publish(url: str, queue: str, count: int) -> int:
    """Publish ``count`` persistent messages, each confirmed before the next; return confirmed."""
    confirmed = 0
    with pika.BlockingConnection(pika.URLParameters(url)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        for i in range(count):
            channel.basic_publish(
                "",
                queue,
                f"message {i}".encode(),
                pika.BasicProperties(delivery_mode=2, message_id=f"demo-{i:06d}"),
                mandatory=True,
            )
            confirmed += 1  # basic_publish raises on nack or return when confirms are on
    return confirmed


def wait_for_active_ctag(cluster: LocalCluster, queue: str, timeout: float = 15.0) -> Any:
    """The queue as the management API shows it, once it names the single active consumer.

    Consumer details appear only after the broker's statistics interval.
    """
    deadline = time.monotonic() + timeout
    while True:
        info = cluster.management_api(f"queues/%2F/{queue}")
        if info.get("single_active_consumer_ctag") or time.monotonic() > deadline:
            return info
        time.sleep(0.25)


def run_demo(messages: int = 1000, name: str = "demo", home: Path | None = None) -> int:
    queue = f"demo-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    print(f"starting a 3-node RabbitMQ cluster {name!r} ...", flush=True)
    with LocalCluster(name=name, nodes=3, home=home) as cluster:
        up_s = time.monotonic() - started
        print(f"cluster up in {up_s:.1f} s: {', '.join(cluster.display_urls())}")
        urls = cluster.urls()
        progress = threading.Condition()
        consumers = [DemoConsumer("consumer-a", urls[1], queue, progress),
                     DemoConsumer("consumer-b", urls[2], queue, progress)]
        for consumer in consumers:
            consumer.start()
            if not consumer.subscribed.wait(30) or consumer.error:
                raise RuntimeError(f"{consumer.label} could not subscribe: {consumer.error}")
        t0 = time.monotonic()
        confirmed = publish(urls[0], queue, messages)
        publish_s = time.monotonic() - t0
        with progress:
            progress.wait_for(lambda: sum(len(c.received) for c in consumers) >= messages, 60)
        info = wait_for_active_ctag(cluster, queue)
        for consumer in consumers:
            consumer.stopping.set()
            consumer.join(10)
        active_tag = info.get("single_active_consumer_ctag")
        print(f"queue {queue} (quorum, single active consumer)")
        print(f"published {messages}, confirmed {confirmed} in {publish_s:.2f} s")
        counts: Counter[str] = Counter()
        for consumer in consumers:
            role = "active " if consumer.consumer_tag == active_tag else "waiting"
            print(f"  {consumer.label} [{role}] on {consumer.url.split('@')[1].split('/')[0]}: "
                  f"received {len(consumer.received)}")
            counts.update(consumer.received)
        workers = [c.label for c in consumers if c.received]
        duplicates = sum(1 for n in counts.values() if n > 1)
        missing = messages - len(counts)
        ok = (len(workers) == 1 and duplicates == 0 and missing == 0 and confirmed == messages
              and any(c.consumer_tag == active_tag and c.received for c in consumers))
        print(f"active consumer: {', '.join(workers) or 'none'}; missing {missing}, "
              f"duplicated {duplicates}")
        print("RESULT: " + ("OK, exactly one consumer received every message once" if ok
                            else "FAILED"))
    print(f"cluster torn down; total {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(run_demo())
