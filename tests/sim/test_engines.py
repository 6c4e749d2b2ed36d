"""The SDK's real engines under deterministic simulation (``sac sim``): a fast campaign, the
faults it claims to meet, exact replay, and each invariant shown able to fail."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from sac.sim.campaign import campaign, replay, run_one
from sac.sim.consumer import ConsumerClient
from sac.sim.invariants import Sent, Settled, retransmitted_with_mark
from sac.sim.publisher import PublisherClient
from sac.sim.workload import EnginesWorkload
from sac.sim.world import World
from .rig import printed_under_other_hash_seeds

LOOKED_INTO = 500
"""Seeds 0 to 499: the runs ``test_the_runs_meet_the_faults_and_paths_they_claim`` looks
into (each must pass too)."""
FAST_RUN = 500
"""Schedules in ``make test``'s campaign, a smoke size (about 7 s here): campaigns run
outside the tests (``sac sim --schedules 100000``). Its seeds follow ``LOOKED_INTO``, so the
module passes 1000 distinct seeds and runs none twice."""


def test_the_real_engines_pass_a_fast_campaign() -> None:
    began = time.perf_counter()
    summary = campaign(EnginesWorkload(), LOOKED_INTO, FAST_RUN)
    seconds = time.perf_counter() - began
    found = summary.found
    assert found is None, (found.outcome.seed, found.shrunk, found.shrunk_violations)
    assert summary.schedules == FAST_RUN
    print(f"\n{FAST_RUN} schedules in {seconds:.1f} s ({FAST_RUN / seconds:.0f} runs/s)")


class Watched:
    """The engines' workload, keeping each run's world to look at."""

    def __init__(self, workload: EnginesWorkload) -> None:
        self.workload = workload
        self.horizon, self.settle, self.space = workload.horizon, workload.settle, workload.space
        self.broker = workload.broker
        self.max_events = workload.max_events
        self.world: World | None = None

    def build(self, world: World) -> Callable[[], list[str]]:
        self.world = world
        return self.workload.build(world)


def test_the_runs_meet_the_faults_and_paths_they_claim() -> None:
    """Not a vacuous campaign: over 500 seeds the engines retransmit after losses,
    get nacks and blocks, have batches fenced and stores fail under them, park messages,
    hand over between consumers, and notice silent links."""
    watched = Watched(EnginesWorkload())
    seen: Counter[str] = Counter()
    for seed in range(LOOKED_INTO):
        outcome = run_one(seed, watched)  # type: ignore[arg-type]
        assert not outcome.failed, (seed, outcome.violations)
        world = watched.world
        assert world is not None
        pub = world.clients["pub"]
        assert isinstance(pub, PublisherClient)
        stats = pub.box.stats()
        seen["retransmitted"] += stats.retransmitted
        seen["nacked"] += stats.nacked
        seen["publisher reconnects"] += pub.reconnects
        for name in watched.space.clients:
            consumer = world.clients[name]
            assert isinstance(consumer, ConsumerClient)
            seen["consumer processes"] += consumer.lives
            seen.update(f"halted: {h.why}" for h in consumer.halts)
            seen["became active"] += sum(r.new == "active" for r in consumer.roles)
        seen.update(e.kind for e in world.trace.entries)
        seen["redelivered"] += sum(bool(e.get("redelivered")) for e in world.trace.of("deliver"))
        seen["parked"] += sum(e.get("queue") == "q.parked" for e in world.trace.of("commit"))
    for what in ("retransmitted", "nacked", "publisher reconnects", "halted: fenced",
                 "halted: store-unavailable", "became active", "redelivered", "blocked",
                 "server_cancel", "heartbeat_timeout", "publish_lost", "dead_letter",
                 "store_down", "store_slow", "effect_committed", "parked",
                 "client_closed_socket", "wire_tripped", "commit_failed"):
        assert seen[what] > 0, (what, seen)
    assert seen["consumer processes"] > 3 * 500  # stopped, killed, halted: started again


def test_a_seed_replays_exactly() -> None:
    workload = EnginesWorkload()
    for seed in (5, 17):
        first, second = replay(seed, workload), replay(seed, workload)
        assert first.trace.lines() == second.trace.lines()
        assert first.violations == second.violations == ()
        assert len(first.schedule) > 0
        # Without the frames the run is the same, only its trace shorter.
        quick = run_one(seed, workload)
        frames = ("client_got", "client_sent")
        assert [e for e in first.trace.lines() if e.split()[1] not in frames] == \
            quick.trace.lines()


class Spinner:
    """A client that never waits: it asks for a tick at the time it is ticked."""

    name = "spinner"

    def __init__(self) -> None:
        self.now = 0.0

    def start(self, now: float) -> list[Any]:
        return []

    def receive(self, now: float, event: Any) -> list[Any]:
        return []

    def tick(self, now: float) -> list[Any]:
        self.now = now
        return []

    def next_tick(self) -> float:
        return self.now


class Spinning(EnginesWorkload):
    def build(self, world: World) -> Callable[[], list[str]]:
        check = super().build(world)
        world.add(Spinner())
        return check


def digests(seeds: list[int]) -> list[str]:
    return [replay(seed, EnginesWorkload()).trace.digest() for seed in seeds]


def test_a_replay_does_not_depend_on_the_hash_seed() -> None:
    """The engines iterate over nothing whose order a ``PYTHONHASHSEED`` changes."""
    seeds = [3, 11, 42]
    here = digests(seeds)
    code = ("import logging; logging.disable(logging.WARNING); "
            "from tests.sim.test_engines import digests; "
            f"print(*digests({seeds!r}))")
    assert printed_under_other_hash_seeds(code) == [here, here]


def test_a_busy_loop_is_a_violation_not_a_hang() -> None:
    outcome = run_one(3, Spinning(max_events=5000))
    assert outcome.failed
    assert outcome.violations[0].startswith("the run raised Runaway at t=0.000")


def sent(link: str, tag: int, mid: str, mark: int | None = None) -> Sent:
    return Sent(link=link, tag=tag, message_id=mid, mark=mark)


def settled(link: str, tag: int, *, multiple: bool = False, ack: bool = True) -> Settled:
    return Settled(link=link, tag=tag, multiple=multiple, ack=ack)


def test_retransmission_rules_each_fail_on_their_case() -> None:
    ok: list[Any] = [
        [sent("p#1", 1, "a"), sent("p#1", 2, "b"), sent("p#2", 1, "b", 1)],
        [settled("p#1", 1), settled("p#2", 1)],
    ]
    assert retransmitted_with_mark(*ok, told_failed=()) == []
    # b lost with p#1 and never sent again
    [lost] = retransmitted_with_mark(ok[0][:2], ok[1][:1], told_failed=())
    assert "b was left unconfirmed on p#1" in lost
    assert retransmitted_with_mark(ok[0][:2], ok[1][:1], told_failed=("b",)) == []
    # sent again without its mark
    [unmarked] = retransmitted_with_mark(
        [sent("p#1", 1, "a"), sent("p#2", 1, "a")], [settled("p#2", 1)], ())
    assert "mark None, expected 1" in unmarked
    # nacked and dropped
    [nacked] = retransmitted_with_mark(
        [sent("p#1", 1, "a")], [settled("p#1", 1, multiple=True, ack=False)], ())
    assert "a was nacked on p#1" in nacked
    # a multiple ack covers the tags before it
    assert retransmitted_with_mark([sent("p#1", 1, "a"), sent("p#1", 2, "b")],
                                   [settled("p#1", 2, multiple=True)], ()) == []
