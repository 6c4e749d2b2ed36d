"""A commit the store refuses for one message's data is that message's failure, not an
outage: the inbox finds the message among its batch, commits the others, and never waits
out ``store_retry`` for it (which would end in ``StoreUnavailable``, and the next consumer
would meet the same batch)."""

from __future__ import annotations

import psycopg
import pytest

from sac.sdk import Backoff, Delivery, StoreUnavailable
from sac.sdk.dedup import Inbox, Outcome, PostgresStore, Transaction
from sac.server import LocalPostgres
from tests.dedup.conftest import new_database

SHORT = Backoff(initial=0.05, maximum=0.1, max_attempts=None, max_elapsed=2.0)


def delivery(message_id: str, n: int) -> Delivery:
    return Delivery(str(n).encode(), message_id, {}, False, None, "q", "q", "")


def test_a_commit_refused_for_one_messages_data_fails_that_message_only(
    postgres: LocalPostgres,
) -> None:
    dsn = new_database(postgres, "refused")
    with psycopg.connect(dsn, autocommit=True) as admin:
        # Checked only at COMMIT: the batch's statements all succeed, its commit fails.
        admin.execute("CREATE TABLE effects (n int UNIQUE DEFERRABLE INITIALLY DEFERRED)")

    def effect(d: Delivery, tx: Transaction) -> None:
        tx.execute("INSERT INTO effects (n) VALUES (%s)", (int(d.body),))
        if d.message_id == "bad":
            tx.execute("INSERT INTO effects (n) VALUES (%s)", (int(d.body),))

    store = PostgresStore(dsn)
    inbox = Inbox(store, effect, store_retry=SHORT)
    inbox.bind("q", "c", None)
    inbox.open()
    try:
        results = inbox.process_batch([delivery("g1", 1), delivery("bad", 2),
                                       delivery("g2", 3)], activation=1)
        assert results[0] is Outcome.COMMITTED
        assert isinstance(results[1], psycopg.errors.UniqueViolation)
        assert len(results) == 2  # what follows the failed one waits, as in any batch
        assert inbox.process_batch([delivery("g2", 3)], activation=1) == [Outcome.COMMITTED]
        assert inbox.stats.store_retries == 0
        assert sorted(m for m, *_ in store.records("q")) == ["g1", "g2"]
    finally:
        inbox.close()
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert [r[0] for r in admin.execute("SELECT n FROM effects ORDER BY n")] == [1, 3]


@pytest.mark.parametrize("fault", [
    # The store failing for everyone: its records table dropped under it, found by the
    # batch's lookup.
    pytest.param("DROP TABLE sac_dedup_records", id="records-table-dropped"),
    # A constraint error (class 23, as a message's data would raise) from claiming the
    # epoch, before any effect ran: it says nothing about the messages.
    pytest.param("ALTER TABLE sac_dedup_epochs ADD CHECK (epoch < 0) NOT VALID",
                 id="epoch-claim-refused"),
])
def test_a_failure_that_is_not_a_messages_data_is_still_retried(
    postgres: LocalPostgres, fault: str,
) -> None:
    """A store fault that is not one message's (a lookup or an epoch claim failing) fails
    no message (and so parks none): the batch is tried again under ``store_retry``, then the
    consumer stops with every message unacked."""
    dsn = new_database(postgres, fault.split()[0].lower())
    store = PostgresStore(dsn, connect_timeout=1)
    inbox = Inbox(store, lambda d, tx: None, store_retry=SHORT)
    inbox.bind("q", "c", None)
    inbox.open()
    try:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(fault)
        with pytest.raises(StoreUnavailable, match=r"2 message\(s\) left unacked"):
            inbox.process_batch([delivery("g1", 1), delivery("g2", 2)], activation=1)
        assert inbox.stats.store_retries >= 1
    finally:
        inbox.close()
