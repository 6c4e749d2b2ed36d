"""One consumer active across a queue federated between two clusters, nothing lost or done
twice, also when the active consumer stops and the one on the other cluster takes over.

Queue federation moves messages to wherever a consumer is: each cluster's copy of the queue
pulls from the other's when it has consumers with spare capacity and the other has messages
no local consumer takes. Native single active consumer works per queue, per cluster, so it
cannot keep one consumer active across both; the SDK's ZooKeeper guard can: the consumer on
each cluster joins one election (``GuardSettings.group``) and subscribes only while it
leads, and its inbox takes the election's fencing token as its epoch. Federation is at least
once between clusters (a link that drops before its upstream ack sends again), so the
consumers share one inbox (PostgreSQL; a SQLite file on one host): a copy that crossed twice
is skipped by its message id.

The pattern, below: ``federate()`` (on each cluster, through the management API, an upstream
pointing at the other and a policy on the queue, a plain quorum queue) and ``consume()`` (the
guarded consumer with the shared inbox, one on each cluster).

The proof (below the pattern), against two clusters from ``sac server up`` and a ZooKeeper:
consumer ``a`` on A leads and subscribes, ``b`` on B stands by; publishers on both
(``--messages`` each, ``--rate``); halfway (``--handover-at``) the publishers hold, ``a`` is
stopped (SIGTERM: it leaves the election), ``b`` wins and subscribes, and federation brings
it what is published on A from then on. Proved when every message published on either side
has exactly one effect, every effect of ``a`` precedes the first of ``b``, messages crossed
the federation both ways, and both links ran.

    sac server up --name sac --zookeeper && sac server up --name sac-b --nodes 1
    python recipes/federated_queue.py                       # clusters sac and sac-b
    python recipes/federated_queue.py --cluster east --cluster-b west --zookeeper zk:2181
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

# The proof's harness (finding the clusters, consumer processes, the verdict): sac.recipe_kit.
# The pattern itself needs sac.sdk alone.
from sac.recipe_kit import (
    BadInput,
    ConsumerProcess,
    Database,
    Parser,
    Reporter,
    Side,
    SteadyPublisher,
    add_two_cluster_arguments,
    attempt,
    find_sides,
    find_zookeeper,
    poll,
    positive,
    run,
    sample,
    verdict,
)
from sac.sdk import (
    ConfigurationError,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    GuardSettings,
    Inbox,
    InboxStats,
    Management,
    PostgresStore,
    PublisherSettings,
    QueueSettings,
    Role,
    SacError,
    Store,
    Transaction,
)

# --------------------------------------------------------------------------- the pattern

TABLE = "recipe_federated_effects"
"""The service's own table, in the shared inbox's database: the effect is a row in it."""
RECEIVED_FROM = "x-received-from"
"""The header federation adds to a message each time it moves it to another cluster."""


def federate(api: Management, queue: str, upstream: str, upstream_urls: list[str]) -> None:
    """The cluster of ``api`` pulls ``queue`` from the cluster at ``upstream_urls`` (every
    node, so that the link reconnects to another when one goes): an upstream parameter and
    a policy naming it. ``ack-mode: on-confirm``: the link acks upstream only once this side
    confirmed, so a message is never lost between clusters (and may cross twice). Run it
    on each cluster, pointing at the other."""
    api.put_parameter("federation-upstream", upstream, {
        "uri": upstream_urls, "ack-mode": "on-confirm", "reconnect-delay": 1})
    api.put_policy(upstream, f"^{queue}$", {"federation-upstream": upstream}, priority=10)


def unfederate(api: Management, upstream: str) -> None:
    """Undo ``federate()`` (what exists of it)."""
    with contextlib.suppress(SacError):
        api.delete_policy(upstream)
    with contextlib.suppress(SacError):
        api.delete_parameter("federation-upstream", upstream)


def consume(connection: ConnectionSettings, queue: QueueSettings, guard: GuardSettings,
            store: Store, name: str,
            on_role_change: Callable[[Role], None] | None = None) -> InboxStats:
    """One instance of the service, on one cluster: guarded (it subscribes only while it
    leads the group ``guard`` names, across both clusters), its effect one row through the
    shared inbox, with when it was made (the host's monotonic clock) and whether the message
    came through federation. Its inbox's statistics once stopped (SIGTERM: gracefully)."""
    mark = "%s" if isinstance(store, PostgresStore) else "?"  # the driver's placeholder
    insert = (f"INSERT INTO {TABLE} (queue, msg, consumer, t, crossed) "
              f"VALUES ({', '.join([mark] * 5)})")

    def effect(delivery: Delivery, tx: Transaction) -> None:
        crossed = int(RECEIVED_FROM in delivery.headers)
        tx.execute(insert, (queue.name, delivery.message_id, name, time.monotonic(), crossed))

    inbox = Inbox(store, effect)
    settings = ConsumerSettings(connection, queue, guard=guard)
    Consumer(settings, inbox, on_role_change=on_role_change).run()
    return inbox.stats


# --------------------------------------------------------------------------- the proof
# Everything below runs the pattern and measures it; none of it is needed to use it.

EFFECTS_COLUMNS = ("queue TEXT NOT NULL, msg TEXT NOT NULL, consumer TEXT NOT NULL, "
                   "t DOUBLE PRECISION NOT NULL, crossed INTEGER NOT NULL")
LINK_RUNNING_S = 30.0


def consumer_process(report: Reporter, connection: ConnectionSettings, queue: QueueSettings,
                     guard: GuardSettings, database: Database) -> None:
    """``consume()`` in a process of its own: it says its role changes, and its inbox's
    statistics once stopped."""
    stats = consume(connection, queue, guard, database.store(), report.name,
                    on_role_change=lambda role: report.say("role", role=role.value))
    report.say("stats", **attrs.asdict(stats))


def upstream_name(queue: str, upstream: Side) -> str:
    return f"{queue}-from-{upstream.label}"


def federate_sides(queue: str, downstream: Side, upstream: Side) -> str:
    """``federate()`` between two local clusters; what was done, in words (no password)."""
    name = upstream_name(queue, upstream)
    federate(downstream.management(), queue, name, upstream.cluster.urls())
    return (f"{downstream.label}: upstream {name} -> {upstream.label} "
            f"({', '.join(upstream.cluster.display_urls())}), policy {name} on ^{queue}$")


def links(side: Side, queue: str) -> list[str]:
    """The status of each federation link of ``queue`` on ``side`` (``running``...)."""
    found = side.cluster.management().federation_links()
    return [link.status for link in found if link.queue == queue]


def link_running(side: Side, queue: str) -> bool:
    return "running" in links(side, queue)


@attrs.frozen
class Effect:
    msg: str
    consumer: str
    t: float
    crossed: bool


def read_effects(database: Database, queue: str) -> list[Effect]:
    rows = database.query(f"SELECT msg, consumer, t, crossed FROM {TABLE} WHERE queue = ? "
                          "ORDER BY t", (queue,))
    return [Effect(str(m), str(c), float(t), bool(x)) for m, c, t, x in rows]


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = Parser(description="A queue federated between two clusters, one consumer "
                    "active across both (the ZooKeeper guard); each message handled once, "
                    "also after a takeover on the other cluster.")
    add_two_cluster_arguments(
        parser,
        ("--cluster", "sac", "cluster A, started by `sac server up --name NAME` (default: sac)"),
        ("--cluster-b", "sac-b", "cluster B (default: sac-b)"))
    parser.add_argument("--messages", type=positive(int), default=300,
                        help="messages published on each cluster (default: 300)")
    parser.add_argument("--rate", type=positive(float), default=100.0,
                        help="messages per second on each cluster (default: 100)")
    parser.add_argument("--handover-at", type=positive(int), default=None, metavar="N",
                        help="stop consumer a once N messages are confirmed on each "
                        "cluster (default: half of --messages)")
    parser.add_argument("--lease", type=positive(float), default=4.0,
                        help="the guard's ZooKeeper session timeout, seconds; the server "
                        "must grant it (default: 4, twice the default tickTime)")
    parser.add_argument("--timeout", type=positive(float), default=60.0,
                        help="seconds allowed for each step (default: 60)")
    args = parser.parse_args(argv)
    if args.handover_at is None:
        args.handover_at = max(1, args.messages // 2)
    if args.handover_at >= args.messages:
        parser.error(f"--handover-at ({args.handover_at}) must be below --messages "
                     f"({args.messages}): some messages must be left for consumer b")
    if args.cluster == args.cluster_b:
        parser.error(f"--cluster and --cluster-b name the same cluster ({args.cluster}): "
                     "federation needs two")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    a, b = find_sides(args, ("a", "cluster"), ("b", "cluster_b"))
    hosts = find_zookeeper(args.zookeeper, (a.cluster, b.cluster))
    queue = QueueSettings(f"federated-{uuid.uuid4().hex[:8]}", single_active_consumer=False)
    try:
        guard = GuardSettings(hosts, f"/sac-recipes/{queue.name}", session_timeout=args.lease)
    except ConfigurationError as exc:
        raise BadInput(f"--zookeeper/--lease: {exc}") from None
    work = Path(tempfile.mkdtemp(prefix="sac-federated-"))
    database = Database(dsn=args.dsn, path=str(work / "inbox.db"))
    database.create(TABLE, EFFECTS_COLUMNS)
    print(f"cluster A: {a.broker.description}")
    print(f"cluster B: {b.broker.description}")
    print(f"guard: ZooKeeper {hosts}, group {guard.group}, lease {args.lease:g} s")
    print(f"inbox shared by both consumers: {database.describe()}")
    print(f"queue {queue.name}: {queue.type}, no native single active consumer (the guard "
          "keeps one consumer active across both clusters)")
    recipe = Federated(args, a, b, queue, guard, database)

    def body() -> int:
        try:
            for down, up in ((a, b), (b, a)):
                print(federate_sides(queue.name, down, up))
            return recipe.run()
        finally:
            for down, up in ((a, b), (b, a)):
                unfederate(down.management(), upstream_name(queue.name, up))
            print(f"cluster B: {b.broker.remove(queue)}; federation policies and upstreams "
                  "deleted on both")

    try:
        return attempt(a.broker, queue, body)
    finally:
        shutil.rmtree(work, ignore_errors=True)


class Federated:
    def __init__(self, args: Any, a: Side, b: Side, queue: QueueSettings,
                 guard: GuardSettings, database: Database) -> None:
        self.args = args
        self.sides = {"a": a, "b": b}
        self.queue = queue
        self.guard = guard
        self.database = database
        self.consumers: dict[str, ConsumerProcess] = {}
        self.links_seen: dict[str, list[str]] = {}

    def start(self, name: str, role: Role) -> ConsumerProcess:
        side = self.sides[name]
        connection = side.broker.connection(f"recipe-federated-{name}")
        process = ConsumerProcess(name, consumer_process, connection, self.queue, self.guard,
                                  self.database)
        self.consumers[name] = process
        process.wait("role", self.args.timeout, role=role.value)
        return process

    def publisher(self, name: str) -> SteadyPublisher:
        settings = PublisherSettings(
            self.sides[name].broker.connection(f"recipe-federated-publisher-{name}"),
            queue=self.queue)
        return SteadyPublisher(settings, self.args.rate, self.args.messages, prefix=f"{name}-",
                               hold_at=self.args.handover_at)

    def wait_links(self) -> None:
        """Until the queue's federation link runs on each cluster (it starts once the policy
        finds the queue), recording what was seen."""
        for name, side in self.sides.items():
            poll(functools.partial(link_running, side, self.queue.name), LINK_RUNNING_S,
                 every=0.2)
            self.links_seen[name] = links(side, self.queue.name)

    def run(self) -> int:
        args = self.args
        publishers = {name: self.publisher(name) for name in self.sides}
        try:
            for publisher in publishers.values():
                publisher.connect()  # each declares the queue on its cluster
            self.wait_links()
            a = self.start("a", Role.WAITING)
            print(f"consumer a on cluster A (pid {a.pid}) is alone in the group: it leads "
                  "and subscribes")
            print(f"publishing {args.messages} messages on each cluster at {args.rate:g}/s ...")
            for publisher in publishers.values():
                publisher.start()
            # A queue without native single active consumer says nothing on subscribing:
            # a consumer knows it is active from its first delivery.
            a.wait("role", args.timeout, role=Role.ACTIVE.value)
            b = self.start("b", Role.WAITING)
            print(f"consumer b on cluster B (pid {b.pid}) stands by (it does not lead)")
            for name, publisher in publishers.items():
                if not publisher.wait_confirmed(args.handover_at, args.timeout):
                    raise TimeoutError(f"{args.handover_at} messages not confirmed on cluster "
                                       f"{name.upper()} within {args.timeout:g} s: "
                                       f"{publisher.failed[:1]}")
            print(f"{args.handover_at} confirmed on each, the publishers hold; stopping a "
                  "(SIGTERM: a graceful stop, it leaves the election) ...")
            b_before = sum(e.consumer == "b" for e in self.effects())
            a_status = a.stop(args.timeout)
            # Published only now, the rest is b's: were it published while a stopped, a
            # fast a could handle all of it and b, which knows it is active from its first
            # delivery, would never hear it.
            for publisher in publishers.values():
                publisher.release()
            b.wait("role", args.timeout, role=Role.ACTIVE.value)
            print(f"a stopped (exit status {a_status}); b won the election and subscribed "
                  "on cluster B")
            for publisher in publishers.values():
                publisher.finish(args.timeout + args.messages / args.rate)
            confirmed = {m for p in publishers.values() for m in p.confirmed}
            failed = [f for p in publishers.values() for f in p.failed]
            poll(lambda: confirmed <= {e.msg for e in self.effects()}, args.timeout)
            b_status = b.stop(args.timeout)
        finally:
            for publisher in publishers.values():
                with contextlib.suppress(SacError):
                    publisher.close(1.0)  # a no-op after finish(); after an error, at once
            for process in self.consumers.values():
                process.kill()  # those still running after an error
        return self.verdict(confirmed, failed, b_before, a_status, b_status)

    def effects(self) -> list[Effect]:
        return read_effects(self.database, self.queue.name)

    def verdict(self, confirmed: set[str], failed: list[str], b_before: int,
                a_status: int | None, b_status: int | None) -> int:
        effects = self.effects()
        a, b = ([e for e in effects if e.consumer == c] for c in ("a", "b"))
        counts: dict[str, int] = {}
        for e in effects:
            counts[e.msg] = counts.get(e.msg, 0) + 1
        missing = sorted(confirmed - set(counts))
        twice = sorted(m for m, n in counts.items() if n > 1)
        skipped = {name: sum(e.get("duplicates_looked_up", 0) + e.get("duplicates_at_commit", 0)
                             for e in p.events
                             if e["event"] == "stats") for name, p in self.consumers.items()}
        print()
        print(f"published and confirmed           {len(confirmed)} ({self.args.messages} on "
              "each cluster)" + (f" ({len(failed)} failed: {failed[0]})" if failed else ""))
        for name, mine, note in (("a", a, "on A, then stopped"), ("b", b, "on B, took over")):
            other = "b" if name == "a" else "a"
            crossed = sum(e.crossed and e.msg.startswith(f"{other}-") for e in mine)
            print(f"handled by {name} ({note})".ljust(34)
                  + f"{len(mine)}, of which {crossed} published on cluster "
                  f"{other.upper()} (crossed the federation)")
        print(f"missing                           {len(missing)}" + sample(missing))
        print(f"done twice                        {len(twice)}" + sample(twice))
        print(f"duplicates skipped by the inbox   {sum(skipped.values())}")
        if a and b:
            print(f"gap: a's last effect -> b's first {b[0].t - a[-1].t:.3f} s (b's election, "
                  "subscription, and federation bringing it messages)")
        print("federation links                  "
              + ", ".join(f"{n.upper()}: {' '.join(s) or 'none'}"
                          for n, s in self.links_seen.items()))
        crossed_to_a = any(e.crossed and e.msg.startswith("b-") for e in a)
        crossed_to_b = any(e.crossed and e.msg.startswith("a-") for e in b)
        checks = {
            "nothing missing": not missing and not failed,
            "nothing done twice": not twice,
            "a worked before the handover, alone": bool(a) and b_before == 0,
            "b took over": bool(b),
            "one at a time: every effect of a before the first of b":
                bool(a) and bool(b) and a[-1].t < b[0].t,
            "messages published on B crossed to a, on A crossed to b":
                crossed_to_a and crossed_to_b,
            "the federation links ran on both clusters":
                all("running" in s for s in self.links_seen.values()),
            "both stopped gracefully (exit 0)": a_status == 0 and b_status == 0,
        }
        return verdict(checks, "one consumer was active across two federated clusters at a "
                       "time; after a's stop b took over on the other cluster and federation "
                       "brought it the messages; every message published on either side was "
                       "handled exactly once.")


if __name__ == "__main__":
    raise SystemExit(run(main))
