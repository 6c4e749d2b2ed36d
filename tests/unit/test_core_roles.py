"""sac.sdk._core.roles: stopped / connecting / waiting / active / stopping."""

from __future__ import annotations

from sac.sdk._core.roles import Change, Role, RoleTracker


def test_starts_stopped() -> None:
    tracker = RoleTracker()
    assert tracker.role is Role.STOPPED
    assert tracker.subscriptions == 0


def test_a_normal_life() -> None:
    tracker = RoleTracker()
    assert tracker.connecting() == Change(Role.STOPPED, Role.CONNECTING)
    assert tracker.subscribed() == Change(Role.CONNECTING, Role.WAITING)
    assert tracker.delivered() == Change(Role.WAITING, Role.ACTIVE)
    assert tracker.stopping() == Change(Role.ACTIVE, Role.STOPPING)
    assert tracker.stopped() == Change(Role.STOPPING, Role.STOPPED)
    assert tracker.role is Role.STOPPED


def test_further_deliveries_change_nothing() -> None:
    tracker = RoleTracker()
    tracker.connecting()
    tracker.subscribed()
    tracker.delivered()
    assert tracker.delivered() is None
    assert tracker.confirmed_active() is None
    assert tracker.role is Role.ACTIVE


def test_confirmation_by_the_broker_makes_a_waiting_consumer_active() -> None:
    tracker = RoleTracker()
    tracker.connecting()
    tracker.subscribed()
    assert tracker.confirmed_active() == Change(Role.WAITING, Role.ACTIVE)


def test_a_delivery_before_start_changes_nothing() -> None:
    tracker = RoleTracker()
    assert tracker.delivered() is None
    assert tracker.role is Role.STOPPED


def test_a_delivery_read_with_the_consume_ok_makes_it_active_and_stay_active() -> None:
    """With a backlog, the first deliveries come in the same read as the consume-ok: they
    are taken before the subscribe call returns, and the subscription then must not make
    an active consumer look like a waiting one."""
    tracker = RoleTracker()
    tracker.connecting()
    assert tracker.delivered() == Change(Role.CONNECTING, Role.ACTIVE)
    assert tracker.subscribed() is None
    assert tracker.role is Role.ACTIVE
    assert tracker.subscriptions == 1


def test_losing_the_subscription_makes_it_a_candidate_again() -> None:
    tracker = RoleTracker()
    tracker.connecting()
    tracker.subscribed()
    tracker.delivered()
    assert tracker.lost() == Change(Role.ACTIVE, Role.CONNECTING)
    assert tracker.subscribed() == Change(Role.CONNECTING, Role.WAITING)
    assert tracker.subscriptions == 2
    assert tracker.role is Role.WAITING


def test_loss_while_connecting_is_no_change() -> None:
    tracker = RoleTracker()
    tracker.connecting()
    assert tracker.lost() is None
    assert tracker.connecting() is None


def test_nothing_reconnects_a_stopping_consumer() -> None:
    tracker = RoleTracker()
    tracker.connecting()
    tracker.subscribed()
    tracker.stopping()
    assert tracker.lost() is None
    assert tracker.connecting() is None
    assert tracker.delivered() is None
    assert tracker.role is Role.STOPPING
    assert tracker.stopping() is None


def test_stopped_twice_is_one_change() -> None:
    tracker = RoleTracker()
    tracker.connecting()
    assert tracker.stopped() == Change(Role.CONNECTING, Role.STOPPED)
    assert tracker.stopped() is None
