"""A consumer group's rebalancing, without I/O: what the group's leader publishes, and what a
member does when it reads it. The shell (ZooKeeper) stores and carries both; this module
decides.

Why two steps. A partition must never be held by two live members at once: each would
consume it as its active consumer, and between them a key's order and its exactly-once
effect would rest on fencing alone. So a partition moves as in Kafka's cooperative
rebalancing: the leader first *revokes* it (publishes it with no owner), its holder finishes
and acks what it holds and lets it go, and only once every live member has read that
revocation and none reports holding the partition does the leader *grant* it to its new
owner. A partition whose holder died (its ZooKeeper session ended: the lease) is granted at
once: a process whose lease ended no longer counts, and what it might still do as a zombie
is refused by the partition's fencing (its inbox epoch) and cut off by eviction.

What lives where (the shell keeps it in ZooKeeper):

- ``Published``: the leader's one record, written with a version check: the generation, who
  owns each partition now (``None``: revoked, or not granted yet), where each one is meant
  to end up (``target``, from ``assignment.assign``), and when each was revoked.
- ``Report``: each member's own record (in its ephemeral node): the newest generation it
  has read and carried out (``seen``), and the partitions it holds (those it is letting go
  included, until they are gone).

The leader is stateless: ``decide`` reads the published record and the live members'
reports and returns the next record (or ``None``: nothing to change), so a new leader after
a failover goes on where the old one stopped. A member's ``Member`` turns each record it
reads into actions: take a partition, let one go, report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from .assignment import Owners, assign


def _owners(count: int) -> Owners:
    return (None,) * count


@attrs.frozen(kw_only=True)
class Published:
    """The group's assignment as its leader published it."""

    generation: int = 0
    owners: Owners = ()
    """Who holds each partition now; ``None``: nobody may (revoked, or not yet granted)."""
    target: Owners = ()
    """Where each partition is meant to be once the moves under way are done."""
    revoked_at: tuple[int, ...] = ()
    """The generation that revoked each partition (0: never revoked)."""

    @classmethod
    def empty(cls, count: int) -> Published:
        return cls(generation=0, owners=_owners(count), target=_owners(count),
                   revoked_at=(0,) * count)

    @property
    def count(self) -> int:
        return len(self.owners)

    def settled(self) -> bool:
        """Every partition is where it is meant to be."""
        return self.owners == self.target

    def encode(self) -> bytes:
        return json.dumps({"generation": self.generation, "owners": self.owners,
                           "target": self.target, "revoked_at": self.revoked_at},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Published:
        """The record in ``data``; ``ValueError`` naming what is wrong with it."""
        raw = _object(data, "the group's assignment record")
        generation = _count(raw.get("generation"), "generation")
        owners = _names(raw.get("owners"), "owners")
        target = _names(raw.get("target"), "target")
        revoked = raw.get("revoked_at")
        if not isinstance(revoked, list):
            raise ValueError("the group's assignment record: revoked_at is not a list")
        revoked_at = tuple(_count(g, "revoked_at") for g in revoked)
        if not len(owners) == len(target) == len(revoked_at):
            raise ValueError("the group's assignment record: owners, target and revoked_at "
                             "differ in length")
        return cls(generation=generation, owners=owners, target=target,
                   revoked_at=revoked_at)


@attrs.frozen(kw_only=True)
class Report:
    """A member's own record: the newest generation it carried out, what it holds."""

    seen: int = 0
    holding: frozenset[int] = frozenset()

    def encode(self) -> bytes:
        return json.dumps({"seen": self.seen, "holding": sorted(self.holding)},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Report:
        """The report in ``data``; ``ValueError`` naming what is wrong with it."""
        raw = _object(data, "a member's report")
        holding = raw.get("holding")
        if not isinstance(holding, list):
            raise ValueError("a member's report: holding is not a list")
        return cls(seen=_count(raw.get("seen"), "seen"),
                   holding=frozenset(_count(p, "holding") for p in holding))


def _object(data: bytes, what: str) -> dict[str, Any]:
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"{what} is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{what} is not a JSON object")
    return raw


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{field}: {value!r} is not a count")
    return value


def _names(value: Any, field: str) -> tuple[str | None, ...]:
    if not isinstance(value, list) or not all(v is None or isinstance(v, str) for v in value):
        raise ValueError(f"{field} is not a list of member names")
    return tuple(value)


def decide(published: Published, reports: Mapping[str, Report]) -> Published | None:
    """The next record for the group whose live members are ``reports``' keys (a member
    whose session ended is not among them), or None when nothing changes.

    A partition owned by a member that is gone, or meant for another member, is revoked;
    a partition nobody owns is granted to the member it is meant for once no live member
    holds it and every live member has read the generation that revoked it (a member that
    read it can no longer take the partition from an older record); at once when its owner
    is gone (nobody live can hold it)."""
    count = published.count
    live = set(reports)
    target = assign(count, live, published.target)
    owners = list(published.owners)
    revoked_at = list(published.revoked_at)
    generation = published.generation + 1
    held = {p for report in reports.values() for p in report.holding}
    oldest_seen = min((report.seen for report in reports.values()), default=0)
    for partition in range(count):
        owner = owners[partition]
        meant = target[partition]
        if owner == meant:
            continue
        if owner is not None and owner in live:
            owners[partition] = None  # revoked: its holder lets it go first
            revoked_at[partition] = generation
            continue
        # Its holder is gone (nobody live holds it), or it was let go and every live
        # member has read that it was revoked.
        if owner is not None or (meant is not None and partition not in held
                                 and oldest_seen >= revoked_at[partition]):
            owners[partition] = meant
            revoked_at[partition] = 0
    new = Published(generation=generation, owners=tuple(owners), target=target,
                    revoked_at=tuple(revoked_at))
    if (new.owners, new.target, new.revoked_at) == (
            published.owners, published.target, published.revoked_at):
        return None
    return new


@attrs.frozen(kw_only=True)
class Take:
    """Start consuming ``partition`` as its owner."""

    partition: int


@attrs.frozen(kw_only=True)
class LetGo:
    """Finish and ack what ``partition``'s consumer holds, then stop it (a graceful
    handover); report ``Member.let_go`` when it is done."""

    partition: int


@attrs.frozen(kw_only=True)
class Write:
    """Write this member's record."""

    report: Report


Action = Take | LetGo | Write


class Member:
    """One member's side: which partitions it holds, and what a published record asks of
    it. Records are carried out newest first only: one older than the last carried out is
    ignored (ZooKeeper hands a watcher the newest data, but a read may race a write)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen = 0
        self.holding: set[int] = set()
        self.letting_go: set[int] = set()

    def report(self) -> Report:
        return Report(seen=self.seen, holding=frozenset(self.holding))

    def read(self, published: Published) -> list[Action]:
        """The leader published ``published``: take what it grants this member, let go
        what it no longer does, and report having read it."""
        if published.generation <= self.seen:
            return []
        actions: list[Action] = []
        for partition, owner in enumerate(published.owners):
            if owner == self.name and partition not in self.holding:
                self.holding.add(partition)
                actions.append(Take(partition=partition))
            elif owner != self.name and partition in self.holding \
                    and partition not in self.letting_go:
                self.letting_go.add(partition)
                actions.append(LetGo(partition=partition))
        self.seen = published.generation
        actions.append(Write(report=self.report()))
        return actions

    def let_go(self, partition: int) -> list[Action]:
        """The consumer of ``partition`` stopped: it is no longer held."""
        if partition not in self.letting_go:
            return []
        self.letting_go.discard(partition)
        self.holding.discard(partition)
        return [Write(report=self.report())]

    def held(self) -> frozenset[int]:
        """The partitions this member consumes as owner (those it is letting go included)."""
        return frozenset(self.holding)
