"""Which member of a consumer group owns which partition: pure, and the same answer in every
process that computes it (the group's leader, a member checking it, the simulator).

Partitions are numbered ``0 .. count - 1``; members are named by strings (an instance's id).
An assignment is a tuple: the owner of each partition, ``None`` only when the group has no
member. ``assign`` keeps three promises, in this order:

1. **Balanced**: with ``P`` partitions over ``M`` members every member owns ``P // M`` or
   ``P // M + 1`` of them, so no member has more than one partition above any other.
2. **Sticky**: a partition stays with its owner while that owner is a member and keeps no
   more than its share. Of all the balanced assignments, the one returned moves the fewest
   partitions: the members that keep the most get the larger shares (the property tests
   hold ``assign`` to a search over every choice of who gets them).
3. **Deterministic**: the answer depends on the set of members and the previous assignment,
   never on the order the members were listed in.

Why sticky matters here: a moved partition is a handover. Its owner finishes and acks what it
holds before the next one starts (the broker switches single active consumers only then), so
every move costs the partition a pause; and a key's order holds through a handover only
because the handover is graceful, so fewer handovers are fewer chances for a fault to land in
one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Owners = tuple[str | None, ...]
"""The owner of each partition, by index."""


def _previous_owner(previous: Sequence[str | None], partition: int) -> str | None:
    return previous[partition] if partition < len(previous) else None


def assign(count: int, members: Iterable[str], previous: Sequence[str | None] = ()) -> Owners:
    """The owners of ``count`` partitions among ``members``, moving as few partitions away
    from ``previous`` (the assignment before; shorter or longer when the partition count
    changed) as a balanced assignment allows."""
    if count < 0:
        raise ValueError(f"a partition count cannot be negative, got {count}")
    group = sorted(set(members))
    if not group:
        return (None,) * count
    base, extra = divmod(count, len(group))
    kept: dict[str, list[int]] = {member: [] for member in group}
    free: list[int] = []
    for partition in range(count):
        owner = _previous_owner(previous, partition)
        if owner is not None and owner in kept:
            kept[owner].append(partition)
        else:
            free.append(partition)
    # The larger shares go to the members that keep the most: each one saves a move.
    ranked = sorted(group, key=lambda member: (-len(kept[member]), member))
    share = {member: base + (1 if rank < extra else 0) for rank, member in enumerate(ranked)}
    owners: list[str | None] = [None] * count
    for member in group:
        mine = kept[member]
        for partition in mine[:share[member]]:
            owners[partition] = member
        free.extend(mine[share[member]:])
    free.sort()
    spare = iter(free)
    for member in group:
        for _ in range(share[member] - min(len(kept[member]), share[member])):
            owners[next(spare)] = member
    return tuple(owners)


def moved(before: Sequence[str | None], after: Sequence[str | None]) -> list[int]:
    """The partitions of ``after`` whose owner is not the one they had ``before`` (a
    partition new in ``after`` counts as moved: it has an owner to start)."""
    return [partition for partition, owner in enumerate(after)
            if owner != _previous_owner(before, partition)]


def shares(owners: Sequence[str | None], members: Iterable[str] = ()) -> dict[str, list[int]]:
    """Each member's partitions, in order; ``members`` that own none are listed too."""
    held: dict[str, list[int]] = {member: [] for member in members}
    for partition, owner in enumerate(owners):
        if owner is not None:
            held.setdefault(owner, []).append(partition)
    return held

