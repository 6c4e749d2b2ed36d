"""A client's phase: every misuse is a precise error."""

from __future__ import annotations

import pytest

from sac.sdk import ClosedError, ConnectError, LifecycleError
from sac.sdk._core.lifecycle import Lifecycle, Phase


def test_the_normal_life() -> None:
    life = Lifecycle("publisher")
    life.start()
    life.check_usable("publish")  # usable while starting: the work waits for the link
    life.started()
    assert life.running
    assert life.close() is True
    assert life.shutting_down
    life.closed()
    assert life.phase is Phase.CLOSED


def test_use_before_start_says_how_to_start() -> None:
    with pytest.raises(LifecycleError, match=r"cannot publish: this publisher is not started"):
        Lifecycle("publisher").check_usable("publish")


def test_start_twice_is_not_use_after_close() -> None:
    life = Lifecycle("consumer")
    life.start()
    with pytest.raises(LifecycleError, match="already started") as info:
        life.start()
    assert not isinstance(info.value, ClosedError)


def test_a_closed_client_cannot_start_again_nor_be_used() -> None:
    life = Lifecycle("consumer")
    life.start()
    life.started()
    life.close()
    with pytest.raises(ClosedError, match="closing"):
        life.check_usable("consume")
    life.closed()
    with pytest.raises(ClosedError, match="cannot be started again"):
        life.start()


def test_close_is_idempotent_and_closing_an_unstarted_client_does_nothing() -> None:
    life = Lifecycle("publisher")
    assert life.close() is False
    assert life.phase is Phase.CLOSED
    started = Lifecycle("publisher")
    started.start()
    assert started.close() is True
    assert started.close() is False


def test_a_failed_client_raises_its_failure_and_can_still_be_closed() -> None:
    life = Lifecycle("publisher")
    life.start()
    life.started()
    error = ConnectError("no node answered")
    life.fail(error)
    with pytest.raises(ConnectError) as info:
        life.check_usable("publish")
    assert info.value is error
    assert life.close() is True


def test_a_close_during_start_is_not_undone_by_started() -> None:
    life = Lifecycle("consumer")
    life.start()
    life.close()
    life.started()
    assert life.phase is Phase.CLOSING
