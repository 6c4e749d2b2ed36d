"""What goes wrong in the middle of a batch, where the PostgreSQL store sends statements
without waiting for their answers (pipeline mode) and so learns of a failure only at the
commit: the inbox still commits every other message, fails only the one at fault, and never
commits after its consumer was replaced. The SQLite store, which waits for every answer,
is held to the same outcomes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sac.sdk import Backoff, Delivery, StaleEpoch
from sac.sdk.dedup import Inbox, LookupPolicy, Outcome, PostgresStore, Store, Transaction
from sac.sdk.dedup._store import Duplicate
from tests.dedup.conftest import SQL_STORES, StoreFactory
from tests.dedup.test_stores import effect_table, effects, write_effect

Q = "orders"
SHORT = Backoff(initial=0.05, maximum=0.1, max_attempts=None, max_elapsed=5.0)


def delivery(message_id: str, tag: int) -> Delivery:
    return Delivery(body=b"x", message_id=message_id, headers={}, redelivered=False,
                    delivery_count=None, queue=Q, routing_key=Q, exchange="", delivery_tag=tag)


def batch(*ids: str) -> list[Delivery]:
    return [delivery(m, i + 1) for i, m in enumerate(ids)]


@pytest.fixture(params=SQL_STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def inbox_for(make_store: StoreFactory) -> Iterator[Callable[..., tuple[Inbox, Store]]]:
    made: list[Inbox] = []

    def build(then: Callable[[Delivery, Transaction], None] = lambda d, tx: None,
              policy: LookupPolicy = LookupPolicy.DEFAULT) -> tuple[Inbox, Store]:
        """An inbox whose effect writes the message's row, then does ``then``."""
        store = make_store()

        def effect(d: Delivery, tx: Transaction) -> None:
            write_effect(store, tx, str(d.message_id))
            then(d, tx)

        inbox = Inbox(store, effect, policy=policy, store_retry=SHORT)
        inbox.bind(Q, "consumer-a", None)
        inbox.open()
        effect_table(store)
        made.append(inbox)
        return inbox, store

    yield build
    for inbox in made:
        inbox.close()


def committed(store: Store) -> list[str]:
    return sorted(m for m, *_ in store.records(Q))


def test_an_effect_failing_in_the_middle_fails_that_message_only(
    inbox_for: Callable[..., tuple[Inbox, Store]],
) -> None:

    def effect(d: Delivery, tx: Transaction) -> None:
        if d.message_id == "bad":
            raise ValueError("poisoned")

    inbox, store = inbox_for(effect)
    results = inbox.process_batch(batch("g1", "g2", "bad", "g3"), activation=1)
    assert results[:2] == [Outcome.COMMITTED, Outcome.COMMITTED]
    assert isinstance(results[2], ValueError)
    assert len(results) == 3  # what follows the failed one waits for it
    assert committed(store) == ["g1", "g2"]
    assert sorted(effects(store)) == ["g1", "g2"]  # the bad one's row was undone
    assert inbox.stats.store_retries == 0


def test_a_statement_failing_in_the_middle_fails_that_message_only(
    inbox_for: Callable[..., tuple[Inbox, Store]],
) -> None:
    """The bad message's second row breaks a unique key at once (not deferred); on
    PostgreSQL its error comes back only with the commit's answer."""

    def effect(d: Delivery, tx: Transaction) -> None:
        if d.message_id == "bad":
            tx.execute("INSERT INTO unique_ids (id) VALUES ('same')")
            tx.execute("INSERT INTO unique_ids (id) VALUES ('same')")

    inbox, store = inbox_for(effect)
    with store.transaction("setup", "setup", 0) as tx:
        tx.execute("CREATE TABLE unique_ids (id TEXT PRIMARY KEY)")
    results = inbox.process_batch(batch("g1", "g2", "bad", "g3"), activation=1)
    assert results[:2] == [Outcome.COMMITTED, Outcome.COMMITTED]
    assert "unique" in str(results[2]).lower()
    assert len(results) == 3
    assert committed(store) == ["g1", "g2"]
    assert sorted(effects(store)) == ["g1", "g2"]
    assert inbox.stats.store_retries == 0
    # The message alone, as the consumer tries it again: the same failure, nothing kept.
    [again] = inbox.process_batch(batch("bad"), activation=1)
    assert "unique" in str(again).lower()
    assert committed(store) == ["g1", "g2"]


