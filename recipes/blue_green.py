"""Blue-green from RabbitMQ 3.10 to 4.0: a mirrored single-active queue on the old cluster
("blue") replaced by a quorum single-active queue on a new one ("green"), with one consumer
working at a time across both, nothing lost or done twice, and each publisher's order kept.

RabbitMQ 4.0 has no classic mirrored queues, and a 3.10 cluster cannot be upgraded to it in
place (upgrades to 4.0 come from 3.13 only): RabbitMQ's advice is a new cluster beside the old
one, and a move. What moves, and what keeps each promise:

- **consumers**: the blue consumer and the green consumer are in one ZooKeeper guard group
  (``GuardSettings.group``): only the leader subscribes, so at most one works at any time, on
  either cluster, and their shared inbox (SQLite, or PostgreSQL with ``--dsn``) takes the
  election's token as its epoch, so a late commit of a replaced leader is refused. The blue
  consumer stops (SIGTERM: the SDK's graceful stop; or it crashes, ``--crash-blue``) and the
  green one leads and subscribes.
- **the backlog**: a dynamic shovel, declared on green, consumes blue's queue and publishes
  to green's, acking on blue only once green confirmed (``ack-mode: on-confirm``), so a
  message is never in neither. Blue's queue is a single-active queue: the shovel waits there
  as the standby behind the blue consumer and takes over the moment it goes (the broker gives
  back what it held, in place, first). It moves the queue in order, on one channel, and keeps
  moving what publishers still send to blue.
- **publishers**: each keeps publishing to blue with confirms until it is switched; then it
  stops sending to blue, waits for every confirm there (what blue refused or left unconfirmed
  is sent again to green, same id), waits until blue's queue is empty (every message it
  published there is in green's queue: the shovel acked it after green confirmed it), and only
  then publishes to green.

**The order kept**: per publisher, effects are committed in the order it published, across
the switch: everything it published to blue (handled by the blue consumer, or moved and
handled by the green one) before anything it published to green. Between two publishers there
is no order, as on one cluster. ``--switch-first`` switches the publisher before the
consumers, without waiting for blue to be empty (a weakened run): what the shovel then moves
lands behind what was published to green, and ``sac check`` finds it reordered.

This script, against two clusters from ``sac server up`` (blue ``--rabbitmq 3.10`` with two
nodes or more; green ``--rabbitmq 4.0``) and a ZooKeeper:

1. puts an ``ha-mode: all`` policy on blue and declares the classic single-active queue there
   (what a 3.10 application has); declares the same queue name on green as the SDK does
   (quorum, single active consumer, a parking queue);
2. starts publishing to blue, the blue consumer (it leads the group and works) and the green
   consumer (it stands by), each consumer in a process of its own; declares the shovel;
3. once ``--handover-at`` messages are confirmed, stops the blue consumer (or lets it crash
   right after committing that message, before its ack): the shovel takes blue's queue over,
   the green consumer leads (``--restart-shovel`` restarts the shovel meanwhile: it sends
   again what it had not acked on blue, and the inbox skips the copies);
4. switches the publisher to green (after blue's queue is empty), publishes the rest;
5. waits until every confirmed message has an effect, stops the green consumer, deletes the
   shovel, blue's policy and queue, and green's queue, and reads the effects back.

The pattern is at the top: blue's mirrored queue (``mirror_policy``), the shovel
(``shovel_definition``), reading blue's queue (``messages_in``), the guarded consumer with the
shared inbox (``consume``) and the publisher's switch (``switch_to_green``). Below it, the
proof runs them on two local clusters and measures.

Every actor records its history (``HistoryRecorder``) in ``--history DIR``, with the effects
(``effects.jsonl``, from the inbox's table) and a ``run.json`` naming the queue single-active
and ordered: ``sac check DIR --engine python`` then checks the run independently of this
script. Proved when every confirmed message has exactly one effect, the blue consumer's
effects all come before the green one's first, green handled messages the shovel moved, and
the effects follow each publisher's order.

    sac server up --name sac-blue --rabbitmq 3.10 --nodes 2 --zookeeper
    sac server up --name sac-green --rabbitmq 4.0 --nodes 3
    python recipes/blue_green.py --history runs/blue-green && sac check runs/blue-green
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.synchronize
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import attrs

# The proof's harness (finding the clusters, consumer processes, the verdict): sac.recipe_kit.
# The pattern itself needs sac.sdk alone.
from sac.history import HistoryEvent, Publish, Retransmit
from sac.recipe_kit import (
    BadInput,
    ConsumerProcess,
    Database,
    Parser,
    Reporter,
    Side,
    add_two_cluster_arguments,
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
    HistoryRecorder,
    Inbox,
    InboxStats,
    ManagementError,
    ManagementNotFound,
    PostgresStore,
    Publisher,
    PublisherSettings,
    QueueSettings,
    Role,
    SacError,
    Store,
    Transaction,
    Unconfirmed,
)
from sac.server import ServerError

# --------------------------------------------------------------------------- the pattern

TABLE = "recipe_blue_green_effects"
"""The service's own table, in the shared inbox's database: the effect is a row in it."""
PREFETCH = 20
"""The consumers' prefetch: what a graceful stop finishes before it hands over is at most
this (a batch in flight), the rest of blue's backlog is the shovel's to move."""
CRASHED = 3
"""The exit status of a blue consumer the proof makes die after a commit (``--crash-blue``)."""


def mirror_policy() -> dict[str, Any]:
    """Blue's queue as a 3.10 application has it: mirrored on every node, new mirrors synced."""
    return {"ha-mode": "all", "ha-sync-mode": "automatic"}


