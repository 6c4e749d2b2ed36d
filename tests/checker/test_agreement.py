"""The Spark engine and the reference engine agree exactly on generated runs.

Clean runs of several shapes and runs with each injected anomaly are checked by both engines;
the verdicts must be the same JSON once ``engine`` and the malformed lines' ``error`` texts
(free wording, SPEC.md) are dropped. All runs go through one ``check_runs`` call, which is
also how the CLI checks many runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from checker import python_engine, spark_engine, spec
from checker.generate import INJECTIONS, generate_run

SHAPES: dict[str, dict[str, Any]] = {
    "clean-1q": {"seed": 1},
    "clean-3q": {"seed": 2, "queues": 3, "consumers": 6, "faults": 4},
    "clean-1consumer": {"seed": 3, "consumers": 1, "faults": 0},
    **{f"inject-{name}": {"seed": 10 + i, "inject": [name]} for i, name in enumerate(INJECTIONS)},
    "inject-all": {"seed": 40, "queues": 2, "consumers": 4, "inject": [*INJECTIONS, "concurrent"]},
}


def comparable(verdict: dict[str, Any]) -> str:
    """The verdict as the agreement is defined (``spec.comparable``), as sorted JSON."""
    return json.dumps(spec.comparable(verdict), sort_keys=True, indent=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("generated")
    paths = []
    for name, shape in SHAPES.items():
        generate_run(root / name, events=2000, **shape)
        paths.append(root / name)
    return paths


@pytest.fixture(scope="module")
def spark_verdicts(spark: SparkSession, runs: list[Path]) -> list[dict[str, Any]]:
    return spark_engine.check_runs(spark, runs)


@pytest.mark.parametrize("index", range(len(SHAPES)), ids=list(SHAPES))
def test_engines_agree(runs: list[Path], spark_verdicts: list[dict[str, Any]], index: int) -> None:
    expected = python_engine.check_run(runs[index])
    got = spark_verdicts[index]
    assert got["engine"] == "spark"
    assert comparable(got) == comparable(expected)


def test_injected_anomalies_are_found(spark_verdicts: list[dict[str, Any]]) -> None:
    """Not only agreement: the anomalies the generator injected are in the verdict."""
    by_name = {v["run"]: v for v in spark_verdicts}
    for name in ("lost", "duplicated", "unexpected", "concurrent"):
        assert by_name[f"inject-{name}"][name]["count"] >= 1, name
        assert not by_name[f"inject-{name}"]["valid"]
    assert by_name["inject-malformed"]["malformed"]["count"] == 1
    assert by_name["inject-no_effects"]["effects_source"] == "events"
    assert all(by_name[name]["valid"] for name in SHAPES if name.startswith("clean"))
