"""sac.sdk._core.ids: strictly increasing UUIDv7 message ids."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from sac.sdk._core.ids import MessageIds, new_message_id

NOW_MS = 1_700_000_000_000


def _clock(values: list[int]) -> Callable[[], int]:
    """A clock reading ``values`` in turn, then standing on the last one."""
    it: Iterator[int] = itertools.chain(values, itertools.repeat(values[-1]))
    return lambda: next(it)


def _check_increasing(ids: list[str]) -> None:
    as_ints = [uuid.UUID(i).int for i in ids]
    assert all(a < b for a, b in itertools.pairwise(as_ints))
    assert all(a < b for a, b in itertools.pairwise(ids))  # the strings sort the same way


def test_ids_parse_as_uuid_version_7() -> None:
    for gen in (MessageIds(), new_message_id):
        value = uuid.UUID(gen())
        assert value.version == 7
        assert value.variant == uuid.RFC_4122


def test_id_is_canonical_lowercase_text() -> None:
    text = MessageIds()()
    assert text == str(uuid.UUID(text))
    assert len(text) == 36


def test_timestamp_is_the_clock_in_milliseconds() -> None:
    gen = MessageIds(clock_ms=lambda: NOW_MS)
    assert uuid.UUID(gen()).int >> 80 == NOW_MS


def test_increasing_with_a_moving_clock() -> None:
    gen = MessageIds(clock_ms=_clock(list(range(NOW_MS, NOW_MS + 100))))
    _check_increasing([gen() for _ in range(100)])


@pytest.mark.parametrize("start", [0, (1 << 11) - 1])
def test_increasing_across_5000_ids_in_one_millisecond(start: int) -> None:
    gen = MessageIds(clock_ms=lambda: NOW_MS, random_bits=lambda n: start if n == 11 else 0)
    ids = [gen() for _ in range(5000)]
    _check_increasing(ids)
    assert len(set(ids)) == 5000
    # running out of counter borrows the next millisecond instead of wrapping
    assert uuid.UUID(ids[-1]).int >> 80 > NOW_MS


def test_increasing_when_the_clock_goes_backwards() -> None:
    gen = MessageIds(clock_ms=_clock([NOW_MS, NOW_MS + 5, NOW_MS - 1000, NOW_MS + 3, NOW_MS]))
    ids = [gen() for _ in range(20)]
    _check_increasing(ids)
    assert {uuid.UUID(i).int >> 80 for i in ids} == {NOW_MS, NOW_MS + 5}


def test_clock_catching_up_after_borrowing_stays_increasing() -> None:
    readings = [NOW_MS] * 4500 + [NOW_MS + 1] * 10 + [NOW_MS + 2] * 10
    gen = MessageIds(clock_ms=_clock(readings), random_bits=lambda n: 0)
    _check_increasing([gen() for _ in range(len(readings))])


def test_random_bits_fill_the_tail() -> None:
    ones = MessageIds(clock_ms=lambda: NOW_MS, random_bits=lambda n: (1 << n) - 1)
    zeros = MessageIds(clock_ms=lambda: NOW_MS, random_bits=lambda n: 0)
    assert uuid.UUID(ones()).int & ((1 << 62) - 1) == (1 << 62) - 1
    assert uuid.UUID(zeros()).int & ((1 << 62) - 1) == 0
    assert uuid.UUID(ones()).version == uuid.UUID(zeros()).version == 7


def test_generators_with_default_random_differ() -> None:
    first, second = MessageIds(clock_ms=lambda: NOW_MS), MessageIds(clock_ms=lambda: NOW_MS)
    assert first() != second()


def test_unique_and_increasing_per_thread_across_threads() -> None:
    gen = MessageIds(clock_ms=lambda: NOW_MS)  # one frozen millisecond: worst case
    per_thread: list[list[str]] = [[] for _ in range(8)]
    barrier = threading.Barrier(len(per_thread))

    def work(out: list[str]) -> None:
        barrier.wait()
        out.extend(gen() for _ in range(1000))

    threads = [threading.Thread(target=work, args=(out,)) for out in per_thread]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [i for out in per_thread for i in out]
    assert len(everything) == len(set(everything)) == 8000
    for out in per_thread:
        _check_increasing(out)


@pytest.mark.parametrize("start", [0, 1000, (1 << 11) - 1])
@pytest.mark.parametrize("counts", [[1], [3, 700, 2], [4096], [9000]])
def test_many_is_the_same_as_calls_in_a_row(start: int, counts: list[int]) -> None:
    def bits(n: int) -> int:
        return start if n == 11 else 12345

    batched = MessageIds(clock_ms=lambda: NOW_MS, random_bits=bits)
    one_by_one = MessageIds(clock_ms=lambda: NOW_MS, random_bits=bits)
    got = [i for count in counts for i in batched.many(count)]
    assert got == [one_by_one() for _ in range(sum(counts))]
    assert batched() == one_by_one()  # and both go on from the same place
    _check_increasing(got)


def test_many_follows_single_ids_and_a_moving_clock() -> None:
    gen = MessageIds(clock_ms=_clock([NOW_MS, NOW_MS, NOW_MS + 1, NOW_MS - 50, NOW_MS + 2]))
    ids = [gen(), *gen.many(10), gen(), *gen.many(3), *gen.many(0), gen()]
    assert len(ids) == 16
    _check_increasing(ids)
    for text in ids:
        value = uuid.UUID(text)
        assert str(value) == text
        assert value.version == 7
        assert value.variant == uuid.RFC_4122


def test_many_is_thread_safe_with_single_ids() -> None:
    gen = MessageIds(clock_ms=lambda: NOW_MS)
    per_thread: list[list[str]] = [[] for _ in range(6)]
    barrier = threading.Barrier(len(per_thread))

    def work(index: int, out: list[str]) -> None:
        barrier.wait()
        for _ in range(50):
            out.extend(gen.many(17) if index % 2 else [gen() for _ in range(17)])

    threads = [threading.Thread(target=work, args=(i, out)) for i, out in enumerate(per_thread)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [i for out in per_thread for i in out]
    assert len(everything) == len(set(everything)) == 6 * 50 * 17
    for out in per_thread:
        _check_increasing(out)
