"""sac.sdk._core.congestion: how many messages may be in flight after nacks."""

from __future__ import annotations

import pytest

from sac.sdk._core.backoff import Backoff
from sac.sdk._core.congestion import SendLimit

BACKOFF = Backoff(initial=0.05, maximum=1.0, max_attempts=50, max_elapsed=30.0)


def _limit(window: int = 1000, draw: float = 0.5) -> SendLimit:
    return SendLimit(window, BACKOFF, rng=lambda: draw)


def _drain(limit: SendLimit, in_flight: int) -> list[float | None]:
    """Every message of a full window nacked one by one, as an electing queue does."""
    return [limit.nacked(in_flight=left) for left in range(in_flight - 1, -1, -1)]


def test_acks_alone_keep_the_whole_window() -> None:
    limit = _limit()
    limit.acked(500)
    assert (limit.limit, limit.allowed, limit.paused) == (1000, 1000, False)


def test_each_nack_halves_what_was_in_flight_down_to_one() -> None:
    limit = _limit()
    seen = []
    for left in range(199, 189, -1):  # 200 in flight, nacked one by one
        assert limit.nacked(in_flight=left) is None  # the window is still draining
        seen.append(limit.allowed)
    assert seen == [100, 50, 25, 12, 6, 3, 1, 1, 1, 1]


def test_a_nack_with_few_in_flight_does_not_open_the_window_wide() -> None:
    limit = _limit()
    assert limit.nacked(in_flight=3) is None
    assert limit.allowed == 2


def test_draining_a_full_window_pauses_only_at_its_last_nack() -> None:
    limit = _limit()
    pauses = _drain(limit, 1000)
    assert pauses[:-1] == [None] * 999
    assert pauses[-1] == pytest.approx(0.05 * 0.5)  # first probe pause: cap 0.05, jittered
    assert limit.paused
    assert limit.allowed == 0


def test_probes_nacked_in_a_row_wait_longer_up_to_the_cap() -> None:
    limit = _limit(draw=1.0)
    _drain(limit, 10)
    waits = []
    for _ in range(8):
        limit.resume()
        assert limit.allowed == 1  # exactly one probe in flight
        waits.append(limit.nacked(in_flight=0))
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0])


def test_probe_pauses_are_jittered() -> None:
    draws = iter([0.9, 0.1])
    limit = SendLimit(10, BACKOFF, rng=lambda: next(draws))
    first = _drain(limit, 10)[-1]
    limit.resume()
    second = limit.nacked(in_flight=0)
    assert first == pytest.approx(0.05 * 0.9)
    assert second == pytest.approx(0.1 * 0.1)


def test_probing_does_not_end_with_the_per_message_retry_bound() -> None:
    """A long election outlasts one message's nack budget, not the publisher's probing."""
    limit = _limit(draw=1.0)
    _drain(limit, 1)
    assert BACKOFF.max_attempts is not None
    pauses = []
    for _ in range(BACKOFF.max_attempts + 10):
        limit.resume()
        pauses.append(limit.nacked(in_flight=0))
    assert pauses[-10:] == [1.0] * 10


def test_a_nack_while_paused_does_not_pause_again() -> None:
    limit = _limit()
    assert _drain(limit, 4)[-1] is not None
    assert limit.nacked(in_flight=0) is None  # a straggler, not a new probe
    assert limit.paused


def test_an_ack_ends_the_pause_and_the_limit_doubles_per_round_trip() -> None:
    limit = _limit()
    _drain(limit, 1000)
    rounds = []
    while limit.allowed < 1000:
        limit.acked(limit.allowed or 1)  # a round trip acks all that was in flight
        rounds.append(limit.allowed)
    assert rounds == [2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]


def test_after_an_ack_probe_pauses_start_short_again() -> None:
    limit = _limit(draw=1.0)
    _drain(limit, 2)
    limit.resume()
    limit.nacked(in_flight=0)
    limit.resume()
    limit.acked(1)
    assert limit.allowed == 2
    assert _drain(limit, 2)[-1] == pytest.approx(0.05)


def test_resume_after_an_ack_keeps_the_grown_limit() -> None:
    limit = _limit()
    _drain(limit, 1)
    limit.acked(7)
    limit.resume()  # a pause timer that fires late changes nothing
    assert limit.allowed == 8


def test_a_window_of_one_probes_from_the_first_nack() -> None:
    limit = SendLimit(1, BACKOFF, rng=lambda: 1.0)
    assert limit.nacked(in_flight=0) == pytest.approx(0.05)
    limit.acked(1)
    assert (limit.limit, limit.allowed) == (1, 1)


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        SendLimit(0, BACKOFF)


def test_a_lost_channel_restarts_from_one_probe_sent_at_once() -> None:
    limit = _limit()
    limit.restart()
    assert (limit.limit, limit.allowed) == (1, 1)
    _drain(limit, 3)
    limit.restart()  # a recycled channel probes at once, even during a pause
    assert limit.allowed == 1
    limit.acked(1)
    assert limit.allowed == 2
