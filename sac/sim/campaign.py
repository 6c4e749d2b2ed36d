"""Many runs of the engines' workload, one schedule each, stopping at the first violation,
which is shrunk to the fewest, smallest faults that still fail; and the replay of one seed.

Seeds ``seed``, ``seed + 1``, ... are run in order, so a campaign is a function of its first
seed and its length; the failing seed alone replays its run (``replay``).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from .faults import Schedule
from .run import Outcome, run
from .shrink import shrink
from .workload import EnginesWorkload


@attrs.frozen(kw_only=True)
class Found:
    """The first failing run of a campaign."""

    index: int
    """How many schedules passed before it (0: the first one failed)."""
    outcome: Outcome
    shrunk: Schedule
    shrunk_violations: tuple[str, ...]


@attrs.frozen(kw_only=True)
class Summary:
    first_seed: int
    schedules: int
    """How many were run (up to and including a failing one)."""
    found: Found | None


def run_one(seed: int, workload: EnginesWorkload, schedule: Schedule | None = None, *,
            trace: bool = False) -> Outcome:
    return run(seed, workload, schedule, max_events=workload.max_events, trace_frames=trace)


def campaign(workload: EnginesWorkload, first_seed: int, count: int, *,
             progress: Callable[[], None] | None = None, shrink_runs: int = 300) -> Summary:
    for index in range(count):
        seed = first_seed + index
        outcome = run_one(seed, workload)
        if progress is not None:
            progress()
        if outcome.failed:
            def fails(schedule: Schedule, seed: int = seed) -> bool:
                return run_one(seed, workload, schedule).failed

            shrunk = shrink(outcome.schedule, fails, max_runs=shrink_runs)
            again = run_one(seed, workload, shrunk)
            return Summary(first_seed=first_seed, schedules=index + 1,
                           found=Found(index=index, outcome=outcome, shrunk=shrunk,
                                       shrunk_violations=again.violations))
    return Summary(first_seed=first_seed, schedules=count, found=None)


def replay(seed: int, workload: EnginesWorkload, schedule: Schedule | None = None) -> Outcome:
    """The run of ``seed`` again, exactly, with every frame in its trace."""
    return run_one(seed, workload, schedule, trace=True)