def test_a_record_committed_before_the_batch_is_a_duplicate_without_a_lookup(
    inbox_for: Callable[..., tuple[Inbox, Store]], make_store: StoreFactory,
) -> None:
    """Without a lookup, a message another consumer committed is refused by its record:
    its effect leaves nothing, the others commit."""
    inbox, store = inbox_for(policy=LookupPolicy.NEVER)
    other = make_store()
    other.open()
    with other.transaction(Q, "m-3", 0, "consumer-b"):
        pass
    results = inbox.process_batch(batch("m-1", "m-2", "m-3", "m-4"), activation=1)
    assert results == [Outcome.COMMITTED, Outcome.COMMITTED, Outcome.DUPLICATE,
                       Outcome.COMMITTED]
    assert committed(store) == ["m-1", "m-2", "m-3", "m-4"]
    assert sorted(effects(store)) == ["m-1", "m-2", "m-4"]
    assert inbox.stats.duplicates_at_commit == 1


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_another_consumer_waits_for_the_records_a_batch_holds(
    inbox_for: Callable[..., tuple[Inbox, Store]], make_store: StoreFactory,
) -> None:
    """A batch holds its messages' records from its start: another consumer committing one
    of them meanwhile (no fencing between them: the same epoch) waits for the batch, then
    finds it a duplicate; the effect runs once. (On SQLite the one write lock does the
    same.)"""
    other = make_store()
    other.open()
    started = threading.Event()
    outcome: list[BaseException | None] = []

    def commit_elsewhere() -> None:
        started.set()
        try:
            with other.transaction(Q, "m-3", inbox.epoch, "consumer-b") as tx:
                write_effect(other, tx, "m-3")
            outcome.append(None)
        except Exception as exc:  # noqa: BLE001 - what the test looks at
            outcome.append(exc)

    waiter = threading.Thread(target=commit_elsewhere)

    def effect(d: Delivery, tx: Transaction) -> None:
        if d.message_id == "m-1" and not started.is_set():
            waiter.start()
            started.wait(5)
            waiter.join(0.5)  # it waits on this batch's record of m-3
            assert waiter.is_alive(), "the other commit did not wait for this batch"

    inbox, store = inbox_for(effect, LookupPolicy.NEVER)
    results = inbox.process_batch(batch("m-1", "m-2", "m-3", "m-4"), activation=1)
    assert results == [Outcome.COMMITTED] * 4
    waiter.join(10)
    [refused] = outcome
    assert isinstance(refused, Duplicate), outcome
    assert committed(store) == ["m-1", "m-2", "m-3", "m-4"]
    assert sorted(effects(store)) == ["m-1", "m-2", "m-3", "m-4"]


def test_a_copy_inside_a_batch_without_lookup_runs_once(
    inbox_for: Callable[..., tuple[Inbox, Store]],
) -> None:

    inbox, store = inbox_for(policy=LookupPolicy.NEVER)
    results = inbox.process_batch(batch("m-1", "m-2", "m-1", "m-3"), activation=1)
    assert results == [Outcome.COMMITTED, Outcome.COMMITTED, Outcome.DUPLICATE,
                       Outcome.COMMITTED]
    assert sorted(effects(store)) == ["m-1", "m-2", "m-3"]


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_a_consumer_replaced_in_the_middle_of_a_batch_commits_nothing(
    inbox_for: Callable[..., tuple[Inbox, Store]], make_store: StoreFactory,
) -> None:
    """A successor claims the epoch while the batch's second effect runs (on PostgreSQL the
    claim ends this consumer's session, which waits for its client inside the batch): the
    batch is refused with ``StaleEpoch``, none of it committed."""
    successor = make_store()
    successor.open()
    claimed: list[int] = []

    def effect(d: Delivery, tx: Transaction) -> None:
        if d.message_id == "m-2" and not claimed:
            claimed.append(successor.claim_epoch(Q))

    inbox, store = inbox_for(effect)
    inbox.process_batch(batch("m-0"), activation=1)
    with pytest.raises(StaleEpoch) as caught:
        inbox.process_batch(batch("m-1", "m-2", "m-3"), activation=1)
    assert (caught.value.epoch, caught.value.current) == (1, claimed[0])
    assert committed(store) == ["m-0"]
    assert effects(store) == ["m-0"]


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_a_batch_that_waits_on_a_record_another_consumer_then_commits_finds_it_a_duplicate(
    inbox_for: Callable[..., tuple[Inbox, Store]], make_store: StoreFactory,
) -> None:
    """The batch's first take bets that every id is new. Another consumer holds the
    record of one of them (no fencing between them: the same epoch): the take waits for
    it, and when the other commits, that message is a duplicate and the others commit."""
    import psycopg

    inbox, store = inbox_for()
    assert isinstance(store, PostgresStore)
    other = make_store()
    other.open()
    outcome: list[list[Outcome | Exception] | BaseException] = []

    def consume() -> None:
        try:
            outcome.append(inbox.process_batch(batch("m-1", "m-2", "m-3"), activation=1))
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            outcome.append(exc)

    consumer = threading.Thread(target=consume)
    inbox.process_batch(batch("m-0"), activation=1)  # its epoch claimed: the other's too
    with other.batch(Q, inbox.epoch, "consumer-b") as held:
        with held.message("m-2") as tx:
            write_effect(other, tx, "m-2")
        with psycopg.connect(store.dsn, autocommit=True) as watch:
            consumer.start()
            deadline = time.monotonic() + 10
            # Wait for the event meant: the inbox's session blocked on the held record.
            while not watch.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND application_name LIKE %s", (f"%{store.token}%",)).fetchone():
                assert time.monotonic() < deadline, "the batch never waited on the record"
                assert consumer.is_alive(), outcome
                watch.execute("SELECT pg_sleep(0.02)")
    consumer.join(10)
    assert outcome == [[Outcome.COMMITTED, Outcome.DUPLICATE, Outcome.COMMITTED]]
    assert committed(store) == ["m-0", "m-1", "m-2", "m-3"]
    assert sorted(effects(store)) == ["m-0", "m-1", "m-2", "m-3"]  # m-2's once: the other's
    assert inbox.stats.duplicates_looked_up == 1  # the take is the default policy's lookup
