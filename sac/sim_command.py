"""``sac sim``: the SDK's real engines (the publisher's outbox, consumers with inboxes) under
seeded fault schedules, against the simulated broker and store, in virtual time, in this
process (``sac.sim``).

Each schedule is one run from one seed, checked by the invariants of ``sac.sim.invariants``.
Exit status: 0 no violation; 1 a violation (printed with its seed, its schedule shrunk to the
faults that matter, and the command that replays it); 2 bad arguments. ``--replay SEED`` runs
one seed again, exactly, and prints the end of its trace.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

DEFAULT_SCHEDULES = 1000
LOOKUPS = ("always", "flagged", "never")
"""``LookupPolicy`` values, the default first (named here: the CLI imports the SDK lazily)."""
BROKERS = ("3.10", "4.0", "4.1", "4.2", "4.3")
"""``sac.sim.model.MODELS``, named here for the help (a test keeps the two the same)."""
DEFAULT_BROKER = "4.0"


def add_parser(commands: Any) -> None:
    sim = commands.add_parser(
        "sim", help="the SDK's engines under seeded fault schedules, in virtual time")
    sim.add_argument("--schedules", type=int, default=DEFAULT_SCHEDULES,
                     help=f"how many schedules to run (default: {DEFAULT_SCHEDULES})")
    sim.add_argument("--seed", type=int, default=None,
                     help="the first seed (default: drawn at random, and printed)")
    sim.add_argument("--replay", type=int, default=None, metavar="SEED",
                     help="run this seed again, exactly, and print the end of its trace")
    sim.add_argument("--variant", default="real",
                     help="the engines: real (default) or a deliberately broken variant "
                          "(`--variant list` names them)")
    sim.add_argument("--lookup", choices=LOOKUPS, default=LOOKUPS[0],
                     help="the consumers' inbox lookup policy (default: always, the SDK's "
                          "default); with flagged, also check that every copy a consumer "
                          "gets is flagged as one (redelivered, counted or marked), which "
                          "that policy relies on")
    sim.add_argument("--broker", default=DEFAULT_BROKER, metavar="VERSION",
                     help=f"the RabbitMQ whose rules the simulated broker follows: "
                          f"{', '.join(BROKERS)} (default: {DEFAULT_BROKER})")
    sim.add_argument("--consumer-timeout", type=float, default=None, metavar="SECONDS",
                     help="declare the queue with this x-consumer-timeout (default: none, "
                          "the broker's 30 minutes, which no run reaches)")
    sim.add_argument("--priorities", action="store_true",
                     help="one consumer subscribes with a higher x-priority (on 4.0 and later "
                          "it takes the queue over whenever it subscribes)")
    sim.add_argument("--lethal", action="store_true",
                     help="one message kills every consumer process that runs it (only the "
                          "broker's delivery limit ends that loop)")
    sim.add_argument("--tail", type=int, default=60,
                     help="trace lines --replay prints (default: 60)")
    sim.add_argument("--json", action="store_true", help="print the summary as JSON")
    sim.set_defaults(func=run_sim)


@contextlib.contextmanager
def _quiet_inbox() -> Iterator[None]:
    """The inbox logs each store retry, thousands of times in a campaign: not here."""
    logger = logging.getLogger("sac.dedup")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_sim(args: argparse.Namespace) -> int:
    from sac.sdk.dedup import LookupPolicy
    from sac.sim.model import BrokerChoice
    from sac.sim.variants import VARIANTS
    from sac.sim.workload import EnginesWorkload

    if args.variant == "list":
        for name, engines in VARIANTS.items():
            print(f"{name:22} {engines.description}")
        return 0
    if args.variant not in VARIANTS:
        raise ValueError(f"unknown variant {args.variant!r}; one of {', '.join(VARIANTS)}")
    if args.schedules < 1:
        raise ValueError(f"--schedules must be at least 1, got {args.schedules}")
    if args.consumer_timeout is not None and not args.consumer_timeout > 0:
        raise ValueError(f"--consumer-timeout must be above 0 s, got {args.consumer_timeout}")
    workload = EnginesWorkload(engines=VARIANTS[args.variant],
                               lookup=LookupPolicy(args.lookup),
                               broker=BrokerChoice(name=args.broker).model,
                               consumer_timeout=args.consumer_timeout,
                               priorities=args.priorities, lethal=args.lethal)
    with _quiet_inbox():
        if args.replay is not None:
            return _replay(args, workload)
        return _campaign(args, workload)


def _replay_command(seed: int, args: argparse.Namespace) -> str:
    extra = "" if args.variant == "real" else f" --variant {args.variant}"
    if args.lookup != LOOKUPS[0]:
        extra += f" --lookup {args.lookup}"
    if args.broker != DEFAULT_BROKER:
        extra += f" --broker {args.broker}"
    if args.consumer_timeout is not None:
        extra += f" --consumer-timeout {args.consumer_timeout:g}"
    extra += " --priorities" * args.priorities + " --lethal" * args.lethal
    return f"sac sim --replay {seed}{extra}"


def _campaign(args: argparse.Namespace, workload: Any) -> int:
    from tqdm import tqdm

    from sac.sim.campaign import campaign
    from sac.sim.faults import describe

    first = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    bar = tqdm(total=args.schedules, unit="run", file=sys.stderr, dynamic_ncols=True,
               disable=args.json, desc=f"sac sim ({args.variant})")
    began = time.perf_counter()
    last = [began]

    def progress() -> None:
        bar.update(1)
        last[0] = time.perf_counter()

    with bar:
        summary = campaign(workload, first, args.schedules, progress=progress)
    found = summary.found
    seconds = last[0] - began  # the runs' pace, without the shrinking after a violation
    rate = summary.schedules / seconds if seconds > 0 else 0.0
    report: dict[str, Any] = {
        "variant": args.variant, "broker": args.broker, "first_seed": first,
        "schedules": summary.schedules,
        "seconds": round(seconds, 2), "runs_per_second": round(rate, 1),
        "violations": 0 if found is None else 1,
    }
    if found is not None:
        seed = found.outcome.seed
        report.update({
            "seed": seed, "index": found.index,
            "violation": list(found.outcome.violations),
            "schedule": [repr(f) for f in found.outcome.schedule],
            "shrunk": [repr(f) for f in found.shrunk],
            "shrunk_violation": list(found.shrunk_violations),
            "replay": _replay_command(seed, args),
        })
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if found is None else 1
    print(f"sac sim: {summary.schedules} schedule(s) from seed {first} (variant "
          f"{args.variant}, RabbitMQ {args.broker} rules) in {seconds:.1f} s, {rate:.0f} runs/s: "
          f"{'no violation' if found is None else 'a violation'}")
    if found is None:
        return 0
    print(f"\nseed {found.outcome.seed} (schedule {found.index + 1} of the campaign) failed:")
    for line in found.outcome.violations:
        print(f"  - {line}")
    print(f"\nits schedule, shrunk from {len(found.outcome.schedule)} to "
          f"{len(found.shrunk)} fault(s), still failing with:")
    for line in found.shrunk_violations:
        print(f"  - {line}")
    print("  " + describe(found.shrunk).replace("\n", "\n  "))
    print(f"\nreplay: {_replay_command(found.outcome.seed, args)}")
    return 1


def _replay(args: argparse.Namespace, workload: Any) -> int:
    from sac.sim.campaign import replay
    from sac.sim.faults import describe

    outcome = replay(args.replay, workload)
    lines = outcome.trace.lines()
    if args.json:
        print(json.dumps({"seed": outcome.seed, "variant": args.variant,
                          "schedule": [repr(f) for f in outcome.schedule],
                          "violations": list(outcome.violations), "trace_lines": len(lines),
                          "trace_tail": lines[-args.tail:] if args.tail > 0 else [],
                          "digest": outcome.trace.digest()}, indent=2))
        return 1 if outcome.failed else 0
    print(f"seed {outcome.seed} (variant {args.variant}), schedule:")
    print("  " + describe(outcome.schedule).replace("\n", "\n  "))
    if args.tail > 0:
        shown = lines[-args.tail:]
        print(f"\nthe last {len(shown)} of {len(lines)} trace lines:")
        for line in shown:
            print(f"  {line}")
    print(f"\ntrace digest {outcome.trace.digest()[:16]}")
    if not outcome.failed:
        print("no violation")
        return 0
    print("violations:")
    for line in outcome.violations:
        print(f"  - {line}")
    return 1
