"""RabbitMQ 4.0 against 3.10: the same workloads on both series in one run, with ratios.

Users run 4.x, and older clusters 3.10. A figure on one series next to a figure measured
another day on the other says little on a machine whose two cores the broker shares
with the client and with other work, so this driver runs the existing benchmarks, with the
same options, on a fresh 3-node cluster of each series (``--rabbitmq``, default ``4.0,3.10``)
in the same run, and reports each figure of the first series over the second's.

- ``throughput`` (``bench/throughput.py``): msg/s, the client's CPU per message and the
  broker's (the cluster's Erlang VMs, read from ``/proc`` around each run). Throughput swings
  with whatever else the machine does; CPU per message much less, so it is the ratio to trust.
- ``handover`` (``bench/handover.py``): the graceful handover (A's ``stop()`` to B's first
  message) and its gap (A's last message to B's first), a killed consumer, and on 4.0 the
  priority handover (B subscribes with a higher priority while A keeps running); p50, p95
  and max.
- ``takeover`` (``bench/takeover.py``): the graceful and the frozen takeover through the
  inbox, p50, p95 and max.

Only one cluster runs at a time (booted, measured, torn down, then the other's turn), and the
benchmarks on it run one after another. ``--repeat R`` makes R rounds, the order of the
series alternating (4.0 then 3.10, then 3.10 then 4.0, ...) so that a slow spell hits both
alike; each series' figures are then over all its rounds. A scenario a series cannot run
(the priority handover on 3.10, which ignores priorities for single active consumer) is left
out of that series and has no ratio. Each benchmark's own options are given as one string
(``--throughput "--messages 20000"``) and parsed by that benchmark, for every series alike,
before any cluster boots.

Results: a table on stdout and ``bench/results/versions-<UTC>.json`` (each series' full
report per benchmark, the ratios, the boot times). ``python -m bench.versions --help``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sac.sdk.management import OverviewInfo
from sac.server import LocalCluster
from . import handover, takeover, throughput
from ._report import broker_versions, choices, conditions, positive_int, rabbitmq_series, save

BENCHMARKS = ("throughput", "handover", "takeover")
DEFAULT_SERIES = ("4.0", "3.10")
DEFAULT_OPTIONS = {
    # A modest size: the machine is shared; ratios within one run are what count.
    "throughput": "--messages 20000",
    "handover": "--repeat 5 --scenarios graceful,priority,connection-reset",
    "takeover": "--trials 5 --modes native-graceful,native-frozen --seed 13",
}
PARSERS: dict[str, Callable[[list[str]], argparse.Namespace]] = {
    "throughput": throughput.parse_args,
    "handover": handover.parse_args,
    "takeover": takeover.parse_args,
}


def order(series: Sequence[str], round_: int) -> list[str]:
    """The series in the order round ``round_`` (from 0) boots them: as given in even rounds,
    reversed in odd ones."""
    return list(series) if round_ % 2 == 0 else list(reversed(series))


def ratio(new: float | None, old: float | None) -> float | None:
    """``new / old`` to 3 decimals; None when either is missing or ``old`` is 0."""
    return None if new is None or not old else round(new / old, 3)


# --------------------------------------------------------------------------- per series


@dataclass
class Series:
    """What one RabbitMQ series gathered over the rounds."""

    name: str
    options: dict[str, argparse.Namespace]
    boot_s: list[float] = field(default_factory=list)
    overview: OverviewInfo | None = None
    """The broker's ``/api/overview``, read when the series is first measured."""
    broker: dict[str, Any] = field(default_factory=dict)
    """throughput's description of the cluster, read while it runs."""
    rates: throughput.Bench | None = None
    """throughput's bench of the first round, every later round's runs added."""
    handovers: list[handover.RunResult] = field(default_factory=list)
    trials: list[takeover.Trial] = field(default_factory=list)

    def measure(self, cluster: LocalCluster, benchmarks: Sequence[str], work: Path) -> None:
        """One round of ``benchmarks`` on ``cluster`` (this series'), one after another."""
        self.overview = cluster.management().overview()
        for name in benchmarks:
            args = self.options[name]
            print(f"[{self.name}] {name}", file=sys.stderr, flush=True)
            if name == "throughput":
                bench = throughput.Bench(cluster, args)
                self.broker = bench.broker()
                bench.run(args.variants)
                self._merge(bench)
            elif name == "handover":
                self.handovers += handover.run_all(
                    handover.Bench(cluster, args), handover.scenarios(args), args)
            else:
                with takeover.servers_for(cluster, args) as servers:
                    self.trials += takeover.run_all(takeover.Bench(servers, args, work), args)

    def _merge(self, bench: throughput.Bench) -> None:
        """Keep the first round's bench, and add every later round's runs to it."""
        if self.rates is None:
            self.rates = bench
            return
        for variant, outcome in bench.outcomes.items():
            kept = self.rates.outcomes.setdefault(variant, throughput.Outcome(outcome.kind))
            kept.runs += outcome.runs
            kept.notes += outcome.notes
        self.rates.fillers |= bench.fillers

    def measured_overview(self) -> OverviewInfo:
        """The broker's overview, once ``measure`` read it (every series is measured before
        anything is reported)."""
        if self.overview is None:
            raise RuntimeError(f"RabbitMQ {self.name}: reported before it was measured")
        return self.overview

    def reports(self, started: dt.datetime, load_before: Sequence[float]) -> dict[str, Any]:
        """Each benchmark's own JSON report, as its module writes it."""
        out: dict[str, Any] = {}
        if self.rates is not None:
            out["throughput"] = throughput.describe(
                self.options["throughput"], started, load_before, self.rates, self.broker)
        if self.handovers:
            out["handover"] = handover.describe(
                self.options["handover"], started, load_before, self.measured_overview(),
                self.handovers)
        if self.trials:
            out["takeover"] = takeover.describe(
                self.options["takeover"], started, load_before, self.measured_overview(),
                self.trials)
        return out


