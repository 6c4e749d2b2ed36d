"""Virtual time: a clock that moves only when the next event is taken from the queue.

Nothing here reads the wall clock. Events at the same instant run in the order they were
scheduled, so a run is a pure function of its seed and its inputs.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import attrs

Action = Callable[[], None]


@attrs.define(eq=False, kw_only=True)
class Timer:
    """A scheduled action; ``cancel()`` makes it a no-op when its time comes."""

    when: float
    action: Action
    background: bool
    queue: EventQueue
    cancelled: bool = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if not self.background:
                self.queue._foreground -= 1


class Runaway(Exception):
    """More events than the run's budget: a busy loop (something that never waits)."""


class EventQueue:
    """The simulation's one clock and agenda.

    A *background* event (a heartbeat timer, say) keeps the world ticking but does not count
    as work: ``run_until_idle`` stops when only background events are left.
    """

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget
        """At most this many events run (``Runaway`` past it); None: no bound."""
        self.steps = 0
        self.now = 0.0
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self._foreground = 0

    def at(self, when: float, action: Action, *, background: bool = False) -> Timer:
        if when < self.now:
            raise ValueError(f"cannot schedule in the past: {when} < {self.now}")
        timer = Timer(when=when, action=action, background=background, queue=self)
        heapq.heappush(self._heap, (when, next(self._order), timer))
        if not background:
            self._foreground += 1
        return timer

    def after(self, delay: float, action: Action, *, background: bool = False) -> Timer:
        return self.at(self.now + max(0.0, delay), action, background=background)

    def next_time(self) -> float | None:
        while self._heap and self._heap[0][2].cancelled:
            self._pop()
        return self._heap[0][0] if self._heap else None

    def busy(self) -> bool:
        """Whether any foreground event (not cancelled) is pending."""
        return self._foreground > 0

    def _pop(self) -> Timer:
        _, _, timer = heapq.heappop(self._heap)
        if not timer.background and not timer.cancelled:
            self._foreground -= 1
        return timer

    def step(self) -> bool:
        """Run the next event; False when there is none."""
        while self._heap:
            timer = self._pop()
            if timer.cancelled:
                continue
            self.now = timer.when
            self.steps += 1
            if self.budget is not None and self.steps > self.budget:
                raise Runaway(f"more than {self.budget} events by t={self.now:.3f}")
            timer.action()
            return True
        return False

    def run_until(self, end: float) -> None:
        """Run every event due at or before ``end``, then set the clock to ``end``."""
        while True:
            when = self.next_time()
            if when is None or when > end:
                break
            self.step()
        self.now = max(self.now, end)

    def run_until_idle(self, limit: float) -> bool:
        """Run until no foreground event is left (True) or the clock would pass ``limit``
        (False)."""
        while self.busy():
            when = self.next_time()
            if when is None or when > limit:
                return not self.busy()
            self.step()
        return True
