"""``sac check RUN... [--engine spark|python] [--master URL] [--out DIR]``: the verdict of each
run directory (``RUN/verdict.json``), ``summary.json`` and ``report.html`` in ``--out``.

The exit status says what a script needs: 0 every run valid, 1 some run invalid (its
anomalies are printed, one line each), 2 the input could not be checked (a missing
directory, a directory that is not a run: no ``run.json``, no history events, no event naming
a queue; an unreachable ``--master``): one line naming the problem, never a Spark stack
trace as the only output, and nothing written.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sac._oneline import one_line
from sac._reach import check_master
from sac.checker.errors import CheckerError, InputError
from sac.checker.runs import open_run
from sac.checker.verdict import Verdict
from sac.history import MALFORMED

SHOWN = 10  # offending ids printed per anomaly; the report lists them all
SPARK_LOG = "check-spark.log"
"""In ``--out``: what Spark's JVM writes (its banner, warnings), not shown on the terminal."""


def add_parser(commands: Any) -> None:
    check = commands.add_parser(
        "check", help="check run directories: verdict.json per run, summary.json, report.html")
    check.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                       help="a run directory (run.json, events/*.jsonl, effects.jsonl)")
    check.add_argument("--engine", choices=("spark", "python"), default="spark",
                       help="spark (default; local[*] unless --master) or the pure-Python "
                            "reference engine (small runs)")
    check.add_argument("--master", default=None,
                       help="a Spark master URL, e.g. spark://10.0.0.5:7077 (default: local[*])")
    check.add_argument("--out", type=Path, default=Path("."),
                       help="where summary.json and report.html go (default: .)")
    check.set_defaults(func=run)


@one_line("sac check", CheckerError, 2)
def run(args: argparse.Namespace) -> int:
    return _check(args.runs, args.engine, args.master, args.out)


def _check(runs: list[Path], engine: str, master: str | None, out: Path) -> int:
    verdicts, summary, report = check_and_report(runs, engine, master, out)
    for path, verdict in zip(runs, verdicts, strict=True):
        print(_one_line(path, verdict))
        for line in verdict.malformed[:SHOWN]:
            print(f"  {path / line['file']}:{line['line']}: malformed line: {line['error']}")
    print(f"{summary['valid']} of {summary['runs']} run(s) valid; report: {report}")
    return 0 if summary["valid"] == summary["runs"] else 1


def check_and_report(runs: list[Path], engine: str, master: str | None, out: Path
                     ) -> tuple[list[Verdict], dict[str, Any], Path]:
    """Each run's verdict on ``engine`` (written to ``RUN/verdict.json``), ``summary.json``
    and ``report.html`` in ``out``: what ``sac check`` and ``sac chaos campaign`` share."""
    if master is not None and engine != "spark":
        raise InputError("--master needs --engine spark")
    # Not a run (none there, no run.json, no events): refused before Spark.
    brokers = [open_run(path).config.broker for path in runs]
    out.mkdir(parents=True, exist_ok=True)
    if engine == "python":
        from sac.checker.python_engine import check_runs

        verdicts = check_runs(runs)
    else:
        if master is not None:
            check_master(master)
        from sac._spark import session
        from sac.checker.spark_engine import check_runs as spark_check

        spark, owned = session(master, out / SPARK_LOG, app="sac-check")
        try:
            verdicts = spark_check(spark, runs)
        finally:
            if owned:
                spark.stop()
    from sac.checker.python_engine import summarize
    from sac.checker.report import render_report

    for path, verdict in zip(runs, verdicts, strict=True):
        (path / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=2,
                                                      sort_keys=True))
    summary = summarize(verdicts, engine)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    return verdicts, summary, render_report(verdicts, summary, out / "report.html", brokers)


def _one_line(path: Path, verdict: Verdict) -> str:
    if verdict.valid:
        tolerated = ", ".join(sorted(verdict.tolerated))
        return f"{path}: valid" + (f" (tolerates {tolerated})" if tolerated else "")
    found = []
    for name in verdict.untolerated():
        count = verdict.count(name)
        ids = () if name == MALFORMED else verdict.ids(name)  # lines: listed below the run
        shown = ", ".join(ids[:SHOWN]) + (f" and {len(ids) - SHOWN} more"
                                          if len(ids) > SHOWN else "")
        found.append(f"{name} {count}" + (f" ({shown})" if shown else ""))
    return f"{path}: INVALID: " + "; ".join(found)