def shovel_definition(blue_urls: Sequence[str], green_url: str, queue: str) -> dict[str, Any]:
    """The dynamic shovel that moves blue's ``queue`` into green's.

    ``on-confirm``: a message is acked on blue only once green confirmed it, so a shovel that
    stops half-way (a restart, a lost link) sends again what it had not confirmed: copies with
    one id, never a loss. Every blue node is a source URI, so that the shovel reconnects to
    another when one goes. Both queues must exist already (``*-predeclared``): a shovel that
    declared green's queue itself would make a classic queue of it."""
    return {
        "src-protocol": "amqp091", "src-uri": list(blue_urls), "src-queue": queue,
        "src-predeclared": True,
        "dest-protocol": "amqp091", "dest-uri": green_url, "dest-queue": queue,
        "dest-predeclared": True,
        "ack-mode": "on-confirm", "reconnect-delay": 1,
    }


def messages_in(listing: str, queue: str) -> int | None:
    """The ``messages`` column of ``queue`` in ``rabbitmqctl list_queues name messages``
    output (tab-separated); None when the queue is not listed."""
    for line in listing.splitlines():
        name, _, count = line.rpartition("\t")
        if name == queue and count.strip().isdigit():
            return int(count)
    return None


def consume(connection: ConnectionSettings, queue: QueueSettings, guard: GuardSettings,
            store: Store, name: str, *, recorder: HistoryRecorder | None = None,
            work_s: float = 0.0, crash_after: str | None = None,
            on_role_change: Callable[[Role], None] | None = None) -> InboxStats:
    """One instance of the service, on either cluster, guarded: it subscribes only while it
    leads the group ``guard`` names, so at most one consumer works across blue and green.
    Its effect (after ``work_s`` of work) is one row through the inbox both share, with the
    host's monotonic clock, the wall clock and the inbox's epoch (the election's token: a
    replaced leader's late commit is refused). Its inbox's statistics once stopped (SIGTERM:
    it finishes its batch, acks, gives back the rest in place, leaves the election).
    ``crash_after`` is the proof's: die right after the commit holding that message."""
    mark = "%s" if isinstance(store, PostgresStore) else "?"  # the driver's placeholder
    insert = (f"INSERT INTO {TABLE} (queue, msg, consumer, t, ts, epoch) "
              f"VALUES ({', '.join([mark] * 6)})")

    def effect(delivery: Delivery, tx: Transaction) -> None:
        time.sleep(work_s)  # the service's work: slower than the publisher, a backlog
        tx.execute(insert, (queue.name, delivery.message_id, name, time.monotonic(),
                            time.time(), tx.epoch))
        if delivery.message_id == crash_after:
            tx.on_commit(lambda: os._exit(CRASHED))  # committed, not yet acked

    inbox = Inbox(store, effect)
    settings = ConsumerSettings(connection, queue, guard=guard, prefetch=PREFETCH)
    Consumer(settings, inbox, recorder=recorder, on_role_change=on_role_change).run()
    return inbox.stats


def switch_to_green(blue: Publisher, unconfirmed: Callable[[], list[str]],
                    blue_empty: Callable[[], bool] | None, timeout: float) -> list[str]:
    """A publisher's switch, between two of its messages: stop sending to blue and wait for
    blue's confirms, then wait until blue's queue is empty (``blue_empty()``: everything it
    published there is in green's queue, moved by the shovel), so that what it publishes to
    green next comes after it. The ids to publish again to green first (same id): those
    blue refused or left unconfirmed. ``blue_empty=None`` skips the wait: the order is
    given up (a weakened run)."""
    with contextlib.suppress(Unconfirmed):  # those are sent again to green
        blue.close(timeout=timeout)
    resend = unconfirmed()
    deadline = time.monotonic() + timeout
    while blue_empty is not None and not blue_empty():
        if time.monotonic() > deadline:
            raise TimeoutError(f"blue's queue not empty within {timeout:g} s")
        time.sleep(0.1)
    return resend


# =========================================================================== the proof
# Everything below runs the pattern on two local clusters and measures it; none of it is
# needed to use it.

PUBLISHER = "publisher-0"
SHOVEL_RUNNING_S = 30.0
EFFECTS_COLUMNS = ("queue TEXT NOT NULL, msg TEXT NOT NULL, consumer TEXT NOT NULL, "
                   "t DOUBLE PRECISION NOT NULL, ts DOUBLE PRECISION NOT NULL, epoch BIGINT")


