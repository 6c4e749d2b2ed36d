"""The inbox's decisions on each store: what it looks up under each policy, what it commits,
what it refuses. Deliveries are built directly here; tests/sdk/test_inbox.py runs the same
inbox under real consumers and a real broker."""

from __future__ import annotations

from typing import Any

import pytest

from sac.sdk import (
    RETRANSMIT_HEADER,
    Backoff,
    Delivery,
    HistoryRecorder,
    MissingMessageId,
    StaleEpoch,
    StoreUnavailable,
)
from sac.sdk.dedup import (
    Inbox,
    LookupPolicy,
    MemoryStore,
    Outcome,
    PostgresStore,
    Store,
    Transaction,
)
from tests.dedup.conftest import StoreFactory
from tests.dedup.test_stores import effect_table, effects, write_effect

Q = "orders"


def delivery(msg: str | None, *, redelivered: bool = False, count: int | None = None,
             retransmitted: bool = False, tag: int = 1) -> Delivery:
    headers: dict[str, Any] = {}
    if count is not None:
        headers["x-delivery-count"] = count
    if retransmitted:
        headers[RETRANSMIT_HEADER] = 1
    return Delivery(body=b"x", message_id=msg, headers=headers, redelivered=redelivered,
                    delivery_count=count, queue=Q, routing_key=Q, exchange="", delivery_tag=tag)


