"""One simulated run from a seed: draw the fault schedule, run the workload, check it.

The same seed gives the same schedule and the same trace, event for event, on any machine
and under any ``PYTHONHASHSEED`` (nothing iterates over a set of strings). A failing seed
is replayed by calling ``run`` again, and its schedule shrunk with ``sim.shrink``.
"""

from __future__ import annotations

import random

import attrs

from .faults import Schedule, draw
from .harness import Workload
from .trace import Trace
from .world import World

_SCHEDULE_STREAM = 0x5EED5C4E


@attrs.frozen(eq=False)
class Outcome:
    seed: int
    schedule: Schedule
    trace: Trace
    violations: tuple[str, ...]

    @property
    def failed(self) -> bool:
        return bool(self.violations)


def schedule_for(seed: int, workload: Workload) -> Schedule:
    """The fault schedule of ``seed`` (its own random stream: the world's draws do not
    move it)."""
    return draw(random.Random(seed ^ _SCHEDULE_STREAM), workload.space)


def run(seed: int, workload: Workload, schedule: Schedule | None = None) -> Outcome:
    """Run ``workload`` in a world seeded with ``seed`` under ``schedule`` (drawn from the
    seed when None)."""
    world = World(seed)
    check = workload.build(world)
    if schedule is None:
        schedule = schedule_for(seed, workload)
    world.schedule(schedule)
    world.run(workload.horizon)
    world.run_until_idle(workload.horizon + workload.settle)
    violations = tuple(check())
    return Outcome(seed, schedule, world.trace, violations)
