"""sac.sdk._core.roles.RoleWatch and the consumer machine's role events from the management
API: what an answer means, allowing for its age."""

from __future__ import annotations

from sac.sdk._core.backoff import Backoff
from sac.sdk._core.consuming import ConsumerMachine, Parking, RoleChanged
from sac.sdk._core.roles import (
    QUEUE_TAG_LAG,
    Change,
    Role,
    RoleTracker,
    RoleWatch,
    Sighting,
    Verdict,
)

LAG = 2.0


def watch_active_since(at: float) -> RoleWatch:
    watch = RoleWatch(LAG)
    watch.changed(Role.ACTIVE, at)
    return watch


def named_active(at: float, own: str = "me") -> Sighting:
    """The API lists this consumer as the active one."""
    return Sighting(at, own, "single_active", ())


def other_active(at: float, other: str = "other", own: str = "me") -> Sighting:
    """The API lists this consumer as waiting and ``other`` as the active one."""
    return Sighting(at, own, "waiting", (other,))


def test_its_own_tag_makes_a_waiting_consumer_active_whatever_the_answers_age() -> None:
    watch = RoleWatch(LAG)
    seen = named_active(0.0, "me-1")
    assert watch.judge(seen, Role.WAITING, "me-1") is Verdict.ACTIVE
    assert watch.judge(seen, Role.ACTIVE, "me-1") is None  # nothing new
    assert watch.judge(seen, Role.CONNECTING, None) is None  # no subscription: no tag
    # a stale entry listed active besides it (a cancelled consumer's) changes nothing
    crowded = Sighting(0.0, "me-1", "single_active", ("me-0",))
    assert watch.judge(crowded, Role.WAITING, "me-1") is Verdict.ACTIVE


def test_an_answer_about_an_ended_subscription_means_nothing() -> None:
    """Asked as me-1, answered after a reconnect made it me-2: the answer is about me-1."""
    watch = watch_active_since(0.0)
    assert watch.judge(named_active(10.0, "me-1"), Role.WAITING, "me-2") is None
    assert watch.judge(other_active(10.0, own="me-1"), Role.ACTIVE, "me-2") is None


def test_another_tag_means_the_role_was_lost_only_in_a_fresh_answer() -> None:
    """An answer asked within the lag of becoming active may show the consumer this one
    took over from."""
    watch = watch_active_since(100.0)
    assert watch.judge(other_active(100.5, "before-me"), Role.ACTIVE, "me") is None
    assert watch.judge(other_active(101.9, "before-me"), Role.ACTIVE, "me") is None
    assert watch.judge(other_active(102.0, "after-me"), Role.ACTIVE, "me") is Verdict.LOST


def test_an_unclear_answer_is_no_news() -> None:
    """Nobody listed active (statistics catching up), this consumer not listed, or several
    others listed active (entries of cancelled consumers linger): no verdict."""
    watch = watch_active_since(0.0)
    assert watch.judge(Sighting(50.0, "me", "waiting", ()), Role.ACTIVE, "me") is None
    assert watch.judge(Sighting(50.0, "me", None, ("other",)), Role.ACTIVE, "me") is None
    assert watch.judge(Sighting(50.0, "me", "waiting", ("a", "b")), Role.ACTIVE, "me") is None
    assert watch.judge(Sighting(50.0, "me", None, ()), Role.WAITING, "me") is None


def test_a_waiting_consumer_is_not_told_it_lost_anything() -> None:
    watch = RoleWatch(LAG)
    watch.changed(Role.WAITING, 0.0)
    assert watch.judge(other_active(50.0), Role.WAITING, "me") is None


def test_the_active_since_clock_restarts_with_each_activation() -> None:
    watch = watch_active_since(0.0)
    watch.changed(Role.WAITING, 5.0)
    watch.changed(Role.ACTIVE, 10.0)
    assert watch.judge(other_active(11.0), Role.ACTIVE, "me") is None
    assert watch.judge(other_active(12.5), Role.ACTIVE, "me") is Verdict.LOST


def test_the_tracker_confirms_only_a_subscribed_consumer_and_demotes_only_an_active_one() -> None:
    tracker = RoleTracker()
    tracker.connecting()
    assert tracker.confirmed_active() is None  # connecting: no subscription to confirm
    assert tracker.demoted() is None
    tracker.subscribed()
    assert tracker.demoted() is None
    assert tracker.confirmed_active() == Change(Role.WAITING, Role.ACTIVE)
    assert tracker.demoted() == Change(Role.ACTIVE, Role.WAITING)
    assert tracker.delivered() == Change(Role.WAITING, Role.ACTIVE)
    tracker.stopping()
    assert tracker.confirmed_active() is None
    assert tracker.demoted() is None


def test_the_machine_counts_a_confirmed_activation_and_a_demotion_starts_a_new_one() -> None:
    """The inbox claims an epoch per activation: confirmed active without a delivery is one;
    after a demotion, the next delivery is another."""
    machine: ConsumerMachine[object] = ConsumerMachine(
        batch=10, retry=Backoff(), resubscribe=Backoff(), parking=Parking.QUEUE)
    machine.start(0.0)
    machine.subscribed(0.0)
    assert machine.confirmed_active(1.0) == [
        RoleChanged(old=Role.WAITING, new=Role.ACTIVE, activation=1)]
    assert machine.confirmed_active(2.0) == ()
    assert machine.demoted(3.0) == [RoleChanged(old=Role.ACTIVE, new=Role.WAITING, activation=1)]
    assert machine.role is Role.WAITING
    assert machine.confirmed_active(4.0) == [
        RoleChanged(old=Role.WAITING, new=Role.ACTIVE, activation=2)]
    assert machine.activation == 2


def test_a_queue_missing_twice_in_a_row_means_an_orphan_subscription() -> None:
    """RabbitMQ 3.10 can take a consumer that subscribes again while its queue's deletion
    is under way, and never cancel it: the API then says the queue does not exist."""
    watch = RoleWatch(LAG)
    assert watch.missing("me", "me") is None  # once: maybe a moment's answer
    assert watch.missing("me", "me") is Verdict.GONE
    assert watch.missing("me", "me") is None  # counted again from nothing
    # an answer in between, or one about an ended subscription, starts the count again
    watch.judge(named_active(0.0), Role.ACTIVE, "me")
    assert watch.missing("me", "me") is None
    watch.judge(named_active(0.0), Role.ACTIVE, "me")
    assert watch.missing("me", "me") is None
    assert watch.missing("me-1", "me-2") is None
    assert watch.missing("me-2", "me-2") is None
    assert watch.missing("me-2", None) is None


def test_a_choice_made_by_the_queue_tag_demotes_only_past_its_longer_lag() -> None:
    """RabbitMQ 4.0 lists both the old and the new active consumer as single_active after a
    priority switch; the queue's own field, refreshed on the queue's tick, chooses. A consumer
    that just became active may still be shown the one it took over from, for longer."""
    watch = watch_active_since(100.0)
    chosen = Sighting(100.0 + LAG, "me", "waiting", ("before-me",), by_queue_tag=True)
    assert watch.judge(chosen, Role.ACTIVE, "me") is None
    later = Sighting(100.0 + LAG + QUEUE_TAG_LAG, "me", "waiting", ("after-me",),
                     by_queue_tag=True)
    assert watch.judge(later, Role.ACTIVE, "me") is Verdict.LOST
