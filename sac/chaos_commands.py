"""``sac chaos list | run | campaign``: the chaos suite from the command line.

``run SCENARIO`` carries out one run and checks it; ``campaign`` many, with a progress bar,
the table and ``report.html``. Both start what they need and stop it afterwards: a fresh
3-node RabbitMQ 4.0 cluster (``--rabbitmq 3.10`` for 3.10, ``--metadata-store khepri`` for
Khepri; a second one of 3.10 when a scenario needs it: mirrored-failover), or the running one
named by ``--cluster`` (from ``sac server up``), and a PostgreSQL for the scenarios that need
one. Exit status: 0 every run passed (or, weakened,
was caught), 1 some run failed, 2 nothing could be run (bad arguments, a server that did not
start): one line naming the problem.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sac._oneline import one_line
from sac.chaos.errors import ChaosError
from sac.checker.errors import CheckerError
from sac.server import ServerError
from sac.server._files import HOME_HELP
from sac.server._rabbitmq_config import KHEPRI_SERIES, METADATA_STORES
from sac.server._rootfs import DEFAULT_SERIES, SERIES

FAILURES = (ChaosError, ServerError, CheckerError)

DEFAULT_CLUSTER = "chaos"
DEMO_SCENARIOS = ("consumer-reset", "consumer-freeze", "leader-kill", "partition-consumer-node")
"""``sac demo``: the key faults (a reset, a freeze, a leader killed, a partition)."""


def add_parser(commands: Any) -> None:
    chaos = commands.add_parser("chaos", help="fault scenarios checked from their history")
    sub = chaos.add_subparsers(dest="action", required=True)

    listing = sub.add_parser("list", help="the scenarios, what each does and must catch")
    listing.set_defaults(func=_list)

    one = sub.add_parser("run", help="one run of a scenario, checked")
    one.add_argument("scenario", help="a scenario name (see `sac chaos list`)")
    one.add_argument("--seed", type=int, default=1,
                     help="draws the scenario's choices (when, how long, which consumer): "
                          "the same seed makes the same choices (default: 1)")
    one.add_argument("--weakened", action="store_true",
                     help="run the scenario's weakened configuration: the checker must then "
                          "find its anomaly")
    _common(one)
    one.set_defaults(func=run_one)

    many = sub.add_parser("campaign", help="many runs: a table and report.html")
    many.add_argument("--scenarios", default=None,
                      help="comma-separated names (default: all)")
    many.add_argument("--seeds", type=int, default=3, help="seeds per scenario (default: 3)")
    many.add_argument("--no-weakened", action="store_true",
                      help="skip the weakened configurations")
    _common(many)
    many.set_defaults(func=run_campaign)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=300,
                        help="messages per run (default: 300)")
    parser.add_argument("--rate", type=float, default=100.0,
                        help="messages per second published (default: 100)")
    parser.add_argument("--out", type=Path, default=Path("chaos-runs"),
                        help="where run directories and report.html go (default: chaos-runs)")
    parser.add_argument("--engine", choices=("spark", "python"), default="python",
                        help="the checker's engine for the final verdicts (default: python)")
    parser.add_argument("--cluster", default=None,
                        help="use this running cluster (`sac server up --name NAME`) instead "
                             "of starting a fresh one")
    parser.add_argument("--home", type=Path, default=None,
                        help=HOME_HELP)
    _broker_options(parser)


def _broker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rabbitmq", choices=SERIES, default=None,
                        help=f"the RabbitMQ series to run on (default: {DEFAULT_SERIES}; a "
                             "scenario that needs 3.10, mirrored-failover, runs on 3.10 "
                             "unless another series is asked, which it refuses)")
    parser.add_argument("--metadata-store", choices=METADATA_STORES, default=None,
                        help="the 4.0 cluster's metadata store (default: mnesia); a run on "
                             "3.10 keeps Mnesia")


def add_demo_parser(commands: Any) -> None:
    demo = commands.add_parser(
        "demo", help="the main job at a glance: the key faults, real and weakened, checked "
                     "on Spark (about two minutes once installed)")
    demo.add_argument("--messages", type=int, default=300, help="messages per run")
    demo.add_argument("--out", type=Path, default=Path("demo-runs"),
                      help="run directories and report.html (default: demo-runs)")
    demo.add_argument("--home", type=Path, default=None,
                      help=HOME_HELP)
    _broker_options(demo)
    demo.set_defaults(func=run_demo)


@one_line("sac demo", FAILURES, 2)
def run_demo(args: argparse.Namespace) -> int:
    """A fresh cluster (a network namespace per node, for the partition), a PostgreSQL, four
    key scenarios each in its real and its weakened configuration, checked on Spark."""
    from sac.chaos.campaign import plan

    scenarios = list(DEMO_SCENARIOS)
    if os.geteuid() != 0:
        print("sac demo: not root, so no network namespaces: the partition scenario is left "
              "out (run as root for it)", file=sys.stderr)
        scenarios.remove("partition-consumer-node")
    print("sac demo: " + ", ".join(scenarios) + "; each in its real configuration (the "
          "checker must find nothing) and weakened (it must find the anomaly)", flush=True)
    args.cluster, args.engine, args.rate = None, "spark", 100.0
    return _carry_out(plan(scenarios, 1, messages=args.messages), args)


def _list(_args: argparse.Namespace) -> int:
    from sac.chaos.scenarios import SCENARIOS

    width = max(len(name) for name in SCENARIOS)
    for scenario in SCENARIOS.values():
        expect = ", ".join(scenario.expect) or "still valid"
        print(f"{scenario.name.ljust(width)}  {scenario.summary}; "
              f"weakened ({scenario.weakened}): {expect}")
    return 0


@contextlib.contextmanager
def _servers(runs: list[Any], args: argparse.Namespace
             ) -> Iterator[tuple[Any, dict[str, Any], Any]]:
    """The cluster the runs use (and, by series, those that the scenarios needing another
    series use), and a PostgreSQL if a scenario needs one; each started here is stopped on
    leaving. ChaosError, before anything starts, for a scenario asked on a series it cannot
    run on."""
    from sac.chaos.campaign import series_of
    from sac.chaos.scenarios import SCENARIOS
    from sac.server import LocalCluster, LocalPostgres

    asked, store = args.rabbitmq, args.metadata_store
    if store == "khepri" and asked is not None and asked not in KHEPRI_SERIES:
        raise ChaosError(f"--metadata-store khepri needs RabbitMQ 4.0: {asked} keeps its "
                         "metadata in Mnesia only")
    scenarios = [SCENARIOS[name] for name in dict.fromkeys(r.scenario for r in runs)]
    with contextlib.ExitStack() as stack:
        attached = None
        if args.cluster is not None:
            attached = LocalCluster.attach(args.cluster, home=args.home)
            have = attached.spec.rabbitmq
            if asked not in (None, have) or store not in (None, attached.spec.metadata_store):
                raise ChaosError(
                    f"cluster {attached.name!r} runs RabbitMQ {have} with "
                    f"{attached.spec.metadata_store}; leave --rabbitmq and --metadata-store "
                    "out, or start a cluster with them (`sac server up`)")
        main = asked or (DEFAULT_SERIES if attached is None else attached.spec.rabbitmq)
        series = series_of(scenarios, asked, main)
        for scenario in scenarios:
            if series[scenario.name] != main:
                if attached is not None:
                    raise ChaosError(f"{scenario.refusal(main)} (cluster {attached.name!r} "
                                     f"runs {main})")
                print(f"sac chaos: {scenario.name} runs on RabbitMQ {scenario.rabbitmq}: "
                      f"{scenario.rabbitmq_why}", file=sys.stderr, flush=True)
        clusters: dict[str, Any] = {}
        for version in dict.fromkeys(series.values()):  # only the series some run uses
            if attached is not None:
                clusters[version] = attached
                continue
            netns = any(s.network == "netns" for s in scenarios if series[s.name] == version)
            network = "netns" if netns else "loopback"
            metadata = (store or "mnesia") if version in KHEPRI_SERIES else "mnesia"
            name = DEFAULT_CLUSTER if version == main else \
                f"{DEFAULT_CLUSTER}-{version.replace('.', '')}"
            print(f"starting a 3-node RabbitMQ {version} cluster {name!r} ({network}, "
                  f"{metadata}) ...", file=sys.stderr, flush=True)
            clusters[version] = stack.enter_context(LocalCluster(
                name, 3, home=args.home, network=network, rabbitmq=version,
                metadata_store=metadata))
        pg = None
        if any(s.store == "postgres" for s in scenarios):
            pg = stack.enter_context(LocalPostgres(f"{DEFAULT_CLUSTER}-pg", home=args.home))
        main_cluster = clusters.pop(main if main in clusters else next(iter(clusters)))
        yield main_cluster, clusters, pg


def _scenarios(names: str | None) -> list[str]:
    from sac.chaos.scenarios import SCENARIOS

    chosen = list(SCENARIOS) if names is None else [n.strip() for n in names.split(",") if n]
    unknown = [n for n in chosen if n not in SCENARIOS]
    if unknown or not chosen:
        raise ChaosError(f"no scenario {', '.join(unknown) or '(none given)'}; there are: "
                         f"{', '.join(SCENARIOS)}")
    return chosen


@one_line("sac chaos", FAILURES, 2)
def run_one(args: argparse.Namespace) -> int:
    from sac.chaos.scenarios import SCENARIOS
    from sac.chaos.settings import RunSettings

    name = _scenarios(args.scenario)[0]
    scenario = SCENARIOS[name]
    settings = RunSettings(name, seed=args.seed, messages=args.messages, rate=args.rate,
                           weakened=scenario.weakened if args.weakened else None)
    return _carry_out([settings], args)


@one_line("sac chaos", FAILURES, 2)
def run_campaign(args: argparse.Namespace) -> int:
    from sac.chaos.campaign import plan

    if args.seeds < 1:
        raise ChaosError("--seeds must be at least 1")
    runs = plan(_scenarios(args.scenarios), args.seeds, weakened=not args.no_weakened,
                messages=args.messages, rate=args.rate)
    return _carry_out(runs, args)


def _carry_out(runs: list[Any], args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from sac.chaos.campaign import carry_out, failed, row, table
    from sac.check import check_and_report

    if args.messages < 1 or args.rate <= 0:
        raise ChaosError("--messages and --rate must be positive")
    started = time.monotonic()
    with _servers(runs, args) as (cluster, others, pg):
        bar = tqdm(total=len(runs), unit="run", file=sys.stderr, dynamic_ncols=True)

        def done(result: Any) -> None:
            bar.set_postfix_str(f"{result.settings.label}: {result.outcome}")
            bar.update()

        try:
            results = carry_out(runs, cluster, args.out, postgres=pg, on_done=done,
                                others=others)
        finally:
            bar.close()
    verdicts, _summary, report = check_and_report(
        [r.path for r in results], args.engine, None, args.out)
    rows = [row(r, v) for r, v in zip(results, verdicts, strict=True)]
    print(table(rows))
    for result in results:
        if result.error is not None:
            print(f"{result.path}: {result.error} (read {result.path / 'logs'})")
        if result.repaired:
            print(f"{result.path}: restarted {', '.join(result.repaired)}: the other nodes "
                  "still listed it as not running 15 s after the heal, or it did not serve "
                  "again within a minute after the fault")
    bad = failed(rows)
    print(f"{len(rows) - len(bad)} of {len(rows)} run(s) as expected "
          f"({time.monotonic() - started:.0f} s, checked on {args.engine}); report: {report}")
    return 1 if bad else 0
