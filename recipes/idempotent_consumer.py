"""An idempotent consumer: each message's effect happens once, although RabbitMQ delivers at
least once.

A message comes again in two ways no broker setting prevents: (a) a forced redelivery (the
effect was made but the ack never reached the broker: the process died, the connection
dropped), flagged ``redelivered``; (b) a publisher retransmission (the broker stored the
message but its confirm was lost, so the publisher sends it again with the same message id;
the SDK's publisher marks such a copy ``x-sac-retransmit``, an application that publishes
again after a ``ConfirmTimeout`` sends it unmarked).

The pattern is ``consume()`` below: the SDK's ``Inbox`` runs the effect inside the dedup
store's transaction (SQLite or PostgreSQL), writes the message id's record in the same
transaction, and acks only after the commit; a message whose id is already recorded is
skipped before its effect runs.

The proof (below the pattern): publishes ``--messages`` messages; (a) consumer-1, in a
process of its own, dies (``os._exit``) right after committing message ``--crash-at``, before
its ack, and the restarted consumer-2 gets the batch ``redelivered`` and skips what was
committed; (b) the first ``--retransmit`` ids are published again, marked and unmarked, and
consumer-3 skips both copies by lookup. Proved when every message has exactly one effect
(rows in the effects table, which has no unique key) and each kind of duplicate was
suppressed (the inboxes' own statistics).

    python recipes/idempotent_consumer.py                    # SQLite, against `sac server up`
    python recipes/idempotent_consumer.py --dsn postgresql://user:password@host/db
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

# The proof's harness (finding the broker, consumer processes, the verdict): sac.recipe_kit.
# The pattern itself needs sac.sdk alone.
from sac.recipe_kit import (
    BadInput,
    Broker,
    ConsumerProcess,
    Database,
    Parser,
    Reporter,
    add_broker_arguments,
    attempt,
    find_broker,
    poll,
    positive,
    run,
    verdict,
)
from sac.sdk import (
    RETRANSMIT_HEADER,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    Inbox,
    InboxStats,
    PostgresStore,
    Publisher,
    PublisherSettings,
    QueueSettings,
    Role,
    Store,
    Transaction,
)

# --------------------------------------------------------------------------- the pattern

TABLE = "recipe_effects"
"""The service's own table, in the dedup store's database: the effect is a row in it."""
EFFECTS_COLUMNS = "queue TEXT NOT NULL, msg TEXT NOT NULL, consumer TEXT NOT NULL"
CRASHED = 3
"""The exit status of a consumer the proof makes die on purpose after its commit."""


def consume(connection: ConnectionSettings, queue: QueueSettings, store: Store, name: str,
            crash_after: str | None = None,
            on_role_change: Callable[[Role], None] | None = None) -> InboxStats:
    """One run of the service: a consumer whose effect goes through the inbox. Its
    statistics once it stopped (SIGTERM or Ctrl-C: a graceful stop).

    The effect inserts one row in the store's transaction; the inbox adds the message id's
    record to the same transaction, and the consumer acks after the commit. A message whose
    id is recorded already is skipped before its effect runs. ``crash_after`` is the proof's:
    the process dies right after the commit holding that message, before the ack."""
    mark = "%s" if isinstance(store, PostgresStore) else "?"  # the driver's placeholder
    insert = f"INSERT INTO {TABLE} (queue, msg, consumer) VALUES ({mark}, {mark}, {mark})"

    def effect(delivery: Delivery, tx: Transaction) -> None:
        tx.execute(insert, (queue.name, delivery.message_id, name))
        if delivery.message_id == crash_after:
            tx.on_commit(lambda: os._exit(CRASHED))  # committed, not yet acked

    inbox = Inbox(store, effect)
    Consumer(ConsumerSettings(connection, queue), inbox, on_role_change=on_role_change).run()
    return inbox.stats


# --------------------------------------------------------------------------- the proof
# Everything below runs the pattern and measures it; none of it is needed to use it.

def consumer_process(report: Reporter, connection: ConnectionSettings, queue: QueueSettings,
                     database: Database, crash_after: str | None) -> None:
    """``consume()`` in a process of its own: it says its role changes, and its inbox's
    statistics once stopped."""
    stats = consume(connection, queue, database.store(), report.name, crash_after,
                    on_role_change=lambda role: report.say("role", role=role.value))
    report.say("stats", **attrs.asdict(stats))


def effects_of(database: Database, queue: str) -> dict[str, int]:
    """Effects per message id of ``queue``."""
    rows = database.query(f"SELECT msg, COUNT(*) FROM {TABLE} WHERE queue = ? GROUP BY msg",
                          (queue,))
    return {str(msg): int(n) for msg, n in rows}


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = Parser(description="An inbox consumer: duplicates from a forced redelivery and "
                    "from a publisher's retransmission are suppressed; each effect once.")
    add_broker_arguments(parser)
    store = parser.add_argument_group("dedup store (one of)")
    store.add_argument("--db", default=None, metavar="PATH",
                       help="a SQLite file (default: one in a temporary directory)")
    store.add_argument("--dsn", default=None,
                       help="a PostgreSQL DSN instead (postgresql://user:password@host/db)")
    parser.add_argument("--messages", type=positive(int), default=200,
                        help="messages to publish (default: 200)")
    parser.add_argument("--crash-at", type=positive(int), default=None, metavar="N",
                        help="consumer-1 dies right after committing message N, before its "
                        "ack (default: half of --messages)")
    parser.add_argument("--retransmit", type=positive(int), default=10, metavar="M",
                        help="message ids published again, marked and unmarked (default: 10)")
    parser.add_argument("--timeout", type=positive(float), default=60.0,
                        help="seconds allowed for each step (default: 60)")
    args = parser.parse_args(argv)
    if args.db and args.dsn:
        parser.error("give --db or --dsn, not both")
    if args.crash_at is None:
        args.crash_at = max(1, args.messages // 2)
    if args.crash_at > args.messages:
        parser.error(f"--crash-at ({args.crash_at}) is beyond --messages ({args.messages})")
    if args.retransmit > args.messages:
        parser.error(f"--retransmit ({args.retransmit}) is beyond --messages "
                     f"({args.messages})")
    if args.db and not Path(args.db).parent.is_dir():
        parser.error(f"--db: no directory {Path(args.db).parent}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    broker = find_broker(args)
    scratch = None if args.db or args.dsn else Path(tempfile.mkdtemp(prefix="sac-inbox-"))
    path = args.db or (str(scratch / "inbox.db") if scratch is not None else None)
    database = Database(dsn=args.dsn, path=None if args.dsn else path)
    queue = QueueSettings(f"idempotent-{uuid.uuid4().hex[:8]}")
    try:
        database.create(TABLE, EFFECTS_COLUMNS)
    except BadInput:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    print(f"broker: {broker.description}")
    print(f"store: {database.describe()}")
    print(f"queue {queue.name}: {queue.type}, single active consumer")
    try:
        return attempt(broker, queue, Recipe(args, broker, queue, database).run)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


class Recipe:
    def __init__(self, args: Any, broker: Broker, queue: QueueSettings,
                 database: Database) -> None:
        self.args = args
        self.broker = broker
        self.queue = queue
        self.database = database
        self.processes: list[ConsumerProcess] = []

    def consumer(self, n: int, crash_after: str | None = None) -> ConsumerProcess:
        name = f"consumer-{n}"
        conn = self.broker.connection(f"recipe-idempotent-{name}", first=n)
        process = ConsumerProcess(name, consumer_process, conn, self.queue, self.database,
                                  crash_after)
        self.processes.append(process)
        return process

    def publisher(self) -> Publisher:
        conn = self.broker.connection("recipe-idempotent-publisher")
        return Publisher(PublisherSettings(conn, queue=self.queue))

    def wait_effects(self, ids: set[str]) -> None:
        """Until each of ``ids`` has an effect, or ``TimeoutError``."""
        if not poll(lambda: ids <= set(effects_of(self.database, self.queue.name)),
                    self.args.timeout):
            raise TimeoutError(f"messages still without an effect after "
                               f"{self.args.timeout:g} s")

    def stats(self, process: ConsumerProcess) -> tuple[InboxStats, int | None]:
        """Stop ``process`` gracefully; its inbox's statistics and exit status."""
        status = process.stop(self.args.timeout)
        said = process.wait("stats", 1.0)
        return InboxStats(**{f.name: said[f.name] for f in attrs.fields(InboxStats)}), status

    def run(self) -> int:
        try:
            return self._run()
        finally:
            for process in self.processes:
                process.kill()  # those still running after an error

    def _run(self) -> int:
        args = self.args
        with self.publisher() as publisher:
            bodies = [f"order {i}".encode() for i in range(1, args.messages + 1)]
            ids = publisher.publish_many(bodies)
        print(f"published {len(ids)} messages, each confirmed")
        crash_id = ids[args.crash_at - 1]

        print(f"\n(a) forced redelivery: consumer-1 dies right after the commit holding "
              f"message {args.crash_at} ({crash_id}), before that batch's ack")
        first = self.consumer(1, crash_after=crash_id)
        first_status = first.join(args.timeout)
        after_crash = effects_of(self.database, self.queue.name)
        print(f"  consumer-1 exited with status {first_status}; effects committed: "
              f"{len(after_crash)}, message {args.crash_at}'s among them: "
              f"{'yes' if crash_id in after_crash else 'no'}")
        first.kill()  # if it is still there, the broker would keep it the active one
        # A fresh message behind the returned ones (a queue delivers those first): once its
        # effect is in, consumer-2 has been through every redelivered message.
        with self.publisher() as publisher:
            after = publisher.publish(b"an order after the crash")
        second = self.consumer(2)
        self.wait_effects({*ids, after})
        redelivery, second_status = self.stats(second)
        print(f"  consumer-2, the restart: {redelivery.lookups} redelivered messages looked "
              f"up, {redelivery.duplicates_looked_up} already committed: suppressed (not run "
              f"again); {redelivery.committed} committed (with one fresh message published "
              "after the crash)")

        m = args.retransmit
        print(f"\n(b) publisher retransmission: the first {m} ids published again, marked "
              f"{RETRANSMIT_HEADER} (as the SDK's publisher does after a lost confirm), and "
              "again unmarked (as an application does after ConfirmTimeout); then one fresh "
              "message")
        with self.publisher() as publisher:
            for mid, body in zip(ids[:m], bodies, strict=False):
                publisher.publish(body, message_id=mid, headers={RETRANSMIT_HEADER: 1})
            for mid, body in zip(ids[:m], bodies, strict=False):
                publisher.publish(body, message_id=mid)
            last = publisher.publish(b"the last order")
        third = self.consumer(3)
        self.wait_effects({last})
        retransmission, third_status = self.stats(third)
        print(f"  consumer-3: {retransmission.duplicates_looked_up} copies (marked and "
              f"unmarked) suppressed by lookup, {retransmission.duplicates_at_commit} refused "
              f"at commit (the effect rolled back with the record), "
              f"{retransmission.committed} committed")

        effects = effects_of(self.database, self.queue.name)
        published = [*ids, after, last]
        missing = [i for i in published if i not in effects]
        twice = [i for i, n in effects.items() if n > 1]
        suppressed = (redelivery.duplicates_looked_up + retransmission.duplicates_looked_up
                      + retransmission.duplicates_at_commit)
        print(f"\nmessages published     {len(published)} (plus {2 * m} copies)")
        print(f"effects                {sum(effects.values())} rows for {len(effects)} ids")
        print(f"missing                {len(missing)}")
        print(f"done twice             {len(twice)}")
        print(f"duplicates suppressed  {suppressed}")
        checks = {
            "consumer-1 died right after its commit": first_status == CRASHED
            and crash_id in after_crash,
            "the redelivered, committed messages were suppressed":
                redelivery.duplicates_looked_up > 0,
            "every copy, marked or not, was suppressed by lookup":
                retransmission.duplicates_looked_up == 2 * m,
            "every message has an effect": not missing,
            "no effect twice": not twice,
            "consumers 2 and 3 stopped gracefully": second_status == 0 and third_status == 0,
        }
        return verdict(checks, "each message's effect happened exactly once, through a "
                       "forced redelivery and a publisher's retransmission.")


if __name__ == "__main__":
    raise SystemExit(run(main))
