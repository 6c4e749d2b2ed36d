"""The group's assignment (``_core/assignment.py``): balanced, sticky to the fewest moves a
balanced assignment allows, and the same answer whatever order the members are listed in;
then through sequences of joins and leaves, as a group lives."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sac.sdk._core.assignment import assign, moved, shares

NAMES = [f"i{n}" for n in range(12)]
members_st = st.sets(st.sampled_from(NAMES), max_size=8)
previous_st = st.lists(st.one_of(st.none(), st.sampled_from(NAMES)), max_size=40)


def fewest_moves_by_search(count: int, members: set[str], previous: list[str | None]) -> int:
    """The fewest moves over every choice of which members take the larger shares, found
    the slow way."""
    group = sorted(members)
    base, extra = divmod(count, len(group))
    held = shares([previous[p] if p < len(previous) else None for p in range(count)], group)
    orphans = sum(1 for p in range(count)
                  if (previous[p] if p < len(previous) else None) not in members)
    return orphans + min(
        sum(max(0, len(held[m]) - base - (1 if m in larger else 0)) for m in group)
        for larger in itertools.combinations(group, extra))


@settings(max_examples=400)
@given(count=st.integers(0, 40), members=members_st, previous=previous_st)
def test_every_partition_has_one_live_owner_and_shares_differ_by_one_at_most(
        count: int, members: set[str], previous: list[str | None]) -> None:
    owners = assign(count, members, previous)
    assert len(owners) == count
    if not members:
        assert owners == (None,) * count
        return
    assert all(owner in members for owner in owners)
    sizes = [len(ps) for ps in shares(owners, members).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=400)
@given(count=st.integers(0, 30), members=members_st.filter(bool), previous=previous_st)
def test_it_moves_no_more_partitions_than_any_balanced_assignment_must(
        count: int, members: set[str], previous: list[str | None]) -> None:
    owners = assign(count, members, previous)
    assert len(moved(previous, owners)) == fewest_moves_by_search(count, members, previous)


@settings(max_examples=200)
@given(count=st.integers(0, 40), members=members_st, previous=previous_st, data=st.data())
def test_the_answer_does_not_depend_on_the_members_order(
        count: int, members: set[str], previous: list[str | None], data: st.DataObject) -> None:
    listed = data.draw(st.permutations(sorted(members)))
    assert assign(count, listed, previous) == assign(count, sorted(members), previous)
    assert assign(count, listed + listed, previous) == assign(count, members, previous)


@settings(max_examples=200)
@given(count=st.integers(0, 40), members=members_st, previous=previous_st)
def test_a_settled_assignment_stays_as_it_is(
        count: int, members: set[str], previous: list[str | None]) -> None:
    owners = assign(count, members, previous)
    assert assign(count, members, owners) == owners


@settings(max_examples=200)
@given(count=st.integers(1, 60), first=st.integers(1, 8),
       steps=st.lists(st.tuples(st.booleans(), st.integers(0, 11)), max_size=30))
def test_through_joins_and_leaves_only_what_must_move_moves(
        count: int, first: int, steps: list[tuple[bool, int]]) -> None:
    """One member joins or leaves at a time: a leaver's partitions move and nothing else
    does; a joiner takes a share, taken from the members above it."""
    group = set(NAMES[:first])
    owners = assign(count, group)
    for joins, n in steps:
        name = NAMES[n]
        if joins == (name in group) or (not joins and len(group) == 1):
            continue
        before = owners
        group = group | {name} if joins else group - {name}
        owners = assign(count, group, before)
        went = moved(before, owners)
        if joins:
            assert all(owners[p] == name for p in went)
            assert len(went) == len(shares(owners, group)[name]) <= -(-count // len(group))
        else:
            assert set(went) == {p for p, owner in enumerate(before) if owner == name}


def test_a_grown_partition_count_keeps_what_it_can() -> None:
    """Partitions added later go to whoever is below its new share; the old ones stay."""
    before = assign(4, ["a", "b"])
    after = assign(6, ["a", "b"], before)
    assert after[:4] == before
    assert sorted(len(ps) for ps in shares(after).values()) == [3, 3]
    assert moved(before, after) == [4, 5]


def test_a_thousand_partitions_over_ten_instances_settle_at_a_hundred_each() -> None:
    members = [f"instance-{n}" for n in range(10)]
    owners = assign(1000, members)
    assert {m: len(ps) for m, ps in shares(owners).items()} == {m: 100 for m in members}
    joined = assign(1000, [*members, "instance-10"], owners)
    assert len(moved(owners, joined)) == 90  # 1000 // 11 for the newcomer, nothing else
    left = assign(1000, members[1:], owners)
    assert moved(owners, left) == shares(owners)["instance-0"]


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        assign(-1, ["a"])
