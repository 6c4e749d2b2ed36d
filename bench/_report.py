"""What every benchmark records beside its numbers, and where it writes them.

A result is only comparable with the conditions it was measured under: the machine's load
before and after (the broker's nodes share the cores with the client), the library and broker
versions and the SDK commit (with or without uncommitted changes to ``sac/sdk/``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from sac.sdk.management import OverviewInfo
from sac.server import ClusterSpec, LocalCluster

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def positive_int(text: str) -> int:
    """An argparse type: an integer above zero."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


def choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma list of some of ``allowed``, each once, in the order given."""

    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        unknown = [x for x in items if x not in allowed]
        if unknown or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}, not {text!r}")
        return list(dict.fromkeys(items))

    return parse


DEFAULT_SERIES = str(attrs.fields(ClusterSpec).rabbitmq.default)
"""The RabbitMQ series a benchmark boots when ``--rabbitmq`` is not given: ``LocalCluster``'s."""


def rabbitmq_series(text: str) -> str:
    """An argparse type: a RabbitMQ series ``LocalCluster`` runs (its own check and message)."""
    try:
        LocalCluster(name="bench-series-check", rabbitmq=text.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def broker_cpu_s(cluster: LocalCluster) -> float:
    """CPU seconds (user + system) the cluster's Erlang VMs have used since they started.

    Read before and after a measurement it gives the broker's share of the work: on a machine
    whose cores the broker shares with the client (and other work) that is steadier than
    throughput, and it is what a broker version changes. Each node's VM is the process named
    in its pid file (``/proc/PID/stat``: fields 14 and 15, in clock ticks)."""
    ticks = 0
    for node in cluster.nodes:
        try:
            pid = int(node.pid_file.read_text().strip())
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"node {node.name}: no running Erlang VM to read CPU from: {exc}"
                               ) from None
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, from field 3 on
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def sdk_revision() -> dict[str, Any]:
    """Which SDK code was measured: the commit, and whether ``sac/sdk/`` differed from it."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        )
        return done.stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain", "--", "sac/sdk")),
        }
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "uncommitted_changes": None}


def broker_versions(overview: OverviewInfo) -> dict[str, str | None]:
    """The broker's versions as every report names them (``overview``: the management API's
    ``/api/overview`` of the cluster measured, ``Management.overview()``)."""
    return {"rabbitmq_version": overview.version, "erlang_version": overview.erlang_version}


def conditions(
    overview: OverviewInfo, nodes: int, load_before: Sequence[float],
    libraries: Iterable[str] = ("pika", "attrs"),
) -> dict[str, Any]:
    """Python, machine, load, library and broker versions (``broker_versions``)."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "libraries": {name: importlib.metadata.version(name) for name in libraries},
        "broker": {
            "nodes": nodes,
            **broker_versions(overview),
        },
    }


def save(prefix: str, started: dt.datetime, report: dict[str, Any], table: str) -> Path:
    """Write ``report`` to ``bench/results/<prefix>-<UTC>.json``; print the table and path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{prefix}-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(table)
    print(f"results: {path}")
    return path


def p95(values: Sequence[float]) -> float:
    """The 95th percentile, interpolated between the values (the value itself for one)."""
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def spread(values: Sequence[float], middle: str = "median") -> dict[str, float | None]:
    """The middle (median, under the name ``middle``), 95th percentile, min and max of some
    timings, in seconds rounded to 0.1 ms; all None without a value."""
    if not values:
        return {middle: None, "p95": None, "min": None, "max": None}
    return {middle: round(statistics.median(values), 4), "p95": round(p95(values), 4),
            "min": round(min(values), 4), "max": round(max(values), 4)}
