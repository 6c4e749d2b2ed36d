"""sac.sdk._core.acks: consumer acks in batches."""

from __future__ import annotations

import pytest

from sac.sdk._core.acks import Ack, AckBatcher, Reject


def test_batch_of_one_acks_each_delivery_singly() -> None:
    batcher = AckBatcher(1)
    assert batcher.done(1) == [Ack(tag=1, multiple=False)]
    assert batcher.done(2) == [Ack(tag=2, multiple=False)]
    assert batcher.pending == 0


def test_batch_is_flushed_when_full() -> None:
    batcher = AckBatcher(3)
    assert batcher.done(1) == []
    assert batcher.done(2) == []
    assert batcher.pending == 2
    assert batcher.done(3) == [Ack(tag=3, multiple=True)]
    assert batcher.pending == 0
    assert batcher.done(4) == []
    assert batcher.pending == 1


def test_flush_uses_multiple_only_when_more_than_one_is_pending() -> None:
    batcher = AckBatcher(10)
    batcher.done(7)
    assert batcher.flush() == [Ack(tag=7, multiple=False)]
    batcher.done(8)
    batcher.done(9)
    assert batcher.flush() == [Ack(tag=9, multiple=True)]


def test_flush_with_nothing_pending_sends_nothing() -> None:
    batcher = AckBatcher(5)
    assert batcher.flush() == []
    batcher.done(1)
    batcher.flush()
    assert batcher.flush() == []


def test_failed_flushes_earlier_acks_before_the_reject() -> None:
    batcher = AckBatcher(10)
    batcher.done(1)
    batcher.done(2)
    assert batcher.failed(3) == [Ack(tag=2, multiple=True), Reject(tag=3, requeue=True)]
    assert batcher.pending == 0


def test_failed_after_one_ack_acks_it_singly() -> None:
    batcher = AckBatcher(10)
    batcher.done(1)
    assert batcher.failed(2) == [Ack(tag=1, multiple=False), Reject(tag=2, requeue=True)]


@pytest.mark.parametrize("requeue", [True, False])
def test_failed_alone_only_rejects(requeue: bool) -> None:
    batcher = AckBatcher(10)
    assert batcher.failed(5, requeue=requeue) == [Reject(tag=5, requeue=requeue)]


def test_acks_after_a_reject_never_cover_it_again() -> None:
    batcher = AckBatcher(2)
    batcher.done(1)
    batcher.failed(2)
    assert batcher.done(3) == []
    assert batcher.done(4) == [Ack(tag=4, multiple=True)]


def test_channel_lost_returns_the_unacked_tags_and_forgets_them() -> None:
    batcher = AckBatcher(10)
    for tag in (1, 2, 3):
        batcher.done(tag)
    assert batcher.channel_lost() == [1, 2, 3]
    assert batcher.pending == 0
    assert batcher.flush() == []
    assert batcher.channel_lost() == []


def test_channel_lost_after_a_flush_returns_only_later_tags() -> None:
    batcher = AckBatcher(2)
    batcher.done(1)
    batcher.done(2)
    batcher.done(3)
    assert batcher.channel_lost() == [3]


@pytest.mark.parametrize("batch", [0, -3])
def test_batch_below_one_is_refused(batch: int) -> None:
    with pytest.raises(ValueError, match="ack batch"):
        AckBatcher(batch)
