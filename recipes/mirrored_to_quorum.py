"""From classic mirrored queues to quorum queues: what can move, what does not carry over, and
one queue migrated without losing a message.

Classic queue mirroring (``ha-mode`` policies) is deprecated; quorum queues replace it. A
queue cannot change its type in place, so a migration declares a quorum *twin* and moves
the messages there. The pattern, at the top: ``assess()`` says whether a mirrored queue can
become a quorum queue (not if exclusive, non-durable or auto-delete) and what does not carry
over (priorities, lazy mode, a global QoS on its consumers' channels, the ``ha-*`` keys,
overflow modes); ``migrate()`` moves one:

a. declares the twin ``<queue>-quorum`` as the SDK declares queues (quorum, single active
   consumer if the queue had it, a parking queue), with the arguments that carry over;
b. waits until the queue has no consumer: **consumers are switched by a graceful stop on the
   old queue and a start on the twin, never both at once** (a stopped SDK consumer acks its
   running message and gives the prefetched rest back), so nothing is handled twice and the
   order stays;
c. moves the messages in order, each confirmed in the twin before it is acked in the old
   queue (``sac.sdk.Mover``): never in neither;
d. switches the bindings (the twin bound first: a message published in between is a
   duplicate with one id, never lost) and moves what arrived meanwhile; publishers that
   publish *to the queue's name* must be pointed at the twin by you;
e. checks the counts, and deletes the old queue only if empty (``--delete-source``).

The tool around it reads a ``sac server up`` cluster (``--cluster``) or any broker (``--url``
and ``--management-url``, once per node) and reports every mirrored queue; ``--demo N`` makes
a mirrored queue of N messages with a consumer, migrates it, and proves by message ids that
each was handled once, before the switch or after it.

    sac server up --name dev --rabbitmq 3.10
    python recipes/mirrored_to_quorum.py --cluster dev --demo 1000
    python recipes/mirrored_to_quorum.py --cluster dev                  # the report only
    python recipes/mirrored_to_quorum.py --cluster dev --migrate orders --delete-source

Exit status: 0 the report (and the migration) done and proved, 1 a migration that could not
be proved, 2 bad input (one line: no such cluster, a broker that refuses the password or does
not answer, a queue that cannot be migrated, consumers that do not stop).
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

# The tool's harness (finding the broker, bad input in one line): sac.recipe_kit. The
# migration itself needs sac.sdk alone.
from sac.recipe_kit import (
    EXIT_STATUSES,
    NOT_PROVED,
    PROVED,
    BadInput,
    Parser,
    add_broker_arguments,
    find_broker,
    run,
)
from sac.sdk import (
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    Management,
    ManagementSettings,
    Mover,
    Publisher,
    PublisherSettings,
    QueueSettings,
    SacError,
)
from sac.sdk.management import ChannelInfo, QueueInfo

TWIN_SUFFIX = "-quorum"

# ---------------------------------------------------------------------------- decisions (pure)

CARRIED = ("x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes",
           "x-dead-letter-exchange", "x-dead-letter-routing-key")
"""Arguments a quorum queue takes as they are."""
LEADER_LOCATOR = {"client-local": "client-local", "min-masters": "balanced",
                  "random": "balanced"}
"""``x-queue-master-locator`` becomes ``x-queue-leader-locator``."""
HANDLED = frozenset({*CARRIED, "x-queue-type", "x-single-active-consumer", "x-max-priority",
                     "x-queue-mode", "x-queue-master-locator", "x-overflow"})


@attrs.frozen
class Assessment:
    """What one classic mirrored queue would become as a quorum queue."""

    queue: QueueInfo
    blockers: tuple[str, ...]
    """Why it cannot be a quorum queue at all."""
    not_carried: tuple[str, ...]
    """What it has that its quorum twin will not."""
    arguments: Mapping[str, Any]
    """The arguments its twin carries over (besides single active consumer)."""

    @property
    def can_migrate(self) -> bool:
        return not self.blockers


def mirrored(queue: QueueInfo) -> bool:
    """A classic queue an ``ha-mode`` policy mirrors."""
    return queue.type == "classic" and "ha-mode" in queue.effective_policy


def assess(queue: QueueInfo, global_qos: Sequence[str] = ()) -> Assessment:
    """``global_qos``: channels consuming from it with a global prefetch."""
    blockers = []
    if queue.exclusive:
        blockers.append("exclusive (a quorum queue cannot be; it lives as long as its connection)")
    if not queue.durable:
        blockers.append("non-durable (a quorum queue is always durable)")
    if queue.auto_delete:
        blockers.append("auto-delete (a quorum queue cannot be)")
    args = queue.arguments
    policy = queue.effective_policy
    lost = []
    if "x-max-priority" in args:
        lost.append(f"priorities (x-max-priority={args['x-max-priority']}): a quorum queue "
                    "delivers in publish order whatever a message's priority")
    mode = args.get("x-queue-mode") or policy.get("queue-mode")
    if mode == "lazy":
        lost.append("lazy mode: nothing to carry, a quorum queue keeps its messages on disk "
                    "and little in memory")
    if global_qos:
        lost.append(f"global QoS on {len(global_qos)} consuming channel(s) "
                    f"({', '.join(global_qos)}): a quorum queue closes such a channel "
                    "(540 NOT_IMPLEMENTED); use a per-consumer prefetch")
    ha_keys = sorted(k for k in policy if k.startswith("ha-"))
    lost.append(f"{', '.join(f'{k}={policy[k]}' for k in ha_keys)}: replication comes from "
                "the quorum queue's members (x-quorum-initial-group-size) instead")
    carried = {k: args[k] for k in CARRIED if k in args}
    overflow = args.get("x-overflow")
    if overflow is not None:
        lost.append(f"x-overflow={overflow}: the SDK's twin rejects publishes when full "
                    "(its at-least-once dead-lettering needs reject-publish)")
    locator = args.get("x-queue-master-locator")
    if isinstance(locator, str) and locator in LEADER_LOCATOR:
        carried["x-queue-leader-locator"] = LEADER_LOCATOR[locator]
    unknown = sorted(k for k in args if k not in HANDLED)
    if unknown:
        lost.append(f"arguments this recipe does not know: {', '.join(unknown)}")
    return Assessment(queue, tuple(blockers), tuple(lost), carried)


def global_qos_channels(queue: QueueInfo, channels: Sequence[ChannelInfo]) -> list[str]:
    """The channels consuming ``queue`` (from its consumer list) with a global prefetch."""
    names = {c.channel for c in queue.consumers if c.channel is not None}
    return sorted(c.name for c in channels if c.name in names and c.global_prefetch_count > 0)


def twin_settings(assessment: Assessment, name: str) -> QueueSettings:
    """The twin as the SDK declares queues: quorum, parking queue, at-least-once
    dead-lettering (into the old queue's dead-letter exchange if it had one)."""
    extra = {k: v for k, v in assessment.arguments.items()
             if k not in ("x-dead-letter-exchange", "x-dead-letter-routing-key")}
    exchange = assessment.arguments.get("x-dead-letter-exchange")
    return QueueSettings(
        name, type="quorum", single_active_consumer=assessment.queue.single_active,
        dead_letter_exchange=exchange if isinstance(exchange, str) else None,
        dead_letter_routing_key=assessment.arguments.get("x-dead-letter-routing-key"),
        extra_arguments=extra)


# ---------------------------------------------------------------------------- the migration


@attrs.frozen
class Migrated:
    source: str
    twin: str
    moved: int
    twin_holds: int
    source_left: int


def wait_without_consumers(broker: Reach, queue: str, timeout: float) -> None:
    """Until the API lists no consumer of ``queue`` (a stop takes effect in the API within
    its statistics interval)."""
    deadline = time.monotonic() + timeout
    while (count := broker.management.queue(queue, broker.vhost).consumer_count) > 0:
        if time.monotonic() > deadline:
            raise BadInput(f"{queue!r} still has {count} consumer(s) after {timeout:g} s: "
                           "stop them (gracefully) and run this again")
        time.sleep(broker.statistics_interval / 2)


def migrate(broker: Reach, assessment: Assessment, twin: str, *, wait: float,
            delete_source: bool) -> Migrated:
    api, conn, vhost = broker.management, broker.connection, broker.vhost
    source = assessment.queue.name
    settings = twin_settings(assessment, twin)
    print(f"migrating {source!r} to {twin!r}:")
    with Publisher(PublisherSettings(conn, queue=settings)):
        pass  # declaring it is all: the twin exists from here on
    print(f"  a. declared {twin!r}: quorum, single active consumer "
          f"{settings.single_active_consumer}, parking queue {settings.parking_queue!r}")
    print(f"  b. waiting until {source!r} has no consumer (stop them gracefully) ...")
    wait_without_consumers(broker, source, wait)
    first = Mover(conn).move(source, twin)
    print(f"  c. moved {first.moved} message(s), each confirmed in {twin!r} before it was "
          f"acked in {source!r}")
    bindings = [b for b in api.queue_bindings(source, vhost) if b.source]
    for binding in bindings:
        api.bind_queue(twin, binding.source, binding.routing_key, binding.arguments, vhost)
    for binding in bindings:
        api.unbind_queue(source, binding, vhost)
    again = Mover(conn).move(source, twin)
    print(f"  d. switched {len(bindings)} binding(s) to {twin!r}; moved {again.moved} more "
          "that arrived meanwhile")
    result = Migrated(source, twin, first.moved + again.moved, again.target_after,
                      again.source_after)
    print(f"  e. counts: {source!r} holds {result.source_left}, {twin!r} holds "
          f"{result.twin_holds} (moved {result.moved})")
    if delete_source and result.source_left == 0:
        api.delete_queue(source, vhost)  # refused by the broker if a message came meanwhile
        print(f"     deleted {source!r} (it was empty)")
    return result


# ============================================================================ the tool around it
# Reaching the broker, the report, and the demo that proves a migration: the machinery that
# runs the pattern above.


# ---------------------------------------------------------------------------- the broker


@attrs.frozen
class Reach:
    """The broker, through AMQP and its management API."""

    connection: ConnectionSettings
    management: Management
    statistics_interval: float
    vhost: str


def connect(args: argparse.Namespace) -> Reach:
    """The broker the command line names (``BadInput`` when there is none to use)."""
    if args.url and not args.management_url:
        raise BadInput("with --url, give the management API too: --management-url "
                       "http://user:password@host:15672 (once per node)")
    found = find_broker(args)
    if found.cluster is not None:
        interval = found.cluster.spec.statistics_interval_ms / 1000
        urls = found.cluster.management_urls()
    else:
        interval, urls = args.statistics_interval, args.management_url
    try:
        settings = ManagementSettings(urls, statistics_interval=interval)
    except SacError as exc:
        raise BadInput(f"--management-url: {exc}") from None
    return Reach(found.connection("sac-mirrored-to-quorum"), Management(settings), interval,
                 found.connection("-").vhost)


# ---------------------------------------------------------------------------- the report


def report(broker: Reach) -> dict[str, Assessment]:
    api = broker.management
    policies = [p for p in api.policies(broker.vhost) if "ha-mode" in p.definition]
    print(f"policies with ha-mode in vhost {broker.vhost!r}: "
          f"{', '.join(f'{p.name} ({p.pattern})' for p in policies) or 'none'}")
    channels = api.channels()
    found: dict[str, Assessment] = {}
    for listed in sorted(api.queues(broker.vhost), key=lambda q: q.name):
        if not mirrored(listed):
            continue
        queue = api.queue(listed.name, broker.vhost)  # with its consumers
        found[queue.name] = item = assess(queue, global_qos_channels(queue, channels))
        verdict = "can become a quorum queue" if item.can_migrate else "CANNOT become one"
        print(f"  {queue.name} (policy {queue.policy}, {queue.messages or 0} messages, "
              f"{queue.consumer_count} consumers): {verdict}")
        for blocker in item.blockers:
            print(f"      blocker: {blocker}")
        for lost in item.not_carried:
            print(f"      not carried over: {lost}")
        if item.can_migrate:
            carried = [f"{k}={v}" for k, v in item.arguments.items()]
            if queue.single_active:
                carried.insert(0, "single active consumer")
            print(f"      carried over: the messages, in order"
                  f"{''.join(', ' + c for c in carried)}")
    print(f"{len(found)} mirrored queue(s), {sum(a.can_migrate for a in found.values())} can "
          "become quorum queues")
    return found


# ---------------------------------------------------------------------------- the demo


class AppConsumer:
    """The application's consumer in the demo: an SDK consumer in a thread, recording ids."""

    def __init__(self, conn: ConnectionSettings, queue: QueueSettings, handled: list[str],
                 lock: threading.Condition) -> None:
        self.queue = queue.name
        self.handled = handled
        self.lock = lock
        self.consumer = Consumer(ConsumerSettings(attrs.evolve(conn, name="sac-demo-app"),
                                                  queue, prefetch=20), self.handle)
        self.thread = threading.Thread(target=self.consumer.run, kwargs={
            "handle_signals": False}, daemon=True)

    def handle(self, delivery: Delivery) -> None:
        time.sleep(0.002)  # some work
        with self.lock:
            self.handled.append(str(delivery.message_id))
            self.lock.notify_all()

    def start(self) -> AppConsumer:
        self.consumer.start()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.consumer.stop()
        self.thread.join(60)


def demo(broker: Reach, count: int, *, wait: float, keep: bool) -> bool:
    api, conn = broker.management, broker.connection
    prefix = f"mtq-demo-{uuid.uuid4().hex[:6]}"
    policy = f"{prefix}-ha"
    source = QueueSettings(f"{prefix}-orders", type="classic", parking_queue=None)
    others = [QueueSettings(f"{prefix}-priority", type="classic", parking_queue=None,
                            single_active_consumer=False,
                            extra_arguments={"x-max-priority": 5}),
              QueueSettings(f"{prefix}-lazy", type="classic", parking_queue=None,
                            single_active_consumer=False,
                            extra_arguments={"x-queue-mode": "lazy"})]
    print(f"demo: policy {policy!r} mirrors ^{prefix}- (ha-mode all); {source.name!r} gets "
          f"{count} messages and a consumer; two more queues show what does not carry over")
    api.put_policy(policy, f"^{prefix}-", {"ha-mode": "all", "ha-sync-mode": "automatic"},
                   vhost=broker.vhost)
    lock = threading.Condition()
    before: list[str] = []
    after: list[str] = []
    try:
        for other in others:
            with Publisher(PublisherSettings(conn, queue=other)) as publisher:
                publisher.publish(b"kept as it is")
        with Publisher(PublisherSettings(conn, queue=source)) as publisher:
            published = publisher.publish_many(f"order {i}".encode() for i in range(count))
        app = AppConsumer(conn, source, before, lock).start()
        with lock:
            lock.wait_for(lambda: len(before) >= count // 3, 60)
        app.stop()  # graceful: its running message acked, the prefetched rest back in the queue
        print(f"the consumer on {source.name!r} handled {len(before)} message(s), then was "
              "stopped gracefully")
        wait_for_policy(broker, [source.name, *(o.name for o in others)], policy)
        found = report(broker)
        twin = f"{source.name}{TWIN_SUFFIX}"
        result = migrate(broker, found[source.name], twin, wait=wait, delete_source=True)
        twin_queue = twin_settings(found[source.name], twin)
        app = AppConsumer(conn, twin_queue, after, lock).start()
        with Publisher(PublisherSettings(conn, queue=twin_queue)) as publisher:
            more = publisher.publish_many(f"order {count + i}".encode()
                                          for i in range(count // 10))
        print(f"the consumer started on {twin!r}; {len(more)} more message(s) published to it")
        with lock:
            lock.wait_for(lambda: len(before) + len(after) >= count + len(more), 120)
        app.stop()
        sent = [*published, *more]
        seen = Counter([*before, *after])
        missing = len(set(sent) - set(seen))
        twice = sum(1 for n in seen.values() if n > 1)
        proved = (missing == 0 and twice == 0 and result.source_left == 0
                  and result.moved == count - len(before) and result.twin_holds == result.moved)
        print(f"published {len(sent)}: handled {len(before)} on {source.name!r} before the "
              f"switch, {len(after)} on {twin!r} after it ({result.moved} moved, "
              f"{len(more)} new); missing {missing}, handled twice {twice}")
        print("PROVED: nothing lost, nothing handled twice, the old queue empty and deleted"
              if proved else "NOT PROVED: see the counts above")
        return proved
    finally:
        if not keep:
            api.delete_policy(policy, broker.vhost)
            for name in (*(o.name for o in others), source.name,
                         f"{source.name}{TWIN_SUFFIX}", f"{source.name}{TWIN_SUFFIX}.parked"):
                with contextlib.suppress(SacError):  # not made, or deleted already
                    api.delete_queue(name, broker.vhost, if_empty=False)


def wait_for_policy(broker: Reach, queues: Sequence[str], policy: str) -> None:
    """The API shows a new policy on a queue within its statistics interval."""
    deadline = time.monotonic() + 10 * broker.statistics_interval + 5
    for name in queues:
        while broker.management.queue(name, broker.vhost).policy != policy:
            if time.monotonic() > deadline:
                raise TimeoutError(f"policy {policy!r} does not show on {name!r}")
            time.sleep(broker.statistics_interval / 2)


# ---------------------------------------------------------------------------- command line


def parser() -> argparse.ArgumentParser:
    first = (__doc__ or "").split("\n\n")[0]
    cli = Parser(
        description=first,
        epilog="Consumers are switched by a graceful stop on the old queue and a start on the "
               "twin; messages move confirmed before acked. See the module docstring. "
               + EXIT_STATUSES)
    add_broker_arguments(cli)
    api = cli.add_argument_group("management API (with --url)")
    api.add_argument("--management-url", action="append", default=[], metavar="URL",
                     help="http(s)://user:password@host:15672, repeated once per node")
    api.add_argument("--statistics-interval", type=float, default=5.0, metavar="S",
                     help="the broker's statistics interval (default: 5, RabbitMQ's)")
    what = cli.add_argument_group("what to do (default: the report only)")
    what.add_argument("--migrate", metavar="QUEUE", help="migrate this mirrored queue")
    what.add_argument("--twin", help=f"the twin's name (default: QUEUE{TWIN_SUFFIX})")
    what.add_argument("--delete-source", action="store_true",
                      help="delete the old queue once it is empty")
    what.add_argument("--demo", type=int, metavar="N",
                      help="make a mirrored queue of N messages with a consumer, migrate it, "
                           "prove nothing was lost or handled twice, clean up")
    what.add_argument("--keep", action="store_true", help="keep the demo's queues and policy")
    what.add_argument("--wait", type=float, default=60.0, metavar="S",
                      help="how long to wait for the old queue's consumers to stop (default 60)")
    return cli


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.demo is not None and (args.demo < 3 or args.migrate):
        cli.error("--demo takes N >= 3, and not with --migrate")
    broker = connect(args)
    try:
        if args.demo is not None:
            return PROVED if demo(broker, args.demo, wait=args.wait, keep=args.keep) \
                else NOT_PROVED
        found = report(broker)
        if args.migrate is None:
            return PROVED
        item = found.get(args.migrate)
        if item is None or not item.can_migrate:
            raise BadInput(f"{args.migrate!r} is not a classic mirrored queue that can become "
                           "a quorum queue (see above)")
        result = migrate(broker, item, args.twin or f"{args.migrate}{TWIN_SUFFIX}",
                         wait=args.wait, delete_source=args.delete_source)
        return PROVED if result.source_left == 0 and result.twin_holds >= result.moved \
            else NOT_PROVED
    except (SacError, TimeoutError) as exc:
        print(f"FAILED: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return NOT_PROVED


if __name__ == "__main__":
    raise SystemExit(run(main))
