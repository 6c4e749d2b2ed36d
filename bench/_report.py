"""What every benchmark records beside its numbers, and where it writes them.

A result is only comparable with the conditions it was measured under: the machine's load
before and after (the broker's nodes share the cores with the client), the library and broker
versions and the SDK commit (with or without uncommitted changes to ``sdk/``).
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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def positive_int(text: str) -> int:
    """An argparse type: an integer above zero."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


def sdk_revision() -> dict[str, Any]:
    """Which SDK code was measured: the commit, and whether ``sdk/`` differed from it."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        )
        return done.stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain", "--", "sdk")),
        }
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "uncommitted_changes": None}


def conditions(
    overview: dict[str, Any], nodes: int, load_before: Sequence[float],
    libraries: Iterable[str] = ("pika", "attrs"),
) -> dict[str, Any]:
    """Python, machine, load, library and broker versions (``overview``: the management
    API's ``/api/overview`` of the cluster measured)."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "libraries": {name: importlib.metadata.version(name) for name in libraries},
        "broker": {
            "nodes": nodes,
            "rabbitmq_version": overview.get("rabbitmq_version"),
            "erlang_version": overview.get("erlang_version"),
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


def spread(values: Sequence[float], middle: str = "median") -> dict[str, float | None]:
    """The middle (median, under the name ``middle``), min and max of some timings, in
    seconds rounded to 0.1 ms; all None without a value."""
    if not values:
        return {middle: None, "min": None, "max": None}
    return {middle: round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}
