"""Runs from a seed replay exactly; failing schedules shrink to the faults that matter."""

from __future__ import annotations

import random

import pytest

from sac.sim.faults import Alarm, Election, Reset, Silence, Space, draw
from sac.sim.queue import Effect, QuorumQueue
from sac.sim.run import run, schedule_for
from sac.sim.sac import Consumer
from sac.sim.shrink import ddmin, shrink
from .naive import NaiveWorkload, digest_of
from .rig import printed_under_other_hash_seeds

WORKLOAD = NaiveWorkload()


def test_a_seed_replays_exactly() -> None:
    for seed in (3, 11, 42):
        first, second = run(seed, WORKLOAD), run(seed, WORKLOAD)
        assert first.schedule == second.schedule
        assert first.trace.lines() == second.trace.lines()
        assert first.violations == second.violations
        assert len(first.trace) > 100


def test_different_seeds_make_different_runs() -> None:
    digests = {run(seed, WORKLOAD).trace.digest() for seed in range(20)}
    assert len(digests) == 20


def test_a_replay_does_not_depend_on_the_hash_seed() -> None:
    """Another process with another ``PYTHONHASHSEED`` gets the same trace: nothing in the
    simulation iterates over a set of strings."""
    seeds = [s for s in range(40) if len(schedule_for(s, WORKLOAD)) >= 3][:3]
    here = [digest_of(s) for s in seeds]
    code = ("import sys; from tests.sim.naive import digest_of; "
            f"print(*[digest_of(s) for s in {seeds!r}])")
    assert printed_under_other_hash_seeds(code) == [here, here]


def test_schedules_are_drawn_from_the_seed_within_their_space() -> None:
    space = Space(links=("a", "b"), queues=("q",), horizon=2.0, max_faults=6, store=True)
    drawn = [draw(random.Random(seed), space) for seed in range(200)]
    assert drawn == [draw(random.Random(seed), space) for seed in range(200)]
    faults = [f for s in drawn for f in s]
    assert all(0.0 <= f.at <= 2.0 for f in faults)
    assert all(getattr(f, "link", "a") in ("a", "b") for f in faults)
    assert len({type(f).__name__ for f in faults}) == 9  # every kind but DeleteQueue
    assert all(list(s) == sorted(s, key=lambda f: f.at) for s in drawn)


def test_the_broker_never_loses_a_committed_message() -> None:
    """Whatever the faults, a message the simulated broker committed is still somewhere
    or was acked (``sim.invariants``)."""
    for seed in range(300):
        outcome = run(seed, WORKLOAD)
        assert [v for v in outcome.violations if "was lost" in v] == [], (
            seed, outcome.schedule)


def test_ddmin_keeps_exactly_the_faults_that_together_fail() -> None:
    faults = tuple(Reset(at=float(i), link=f"l{i}") for i in range(9))
    needed = {faults[2], faults[7]}
    calls: list[int] = []

    def fails(schedule: tuple[object, ...]) -> bool:
        calls.append(1)
        return needed <= set(schedule)

    assert ddmin(faults, fails) == (faults[2], faults[7])
    assert len(calls) < 40


def test_shrink_makes_faults_smaller() -> None:
    schedule = (Alarm(at=0.1, duration=2.0), Silence(at=0.5, link="a", duration=4.0),
                Election(at=1.0, queue="q", duration=0.4))

    def fails(candidate: tuple[object, ...]) -> bool:
        return any(isinstance(f, Silence) and f.duration >= 0.9 for f in candidate)

    assert shrink(schedule, fails) == (Silence(at=0.5, link="a", duration=1.0),)


def test_a_failing_run_shrinks_to_one_fault_that_replays() -> None:
    seed = next(s for s in range(500)
                if len(schedule_for(s, WORKLOAD)) >= 3 and run(s, WORKLOAD).failed)
    original = run(seed, WORKLOAD)

    def fails(schedule: tuple[object, ...]) -> bool:
        return run(seed, WORKLOAD, schedule).failed  # type: ignore[arg-type]

    shrunk = shrink(original.schedule, fails)
    assert len(shrunk) == 1 < len(original.schedule)
    assert fails(shrunk)
    assert not fails(())
    again, twice = run(seed, WORKLOAD, shrunk), run(seed, WORKLOAD, shrunk)
    assert again.trace.lines() == twice.trace.lines()
    assert again.violations == twice.violations != ()


def test_the_loss_invariant_catches_a_broker_that_drops_returns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def drop_all(self: QuorumQueue, consumer: Consumer, **_how: object) -> list[Effect]:
        consumer.checked_out.clear()
        return []

    monkeypatch.setattr(QuorumQueue, "_return_all", drop_all)
    caught = [seed for seed in range(100)
              if any("was lost" in v for v in run(seed, WORKLOAD).violations)]
    assert caught