def seq_of(message_id: str) -> int:
    """The publisher's order of a message, from its id (``m000042`` is the 42nd)."""
    return int(message_id.lstrip("m"))


def out_of_order(first_effects: Sequence[str]) -> list[str]:
    """The ids, in commit order, committed after an id the publisher published later."""
    late, highest = [], 0
    for msg in first_effects:
        seq = seq_of(msg)
        if seq < highest:
            late.append(msg)
        highest = max(highest, seq)
    return late


class OnePublisherHistory(HistoryRecorder):
    """The history of one application publisher that moves from blue to green.

    Each SDK ``Publisher`` numbers its messages from 1 (``seq``, the order it writes them on
    its channel); the green one's numbers continue after the blue one's last (``offset``), so
    the history holds the application's one publish order, which ``sac check`` holds the
    effects to. A message published again on green after blue left it unconfirmed is
    recorded as a retransmission: it lands where its copy lands, not at its first place."""

    def __init__(self, path: Path | str, actor: str) -> None:
        super().__init__(path, actor)
        self.offset = 0
        self.resent: set[str] = set()

    def record(self, event: HistoryEvent, /) -> None:
        if isinstance(event, Publish) and event.msg not in self.resent:
            event = Publish(msg=event.msg, seq=event.seq + self.offset, queue=event.queue)
        elif isinstance(event, Publish | Retransmit):
            event = Retransmit(msg=event.msg, seq=event.seq + self.offset)
        super().record(event)


@attrs.frozen
class Switched:
    """What one publisher's switch did."""

    sent_to_blue: int
    resent: tuple[str, ...]
    """Ids blue did not confirm, published again to green."""
    paused_s: float
    """From the switch asked to the publisher free to publish to green."""


@attrs.frozen
class _Asked:
    drained: Callable[[], bool] | None
    timeout: float


class SwitchingPublisher:
    """One application publisher: ``count`` messages at ``rate`` a second (ids ``m000001``...)
    from a thread of its own, to blue until ``switch()``, then to green; each confirmed. The
    last ``to_green`` wait for the switch if they come before it, so that some always go to
    green.

    Only its thread sends (the switch is made there too, between two messages), so nothing is
    sent to blue once the switch began."""

    def __init__(self, blue: PublisherSettings, green: PublisherSettings,
                 history: OnePublisherHistory, rate: float, count: int, to_green: int) -> None:
        self.rate, self.count, self.to_green, self.history = rate, count, to_green, history
        self.blue = Publisher(blue, recorder=history)
        self.green = Publisher(green, recorder=history)
        self.sent: list[str] = []
        self.confirmed: list[str] = []
        self.failed: list[str] = []
        """Failures on green (on blue they are sent again to green by the switch)."""
        self.switched: Switched | None = None
        self._on_green = False
        self._futures: dict[str, Future[str]] = {}
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._asked: _Asked | None = None
        self._answer: Switched | BaseException | None = None
        self._ended = False
        self._closing = False
        self._thread = threading.Thread(target=self._publish, name="recipe-publisher",
                                        daemon=True)

    def connect(self) -> None:
        """Connect to both: each declares its queue."""
        self.blue.start()
        self.green.start()

    def begin(self) -> None:
        """Start publishing, to blue."""
        self._thread.start()

    def _publish(self) -> None:
        began, seq = time.monotonic(), 1
        while seq <= self.count and not self._closing:
            held = not self._on_green and seq > self.count - self.to_green
            due = began + seq / self.rate
            self._wake.wait(None if held else max(0.0, due - time.monotonic()))
            if self._closing:
                return
            if self._asked is not None:
                self._serve()
                began = time.monotonic() - (seq - 1) / self.rate  # on at the rate, no burst
            elif not held and time.monotonic() >= due:
                self._send(f"m{seq:06d}")
                seq += 1
        with self._cond:
            self._ended = True  # from here a switch is served by switch() itself
            pending = self._asked is not None
        if pending:
            self._serve()

    def _send(self, msg: str) -> None:
        publisher, on_green = (self.green, True) if self._on_green else (self.blue, False)
        future = publisher.send(f"{msg} of {self.count}".encode(), message_id=msg)
        with self._cond:
            if msg not in self._futures:
                self.sent.append(msg)
            self._futures[msg] = future
        future.add_done_callback(lambda done: self._settled(msg, done, on_green))

    def _settled(self, msg: str, future: Future[str], on_green: bool) -> None:
        with self._cond:
            if future.exception() is None:
                self.confirmed.append(msg)
            elif on_green:
                self.failed.append(f"{msg}: {future.exception()!r}")
            self._cond.notify_all()

    def switch(self, blue_drained: Callable[[], bool] | None, timeout: float) -> Switched:
        """Move the publisher to green, between two of its messages: close blue (its
        confirms awaited), wait until ``blue_drained()`` says blue's queue is empty (unless
        it is None: a weakened run), then publish to green, first what blue did not
        confirm."""
        with self._cond:
            self._asked, self._answer = _Asked(blue_drained, timeout), None
            ended = self._ended
        self._wake.set()
        if ended:
            self._serve()
        with self._cond:
            if not self._cond.wait_for(lambda: self._answer is not None, 2 * timeout):
                raise TimeoutError(f"the publisher did not switch within {2 * timeout:g} s")
            answer = self._answer
        if isinstance(answer, BaseException):
            raise answer
        assert answer is not None
        return answer

    def _serve(self) -> None:
        asked = self._asked
        assert asked is not None
        began = time.monotonic()
        answer: Switched | BaseException
        try:
            resend = switch_to_green(
                self.blue, lambda: [m for m, f in self._futures.items()
                                    if not f.done() or f.exception() is not None],
                asked.drained, asked.timeout)
            self.history.offset = len(self.sent)
            self.history.resent.update(resend)
            self._on_green = True
            for msg in resend:
                self._send(msg)
            answer = self.switched = Switched(len(self.sent), tuple(resend),
                                              time.monotonic() - began)
        except (SacError, TimeoutError) as exc:
            answer, self._closing = exc, True
        self._wake.clear()
        with self._cond:
            self._asked, self._answer = None, answer
            self._cond.notify_all()

    def wait_confirmed(self, n: int, timeout: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: len(self.confirmed) >= n or bool(self.failed), timeout)
            return len(self.confirmed) >= n and not self.failed

    def finish(self, timeout: float) -> None:
        """Until the last message is sent and every confirm is in (or ``timeout``)."""
        self._thread.join(timeout)
        self.close(timeout)

    def close(self, timeout: float) -> None:
        self._closing = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for publisher in (self.blue, self.green):
            with contextlib.suppress(SacError):  # unconfirmed: counted as such
                publisher.close(timeout=timeout)


