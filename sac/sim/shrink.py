"""Shrinking a failing fault schedule: fewer faults, then smaller ones, while it still
fails.

First delta debugging (Zeller's ddmin) over the faults, which ends with a schedule from
which no single fault can be removed; then each remaining fault is made smaller where it
has a size (durations halved, a frame cut moved to an earlier frame). Each candidate is one
deterministic run, so the result replays exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from .faults import CutOnFrame, Fault, Schedule

Fails = Callable[[Schedule], bool]


class _Budget:
    def __init__(self, fails: Fails, runs: int) -> None:
        self._fails = fails
        self.left = runs
        self.runs = 0

    def __call__(self, schedule: Schedule) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        self.runs += 1
        return self._fails(schedule)


def _chunks(items: Sequence[Fault], n: int) -> list[tuple[Fault, ...]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(tuple(items[start:end]))
        start = end
    return [c for c in out if c]


def ddmin(schedule: Schedule, fails: Fails) -> Schedule:
    """A 1-minimal failing subsequence of ``schedule`` (which must fail)."""
    items: tuple[Fault, ...] = tuple(schedule)
    if fails(()):
        return ()
    n = 2
    while len(items) >= 2:
        chunks = _chunks(items, n)
        for chunk in chunks:
            if fails(chunk):
                items, n = chunk, 2
                break
        else:
            for i in range(len(chunks)):
                rest = tuple(f for j, c in enumerate(chunks) if j != i for f in c)
                if fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), n * 2)
    return items


def _smaller(fault: Fault) -> list[Fault]:
    """Smaller versions of one fault, most aggressive first."""
    options: list[Fault] = []
    if isinstance(fault, CutOnFrame) and fault.nth > 1:
        options += [attrs.evolve(fault, nth=1), attrs.evolve(fault, nth=fault.nth - 1)]
    duration = getattr(fault, "duration", None)
    if duration is not None and duration > 0.01:
        options.append(attrs.evolve(fault, duration=round(duration / 2, 3)))
    return options


def shrink(schedule: Schedule, fails: Fails, *, max_runs: int = 500) -> Schedule:
    """The smallest failing schedule found within ``max_runs`` runs."""
    budget = _Budget(fails, max_runs)
    current = ddmin(schedule, budget)
    improved = True
    while improved and budget.left > 0:
        improved = False
        for i, fault in enumerate(current):
            for smaller in _smaller(fault):
                candidate = (*current[:i], smaller, *current[i + 1:])
                if budget(candidate):
                    current, improved = candidate, True
                    break
            if improved:
                break
    return current
