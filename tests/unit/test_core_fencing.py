"""The decisions a consumer's shell used to make inline: the fencing token of a run's channel,
when an evicted leader steps down, and which failed parks stop the consumer."""

from __future__ import annotations

import pytest

from sac.sdk._core.eviction import eviction_reason
from sac.sdk._core.fencing import Fencing
from sac.sdk._core.guarding import LeaderRecord
from sac.sdk._core.park_failures import ParkEnd, parking_failure


def test_a_run_commits_under_the_token_of_the_channel_subscribed_as_leader() -> None:
    fencing = Fencing()
    assert fencing.token_for(0) is None, "nothing led yet: refused"
    fencing.subscribed(3, 41)
    assert fencing.token_for(3) == 41
    assert fencing.token_for(4) is None, "a later channel, not subscribed as leader"
    fencing.subscribed(4, None)  # subscribed without a leadership: keeps nothing new
    assert fencing.token_for(4) is None
    fencing.subscribed(5, 42)
    assert fencing.token_for(3) is None, "an older channel's run is refused"
    fencing.abandoned()
    assert fencing.token_for(5) is None, "a channel given up commits nothing more"


def test_only_a_newer_leaders_eviction_makes_it_step_down() -> None:
    fencing = Fencing()
    newer = eviction_reason(9, LeaderRecord(token=7), "/sac/g")
    assert fencing.steps_down(newer) is None, "not leading: nothing to step down from"
    fencing.subscribed(1, 7)
    assert fencing.steps_down("CONNECTION_FORCED - broker shutdown") is None
    assert fencing.steps_down(eviction_reason(7, LeaderRecord(token=5), "/sac/g")) is None
    assert fencing.steps_down(newer) == 9


def test_a_park_that_loses_the_consuming_link_is_no_failure() -> None:
    assert parking_failure(ParkEnd.LINK_LOST, consuming_link_up=False, parking_queue="p",
                           detail="reset", timeout=120) is None


@pytest.mark.parametrize(("end", "expected"), [
    (ParkEnd.LINK_LOST, "the parking channel closed: reset"),
    (ParkEnd.REFUSED, "parking queue 'p' refused it: reset"),
    (ParkEnd.TIMED_OUT, "no confirm from the parking queue within 120 s"),
])
def test_a_park_that_fails_on_a_live_link_stops_the_consumer(end: ParkEnd,
                                                              expected: str) -> None:
    assert parking_failure(end, consuming_link_up=True, parking_queue="p", detail="reset",
                           timeout=120) == expected