@attrs.frozen
class ConsumerPlan:
    """What one consumer process runs: where, and how (the weakened variants included)."""

    side: str
    connection: ConnectionSettings
    queue: QueueSettings
    guard: GuardSettings
    database: Database
    events: str
    work_s: float
    crash_after: str | None = None
    """Die (``os._exit``) right after committing this message, before its ack."""
    inbox: bool = True
    """False: the effect is written without the inbox (a weakened run: no deduplication)."""
    go: multiprocessing.synchronize.Event | None = None
    """Set when the consumer may start (the process is spawned ahead: imports take a while)."""


def consumer_process(report: Reporter, plan: ConsumerPlan) -> None:
    """``consume()`` in a process of its own, on one cluster: it says its role changes and
    its inbox's statistics, and writes its history to ``events/consumer-<side>.jsonl``, each
    event through at once (a crash loses none). Without the inbox (``--no-inbox``, a
    weakened run) the effect is written on its own: nothing deduplicates."""
    actor = f"consumer-{plan.side}"
    if plan.go is not None:
        plan.go.wait()
    with HistoryRecorder(Path(plan.events) / f"{actor}.jsonl", actor, flush_every=1) as rec:
        if plan.inbox:
            stats = consume(plan.connection, plan.queue, plan.guard, plan.database.store(),
                            plan.side, recorder=rec, work_s=plan.work_s,
                            crash_after=plan.crash_after,
                            on_role_change=lambda role: report.say("role", role=role.value))
            report.say("stats", **attrs.asdict(stats))
            return
        insert = (f"INSERT INTO {TABLE} (queue, msg, consumer, t, ts, epoch) VALUES "
                  "(?, ?, ?, ?, ?, ?)")

        def effect_without_inbox(delivery: Delivery) -> None:
            time.sleep(plan.work_s)
            plan.database.query(insert, (plan.queue.name, delivery.message_id, plan.side,
                                         time.monotonic(), time.time(), None))
            if delivery.message_id == plan.crash_after:
                os._exit(CRASHED)  # done, not yet acked

        settings = ConsumerSettings(plan.connection, plan.queue, guard=plan.guard,
                                    prefetch=PREFETCH)
        Consumer(settings, effect_without_inbox, recorder=rec,
                 on_role_change=lambda role: report.say("role", role=role.value)).run()


@attrs.frozen
class Effect:
    msg: str
    side: str
    t: float
    ts: float
    epoch: int | None


def read_effects(database: Database, queue: str) -> list[Effect]:
    rows = database.query(f"SELECT msg, consumer, t, ts, epoch FROM {TABLE} WHERE queue = ? "
                          "ORDER BY t", (queue,))
    return [Effect(str(m), str(c), float(t), float(ts), None if e is None else int(e))
            for m, c, t, ts, e in rows]


def version(side: Side) -> str:
    return side.cluster.management().overview().version


def synchronised_mirrors(side: Side, queue: str) -> tuple[str | None, list[str]]:
    """A mirrored classic queue's policy and the nodes of its synchronised mirrors (RabbitMQ
    3.x only)."""
    found = side.cluster.management().queue(queue)
    return found.policy, list(found.synchronised_mirrors or ())


