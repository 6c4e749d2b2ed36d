"""Run a recipe as its user does: the file copied alone into a project of theirs where sac is
installed (no checkout, no ``recipes`` package), ``python NAME.py ...``, in a process of its
own, against the session's servers (``tests/conftest.py``)."""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sac.server import LocalCluster

ROOT = Path(__file__).parents[2]
RECIPE_TIMEOUT = 240.0

Recipe = Callable[..., subprocess.CompletedProcess[str]]


@functools.cache
def installed_sac() -> Path:
    """A directory holding the package ``sac`` alone (a link to this checkout's): on
    PYTHONPATH it stands for a project's site-packages, where ``recipes`` and ``tests`` are
    not importable."""
    site = Path(tempfile.mkdtemp(prefix="sac-site-"))
    atexit.register(shutil.rmtree, site, True)
    (site / "sac").symlink_to(ROOT / "sac", target_is_directory=True)
    return site


def run_recipe(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python NAME.py ARGS`` with the recipe's file copied alone into a fresh directory, and
    run from there."""
    project = Path(tempfile.mkdtemp(prefix=f"sac-project-{name}-"))
    try:
        shutil.copy(ROOT / "recipes" / f"{name}.py", project)
        env = {**os.environ, "PYTHONPATH": str(installed_sac())}
        return subprocess.run([sys.executable, f"{name}.py", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=RECIPE_TIMEOUT,
                              check=False)
    finally:
        shutil.rmtree(project, ignore_errors=True)


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