# --------------------------------------------------------------------------- ratios


def _spread_ratios(new: dict[str, Any], old: dict[str, Any]) -> dict[str, float | None]:
    return {key: ratio(new.get(key), old.get(key)) for key in new if key != "min"}


def ratios(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """Each figure of ``new``'s reports over the same figure of ``old``'s (above 1: ``new``
    has more of it), for what both measured."""
    out: dict[str, Any] = {}
    if "throughput" in new and "throughput" in old:
        variants_new, variants_old = new["throughput"]["variants"], old["throughput"]["variants"]
        out["throughput"] = {
            variant: {key: ratio(s.get(key), variants_old[variant].get(key))
                      for key in ("msg_per_s", "client_cpu_us_per_msg", "broker_cpu_us_per_msg")}
            for variant, s in variants_new.items() if variant in variants_old
        }
    if "handover" in new and "handover" in old:
        summary_old = old["handover"]["summary"]
        out["handover"] = {
            key: {"handover_s": _spread_ratios(s["handover_s"], summary_old[key]["handover_s"]),
                  "gap_s": _spread_ratios(s["gap_s"], summary_old[key]["gap_s"])}
            for key, s in new["handover"]["summary"].items() if key in summary_old
        }
    if "takeover" in new and "takeover" in old:
        summary_old = old["takeover"]["summary"]
        out["takeover"] = {
            mode: {"takeover_s": _spread_ratios(s["takeover_s"], summary_old[mode]["takeover_s"])}
            for mode, s in new["takeover"]["summary"].items() if mode in summary_old
        }
    return out


# --------------------------------------------------------------------------- table


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(series: Sequence[str], reports: dict[str, dict[str, Any]],
          found: dict[str, Any]) -> str:
    """Each figure per series, then the first series over the second."""
    a, b = series
    head = f"{a}/{b}"
    lines: list[str] = []
    if all("throughput" in reports[s] for s in series):
        lines += [f"{'throughput':<28} {'msg/s':>17} {'client us/msg':>17} "
                  f"{'broker us/msg':>17}   ({a} | {b} | {head})"]
        for variant, r in found.get("throughput", {}).items():
            cells = []
            for key, digits in (("msg_per_s", 0), ("client_cpu_us_per_msg", 1),
                                ("broker_cpu_us_per_msg", 1)):
                x, y = (reports[s]["throughput"]["variants"][variant][key] for s in series)
                cells.append(f"{_num(x, digits)}|{_num(y, digits)}|{_num(r[key], 2)}")
            lines.append(f"{variant:<28} " + " ".join(f"{c:>17}" for c in cells))
    for bench_name, key, middle in (("handover", "handover_s", "median"),
                                    ("handover", "gap_s", "median"),
                                    ("takeover", "takeover_s", "p50")):
        rows = {s: reports[s].get(bench_name, {}).get("summary", {}) for s in series}
        if not any(rows.values()):
            continue
        lines += ["", f"{bench_name} {key:<19} {'p50':>17} {'p95':>17} {'max':>17}"
                  f"   ({a} | {b} | {head})"]
        for group in dict.fromkeys([*rows[a], *rows[b]]):
            cells = []
            for stat in (middle, "p95", "max"):
                x, y = (rows[s].get(group, {}).get(key, {}).get(stat) for s in series)
                cells.append(f"{_num(x)}|{_num(y)}|{_num(ratio(x, y), 2)}")
            lines.append(f"{group:<28} " + " ".join(f"{c:>17}" for c in cells))
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _series_list(text: str) -> list[str]:
    names = [rabbitmq_series(x) for x in text.split(",") if x.strip()]
    if len(names) != 2 or names[0] == names[1]:
        raise argparse.ArgumentTypeError(f"give two different series, as 4.0,3.10; not {text!r}")
    return names


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[Series]]:
    """The driver's options, and each series with every chosen benchmark's options parsed
    for it (a benchmark's bad option ends the run here, before any cluster boots)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.versions",
        description="The same benchmarks on a 3-node cluster of each of two RabbitMQ series, "
        "one cluster at a time, in one run; each figure of the first over the second's.")
    parser.add_argument("--rabbitmq", type=_series_list, default=list(DEFAULT_SERIES),
                        help="two series, the first over the second (default 4.0,3.10)")
    parser.add_argument("--benchmarks", type=choices(BENCHMARKS), default=list(BENCHMARKS),
                        help=f"comma list of {', '.join(BENCHMARKS)} (default: all)")
    parser.add_argument("--repeat", type=positive_int, default=1,
                        help="rounds; each boots every series once, the order alternating")
    parser.add_argument("--cluster-name", default="versions",
                        help="LocalCluster name prefix (the series is added)")
    for name in BENCHMARKS:
        parser.add_argument(f"--{name}", default=DEFAULT_OPTIONS[name], metavar="OPTIONS",
                            help=f"options of bench.{name}, for every series alike "
                            f"(default {DEFAULT_OPTIONS[name]!r})")
    args = parser.parse_args(argv)
    series = []
    for name in args.rabbitmq:
        options = {}
        for bench_name in args.benchmarks:
            argv_of = [*shlex.split(getattr(args, bench_name)), "--rabbitmq", name]
            print(f"bench.{bench_name} on {name}: {shlex.join(argv_of)}", file=sys.stderr)
            options[bench_name] = PARSERS[bench_name](argv_of)
        series.append(Series(name, options))
    return args, series


def cluster_name(prefix: str, series: str) -> str:
    return f"{prefix}-{series.replace('.', '')}"


def main(argv: Sequence[str] | None = None) -> int:
    args, series = parse_args(argv)
    by_name = {s.name: s for s in series}
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    rounds: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as work:
        for round_ in range(args.repeat):
            rounds.append(order(args.rabbitmq, round_))
            for name in rounds[-1]:
                print(f"round {round_ + 1}: booting a 3-node RabbitMQ {name} cluster ...",
                      file=sys.stderr, flush=True)
                booted = time.monotonic()
                with LocalCluster(name=cluster_name(args.cluster_name, name), nodes=3,
                                  rabbitmq=name) as cluster:
                    by_name[name].boot_s.append(round(time.monotonic() - booted, 1))
                    by_name[name].measure(cluster, args.benchmarks, Path(work))
    reports = {s.name: s.reports(started, load_before) for s in series}
    overviews = [s.measured_overview() for s in series]
    first, second = args.rabbitmq
    found = ratios(reports[first], reports[second])
    report = {
        "benchmark": "RabbitMQ series against each other",
        "timestamp": started.isoformat(timespec="seconds"),
        "series": args.rabbitmq,
        "ratio": f"{first}/{second}: each figure of {first} over the same figure of {second}",
        "benchmarks": args.benchmarks,
        "options": {name: getattr(args, name) for name in args.benchmarks},
        "rounds": rounds,
        "one_cluster_at_a_time": True,
        "boot_s": {s.name: s.boot_s for s in series},
        # the machine's; each series' broker is under "brokers"
        **{k: v for k, v in conditions(overviews[0], 3, load_before).items()
           if k != "broker"},
        "brokers": {s.name: broker_versions(o) for s, o in zip(series, overviews, strict=True)},
        "ratios": found,
        "reports": reports,
    }
    save("versions", started, report, table(args.rabbitmq, reports, found))
    failed = sum(len(r.errors) for s in series for r in s.handovers) + sum(
        not t.ok for s in series for t in s.trials)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