def blue_backlog(blue: Side, queue: str) -> int | None:
    """Messages in blue's queue, ready or held (the shovel holds what green has not confirmed
    yet), read from the queue itself (``rabbitmqctl list_queues``): the management API's
    count is up to a statistics interval old, so a 0 read there may predate the last
    publish. None when no node answers."""
    for node in blue.cluster.nodes:
        try:
            listing = blue.cluster.ctl(node, "list_queues", "-q", "--no-table-headers",
                                       "name", "messages", timeout=30)
        except ServerError:
            continue
        return messages_in(listing, queue)
    return None


def shovel_state(green: Side, name: str) -> str | None:
    return next((s.state for s in green.cluster.management().shovels()
                 if s.name == name), None)


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = Parser(description="Blue-green from a 3.10 cluster's mirrored single-active "
                    "queue to a 4.0 cluster's quorum single-active queue: consumers moved "
                    "under a ZooKeeper guard, the backlog shovelled with confirms, publishers "
                    "switched; nothing lost or done twice, each publisher's order kept.")
    add_two_cluster_arguments(
        parser,
        ("--blue", "sac-blue", "the old cluster (RabbitMQ 3.x, 2+ nodes), from `sac server up "
         "--name NAME --rabbitmq 3.10` (default: sac-blue)"),
        ("--green", "sac-green", "the new cluster (default: sac-green)"))
    parser.add_argument("--history", default=None, metavar="DIR",
                        help="where the run's history goes, for `sac check` (default: a new "
                        "temporary directory, kept)")
    parser.add_argument("--messages", type=positive(int), default=600,
                        help="messages to publish in all (default: 600)")
    parser.add_argument("--rate", type=positive(float), default=200.0,
                        help="messages published per second (default: 200)")
    parser.add_argument("--work-ms", type=float, default=10.0, metavar="MS",
                        help="each effect's work, so that a backlog builds up on blue "
                        "(default: 10)")
    parser.add_argument("--to-green", type=positive(int), default=None, metavar="M",
                        help="the last M messages are published to green: the publisher "
                        "waits for its switch if it gets there first (default: a quarter of "
                        "--messages)")
    parser.add_argument("--handover-at", type=positive(int), default=None, metavar="N",
                        help="stop the blue consumer once N messages are confirmed "
                        "(default: half of --messages)")
    parser.add_argument("--crash-blue", action="store_true",
                        help="the blue consumer dies right after committing message N "
                        "(--handover-at), before its ack, instead of a graceful stop")
    parser.add_argument("--restart-shovel", action="store_true",
                        help="restart the shovel once the blue consumer is gone, while it "
                        "moves blue's backlog: it sends again what it had not acked on blue "
                        "(copies the inbox skips)")
    parser.add_argument("--lease", type=positive(float), default=4.0,
                        help="the guard's ZooKeeper session timeout, seconds (default: 4): "
                        "after a crash the green consumer leads once it expires")
    parser.add_argument("--timeout", type=positive(float), default=60.0,
                        help="seconds allowed for each step (default: 60)")
    weak = parser.add_argument_group("weakened runs (for the checker to catch)")
    weak.add_argument("--no-inbox", action="store_true",
                      help="effects written without the inbox: a message the crashed blue "
                      "consumer did not ack is done again on green")
    weak.add_argument("--switch-first", action="store_true",
                      help="switch the publisher before stopping the blue consumer, without "
                      "waiting for blue's queue to empty: the moved backlog lands behind "
                      "newer messages")
    args = parser.parse_args(argv)
    if args.handover_at is None:
        args.handover_at = max(1, args.messages // 2)
    if args.to_green is None:
        args.to_green = max(1, args.messages // 4)
    if args.handover_at + args.to_green > args.messages:
        parser.error(f"--handover-at ({args.handover_at}) and --to-green ({args.to_green}) "
                     f"add up to more than --messages ({args.messages})")
    if args.blue == args.green:
        parser.error(f"--blue and --green name the same cluster ({args.blue}): a blue-green "
                     "move needs two")
    if not 0 <= args.work_ms <= 10_000:
        parser.error(f"--work-ms must be from 0 to 10000, not {args.work_ms:g}")
    return args


def blue_and_green(args: Any) -> tuple[Side, Side]:
    blue, green = find_sides(args, ("blue", "blue"), ("green", "green"))
    if not blue.cluster.spec.rabbitmq.startswith("3."):
        raise BadInput(f"--blue: cluster {args.blue!r} runs RabbitMQ "
                       f"{blue.cluster.spec.rabbitmq}, which has no mirrored queues: blue is "
                       "the old 3.x cluster")
    return blue, green


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    blue, green = blue_and_green(args)
    hosts = find_zookeeper(args.zookeeper, (blue.cluster, green.cluster))
    name = f"blue-green-{uuid.uuid4().hex[:8]}"
    try:
        guard = GuardSettings(hosts, f"/sac-recipes/{name}", session_timeout=args.lease)
    except ConfigurationError as exc:
        raise BadInput(f"--zookeeper/--lease: {exc}") from None
    history = Path(args.history or tempfile.mkdtemp(prefix="sac-blue-green-"))
    if history.exists() and any(history.iterdir()):
        raise BadInput(f"--history {history}: not empty (a run's history needs a directory "
                       "of its own)")
    work = Path(tempfile.mkdtemp(prefix="sac-blue-green-db-"))
    database = Database(dsn=args.dsn, path=str(work / "inbox.db"))
    database.create(TABLE, EFFECTS_COLUMNS)
    move = BlueGreen(args, blue, green, name, guard, database, history)
    print(f"blue:  RabbitMQ {version(blue)}, {blue.broker.description}")
    print(f"green: RabbitMQ {version(green)}, {green.broker.description}")
    print(f"guard: ZooKeeper {hosts}, group {guard.group}, lease {args.lease:g} s")
    print(f"inbox shared by both consumers: {database.describe()}"
          + (" (NOT USED: --no-inbox)" if args.no_inbox else ""))
    try:
        return move.run()
    except (SacError, TimeoutError, ServerError) as exc:
        print(f"FAILED: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return 1
    finally:
        move.tidy()
        shutil.rmtree(work, ignore_errors=True)
        print(f"history: {history} (check it: sac check {history} --engine python)")


class BlueGreen:
    def __init__(self, args: Any, blue: Side, green: Side, name: str, guard: GuardSettings,
                 database: Database, history: Path) -> None:
        self.args = args
        self.blue, self.green = blue, green
        self.blue_queue = QueueSettings(name, type="classic", parking_queue=None)
        self.green_queue = QueueSettings(name)
        self.policy = f"{name}-mirrored"
        self.shovel = f"{name}-blue-to-green"
        self.guard = guard
        self.database = database
        self.history = history
        self.consumers: dict[str, ConsumerProcess] = {}
        self.blue_left: int | None = None
        self.reads: list[tuple[int | None, float]] = []
        """Each read of blue's queue while the publisher switched: messages, seconds taken."""

    # ---------------------------------------------------------------- steps

    def mirror(self) -> None:
        """Step 1 on blue: the policy (the queue is declared by the publisher)."""
        self.blue.management().put_policy(self.policy, f"^{self.blue_queue.name}$",
                                          mirror_policy())

    def wait_mirrored(self) -> None:
        """Until blue's queue shows the policy and a synchronised mirror (the API lags)."""
        name = self.blue_queue.name

        def mirrored() -> bool:
            try:
                found = synchronised_mirrors(self.blue, name)
            except ManagementNotFound:
                return False  # not in the statistics yet
            return found[0] == self.policy and len(found[1]) >= 1

        if not poll(mirrored, self.args.timeout, every=0.2):
            raise TimeoutError(f"blue's queue {name} not mirrored within "
                               f"{self.args.timeout:g} s (blue needs 2 nodes or more)")
        mirrors = len(synchronised_mirrors(self.blue, name)[1])
        print(f"1. blue: policy {self.policy} (ha-mode all) on {name}, a classic single-active "
              f"queue: mirrored on {mirrors} more node(s), synced")

    def spawn_consumer(self, side: Side, crash_after: str | None = None,
                       go: multiprocessing.synchronize.Event | None = None) -> ConsumerProcess:
        queue = self.blue_queue if side is self.blue else self.green_queue
        plan = ConsumerPlan(side.label, side.broker.connection(f"recipe-blue-green-{side.label}"),
                            queue, self.guard, self.database, str(self.history / "events"),
                            self.args.work_ms / 1000, crash_after, not self.args.no_inbox, go)
        process = ConsumerProcess(side.label, consumer_process, plan)
        self.consumers[side.label] = process
        return process

    def declare_shovel(self) -> None:
        definition = shovel_definition(self.blue.cluster.urls(), self.green.cluster.urls()[0],
                                       self.blue_queue.name)
        self.green.management().put_parameter("shovel", self.shovel, definition)
        if not poll(lambda: shovel_state(self.green, self.shovel) == "running",
                    SHOVEL_RUNNING_S, every=0.2):
            raise TimeoutError(f"shovel {self.shovel} not running within {SHOVEL_RUNNING_S:g} "
                               f"s: {shovel_state(self.green, self.shovel)}")
        print(f"   shovel {self.shovel} declared on green (on-confirm), running: it waits "
              "on blue's queue as the standby behind the blue consumer")

    def subscribed(self, side: str) -> bool:
        """Whether the consumer's history says it subscribed (it leads the group)."""
        path = self.history / "events" / f"consumer-{side}.jsonl"
        return path.exists() and '"type":"subscribed"' in path.read_text(encoding="utf-8")

    def restart_shovel(self) -> None:
        self.green.cluster.management().restart_shovel(self.shovel)
        if not poll(lambda: shovel_state(self.green, self.shovel) == "running",
                    SHOVEL_RUNNING_S, every=0.2):
            raise TimeoutError(f"shovel {self.shovel} not running again within "
                               f"{SHOVEL_RUNNING_S:g} s")
        print("   shovel restarted mid-move (--restart-shovel), running again")

    def drained(self) -> bool:
        began = time.monotonic()
        self.blue_left = blue_backlog(self.blue, self.blue_queue.name)
        self.reads.append((self.blue_left, time.monotonic() - began))
        return self.blue_left == 0

    def run(self) -> int:
        args = self.args
        publisher = SwitchingPublisher(
            PublisherSettings(self.blue.broker.connection("recipe-blue-green-publisher"),
                              queue=self.blue_queue),
            PublisherSettings(self.green.broker.connection("recipe-blue-green-publisher"),
                              queue=self.green_queue),
            OnePublisherHistory(self.history / "events" / f"{PUBLISHER}.jsonl", PUBLISHER),
            args.rate, args.messages, args.to_green)
        crash_at = f"m{args.handover_at:06d}" if args.crash_blue else None
        try:
            self.mirror()
            publisher.connect()
            self.wait_mirrored()
            print(f"   green: {self.green_queue.name} declared as the SDK does (quorum, single "
                  f"active consumer, parking queue {self.green_queue.parking_queue})")
            go = multiprocessing.get_context("spawn").Event()
            blue = self.spawn_consumer(self.blue, crash_at)
            green = self.spawn_consumer(self.green, go=go)  # it joins once blue leads
            blue.wait("role", args.timeout, role=Role.WAITING.value)
            if not poll(lambda: self.subscribed("blue"), args.timeout):
                raise TimeoutError(f"the blue consumer did not subscribe within "
                                   f"{args.timeout:g} s")
            print(f"2. blue consumer (pid {blue.pid}) leads the guard group: subscribed on blue")
            go.set()
            green.wait("role", args.timeout, role=Role.WAITING.value)
            print(f"   green consumer (pid {green.pid}) stands by: it does not lead")
            self.declare_shovel()
            print(f"   publishing {args.messages} messages at {args.rate:g}/s to blue ...")
            publisher.begin()
            if not publisher.wait_confirmed(args.handover_at, args.timeout):
                raise TimeoutError(f"{args.handover_at} messages not confirmed within "
                                   f"{args.timeout:g} s: {publisher.failed[:1]}")
            if args.switch_first:
                self.switch(publisher, wait=False)
                if not publisher.wait_confirmed(args.handover_at + 20, args.timeout):
                    raise TimeoutError("messages not confirmed on green")
            b_status = self.hand_over(blue)
            if args.restart_shovel:
                self.restart_shovel()
            if not poll(lambda: self.subscribed("green"), args.timeout):
                raise TimeoutError(f"the green consumer did not lead within {args.timeout:g} s")
            print("   the green consumer leads, subscribed on green; the shovel moves blue's "
                  "queue to green")
            if not args.switch_first:
                self.switch(publisher, wait=True)
            publisher.finish(args.timeout + args.messages / args.rate)
            confirmed = set(publisher.confirmed)
            poll(lambda: confirmed <= {e.msg for e in read_effects(
                self.database, self.green_queue.name)}, args.timeout)
            self.blue_left = blue_backlog(self.blue, self.blue_queue.name)
            g_status = green.stop(args.timeout)
        finally:
            with contextlib.suppress(SacError):
                publisher.close(1.0)  # a no-op after finish(); after an error, at once
            for process in self.consumers.values():
                process.kill()  # those still running after an error
        print(f"5. green consumer stopped (exit status {g_status}); blue's queue holds "
              f"{self.blue_left} message(s)")
        self.write_history(publisher)
        return self.verdict(publisher, b_status, g_status)

    def hand_over(self, blue: ConsumerProcess) -> int | None:
        """Step 3: the blue consumer goes: stopped gracefully, or (``--crash-blue``) dead of
        its own accord after a commit."""
        if self.args.crash_blue:
            print(f"3. waiting for the blue consumer to crash after committing "
                  f"m{self.args.handover_at:06d}, before its ack ...")
            status = blue.join(self.args.timeout)
        else:
            print("3. stopping the blue consumer (SIGTERM: a graceful stop; it leaves the "
                  "election) ...")
            status = blue.stop(self.args.timeout)
        print(f"   blue consumer exited (status {status})")
        return status

    def switch(self, publisher: SwitchingPublisher, *, wait: bool) -> None:
        done = publisher.switch(self.drained if wait else None, self.args.timeout)
        how = ("once blue's queue was empty" if wait
               else "AT ONCE, blue's queue not awaited (--switch-first)")
        print(f"4. publisher switched to green after {done.sent_to_blue} message(s) to blue, "
              f"{how}: paused {done.paused_s:.3f} s; {len(done.resent)} sent again to green "
              "(unconfirmed on blue)")
        if self.reads:
            print(f"   blue's queue read {len(self.reads)} time(s) (rabbitmqctl): "
                  + ", ".join(f"{n} message(s) in {s:.2f} s" for n, s in self.reads))

    # ---------------------------------------------------------------- afterwards

    def write_history(self, publisher: SwitchingPublisher) -> None:
        """The run's ``run.json`` and ``effects.jsonl`` beside the events, for ``sac check``."""
        name = self.green_queue.name
        publisher.history.close()
        weakened = [flag for flag in ("no_inbox", "switch_first") if getattr(self.args, flag)]
        (self.history / "run.json").write_text(json.dumps({
            "recipe": "blue_green", "queue": name,
            "single_active_queues": [name], "ordered_queues": [name],
            "blue": {"rabbitmq": version(self.blue), "queue": "classic, mirrored (ha-mode "
                     "all), single active consumer"},
            "green": {"rabbitmq": version(self.green), "queue": "quorum, single active "
                      "consumer"},
            "crash_blue": bool(self.args.crash_blue),
            "restart_shovel": bool(self.args.restart_shovel), "weakened": weakened,
        }, indent=2) + "\n")
        with (self.history / "effects.jsonl").open("w", encoding="utf-8") as out:
            for e in read_effects(self.database, name):
                out.write(json.dumps({"msg": e.msg, "actor": f"consumer-{e.side}",
                                      "epoch": e.epoch, "ts": e.ts}) + "\n")

    def verdict(self, publisher: SwitchingPublisher, b_status: int | None,
                g_status: int | None) -> int:
        effects = read_effects(self.database, self.green_queue.name)
        blue = [e for e in effects if e.side == "blue"]
        green = [e for e in effects if e.side == "green"]
        confirmed = set(publisher.confirmed)
        unconfirmed = sorted(set(publisher.sent) - confirmed)
        counts = Counter(e.msg for e in effects)
        missing = sorted(confirmed - set(counts))
        twice = sorted(m for m, n in counts.items() if n > 1)
        switched = publisher.switched
        to_blue = set(publisher.sent[:switched.sent_to_blue]) if switched else set()
        moved = sum(e.msg in to_blue for e in green)
        first: dict[str, Effect] = {}
        for e in effects:
            first.setdefault(e.msg, e)
        late = out_of_order([e.msg for e in first.values()])
        skipped = sum(e.get("duplicates_looked_up", 0) + e.get("duplicates_at_commit", 0)
                      for p in self.consumers.values() for e in p.events
                      if e["event"] == "stats")
        print()
        print(f"published and confirmed           {len(confirmed)}"
              + (f" ({len(unconfirmed)} unconfirmed: {publisher.failed[:1]})"
                 if unconfirmed else ""))
        print(f"handled by blue (then {'crashed' if self.args.crash_blue else 'stopped'})"
              .ljust(34) + f"{len(blue)}")
        print(f"handled by green                  {len(green)}, of which {moved} published to "
              "blue (moved by the shovel)")
        print(f"missing                           {len(missing)}" + sample(missing))
        print(f"done twice                        {len(twice)}" + sample(twice))
        print(f"duplicates skipped by the inbox   {skipped}")
        print(f"out of publish order              {len(late)}" + sample(late))
        if blue and green:
            print(f"gap: blue's last effect -> green's first {green[0].t - blue[-1].t:.3f} s")
        expected_blue = CRASHED if self.args.crash_blue else 0
        checks = {
            "every message confirmed, on blue or on green": not unconfirmed,
            "nothing missing": not missing,
            "nothing done twice": not twice,
            "the blue consumer worked first, then the green one: one at a time":
                bool(blue) and bool(green) and blue[-1].t < green[0].t,
            "green handled messages the shovel moved from blue": moved > 0,
            "effects in the publisher's order, across the switch": not late,
            "blue's queue empty at the end": self.blue_left == 0,
            f"the blue consumer exited {expected_blue}, the green one 0":
                b_status == expected_blue and g_status == 0,
        }
        return verdict(checks, "consumers, backlog and publisher moved from blue to green: "
                       "one consumer at a time across both clusters, every message handled "
                       "once, in the publisher's order.")

    def tidy(self) -> None:
        """The shovel, blue's policy and queue, green's queues: whatever exists of them."""
        blue, green = self.blue.management(), self.green.management()
        queue, parking = self.green_queue.name, str(self.green_queue.parking_queue)
        steps: list[Callable[[], None]] = [
            lambda: green.delete_parameter("shovel", self.shovel),
            lambda: blue.delete_policy(self.policy),
            lambda: blue.delete_queue(queue, if_empty=False),
            lambda: green.delete_queue(queue, if_empty=False),
            lambda: green.delete_queue(parking, if_empty=False),
        ]
        for step in steps:
            with contextlib.suppress(ManagementError):  # never made, gone already, or no answer
                step()
        print("deleted the shovel, blue's policy and queue, green's queue and parking queue")


if __name__ == "__main__":
    raise SystemExit(run(main))