class Sink:
    """The application's effect: a row through the transaction, and a count of runs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.runs: list[str] = []

    def __call__(self, d: Delivery, tx: Transaction) -> None:
        self.runs.append(str(d.message_id))
        write_effect(self.store, tx, str(d.message_id))


def make_inbox(store: Store, policy: LookupPolicy = LookupPolicy.DEFAULT,
               **kwargs: Any) -> tuple[Inbox, Sink]:
    sink = Sink(store)
    inbox = Inbox(store, sink, policy=policy, **kwargs)
    inbox.bind(Q, "consumer-a", kwargs.pop("recorder", None))
    inbox.open()
    effect_table(store)
    return inbox, sink


def test_the_flagged_policy_looks_up_only_flagged_messages(make_store: StoreFactory) -> None:
    inbox, sink = make_inbox(make_store(), LookupPolicy.FLAGGED)
    try:
        assert inbox.process(delivery("m-1"), 1) is Outcome.COMMITTED
        assert inbox.stats.lookups == 0
        # Each kind of possible copy is looked up and skipped without running the effect.
        for copy in (delivery("m-1", redelivered=True), delivery("m-1", count=1),
                     delivery("m-1", retransmitted=True)):
            assert inbox.process(copy, 1) is Outcome.DUPLICATE
        assert sink.runs == ["m-1"]
        assert inbox.stats.lookups == 3
        assert inbox.stats.duplicates_looked_up == 3
        assert inbox.stats.committed == 1
        # A flagged message never seen before is looked up, then committed.
        assert inbox.process(delivery("m-2", redelivered=True), 1) is Outcome.COMMITTED
        assert inbox.stats.lookups == 4
    finally:
        inbox.close()


def test_the_default_looks_up_an_unflagged_copy(make_store: StoreFactory) -> None:
    """A publisher that does not mark its retransmissions sends an unflagged copy; so does
    ours when the original was held on a silent link (``tests/sim/test_findings.py``)."""
    inbox, sink = make_inbox(make_store())
    assert inbox.policy is LookupPolicy.ALWAYS
    try:
        inbox.process(delivery("m-1"), 1)
        assert inbox.process(delivery("m-1"), 1) is Outcome.DUPLICATE
        assert sink.runs == ["m-1"]
        assert inbox.stats.lookups == 2
    finally:
        inbox.close()


def test_a_batch_is_looked_up_at_once_and_a_copy_inside_it_is_caught(
    make_store: StoreFactory,
) -> None:
    """One read per batch: what was committed before it, and what it committed so far."""
    inbox, sink = make_inbox(make_store())
    try:
        assert inbox.process(delivery("m-1"), 1) is Outcome.COMMITTED
        batch = [delivery("m-1", tag=2), delivery("m-2", tag=3), delivery("m-2", tag=4),
                 delivery("m-3", tag=5)]
        assert inbox.process_batch(batch, 1) == [
            Outcome.DUPLICATE, Outcome.COMMITTED, Outcome.DUPLICATE, Outcome.COMMITTED]
        assert sink.runs == ["m-1", "m-2", "m-3"]
        assert inbox.stats.lookups == 5
        assert inbox.stats.duplicates_looked_up == 2
        assert inbox.stats.duplicates_at_commit == 0
    finally:
        inbox.close()


def test_without_lookup_a_sql_store_rolls_the_copy_back(make_store: StoreFactory) -> None:
    store = make_store()
    inbox, sink = make_inbox(store, LookupPolicy.NEVER)
    try:
        inbox.process(delivery("m-1"), 1)
        assert inbox.process(delivery("m-1", redelivered=True), 1) is Outcome.DUPLICATE
        assert inbox.stats.lookups == 0
        if isinstance(store, MemoryStore):
            assert sink.runs == ["m-1"]  # it checks before running: it cannot roll back
        elif isinstance(store, PostgresStore):
            # It takes the batch's records before the effects run: the copy's is refused.
            assert sink.runs == ["m-1"]
            assert effects(store) == ["m-1"]
        else:
            assert sink.runs == ["m-1", "m-1"]  # ran, then rolled back at commit
            assert effects(store) == ["m-1"]
        assert inbox.stats.duplicates_at_commit == 1
    finally:
        inbox.close()


def test_each_activation_claims_a_new_epoch_and_fences_the_old(
    make_store: StoreFactory, tmp_path: Any
) -> None:
    first_store, second_store = make_store(), make_store()
    history = HistoryRecorder(tmp_path / "a.jsonl", "consumer-a")
    first, _ = make_inbox(first_store)
    first.recorder = history
    second, sink2 = make_inbox(second_store)
    try:
        first.process(delivery("m-1"), 1)
        assert first.epoch == 1
        second.process(delivery("m-2"), 1)  # the other consumer became active
        assert second.epoch == 2
        with pytest.raises(StaleEpoch) as caught:
            first.process(delivery("m-3"), 1)
        assert (caught.value.epoch, caught.value.current) == (1, 2)
        assert not first_store.seen(Q, "m-3")
        assert first.stats.stale == 1
        first.process(delivery("m-3"), 2)  # active again: a new epoch
        assert first.epoch == 3
        assert sink2.runs == ["m-2"]
    finally:
        first.close()
        second.close()
        history.close()
    import json

    events = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [(e["type"], e.get("epoch")) for e in events] == [
        ("active", 1), ("commit", 1), ("commit_rejected", 1), ("active", 3), ("commit", 3)]
    assert events[2]["why"] == "stale-epoch"


def test_an_epoch_from_outside(make_store: StoreFactory) -> None:
    elected = [41]
    inbox, _ = make_inbox(make_store(), epoch_source=lambda: elected[0])
    try:
        inbox.process(delivery("m-1"), 1)
        assert inbox.epoch == 41
        elected[0] = 40  # an older election result
        with pytest.raises(StaleEpoch):
            inbox.process(delivery("m-2"), 2)
    finally:
        inbox.close()


def test_a_consumers_session_passes_the_epoch_with_each_batch(
        make_store: StoreFactory) -> None:
    """A guarded consumer gives the leadership's token with the batch (``epoch``): the inbox
    adopts it and refuses an older one, with nothing set on the inbox itself."""
    store = make_store()
    inbox = Inbox(store, Sink(store))
    session = inbox.session(queue=Q, consumer="consumer-a", recorder=None)
    inbox.open()
    effect_table(store)
    try:
        assert session.process_batch([delivery("m-1")], 1, epoch=lambda: 41) == [
            Outcome.COMMITTED]
        assert inbox.epoch == 41
        assert inbox.epoch_source is None
        with pytest.raises(StaleEpoch):
            session.process_batch([delivery("m-2")], 2, epoch=lambda: 40)
        with pytest.raises(ValueError, match="already serves queue 'orders'"):
            inbox.session(queue="payments", consumer="consumer-b", recorder=None)
    finally:
        inbox.close()


def test_a_message_without_id_is_refused(make_store: StoreFactory) -> None:
    inbox, sink = make_inbox(make_store())
    try:
        with pytest.raises(MissingMessageId, match="message_id"):
            inbox.process(delivery(None, tag=7), 1)
        assert sink.runs == []
    finally:
        inbox.close()


def test_an_inbox_checks_what_it_is_given() -> None:
    with pytest.raises(TypeError, match="Store"):
        Inbox("sqlite:///x.db", lambda d, tx: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        Inbox(MemoryStore(), "effect")  # type: ignore[arg-type]


def test_records_are_purged_in_the_background_while_messages_commit(
    make_store: StoreFactory,
) -> None:
    from sac.sdk.dedup import Retention
    from tests.helpers import wait_until

    store = make_store()
    inbox, _ = make_inbox(store, retention=Retention(max_records=5, interval=0.05, batch=2))
    try:
        for n in range(40):
            inbox.process(delivery(f"m-{n}"), 1)
        wait_until(lambda: len(store.records(Q)) <= 5, 10, "the purge to keep 5 records")
        kept = [r[0] for r in store.records(Q)]
        assert kept[-1] == "m-39"  # the newest stay
        assert inbox.process(delivery("m-40"), 1) is Outcome.COMMITTED
    finally:
        inbox.close()


def test_a_batch_commits_together_and_isolates_each_message(make_store: StoreFactory) -> None:
    """One store transaction for the batch: a failing effect and a copy inside it undo only
    themselves; the rest commits. A failed effect ends the batch: the messages after it wait
    (the consumer retries or parks the failed one first, keeping the queue's order)."""
    store = make_store()
    inbox, _ = make_inbox(store)
    real = inbox.effect

    def effect(d: Delivery, tx: Transaction) -> None:
        real(d, tx)
        if d.message_id == "bad":
            raise ValueError("effect broke")

    inbox.effect = effect
    try:
        results = inbox.process_batch(
            [delivery("m-1"), delivery("m-2"), delivery("m-1", retransmitted=True),
             delivery("bad"), delivery("m-3")], 1)
        assert results[:3] == [Outcome.COMMITTED, Outcome.COMMITTED, Outcome.DUPLICATE]
        assert isinstance(results[3], ValueError)
        assert len(results) == 4, "m-3 ran past the failed message"
        assert sorted(r[0] for r in store.records(Q)) == ["m-1", "m-2"]
        if not isinstance(store, MemoryStore):
            assert sorted(effects(store)) == ["m-1", "m-2"]  # "bad" rolled back
        assert inbox.stats.committed == 2
        rest = inbox.process_batch([delivery(None), delivery("m-3")], 1)
        assert isinstance(rest[0], MissingMessageId)
        assert len(rest) == 1
    finally:
        inbox.close()


def test_a_stale_batch_commits_nothing(make_store: StoreFactory) -> None:
    first_store, second_store = make_store(), make_store()
    first, _ = make_inbox(first_store)
    second, _ = make_inbox(second_store)
    try:
        first.process(delivery("m-0"), 1)
        second.process(delivery("x"), 1)  # replaced the first
        with pytest.raises(StaleEpoch):
            first.process_batch([delivery("m-1"), delivery("m-2")], 1)
        assert {r[0] for r in first_store.records(Q)} == {"m-0", "x"}
        if not isinstance(first_store, MemoryStore):
            assert sorted(effects(first_store)) == ["m-0", "x"]
    finally:
        first.close()
        second.close()


class Outage(MemoryStore):
    """A memory store whose transactions fail while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def batch(self, queue: str, epoch: int, consumer: str | None = None) -> Any:
        if self.down:
            raise StoreUnavailable("down (test)")
        return super().batch(queue, epoch, consumer)


def test_batch_steps_yield_the_waits_for_a_failing_store() -> None:
    """What a driver on virtual time (the simulator) uses: the batch's tries as steps, the
    waits between them yielded on the given clock, the result (or the error) at the end."""
    now = [0.0]
    store = Outage()
    quick = Backoff(initial=1.0, maximum=1.0, max_attempts=None, max_elapsed=2.5)
    inbox = Inbox(store, lambda _d, _tx: None, store_retry=quick, clock=lambda: now[0],
                  rng=lambda: 1.0)
    inbox.bind(Q, "a", None)
    steps = inbox.batch_steps([delivery("m-1")], 1)
    assert next(steps) == 1.0
    now[0] += 1.0
    store.down = False
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value == [Outcome.COMMITTED]
    assert inbox.stats.store_retries == 1
    store.down = True
    steps = inbox.batch_steps([delivery("m-2")], 1)
    waits: list[float] = []

    def wait_out() -> None:
        while True:
            waits.append(next(steps))
            now[0] += waits[-1]

    with pytest.raises(StoreUnavailable, match="failed 4 time"):
        wait_out()
    assert waits == [1.0, 1.0, 0.5]  # then 2.5 s had passed: the bound
