"""A consumer group's membership in a real ZooKeeper (``sac.sdk.group``): members joining,
leaving and losing their session settle balanced, and no partition is ever held by two
members at once (checked at every take, across all members of the test)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from sac.sdk import ConfigurationError
from sac.sdk._settings import GroupSettings
from sac.sdk.group import GroupMembership
from sac.server import LocalZooKeeper
from tests.helpers import wait_until

WAIT = 20.0


class Ledger:
    """Who holds each partition, as the members' callbacks say; a take of a partition
    someone else holds is recorded as a clash."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: dict[int, str] = {}
        self.clashes: list[str] = []
        self.takes = 0

    def take(self, who: str, partition: int) -> None:
        with self.lock:
            self.takes += 1
            other = self.holder.get(partition)
            if other is not None and other != who:
                self.clashes.append(f"{who} took {partition} while {other} held it")
            self.holder[partition] = who

    def release(self, who: str, partitions: frozenset[int] | set[int]) -> None:
        with self.lock:
            for partition in partitions:
                if self.holder.get(partition) == who:
                    del self.holder[partition]


@pytest.fixture
def group_path() -> str:
    return f"/sac-tests/groups/{os.urandom(4).hex()}"


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def members(zookeeper_short_tick: LocalZooKeeper, group_path: str,
            ledger: Ledger) -> Iterator[Callable[..., GroupMembership]]:
    made: list[GroupMembership] = []

    def make(instance: str, partitions: int = 12, session: float = 2.0,
             hosts: str | None = None) -> GroupMembership:
        settings = GroupSettings(hosts or zookeeper_short_tick.hosts, group_path, partitions,
                                 session_timeout=session)
        holder: list[GroupMembership] = []

        def let_go(partition: int) -> None:
            ledger.release(instance, {partition})
            holder[0].let_go_done(partition)

        member = GroupMembership(
            settings, instance, on_take=lambda p: ledger.take(instance, p),
            on_let_go=let_go, on_lost=lambda held: ledger.release(instance, held))
        holder.append(member)
        member.start()
        made.append(member)
        return member

    yield make
    for member in made:
        member.close()


def settled(*group: GroupMembership) -> bool:
    """Every member carried out the newest record, which is settled among exactly these
    members (more partitions than members), and holds what it says."""
    records = [m.published for m in group]
    if any(r is None for r in records) or len({r.generation for r in records if r}) != 1:
        return False
    record = records[0]
    assert record is not None
    return record.settled() and set(record.owners) == {m.name for m in group} and all(
        m.held == {p for p, o in enumerate(record.owners) if o == m.name} for m in group)


def test_members_joining_one_by_one_end_balanced_and_never_share_a_partition(
        members: Callable[..., GroupMembership], ledger: Ledger) -> None:
    a = members("a")
    wait_until(lambda: settled(a), WAIT, "a alone to settle")
    assert a.held == set(range(12))
    b = members("b")
    wait_until(lambda: settled(a, b), WAIT, "a and b to settle")
    c = members("c")
    wait_until(lambda: settled(a, b, c), WAIT, "a, b and c to settle")
    assert sorted(len(m.held) for m in (a, b, c)) == [4, 4, 4]
    assert a.held | b.held | c.held == set(range(12))
    assert ledger.clashes == []
    assert ledger.takes == 12 + 6 + 4  # sticky: only what had to move moved


def test_a_member_that_leaves_hands_its_partitions_to_the_others(
        members: Callable[..., GroupMembership], ledger: Ledger) -> None:
    a, b, c = members("a"), members("b"), members("c")
    wait_until(lambda: settled(a, b, c), WAIT, "three members to settle")
    kept = {m.name: m.held for m in (a, b)}
    ledger.release("c", c.held)  # c stops its consumers, then leaves
    c.close()
    wait_until(lambda: settled(a, b), WAIT, "a and b to settle without c")
    assert sorted(len(m.held) for m in (a, b)) == [6, 6]
    assert all(kept[m.name] <= m.held for m in (a, b))  # theirs stayed theirs
    assert ledger.clashes == []


def test_a_member_whose_session_is_lost_counts_as_gone_and_joins_again_as_new(
        members: Callable[..., GroupMembership], ledger: Ledger,
        zookeeper_short_tick: LocalZooKeeper) -> None:
    a, b = members("a"), members("b")
    wait_until(lambda: settled(a, b), WAIT, "a and b to settle")
    old_name = b.name
    # End b's session from outside, as its expiry would (kazoo then starts a new one).
    # From then on b's partitions no longer count as b's, though b hears of it only when
    # it reconnects: that window is the lease's, and fencing is what covers it.
    ledger.release("b", b.held)
    killer = KazooClient(hosts=zookeeper_short_tick.hosts,
                         client_id=b.client.client_id)
    killer.start(timeout=10)
    killer.stop()
    killer.close()
    wait_until(lambda: b.name not in (None, old_name) and settled(a, b), WAIT,
               "b to join again as a new member and the group to settle")
    assert sorted(len(m.held) for m in (a, b)) == [6, 6]
    assert ledger.clashes == []


def test_a_member_given_another_partition_count_is_refused(
        members: Callable[..., GroupMembership]) -> None:
    members("a", partitions=12)
    with pytest.raises(ConfigurationError, match=r"has 12 partitions.*partitions=8"):
        members("b", partitions=8)


def test_group_settings_name_their_faults() -> None:
    with pytest.raises(ConfigurationError, match=r"GroupSettings\.partitions"):
        GroupSettings("127.0.0.1:2181", "/sac/g", 0)
    with pytest.raises(ConfigurationError, match=r"GroupSettings\.group"):
        GroupSettings("127.0.0.1:2181", "sac/g", 4)
    with pytest.raises(ConfigurationError, match=r"GroupSettings\.hosts"):
        GroupSettings("127.0.0.1:x", "/sac/g", 4)
