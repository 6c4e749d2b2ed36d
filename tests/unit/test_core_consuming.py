"""sdk._core.consuming: the consumer machine, driven without a broker, with virtual time.

Scenario tests pin each decision; the property tests drive random event sequences against a
model of the channel (tags restart at 1 on each new channel, as a broker's do) and check
what a broker and a checker would see."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from sac.sdk._core.acks import Ack, Reject
from sac.sdk._core.backoff import Backoff
from sac.sdk._core.consuming import (
    CANCEL,
    RELEASE,
    WAKE,
    Action,
    Admission,
    ConsumerMachine,
    Halt,
    Handover,
    Park,
    Parking,
    ResubscribeLater,
    RetryLater,
    RoleChanged,
    Run,
    Stage,
    Subscribe,
    Why,
)
from sac.sdk._core.roles import Role

RETRY = Backoff(initial=1.0, maximum=4.0, max_attempts=3, max_elapsed=100.0)
RESUBSCRIBE = Backoff(initial=0.5, maximum=2.0, max_attempts=3, max_elapsed=60.0)


@attrs.frozen
class Msg:
    delivery_tag: int
    name: str = ""


class Permanent(Exception):
    pass


class Recorded:
    """The machine, with the runs it hands out kept in order as a worker keeps them, so a
    test can say how the oldest one ended."""

    def __init__(self, m: ConsumerMachine[Msg]) -> None:
        self.m = m
        self.out: collections.deque[Run[Msg]] = collections.deque()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.m, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            actions = attr(*args, **kwargs)
            if isinstance(actions, list | tuple):
                self.out.extend(a for a in actions if isinstance(a, Run))
            return actions

        return call

    def done(self, count: int, failed: Exception | None, now: float) -> Any:
        """The oldest run out ended: ``count`` succeeded, then ``failed``."""
        return self.ran(self.out.popleft(), count, failed, now)

    def refused(self, error: Exception, now: float, fenced: bool) -> Any:
        """The inbox refused the oldest run out."""
        return self.commit_failed(self.out.popleft(), error, now, fenced=fenced)


def machine(batch: int = 3, parking: Parking = Parking.QUEUE,
            pipeline: int | None = 1, handover: Handover = Handover.CLOSE) -> Recorded:
    return Recorded(ConsumerMachine(
        batch=batch, retry=RETRY, resubscribe=RESUBSCRIBE, parking=parking,
        permanent=lambda exc: isinstance(exc, Permanent), rng=lambda: 1.0, pipeline=pipeline,
        handover=handover))


def running(m: Recorded) -> Recorded:
    m.start(0.0)
    m.subscribed(0.0)
    return m


def failed_once(error: Exception) -> Recorded:
    """A running machine whose one delivery (tag 1) failed with ``error`` at time 0."""
    m = running(machine())
    m.deliver(Msg(1))
    m.dispatch(0.0)
    m.done(0, error, 0.0)
    return m


def of(actions: Sequence[Action[Msg]], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def tags(run: Run[Msg]) -> list[int]:
    return [d.delivery_tag for d in run.deliveries]


# ---------------------------------------------------------------------- intake and acks


def test_first_delivery_makes_it_active_and_wakes_the_worker_once() -> None:
    m = running(machine())
    assert m.role is Role.WAITING
    first = m.deliver(Msg(1))
    assert first == [RoleChanged(old=Role.WAITING, new=Role.ACTIVE, activation=1), WAKE]
    assert m.deliver(Msg(2)) == ()
    [run] = m.dispatch(1.0)
    assert isinstance(run, Run)
    assert tags(run) == [1, 2]
    assert (run.generation, run.activation, run.attempt) == (0, 1, 1)


def test_a_run_takes_at_most_a_batch_and_the_rest_follows_in_order() -> None:
    m = running(machine(batch=2))
    for tag in range(1, 6):
        m.deliver(Msg(tag))
    [run] = m.dispatch(0.0)
    assert tags(run) == [1, 2]
    acks = m.done(2, None, 0.0)
    assert acks[0] == Ack(tag=2, multiple=True)
    assert tags(acks[1]) == [3, 4]
    assert m.done(2, None, 0.0)[0] == Ack(tag=4, multiple=True)


def test_idle_flushes_acks_below_the_batch() -> None:
    m = running(machine(batch=10))
    m.deliver(Msg(1))
    m.dispatch(0.0)
    assert m.done(1, None, 0.0) == [Ack(tag=1, multiple=False)]
    assert m.unacked_done == 0


def test_deliveries_during_a_run_wait_for_it_and_no_wake_is_sent() -> None:
    m = running(machine(batch=10))
    m.deliver(Msg(1))
    m.dispatch(0.0)
    assert m.deliver(Msg(2)) == ()
    actions = m.done(1, None, 0.0)
    [run] = of(actions, Run)
    assert tags(run) == [2]
    assert of(actions, Ack) == []  # not idle: the ack waits for the batch or the idle point
    assert m.done(1, None, 0.0) == [Ack(tag=2, multiple=True)]


def test_a_run_cut_short_puts_the_rest_back_first() -> None:
    m = running(machine(batch=10))
    for tag in (1, 2, 3):
        m.deliver(Msg(tag))
    m.dispatch(0.0)
    m.deliver(Msg(4))
    [run] = m.done(1, None, 0.0)
    assert tags(run) == [2, 3, 4]
    assert m.unacked_done == 1


# ---------------------------------------------------------------------- failures


def test_a_failure_is_retried_in_place_after_the_backoff_then_acked() -> None:
    m = running(machine(batch=10))
    for tag in (1, 2, 3):
        m.deliver(Msg(tag))
    m.dispatch(0.0)
    error = ValueError("boom")
    actions = m.done(1, error, 10.0)
    assert actions == [Ack(tag=1, multiple=False),
                       RetryLater(delivery=Msg(2), error=error, attempts=1, delay=1.0, at=11.0)]
    assert m.deadline == 11.0
    assert m.tick(10.5) == []
    assert m.deliver(Msg(4)) == ()  # waits behind the failing message
    [retry] = m.tick(11.0)
    assert isinstance(retry, Run)
    assert (tags(retry), retry.attempt) == ([2], 2)
    assert m.counts.retried == 1
    actions = m.done(1, None, 11.5)
    [run] = of(actions, Run)
    assert tags(run) == [3, 4]
    assert m.done(2, None, 12.0) == [Ack(tag=4, multiple=True)]
    assert m.counts.handler_errors == 1


def test_a_message_that_keeps_failing_is_parked_then_acked() -> None:
    m = running(machine(batch=10))
    m.deliver(Msg(1))
    m.deliver(Msg(2))
    m.dispatch(0.0)
    now = 0.0
    actions = m.done(0, ValueError("1"), now)
    for attempts in (2, 3, 4):
        [retry] = m.tick(actions[-1].at)
        assert retry.attempt == attempts
        now = actions[-1].at
        actions = m.done(0, ValueError(str(attempts)), now)
    [park] = actions
    assert isinstance(park, Park)
    assert (park.delivery, park.attempts, park.target) == (Msg(1), 4, Parking.QUEUE)
    assert m.busy
    actions = m.parked(now + 1)
    assert m.counts.parked == 1
    [run] = of(actions, Run)
    assert tags(run) == [2]
    assert m.done(1, None, now + 2) == [Ack(tag=2, multiple=True)]  # covers the parked one


def test_a_permanent_failure_is_parked_at_once() -> None:
    m = running(machine())
    m.deliver(Msg(1))
    m.dispatch(0.0)
    [park] = m.done(0, Permanent("no id"), 0.0)
    assert isinstance(park, Park)
    assert park.attempts == 1


def test_without_a_parking_queue_it_is_rejected_into_the_dead_letter_exchange() -> None:
    m = running(machine(batch=10, parking=Parking.DEAD_LETTER))
    for tag in (1, 2, 3):
        m.deliver(Msg(tag))
    m.dispatch(0.0)
    actions = m.done(1, Permanent("x"), 0.0)
    assert [type(a) for a in actions] == [Park, Ack, Reject, Run]
    assert actions[1:3] == [Ack(tag=1, multiple=False), Reject(tag=2, requeue=False)]
    assert tags(actions[3]) == [3]
    assert m.counts.parked == 1


def test_with_nowhere_to_park_it_halts_and_acks_only_what_is_done() -> None:
    m = running(machine(batch=10, parking=Parking.NONE))
    for tag in (1, 2, 3):
        m.deliver(Msg(tag))
    m.dispatch(0.0)
    error = Permanent("x")
    actions = m.done(1, error, 0.0)
    assert actions[1:] == [Ack(tag=1, multiple=False), Halt(why=Why.NOWHERE_TO_PARK, error=error,
                                                       delivery=Msg(2), attempts=1)]
    assert m.stage is Stage.HALTED
    assert m.deliver(Msg(4)) == ()
    assert m.dispatch(0.0) == ()


def test_a_park_that_fails_on_a_live_channel_halts_instead_of_passing_it_over() -> None:
    m = failed_once(Permanent("x"))
    error = RuntimeError("the parking queue refused it")
    assert m.park_failed(1.0, error) == [
        Halt(why=Why.PARKING_FAILED, error=error, delivery=Msg(1), attempts=1)]


def test_a_park_cut_by_a_lost_channel_is_no_error() -> None:
    m = failed_once(Permanent("x"))
    m.channel_lost(0.5)
    assert not m.busy
    assert m.park_failed(1.0, RuntimeError("link lost")) == ()
    assert m.parked(1.0) == ()


# ---------------------------------------------------------------------- the inbox


def test_a_fenced_commit_halts_and_acks_nothing_of_its_run() -> None:
    m = running(machine(batch=2))
    for tag in (1, 2, 3, 4):
        m.deliver(Msg(tag))
    m.dispatch(0.0)
    [ack, run] = m.done(2, None, 0.0)
    assert ack == Ack(tag=2, multiple=True)
    assert tags(run) == [3, 4]
    error = RuntimeError("stale epoch")
    assert m.refused(error, 1.0, True) == [Halt(why=Why.FENCED, error=error)]
    assert m.unacked_done == 0
    assert m.finish(2.0) == [RELEASE]


def test_a_run_fenced_after_its_channel_was_lost_still_halts() -> None:
    """The broker dropped a consumer stuck in its effect and handed the queue over; when the
    effect ends, its commit is refused: this consumer was replaced, whatever channel it has
    by now."""
    m = running(machine())
    m.deliver(Msg(1))
    m.dispatch(0.0)
    m.channel_lost(1.0)
    m.subscribed(2.0)
    error = RuntimeError("stale epoch")
    assert m.refused(error, 3.0, True) == [Halt(why=Why.FENCED, error=error)]
    assert m.stage is Stage.HALTED


def test_a_store_failure_halts_unless_stopping() -> None:
    m = running(machine())
    m.deliver(Msg(1))
    m.dispatch(0.0)
    error = RuntimeError("store down")
    assert m.refused(error, 0.0, False) == [Halt(why=Why.STORE_UNAVAILABLE, error=error)]
    m = running(machine())
    m.deliver(Msg(1))
    m.dispatch(0.0)
    m.stop(0.0)
    assert m.refused(error, 0.0, False) == []


# ---------------------------------------------------------------------- channels


def test_a_lost_channel_makes_its_runs_and_tags_stale() -> None:
    m = running(machine(batch=10))
    m.deliver(Msg(1))
    m.deliver(Msg(2))
    m.dispatch(0.0)
    assert m.channel_lost(1.0) == [RoleChanged(old=Role.ACTIVE, new=Role.CONNECTING, activation=1)]
    assert not m.live(0)
    # Active again (a new activation), but no wake: the old run is still out.
    assert m.deliver(Msg(1, "new channel")) == [
        RoleChanged(old=Role.CONNECTING, new=Role.ACTIVE, activation=2)]
    actions = m.done(2, None, 2.0)
    assert of(actions, Ack) == []
    [run] = actions
    assert run.deliveries == [Msg(1, "new channel")]
    assert run.generation == 1
    assert m.done(1, None, 3.0) == [Ack(tag=1, multiple=False)]


def test_a_server_cancel_flushes_then_resubscribes_with_backoff() -> None:
    m = running(machine(batch=10))
    m.deliver(Msg(1))
    m.deliver(Msg(2))
    m.dispatch(0.0)
    m.done(1, None, 0.0)  # not idle yet: 2 comes next
    actions = m.server_cancel(5.0)
    assert actions == [RoleChanged(old=Role.ACTIVE, new=Role.CONNECTING, activation=1),
                       Ack(tag=1, multiple=False), ResubscribeLater(at=5.5, attempt=1)]
    assert m.tick(5.5) == [Subscribe(attempt=1)]
    assert m.subscribe_failed(6.0, RuntimeError("queue gone")) == [
        ResubscribeLater(at=7.0, attempt=2)]
    assert m.tick(7.0) == [Subscribe(attempt=2)]
    assert m.subscribed(7.1) == [RoleChanged(old=Role.CONNECTING, new=Role.WAITING, activation=1)]
    assert m.counts.resubscribes == 1


def test_resubscribing_gives_up_when_the_backoff_is_spent() -> None:
    m = running(machine())
    actions = m.server_cancel(0.0)
    for attempt in (1, 2):
        assert m.tick(actions[-1].at) == [Subscribe(attempt=attempt)]
        actions = m.subscribe_failed(actions[-1].at, RuntimeError("no queue"))
    assert m.tick(actions[-1].at) == [Subscribe(attempt=3)]
    error = RuntimeError("still no queue")
    [halt] = m.subscribe_failed(10.0, error)
    assert halt == Halt(why=Why.NOT_RESUBSCRIBED, error=error, attempts=3)


# ---------------------------------------------------------------------- stopping


def test_a_graceful_stop_finishes_the_run_acks_it_and_leaves_the_rest() -> None:
    m = running(machine(batch=10))
    for tag in (1, 2, 3):
        m.deliver(Msg(tag))
    [run] = m.dispatch(0.0)
    m.deliver(Msg(4))
    assert m.stop(1.0) == [RoleChanged(old=Role.ACTIVE, new=Role.STOPPING, activation=1)]
    assert not m.live(run.generation)  # the worker stops after the running handler
    assert m.busy
    assert m.done(1, None, 2.0) == [Ack(tag=1, multiple=False)]
    assert not m.busy
    assert m.waiting == 0
    assert m.finish(2.0) == [RELEASE]  # only now: no overlap with the next
    assert m.closed(2.0) == [RoleChanged(old=Role.STOPPING, new=Role.STOPPED, activation=1)]


def test_a_stop_closes_with_the_subscription_in_place_unless_told_to_cancel() -> None:
    """``Release`` (the channel closed without basic.cancel: what was prefetched is back at
    the head of the queue before the next consumer is active) by default; ``Cancel`` only in
    the weakened order the chaos suite runs."""
    for handover, last in ((Handover.CLOSE, RELEASE), (Handover.CANCEL, CANCEL)):
        m = running(machine(batch=10, handover=handover))
        m.deliver(Msg(1))
        m.dispatch(0.0)
        m.deliver(Msg(2))
        m.stop(1.0)
        assert m.done(1, None, 2.0) == [Ack(tag=1, multiple=False)]
        assert m.finish(2.0) == [last]


def test_a_stop_during_a_retry_wait_leaves_the_message() -> None:
    m = failed_once(ValueError("x"))
    m.stop(0.1)
    assert not m.busy
    assert m.tick(100.0) == []
    assert m.finish(0.2) == [RELEASE]


def test_a_stop_waits_for_a_park_under_way_and_acks_it() -> None:
    m = failed_once(Permanent("x"))
    m.stop(0.1)
    assert m.busy
    assert m.parked(0.2) == [Ack(tag=1, multiple=False)]
    assert not m.busy


def test_results_after_finish_are_ignored() -> None:
    m = running(machine())
    m.deliver(Msg(1))
    m.dispatch(0.0)
    m.stop(0.0)
    m.finish(1.0)  # the handler did not finish in time
    assert m.done(1, None, 2.0) == ()


# ---------------------------------------------------------------------- properties


class Channel(RuleBasedStateMachine):
    """The machine against a model of the broker's side of the channel."""

    def __init__(self) -> None:
        super().__init__()
        self.m: ConsumerMachine[Msg] | None = None
        self.now = 0.0
        self.gen = 0
        self.next_tag = 1
        self.delivered: list[tuple[int, int]] = []
        self.done: set[tuple[int, int]] = set()
        self.failed_for_good: set[tuple[int, int]] = set()
        self.acked: set[tuple[int, int]] = set()
        self.rejected: set[tuple[int, int]] = set()
        self.last_ack: dict[int, int] = {}
        self.out: collections.deque[tuple[Run[Msg], int]] = collections.deque()
        """Runs handed to the worker, in order, with the model's generation."""
        self.admission = Admission()
        self.pipeline: int | None = 1
        self.parking: Msg | None = None
        self.woken = False
        self.subscribing = False
        self.stopped = False
        self.finished = False
        self.role = Role.STOPPED
        self.retrying: Msg | None = None
        """A delivery waiting for its retry (after ``RetryLater``)."""
        self.halted = False
        self.unfit: set[tuple[int, int]] = set()
        """Deliveries given by ``refuse``: never run, parked in their turn."""

    @initialize(batch=st.integers(1, 4), parking=st.sampled_from(Parking),
                pipeline=st.sampled_from([1, 2, None]))
    def begin(self, batch: int, parking: Parking, pipeline: int | None) -> None:
        self.pipeline = pipeline
        self.m = ConsumerMachine(batch=batch, retry=RETRY, resubscribe=RESUBSCRIBE,
                                 parking=parking, pipeline=pipeline,
                                 permanent=lambda exc: isinstance(exc, Permanent))
        self.apply(self.m.start(self.now))
        self.apply(self.m.subscribed(self.now))

    def apply(self, actions: Sequence[Action[Msg]]) -> None:
        assert self.m is not None
        for action in actions:
            if action is WAKE:
                self.woken = True
            elif isinstance(action, Run):
                if self.pipeline is not None:
                    assert self.m.in_flight <= self.pipeline, "too many runs out"
                if action.attempt > 1:
                    assert self.retrying == action.deliveries[0]
                    self.retrying = None
                assert action.generation == self.m.generation
                keys = [(self.gen, d.delivery_tag) for d in action.deliveries]
                assert keys == sorted(keys), "out of order"
                assert not set(keys) & (self.done | self.acked | self.rejected), \
                    "a delivery that was done runs again"
                assert not set(keys) & self.unfit, "an unfit delivery runs"
                self.out.append((action, self.gen))
            elif isinstance(action, Ack):
                covered = [(g, t) for g, t in self.delivered if g == self.gen
                           and t <= action.tag and (g, t) not in self.acked | self.rejected] \
                    if action.multiple else [(self.gen, action.tag)]
                assert (self.gen, action.tag) in self.delivered, "ack of an unknown tag"
                assert action.tag > self.last_ack.get(self.gen, 0), "acks out of tag order"
                assert set(covered) <= self.done, f"acked without being done: {covered}"
                assert len(covered) == action.count
                self.acked |= set(covered)
                self.last_ack[self.gen] = action.tag
            elif isinstance(action, Reject):
                key = (self.gen, action.tag)
                assert key in self.failed_for_good
                assert not action.requeue
                assert key not in self.acked | self.rejected
                self.rejected.add(key)
            elif isinstance(action, Park):
                key = (self.gen, action.delivery.delivery_tag)
                if key in self.unfit:
                    assert action.attempts == 0
                    earlier = {(g, t) for g, t in self.delivered if g == self.gen
                               and t < key[1]}
                    assert earlier <= self.done | self.rejected, "parked out of its turn"
                self.failed_for_good.add(key)
                if action.target is Parking.QUEUE:
                    self.parking = action.delivery
            elif isinstance(action, Subscribe):
                self.subscribing = True
            elif isinstance(action, RoleChanged):
                assert action.old is self.role
                self.role = action.new
            elif isinstance(action, RetryLater):
                self.retrying = action.delivery
            elif isinstance(action, Halt):
                self.halted = True
            elif action is RELEASE:
                assert self.m.stage is Stage.CLOSED, "cancelled before the last run ended"
            elif isinstance(action, ResubscribeLater):
                pass
            else:
                raise AssertionError(f"unknown action {action!r}")

    EVENTS: ClassVar[list[tuple[str, int]]] = [
        ("deliver", 6), ("dispatch", 6), ("run_ends", 8), ("commit_fails", 1),
        ("park_ends", 3), ("time_passes", 3), ("channel_lost", 1), ("server_cancel", 1),
        ("subscribe_ends", 2), ("stop", 1), ("finish", 2)]
    """Events and their weights: mostly traffic, now and then a fault."""

    def enabled(self, event: str) -> bool:
        live = not self.finished
        return {
            "deliver": live, "dispatch": self.woken, "run_ends": self.front() is not None,
            "commit_fails": self.front() is not None, "park_ends": self.parking is not None,
            "time_passes": True, "channel_lost": live, "server_cancel": live,
            "subscribe_ends": self.subscribing, "stop": not self.stopped,
            "finish": self.stopped and live,
        }[event]

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        choices = [name for name, weight in self.EVENTS if self.enabled(name)
                   for _ in range(weight)]
        getattr(self, data.draw(st.sampled_from(choices), "event"))(data)

    def deliver(self, data: st.DataObject) -> None:
        """A read that brings ``count`` deliveries."""
        assert self.m is not None
        for _ in range(data.draw(st.integers(1, 4), "count")):
            self.delivered.append((self.gen, self.next_tag))
            if data.draw(st.integers(0, 9), "unfit") == 0:
                self.unfit.add((self.gen, self.next_tag))
                self.apply(self.m.refuse(Msg(self.next_tag), Permanent("unfit")))
            else:
                self.apply(self.m.deliver(Msg(self.next_tag)))
            self.next_tag += 1

    def dispatch(self, data: st.DataObject) -> None:
        assert self.m is not None
        self.woken = False
        self.apply(self.m.dispatch(self.now))

    def front(self) -> tuple[Run[Msg], int] | None:
        """The next run the worker runs: those its admission refuses are skipped."""
        while self.out and not self.admission.admits(self.out[0][0]):
            self.out.popleft()
        return self.out[0] if self.out else None

    def reached(self, run: Run[Msg], gen: int, count: int) -> None:
        """The worker ran ``run``'s first ``count`` deliveries: on a live channel, each only
        once every earlier delivery of the channel is settled (the queue's order)."""
        assert self.m is not None
        if not self.m.live(run.generation):
            return  # the real worker would not have run it at all
        settled = self.done | self.rejected
        for delivery in run.deliveries[:count]:
            key = (gen, delivery.delivery_tag)
            earlier = {(g, t) for g, t in self.delivered if g == gen and t < key[1]}
            assert earlier <= settled, "ran ahead of an unsettled delivery"
            assert key not in self.done, "ran twice"
            settled.add(key)  # the next one runs after this one (if it fails: is not run)

    def run_ends(self, data: st.DataObject) -> None:
        assert self.m is not None
        assert self.front() is not None
        run, gen = self.out.popleft()
        size = len(run.deliveries)
        done = data.draw(st.integers(0, size))
        failed: Exception | None = None
        if done < size and data.draw(st.booleans()):
            failed = data.draw(st.sampled_from([ValueError("transient"), Permanent("bad")]))
        self.reached(run, gen, done + (failed is not None))
        self.done |= {(gen, d.delivery_tag) for d in run.deliveries[:done]}
        self.admission.ran(run, done)
        self.apply(self.m.ran(run, done, failed, self.now))

    def commit_fails(self, data: st.DataObject) -> None:
        assert self.m is not None
        assert self.front() is not None
        run, _gen = self.out.popleft()
        self.admission.ran(run, 0)
        fenced = data.draw(st.booleans(), "fenced")
        self.apply(self.m.commit_failed(run, RuntimeError("refused"), self.now, fenced=fenced))

    def park_ends(self, data: st.DataObject) -> None:
        assert self.m is not None
        assert self.parking is not None
        key = (self.gen, self.parking.delivery_tag)
        self.parking = None
        if data.draw(st.booleans(), "parked"):
            self.done.add(key)
            self.apply(self.m.parked(self.now))
        else:
            self.apply(self.m.park_failed(self.now, RuntimeError("refused")))

    def time_passes(self, data: st.DataObject) -> None:
        assert self.m is not None
        self.now += data.draw(st.floats(0.0, 5.0), "seconds")
        self.apply(self.m.tick(self.now))

    def channel_lost(self, data: st.DataObject) -> None:
        assert self.m is not None
        self.gen += 1
        self.next_tag = 1
        self.parking = None
        self.retrying = None
        self.subscribing = False
        self.apply(self.m.channel_lost(self.now))
        self.apply(self.m.subscribed(self.now))

    def server_cancel(self, data: st.DataObject) -> None:
        assert self.m is not None
        self.apply(self.m.server_cancel(self.now))

    def subscribe_ends(self, data: st.DataObject) -> None:
        assert self.m is not None
        self.subscribing = False
        if data.draw(st.booleans(), "subscribed"):
            self.apply(self.m.subscribed(self.now))
        else:
            self.apply(self.m.subscribe_failed(self.now, RuntimeError("no queue")))

    def stop(self, data: st.DataObject) -> None:
        assert self.m is not None
        self.stopped = True
        self.retrying = None
        self.apply(self.m.stop(self.now))

    def finish(self, data: st.DataObject) -> None:
        assert self.m is not None
        if data.draw(st.booleans(), "patient") and self.m.busy:
            return  # the shell waits for what is in flight, unless its patience ran out
        self.finished = True
        self.apply(self.m.finish(self.now))
        self.apply(self.m.closed(self.now))
        assert self.role is Role.STOPPED
        # Everything done on the current channel is acked; nothing else was.
        current = {k for k in self.done if k[0] == self.gen}
        assert current - self.rejected <= self.acked
        assert self.m.unacked_done == 0

    @invariant()
    def idle_never_sits_on_acks(self) -> None:
        if self.m is not None and self.m.in_flight == 0 and self.m.waiting == 0:
            assert self.m.unacked_done == 0

    @invariant()
    def nothing_in_hand_is_forgotten(self) -> None:
        """Running, with nothing out (no run, park or retry) and nothing waiting, every
        delivery of the channel is settled: none sits unacked where no one will get to it
        (and where a later multiple ack would cover it)."""
        m = self.m
        if (m is None or m.stage is not Stage.RUNNING or m.in_flight
                or self.parking is not None or self.retrying is not None or m.waiting):
            return
        current = {k for k in self.delivered if k[0] == self.gen}
        assert current <= self.acked | self.rejected

    @invariant()
    def the_worker_has_what_the_machine_waits_for(self) -> None:
        """Runs the machine counts as out are runs the worker will run (not skip)."""
        if self.m is not None and self.m.in_flight:
            assert self.front() is not None, "the machine waits for a run the worker skips"

    @invariant()
    def nothing_acked_twice_or_both_ways(self) -> None:
        assert not self.acked & self.rejected
        assert self.acked <= self.done


def test_random_event_sequences_keep_the_invariants() -> None:
    run_state_machine_as_test(
        Channel,
        settings=settings(max_examples=500, stateful_step_count=50, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow]))


@pytest.mark.parametrize("batch", [1, 5])
def test_a_long_clean_stream_acks_everything_in_batches(batch: int) -> None:
    m = running(machine(batch=batch))
    acked = 0
    for tag in range(1, 101):
        m.deliver(Msg(tag))
        for action in m.dispatch(0.0):
            assert isinstance(action, Run)
            run: Run[Msg] | None = action
            while run is not None:
                actions = m.done(len(run.deliveries), None, 0.0)
                acked += sum(a.count for a in of(actions, Ack))
                runs = of(actions, Run)
                run = runs[0] if runs else None
    assert acked == 100
