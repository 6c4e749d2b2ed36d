"""Rebalance time of a consumer group's membership (``sac.sdk.group``) alone: how long after a
member joins or leaves gracefully every member holds what the settled record gives it.

The group: ``--partitions`` (1 000) over ``--members`` (10), each member a ``GroupMembership``
with a ZooKeeper session of its own, all in this process, on a ZooKeeper this bench starts.
A let-go ends at once (``let_go_done`` from the callback): this measures the protocol (two
steps: revoke, then grant once the holder let go and every member read the revocation) and
ZooKeeper, not a consumer's handover, which adds the time its partition's consumer takes
to finish and ack what it holds.

A trial: one more member joins (``start``), and the clock stops once every member carried
out a settled record that includes it; then that member leaves (its partitions released,
then ``close``), and the clock stops once the others carried out a settled record without
it. ``--trials`` of each; the median, p95 and max are reported (the issue asks for a p50
under 1 s and a max under 2 s for 1 000 partitions over 10 instances). Results go to
``bench/results/group-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from sac.sdk._settings import GroupSettings
from sac.sdk.group import GroupMembership
from sac.server import LocalZooKeeper
from ._report import positive_int, save, sdk_revision, spread

RESULTS_PREFIX = "group"


def member(hosts: str, path: str, partitions: int, name: str,
           lease: float) -> GroupMembership:
    box: list[GroupMembership] = []
    membership = GroupMembership(
        GroupSettings(hosts, path, partitions, session_timeout=lease), name,
        on_take=lambda _p: None, on_let_go=lambda p: box[0].let_go_done(p))
    box.append(membership)
    return membership


def settled(group: Sequence[GroupMembership]) -> bool:
    records = [m.published for m in group]
    first = records[0]
    if first is None or any(r is None or r.generation != first.generation for r in records):
        return False
    return first.settled() and set(first.owners) == {m.name for m in group} and all(
        m.held == {p for p, o in enumerate(first.owners) if o == m.name} for m in group)


def wait_settled(group: Sequence[GroupMembership], timeout: float) -> float:
    """Seconds until ``group`` is settled (woken by the first member's thread)."""
    began = time.perf_counter()
    while not settled(group):
        if time.perf_counter() - began > timeout:
            raise TimeoutError(f"the group did not settle within {timeout} s")
        with group[0].changed:
            group[0].changed.wait(0.005)
    return time.perf_counter() - began


def run(args: argparse.Namespace) -> dict[str, Any]:
    path = f"/sac-bench/group-{os.urandom(4).hex()}"
    with LocalZooKeeper(name="bench-group-zk") as zk:
        base = [member(zk.hosts, path, args.partitions, f"i{n}", args.lease)
                for n in range(args.members)]
        for m in base:
            m.start()
        first = wait_settled(base, 120)
        joins: list[float] = []
        leaves: list[float] = []
        for trial in range(args.trials):
            extra = member(zk.hosts, path, args.partitions, f"joiner{trial}", args.lease)
            began = time.perf_counter()
            extra.start()
            wait_settled([*base, extra], 60)
            joins.append(time.perf_counter() - began)
            began = time.perf_counter()
            extra.close()
            wait_settled(base, 60)
            leaves.append(time.perf_counter() - began)
            print(f"  trial {trial + 1}: join {joins[-1] * 1000:.0f} ms, "
                  f"leave {leaves[-1] * 1000:.0f} ms", file=sys.stderr, flush=True)
        for m in base:
            m.close()
    return {"first_settle_s": round(first, 4), "join": spread(joins, "median"),
            "leave": spread(leaves, "median"), "joins_s": joins, "leaves_s": leaves}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.group", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=positive_int, default=1000)
    parser.add_argument("--members", type=positive_int, default=10)
    parser.add_argument("--trials", type=positive_int, default=10)
    parser.add_argument("--lease", type=float, default=10.0, help="session timeout, s")
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    result = run(args)
    report = {"timestamp": started.isoformat(), "partitions": args.partitions,
              "members": args.members, "trials": args.trials, "loadavg_1_5_15": os.getloadavg(),
              "sdk": sdk_revision(), **result}
    table = (f"{args.partitions} partitions over {args.members} members (+1):\n"
             f"  join  settled in median {result['join']['median']} s, "
             f"max {result['join']['max']} s\n"
             f"  leave settled in median {result['leave']['median']} s, "
             f"max {result['leave']['max']} s")
    save(RESULTS_PREFIX, started, report, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
