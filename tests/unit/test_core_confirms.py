"""sac.sdk._core.confirms: the publisher's confirm window."""

from __future__ import annotations

import pytest

from sac.sdk._core.confirms import ConfirmWindow, InFlight


def _item(seq: int) -> InFlight[str]:
    return InFlight(seq=seq, message_id=f"id-{seq}", message=f"body-{seq}")


def _window(count: int, size: int = 100) -> tuple[ConfirmWindow[str], list[InFlight[str]]]:
    window: ConfirmWindow[str] = ConfirmWindow(size)
    items = [_item(seq) for seq in range(1, count + 1)]
    for item in items:
        window.sent(item)
    return window, items


def _seqs(items: list[InFlight[str]]) -> list[int]:
    return [i.seq for i in items]


def test_tags_count_from_one_and_sends_are_counted() -> None:
    window: ConfirmWindow[str] = ConfirmWindow(10)
    items = [_item(seq) for seq in (1, 2, 3)]
    assert [window.sent(i) for i in items] == [1, 2, 3]
    assert len(window) == 3
    assert [i.sends for i in items] == [1, 1, 1]
    assert list(window) == items


@pytest.mark.parametrize("tag", [1, 3, 5])
def test_multiple_ack_settles_exactly_the_tags_up_to_n(tag: int) -> None:
    window, _ = _window(5)
    settled = window.acked(tag, multiple=True)
    assert _seqs(settled) == list(range(1, tag + 1))
    assert _seqs(list(window)) == list(range(tag + 1, 6))
    assert all(i.nacks == 0 and i.returned is None for i in settled)


def test_multiple_ack_after_single_acks_skips_the_settled_ones() -> None:
    window, _ = _window(6)
    assert _seqs(window.acked(2, multiple=False)) == [2]
    assert _seqs(window.acked(4, multiple=True)) == [1, 3, 4]
    assert _seqs(list(window)) == [5, 6]


def test_single_ack_settles_only_its_tag() -> None:
    window, _ = _window(3)
    assert _seqs(window.acked(2, multiple=False)) == [2]
    assert _seqs(list(window)) == [1, 3]


@pytest.mark.parametrize("multiple", [False, True])
def test_ack_of_an_unknown_or_settled_tag_settles_nothing(multiple: bool) -> None:
    window, _ = _window(3)
    window.acked(3, multiple=True)
    assert window.acked(3, multiple=multiple) == []
    assert window.acked(99, multiple=False) == []


def test_nack_increments_nacks_of_exactly_the_nacked_messages() -> None:
    window, items = _window(4)
    assert _seqs(window.nacked(2, multiple=True)) == [1, 2]
    assert _seqs(window.nacked(4, multiple=False)) == [4]
    assert [i.nacks for i in items] == [1, 1, 0, 1]
    assert _seqs(list(window)) == [3]


def test_nacks_accumulate_over_resends() -> None:
    window, items = _window(1)
    window.nacked(1, multiple=False)
    tag = window.sent(items[0])
    window.nacked(tag, multiple=False)
    assert (items[0].nacks, items[0].sends) == (2, 2)


def test_returned_marks_the_right_message() -> None:
    window, items = _window(3)
    assert window.returned("id-2", "NO_ROUTE") is True
    assert [i.returned for i in items] == [None, "NO_ROUTE", None]
    acked = window.acked(3, multiple=True)
    assert [(i.seq, i.returned) for i in acked] == [(1, None), (2, "NO_ROUTE"), (3, None)]


def test_returned_for_an_unknown_or_settled_message_is_false() -> None:
    window, items = _window(2)
    window.acked(1, multiple=False)
    assert window.returned("id-1", "NO_ROUTE") is False
    assert window.returned("nope", "NO_ROUTE") is False
    assert items[0].returned is None


def test_has_room_respects_the_size() -> None:
    window: ConfirmWindow[str] = ConfirmWindow(2)
    assert window.has_room()
    window.sent(_item(1))
    assert window.has_room()
    window.sent(_item(2))
    assert not window.has_room()
    window.acked(1, multiple=False)
    assert window.has_room()


@pytest.mark.parametrize("size", [0, -1])
def test_size_below_one_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="window size"):
        ConfirmWindow[str](size)


def test_channel_lost_returns_everything_in_seq_order_and_restarts_tags() -> None:
    window, items = _window(4)
    lost = window.channel_lost()
    assert lost == items
    assert len(window) == 0
    assert list(window) == []
    assert window.sent(_item(5)) == 1


def test_channel_lost_after_partial_acks_returns_the_rest_in_order() -> None:
    window, _ = _window(6)
    window.acked(2, multiple=True)
    window.acked(4, multiple=False)
    window.nacked(5, multiple=False)
    assert _seqs(window.channel_lost()) == [3, 6]


def test_channel_lost_orders_by_first_publish_even_when_resent_out_of_order() -> None:
    window, items = _window(4)
    window.nacked(1, multiple=False)
    window.nacked(3, multiple=False)
    # the nacked ones go out again after 2 and 4: their tags are now larger
    assert window.sent(items[2]) == 5
    assert window.sent(items[0]) == 6
    assert _seqs(list(window)) == [2, 4, 3, 1]
    assert _seqs(window.channel_lost()) == [1, 2, 3, 4]


def test_retransmission_on_the_next_channel() -> None:
    window, items = _window(3)
    window.acked(1, multiple=False)
    lost = window.channel_lost()
    assert [window.sent(i) for i in lost] == [1, 2]
    assert [i.sends for i in items] == [1, 2, 2]
    # the new channel's tag 1 is message 2, not the acked message 1
    assert _seqs(window.acked(1, multiple=False)) == [2]
    assert window.returned("id-3", "NO_ROUTE") is True
    assert _seqs(window.acked(2, multiple=True)) == [3]
    assert len(window) == 0


def test_nothing_unconfirmed_means_nothing_lost() -> None:
    window, _ = _window(3)
    window.acked(3, multiple=True)
    assert window.channel_lost() == []
    assert window.returned("id-1", "NO_ROUTE") is False
