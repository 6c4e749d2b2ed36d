"""One simulated run from a seed: draw the fault schedule, run the workload, check it.

The same seed gives the same schedule and the same trace, event for event, on any machine
and under any ``PYTHONHASHSEED`` (nothing iterates over a set of strings). A failing seed
is replayed by calling ``run`` again, and its schedule shrunk with ``sim.shrink``.

A client that raises, or a run past ``max_events`` (a busy loop), fails the run with that
as its violation, the trace kept up to that point.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from typing import Protocol

import attrs

from .faults import Schedule, Space, draw
from .model import BrokerModel
from .trace import Trace
from .world import World

_SCHEDULE_STREAM = 0x5EED5C4E


class Workload(Protocol):
    """What one simulated run drives: the clients under test, the faults they may meet,
    and what must hold at the end. ``sim.run.run`` calls ``build`` on a fresh world, runs
    it to ``horizon`` under a schedule drawn from ``space`` (then until idle, at most
    ``settle`` more seconds) and calls the checker ``build`` returned."""

    horizon: float
    settle: float
    space: Space
    broker: BrokerModel
    """The RabbitMQ the simulated broker follows (``sim.model``)."""

    def build(self, world: World) -> Callable[[], list[str]]:
        """Add the clients to ``world``; return what lists the invariants violated at the
        end of the run (empty: it passed)."""
        ...



@attrs.frozen(eq=False, kw_only=True)
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


def run(seed: int, workload: Workload, schedule: Schedule | None = None, *,
        max_events: int | None = None, trace_frames: bool = True) -> Outcome:
    """Run ``workload`` in a world seeded with ``seed`` under ``schedule`` (drawn from the
    seed when None). ``trace_frames=False`` leaves the frames out of the trace (faster; the
    run is the same)."""
    world = World(seed, max_events=max_events, trace_frames=trace_frames,
                  broker=workload.broker)
    check = workload.build(world)
    if schedule is None:
        schedule = schedule_for(seed, workload)
    world.schedule(schedule)
    try:
        world.run(workload.horizon)
        world.run_until_idle(workload.horizon + workload.settle)
    except Exception as exc:  # noqa: BLE001 - a client's bug (or a busy loop) is the finding
        where = traceback.format_exception(exc)[-3:]
        violations: tuple[str, ...] = (
            f"the run raised {type(exc).__name__} at t={world.events.now:.3f}: {exc}\n"
            + "".join(where).rstrip(),)
    else:
        violations = tuple(check())
    return Outcome(seed=seed, schedule=schedule, trace=world.trace, violations=violations)
