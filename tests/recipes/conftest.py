"""Run a recipe as its user does: ``python -m recipes.<name> ...`` from the checkout, in a
process of its own, against the session's servers (``tests/conftest.py``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sac.server import LocalCluster

ROOT = Path(__file__).parents[2]
RECIPE_TIMEOUT = 240.0

Recipe = Callable[..., subprocess.CompletedProcess[str]]


def run_recipe(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", f"recipes.{name}", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=RECIPE_TIMEOUT, check=False)


@pytest.fixture
def recipe(cluster: LocalCluster) -> Recipe:
    """Runs a recipe against the session cluster (found by name, as after `sac server up`)."""

    def run(name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return run_recipe(name, "--cluster", cluster.name, "--home", str(cluster.spec.home),
                          *args)

    return run


def number(output: str, label: str) -> int:
    """The number printed after ``label`` at the start of a line of the recipe's report."""
    found = re.search(rf"^{re.escape(label)}\s+(\d+)", output, re.MULTILINE)
    assert found is not None, f"no line {label!r} in:\n{output}"
    return int(found.group(1))
