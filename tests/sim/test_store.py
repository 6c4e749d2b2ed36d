"""The simulated dedup store: latency, failures, ambiguity and fencing in virtual time."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from sac.sdk import StaleEpoch, StoreUnavailable
from sac.sim.clock import EventQueue
from sac.sim.faults import StoreDown, StoreSlow
from sac.sim.harness import Action, ClaimEpoch, Commit, CommitDone, EpochClaimed, Event
from sac.sim.store import SimStore
from sac.sim.trace import Trace
from sac.sim.world import World


def store(seed: int = 1) -> SimStore:
    events = EventQueue()
    return SimStore(events, random.Random(seed), Trace(events))


def commit(s: SimStore, epoch: int, *ids: str, queue: str = "q") -> list[CommitDone]:
    done: list[CommitDone] = []
    s.commit_later(queue, epoch, "c1", ids, done.append)
    return done


def test_a_commit_completes_later_and_is_recorded_once() -> None:
    s = store()
    epoch = s.claim_epoch("q")
    done = commit(s, epoch, "a", "b")
    assert done == []
    s.events.run_until_idle(10.0)
    assert [(d.committed, d.duplicates, d.error) for d in done] == [(("a", "b"), (), None)]
    again = commit(s, epoch, "b", "c")
    s.events.run_until_idle(10.0)
    assert [(d.committed, d.duplicates) for d in again] == [(("c",), ("b",))]
    assert [(e.message_id, e.epoch) for e in s.ledger] == [("a", 1), ("b", 1), ("c", 1)]


def test_a_commit_from_a_replaced_consumer_is_fenced_when_it_completes() -> None:
    s = store()
    old = s.claim_epoch("q")
    done = commit(s, old, "a")
    s.claim_epoch("q")  # the successor claims while the old commit is in flight
    s.events.run_until_idle(10.0)
    [result] = done
    assert isinstance(result.error, StaleEpoch)
    assert s.ledger == []


def test_a_slow_store_answers_late() -> None:
    s = store()
    s.slow_for(5.0, latency=2.0)
    done = commit(s, s.claim_epoch("q"), "a")
    s.events.run_until(1.9)
    assert done == []
    s.events.run_until_idle(10.0)
    assert done[0].committed == ("a",)
    assert 2.0 <= s.ledger[0].t <= 2.01


def test_a_store_down_refuses_calls_and_its_commits_are_ambiguous() -> None:
    outcomes = set()
    for seed in range(10):
        s = store(seed)
        epoch = s.claim_epoch("q")
        done = commit(s, epoch, "a")
        s.fail_for(1.0)
        with pytest.raises(StoreUnavailable):
            s.seen("q", "a")
        s.events.run_until_idle(10.0)
        [result] = done
        assert isinstance(result.error, StoreUnavailable)
        # The store may have committed it all the same; the retry finds the record.
        s.events.run_until(2.0)
        outcomes.add(s.seen("q", "a"))
        retry = commit(s, epoch, "a")
        s.events.run_until_idle(10.0)
        assert retry[0].committed + retry[0].duplicates == ("a",)
        assert [e.message_id for e in s.ledger] == ["a"]
    assert outcomes == {True, False}


def test_the_blocking_interface_is_a_real_store() -> None:
    s = store()
    epoch = s.claim_epoch("q")
    applied: list[str] = []
    with s.transaction("q", "a", epoch, "c1") as tx:
        tx.on_commit(lambda: applied.append("a"))
    assert applied == ["a"]
    assert s.records("q") == [("a", 1, "c1", 0.0)]
    s.claim_epoch("q")
    with pytest.raises(StaleEpoch), s.transaction("q", "b", epoch, "c1"):
        pass
    assert [e.message_id for e in s.ledger] == ["a"]


class Committer:
    """Claims an epoch, then commits one message: the store calls a consumer makes."""

    name = "committer"

    def __init__(self) -> None:
        self.got: list[tuple[float, Event]] = []

    def start(self, now: float) -> Sequence[Action]:
        return [ClaimEpoch(token="claim", queue="q")]

    def receive(self, now: float, event: Event) -> Sequence[Action]:
        self.got.append((now, event))
        if isinstance(event, EpochClaimed) and event.epoch is not None:
            return [Commit(token="commit", queue="q", epoch=event.epoch, consumer=self.name,
                           message_ids=("a",))]
        return ()

    def tick(self, now: float) -> Sequence[Action]:
        return ()

    def next_tick(self) -> float | None:
        return None


def test_store_faults_reach_a_client_in_virtual_time() -> None:
    slow = World(1)
    slow_client = Committer()
    slow.schedule([StoreSlow(at=0.0, duration=5.0, latency=1.0)])
    slow.add(slow_client)
    slow.run_until_idle(10.0)
    (t1, claimed), (t2, done) = slow_client.got
    assert isinstance(claimed, EpochClaimed)
    assert isinstance(done, CommitDone)
    assert claimed.epoch == 1
    assert done.committed == ("a",)
    assert t1 >= 1.0
    assert t2 - t1 >= 1.0

    down = World(1)
    down_client = Committer()
    down.schedule([StoreDown(at=0.0, duration=5.0)])
    down.add(down_client)
    down.run_until_idle(10.0)
    [(_, refused)] = down_client.got
    assert isinstance(refused, EpochClaimed)
    assert isinstance(refused.error, StoreUnavailable)
