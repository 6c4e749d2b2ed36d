"""What exactly-once effects cost and what each lookup policy catches, in one run.

Cost: a consumer drains N messages from a quorum queue; its effect writes one row. The
baseline is the same consumer with a plain handler and no deduplication (the effect appends to
a list). Every store (memory, SQLite, PostgreSQL) runs under every policy (``always``, the
default; ``flagged``; ``never``), on both faces, in rounds (each round runs every variant once,
so drift hits them alike); medians are reported, with the ratio to the baseline of the same face.

Catches: the queue holds N fresh messages, N/10 copies marked as our publisher's
retransmissions (header ``x-sac-retransmit``, ``redelivered`` false) and N/10 unmarked copies
with the same ids (a foreign publisher's retransmission). For each store and policy: how many
copies a lookup skipped, how many the store refused at commit (effect rolled back), and how
many effects ran twice.

Needs the Debian packages rabbitmq-server and postgresql; boots a local cluster and a local
PostgreSQL and tears both down. Run ``python -m bench.dedup --help``; results go to
``bench/results/dedup-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pika

from sac.sdk import (
    RETRANSMIT_HEADER,
    AsyncConsumer,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    Publisher,
    PublisherSettings,
    QueueSettings,
)
from sac.sdk.dedup import (
    Inbox,
    LookupPolicy,
    MemoryStore,
    PostgresStore,
    SQLiteStore,
    Store,
    Transaction,
)
from sac.server import LocalCluster, LocalPostgres

STORES = ("memory", "sqlite", "postgres")
POLICIES = {"always": LookupPolicy.ALWAYS, "flagged": LookupPolicy.FLAGGED,
            "never": LookupPolicy.NEVER}
"""``always`` is the default."""
RESULTS = Path(__file__).parent / "results"


class Env:
    """The servers, and a fresh store of each kind per variant."""

    def __init__(self, cluster: LocalCluster, postgres: LocalPostgres, tmp: Path) -> None:
        self.cluster = cluster
        self.postgres = postgres
        self.tmp = tmp
        self.conn = ConnectionSettings(urls=cluster.urls(), name="bench-dedup")
        self._n = 0

    def store(self, kind: str) -> Store:
        self._n += 1
        if kind == "memory":
            return MemoryStore(max_records=10_000_000)
        if kind == "sqlite":
            return SQLiteStore(self.tmp / f"dedup-{self._n}.db")
        return PostgresStore(self.postgres.create_database(f"bench_{self._n}"))


def effect_for(store: Store | None, sink: list[str]) -> Callable[..., None]:
    """One row per message: through the transaction for SQL stores, a list otherwise."""
    if isinstance(store, SQLiteStore | PostgresStore):
        p = "%s" if isinstance(store, PostgresStore) else "?"
        sql = f"INSERT INTO effects (msg) VALUES ({p})"

        def write(delivery: Delivery, tx: Any) -> None:
            tx.execute(sql, (delivery.message_id,))
            sink.append(str(delivery.message_id))

        return write
    return lambda delivery, tx=None: sink.append(str(delivery.message_id))


def prepare_effects_table(store: Store) -> None:
    if isinstance(store, SQLiteStore | PostgresStore):
        store.open()
        with store.transaction("bench-setup", "bench-setup", 0) as tx:
            tx.execute("CREATE TABLE effects (msg TEXT)")
        store.close()


def fill(env: Env, queue: str, n: int, copies: bool) -> list[str]:
    """N messages through the SDK publisher; with ``copies``, N/10 marked and N/10 unmarked
    copies after them, through a raw channel."""
    settings = PublisherSettings(env.conn, queue=QueueSettings(queue))
    with Publisher(settings) as pub:
        ids = pub.publish_many([b"x" * 256] * n)
    if copies:
        with pika.BlockingConnection(pika.URLParameters(env.cluster.urls()[0])) as raw:
            channel = raw.channel()
            channel.confirm_delivery()
            for i, mid in enumerate(ids[: n // 5]):
                headers = {RETRANSMIT_HEADER: 1} if i % 2 == 0 else {}
                channel.basic_publish("", queue, b"x" * 256, pika.BasicProperties(
                    message_id=mid, delivery_mode=2, headers=headers))
    return ids


def consume(env: Env, face: str, queue: str, expected: int,
            handler: Any, timeout: float) -> tuple[float, Any]:
    """Drain ``expected`` deliveries; seconds from the first delivery to the last ack."""
    settings = ConsumerSettings(env.conn, QueueSettings(queue), prefetch=1000, ack_batch=100)
    first: list[float] = []

    def mark(d: Delivery) -> None:
        if not first:
            first.append(time.perf_counter())

    if isinstance(handler, Inbox):
        real = handler.effect

        def timed(d: Delivery, tx: Transaction) -> None:
            mark(d)
            real(d, tx)

        handler.effect = timed
        target: Any = handler
    else:
        def target(d: Delivery) -> None:
            mark(d)
            handler(d)

    deadline = time.monotonic() + timeout
    if face == "blocking":
        consumer = Consumer(settings, target)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            running = pool.submit(consumer.run)
            while consumer.stats.acked < expected:
                if running.done():
                    running.result()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{consumer.stats.acked} of {expected} acked")
                time.sleep(0.001)
            end = time.perf_counter()
            consumer.stop()
            running.result(60)
        return end - first[0], consumer.stats

    async def run() -> tuple[float, Any]:
        async def ahandle(d: Delivery) -> None:
            target(d)

        c = AsyncConsumer(settings, target if isinstance(target, Inbox) else ahandle)
        await c.start()
        try:
            while c.stats.acked < expected:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{c.stats.acked} of {expected} acked")
                await asyncio.sleep(0.001)
            end = time.perf_counter()
        finally:
            await c.stop()
        return end - first[0], c.stats

    return asyncio.run(run())


def delete_queue(env: Env, queue: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(env.cluster.urls()[0])) as raw:
        raw.channel().queue_delete(queue)
        raw.channel().queue_delete(f"{queue}.parked")


def run_cost(env: Env, face: str, store_kind: str | None, policy: str | None,
             n: int, timeout: float, round_: int) -> float:
    queue = f"bench-dedup-{face}-{store_kind}-{policy}-{round_}"
    sink: list[str] = []
    fill(env, queue, n, copies=False)
    try:
        if store_kind is None:
            seconds, _ = consume(env, face, queue, n, effect_for(None, sink), timeout)
        else:
            store = env.store(store_kind)
            prepare_effects_table(store)
            inbox = Inbox(store, effect_for(store, sink), policy=POLICIES[str(policy)])
            seconds, _ = consume(env, face, queue, n, inbox, timeout)
        if len(sink) != n:
            raise RuntimeError(f"{queue}: {len(sink)} effects for {n} messages")
    finally:
        delete_queue(env, queue)
    return n / seconds


def run_catches(env: Env, store_kind: str, policy: str, n: int,
                timeout: float) -> dict[str, int]:
    queue = f"bench-dedup-catch-{store_kind}-{policy}"
    sink: list[str] = []
    ids = fill(env, queue, n, copies=True)
    try:
        store = env.store(store_kind)
        prepare_effects_table(store)
        inbox = Inbox(store, effect_for(store, sink), policy=POLICIES[policy])
        consume(env, "blocking", queue, n + n // 5, inbox, timeout)
    finally:
        delete_queue(env, queue)
    return {
        "copies": n // 5,
        "lookups": inbox.stats.lookups,
        "skipped_by_lookup": inbox.stats.duplicates_looked_up,
        "effects_run": len(sink),
        "refused_at_commit": inbox.stats.duplicates_at_commit,
        "effects_kept_twice": kept_twice(store, sink, ids),
    }


def kept_twice(store: Store, sink: list[str], ids: list[str]) -> int:
    """Messages whose effect stayed twice: in the effects table for SQL stores (a refused
    commit rolled its effect back), in the sink for the memory store (nothing rolls back)."""
    if isinstance(store, SQLiteStore):
        import sqlite3

        db = sqlite3.connect(store.path)
        rows = db.execute("SELECT msg FROM effects").fetchall()
        db.close()
        effects = Counter(r[0] for r in rows)
    elif isinstance(store, PostgresStore):
        import psycopg

        with psycopg.connect(store.dsn) as pg:
            effects = Counter(r[0] for r in pg.execute("SELECT msg FROM effects").fetchall())
    else:
        effects = Counter(sink)
    return sum(1 for m in ids if effects[m] > 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dedup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--faces", default="blocking,asyncio")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    faces = args.faces.split(",")
    stores = args.stores.split(",")
    policies = args.policies.split(",")
    variants: list[tuple[str, str | None, str | None]] = []
    for face in faces:
        variants.append((face, None, None))
        variants += [(face, s, p) for s in stores for p in policies]
    rates: dict[str, list[float]] = {}
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(name="bench-dedup", nodes=args.nodes) as cluster, \
            LocalPostgres(name="bench-dedup-pg") as postgres:
        env = Env(cluster, postgres, Path(tmp))
        for round_ in range(args.repeat):
            for face, store, policy in variants:
                name = f"{face}/{store or 'none'}/{policy or '-'}"
                rate = run_cost(env, face, store, policy, args.messages, args.timeout, round_)
                rates.setdefault(name, []).append(rate)
                print(f"  {name:<28} round {round_ + 1}: {rate:8.0f} msg/s", file=sys.stderr,
                      flush=True)
        catches = {f"{s}/{p}": run_catches(env, s, p, args.messages, args.timeout)
                   for s in stores for p in policies}
    cost = {}
    for name, runs in rates.items():
        face = name.split("/")[0]
        base = statistics.median(rates[f"{face}/none/-"])
        cost[name] = {"runs": runs, "median_msg_per_s": statistics.median(runs),
                      "ratio_to_no_dedup": statistics.median(runs) / base}
    report = {"started": started.isoformat(), "messages": args.messages,
              "repeat": args.repeat, "nodes": args.nodes, "cost": cost, "catches": catches}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"dedup-{started:%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"{'variant':<28} {'msg/s':>9} {'vs none':>8}")
    for name, row in cost.items():
        print(f"{name:<28} {row['median_msg_per_s']:9.0f} {row['ratio_to_no_dedup']:8.2f}")
    print(f"\n{'store/policy':<20} " + " ".join(f"{k:>18}" for k in next(iter(catches.values()))))
    for name, caught in catches.items():
        print(f"{name:<20} " + " ".join(f"{v:>18}" for v in caught.values()))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
