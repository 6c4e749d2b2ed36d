"""The nack storm: what a quorum queue's leader election costs a publisher in flight.

A quorum queue nacks the publishes it cannot take while it elects a new leader. A publisher
that refills every slot a nack frees at once (``throttle_on_nack=False``) sends new messages
into the election, which are nacked in turn, and every nacked message goes out again: a storm
of the order of one nack and one retransmission per message published. With the throttle (the
default) every nack halves how many messages may be in flight, down to one probe, and a
nacked probe is followed by the next only after a jittered pause; acks widen the window
again. This benchmark measures both, side by side.

Each run: a fresh quorum queue (single active consumer, as the SDK declares it); a blocking
``Publisher`` connected to node 1 sends ``--messages`` messages with ``publish_many`` (window
``--window``); once a quarter is confirmed, the queue's leader gets SIGKILL. Two placements
(``--placements``):

``publisher-node``
    node 1 leads the queue (the node a publisher declaring it is connected to, as in
    ``tests/sdk/test_publisher.py``): the kill also takes the publisher's connection, it
    reconnects to node 2 and sends its unconfirmed messages again into the election: where
    a storm shows most.
``other-node``
    node 2 leads the queue: the publisher's connection survives, the election shows only as
    whatever the queue nacks or confirms late.

``publish_many`` returns once every message is confirmed (or raises); then the queue is
drained from node 3 to count what it holds: duplicates are the price the consumer's dedup
pays. The killed node is started again and the queue deleted before the next run.

Rounds are outermost and alternate which variant goes first, so a slow spell on the machine
hits both alike; compare the variants within one run of this script. Results: a table on
stdout and ``bench/results/nack-storm-<UTC>.json``. Run ``python -m bench.nack_storm --help``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pika

from sac.sdk import ConnectionSettings, Publisher, PublisherSettings, QueueSettings, SacError
from sac.server import LocalCluster
from ._report import conditions, positive_int, save, sdk_revision

VARIANTS = {"throttle-off": False, "throttle-on": True}
PLACEMENTS = {"publisher-node": 1, "other-node": 2}
"""The node (1-based) that leads the queue and is killed; the publisher starts on node 1."""
BODY = b"x" * 256


@dataclass
class RunResult:
    placement: str
    variant: str
    round: int
    messages: int
    window: int
    leader_before: int | None = None
    confirmed_at_kill: int | None = None
    nacks: int = 0
    retransmissions: int = 0
    confirmed: int = 0
    reconnects: int = 0
    elapsed_s: float | None = None
    """From the first publish to the last confirm."""
    kill_to_done_s: float | None = None
    """From the SIGKILL to the last confirm: how long the election held the publisher up."""
    in_queue: int = 0
    duplicates: int = 0
    missing: int = 0
    """Confirmed but not in the queue: must always be 0."""
    errors: list[str] = field(default_factory=list)


def _queue_leader(cluster: LocalCluster, queue: str) -> int:
    return cluster.node(str(cluster.management().queue(queue).node)).index


def _declare_on(url: str, queue: QueueSettings) -> None:
    """Declare on the node that is to lead the queue (RabbitMQ 3.10 places a new quorum
    queue's leader on the node the declaring client is connected to)."""
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        connection.channel().queue_declare(queue.name, durable=True, arguments=queue.arguments())


def _drain(url: str, queue: str, timeout: float) -> list[str]:
    """Every message id the queue holds (acked away), duplicates included."""
    ids: list[str] = []
    deadline = time.monotonic() + timeout
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        expected = channel.queue_declare(queue, passive=True).method.message_count
        channel.basic_qos(prefetch_count=1000)
        for method, props, _body in channel.consume(queue, inactivity_timeout=1.0):
            if method is not None:
                ids.append(str(props.message_id))
                channel.basic_ack(method.delivery_tag)
            if len(ids) >= expected or time.monotonic() > deadline:
                break
        channel.cancel()
        channel.queue_delete(queue)
        channel.queue_delete(f"{queue}.parked")
    return ids


def run_once(
    cluster: LocalCluster, placement: str, variant: str, index: int, args: argparse.Namespace
) -> RunResult:
    result = RunResult(placement, variant, index, args.messages, args.window)
    leader = PLACEMENTS[placement]
    urls = cluster.urls()
    queue = QueueSettings(f"nack-storm-{variant}-{index}-{uuid.uuid4().hex[:8]}")
    _declare_on(urls[leader - 1], queue)
    result.leader_before = _queue_leader(cluster, queue.name)
    if result.leader_before != leader:
        result.errors.append(f"queue leader is node {result.leader_before}, not {leader}")
        _drain(urls[2], queue.name, args.timeout)
        return result
    conn = ConnectionSettings(urls=urls, heartbeat=5, name=f"nack-storm-{variant}-{index}")
    settings = PublisherSettings(
        conn, queue=queue, window=args.window, throttle_on_nack=VARIANTS[variant]
    )
    publisher = Publisher(settings).start()
    ids: list[str] = []
    killed_at = done_at = started = 0.0
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            job = pool.submit(publisher.publish_many, [BODY] * args.messages)
            quarter = args.messages // 4
            while publisher.stats.confirmed < quarter and not job.done():
                time.sleep(0.001)  # polling a counter; the kill's timing is what is measured
            result.confirmed_at_kill = publisher.stats.confirmed
            killed_at = time.monotonic()
            cluster.kill(leader)
            try:
                ids = job.result(timeout=args.timeout)
            except SacError as exc:
                result.errors.append(f"{type(exc).__name__}: {exc}")
            done_at = time.monotonic()
        publisher.close(timeout=10)
    except SacError as exc:
        result.errors.append(f"close: {type(exc).__name__}: {exc}")
    finally:
        stats = publisher.stats
        result.nacks = stats.nacked
        result.retransmissions = stats.retransmitted
        result.confirmed = stats.confirmed
        result.reconnects = stats.reconnects
    if result.confirmed_at_kill is not None and result.confirmed_at_kill >= args.messages:
        result.errors.append("publishing finished before the kill: raise --messages")
    result.elapsed_s = round(done_at - started, 3)
    result.kill_to_done_s = round(done_at - killed_at, 3)
    held = _drain(urls[2], queue.name, args.timeout)
    result.in_queue = len(held)
    result.duplicates = len(held) - len(set(held))
    result.missing = len(set(ids) - set(held))
    cluster.start(leader)
    cluster.wait_members(cluster.nodes, timeout=120)
    return result


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(f"{r.placement}/{r.variant}" for r in results):
        runs = [r for r in results if f"{r.placement}/{r.variant}" == key]
        good = [r for r in runs if not r.errors]
        summary[key] = {
            "runs": len(runs),
            "runs_ok": len(good),
            "nacks": [r.nacks for r in runs],
            "retransmissions": [r.retransmissions for r in runs],
            "confirmed": [r.confirmed for r in runs],
            "duplicates": [r.duplicates for r in runs],
            "missing": [r.missing for r in runs],
            "elapsed_s": [r.elapsed_s for r in runs],
            "kill_to_done_s": [r.kill_to_done_s for r in runs],
            "reconnects": [r.reconnects for r in runs],
            "median": {
                key: _median([float(getattr(r, key)) for r in good])
                for key in ("nacks", "retransmissions", "duplicates", "elapsed_s",
                            "kill_to_done_s")
            },
        }
    return summary


def table(summary: dict[str, dict[str, Any]]) -> str:
    def nums(values: list[Any]) -> str:
        return ",".join(str(v) for v in values)

    lines = [f"{'placement/variant':<28} {'nacks':<26} {'retransmissions':<26} {'dups':<22} "
             f"{'elapsed s':<36} {'confirmed'}"]
    for variant, s in summary.items():
        lines.append(
            f"{variant:<28} {nums(s['nacks']):<26} {nums(s['retransmissions']):<26} "
            f"{nums(s['duplicates']):<22} {nums(s['elapsed_s']):<36} {nums(s['confirmed'])}"
        )
        m = s["median"]
        lines.append(
            f"{'  median':<28} {m['nacks']!s:<26} {m['retransmissions']!s:<26} "
            f"{m['duplicates']!s:<22} {m['elapsed_s']!s:<36}"
        )
    return "\n".join(lines)


def _line(r: RunResult) -> str:
    errors = f", errors: {r.errors}" if r.errors else ""
    return (f"nacks {r.nacks}, retransmissions {r.retransmissions}, confirmed {r.confirmed}, "
            f"duplicates {r.duplicates}, missing {r.missing}, reconnects {r.reconnects}, "
            f"{r.elapsed_s} s{errors}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.nack_storm",
        description="Nacks and retransmissions when a quorum queue's leader is SIGKILLed "
        "mid-publish, with and without the publisher's nack throttle (local 3-node cluster).",
    )
    parser.add_argument("--messages", type=positive_int, default=3000)
    parser.add_argument("--window", type=positive_int, default=1000,
                        help="the publisher's window (default: the SDK's default)")
    parser.add_argument("--repeat", type=positive_int, default=3, help="runs per variant")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--placements", default=",".join(PLACEMENTS),
                        help=f"comma-separated, from {', '.join(PLACEMENTS)}")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds allowed for publishing and for draining, per run")
    parser.add_argument("--cluster-name", default="nack-storm", help="LocalCluster name")
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or not args.variants:
        parser.error(f"--variants: choose from {', '.join(VARIANTS)}")
    args.placements = [p.strip() for p in args.placements.split(",") if p.strip()]
    if not args.placements or set(args.placements) - set(PLACEMENTS):
        parser.error(f"--placements: choose from {', '.join(PLACEMENTS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    results: list[RunResult] = []
    print(f"booting a 3-node cluster {args.cluster_name!r} ...", file=sys.stderr, flush=True)
    with LocalCluster(name=args.cluster_name, nodes=3) as cluster:
        overview = cluster.management().overview()
        for index in range(args.repeat):
            order = args.variants if index % 2 == 0 else args.variants[::-1]
            for placement in args.placements:
                for variant in order:
                    r = run_once(cluster, placement, variant, index, args)
                    results.append(r)
                    print(f"  {placement}/{variant} run {index + 1}: {_line(r)}",
                          file=sys.stderr, flush=True)
    summary = summarize(results)
    report = {
        "benchmark": "nack storm: quorum queue leader SIGKILL mid-publish",
        "timestamp": started.isoformat(timespec="seconds"),
        "messages": args.messages,
        "window": args.window,
        "body_bytes": len(BODY),
        "repeat": args.repeat,
        "placements": {p: {"publisher": "node 1", "queue leader (killed)": f"node {n}",
                           "drain": "node 3"} for p, n in PLACEMENTS.items()
                       if p in args.placements},
        "kill": "SIGKILL of the leader once a quarter of the messages is confirmed",
        "variants": {k: {"throttle_on_nack": v} for k, v in VARIANTS.items()
                     if k in args.variants},
        "sdk": sdk_revision(),
        **conditions(overview, len(cluster.nodes), load_before),
        "summary": summary,
        "runs": [asdict(r) for r in results],
    }
    save("nack-storm", started, report, table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
