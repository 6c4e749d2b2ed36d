"""``recipes/takeover.py`` end to end: what its user checks in its report."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from sac.server import LocalCluster
from tests.recipes.conftest import ROOT, Recipe, number, run_recipe


def test_a_standby_takes_over_after_a_graceful_stop(recipe: Recipe,
                                                      cluster: LocalCluster) -> None:
    done = recipe("takeover", "--messages", "400", "--rate", "200")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert number(out, "published and confirmed") == 400
    handled_a = number(out, "handled by a (then stopped)")
    handled_b = number(out, "handled by b (the standby)")
    assert handled_a > 0
    assert handled_b > 0
    assert handled_a + handled_b == 400
    assert number(out, "missing") == 0
    assert number(out, "done twice") == 0
    gap = re.search(r"^gap: a's last effect -> b's first effect\s+([0-9.]+) s$", out, re.M)
    assert gap is not None, out
    assert float(gap.group(1)) > 0
    assert "PROVED:" in out
    # its queue is gone again
    names = {q.name for q in cluster.management().queues("/")}
    assert not [n for n in names if n.startswith("takeover-")]


def test_bad_input_is_one_line_and_status_2(recipe: Recipe) -> None:
    done = recipe("takeover", "--messages", "10", "--handover-at", "10")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "--handover-at (10) must be below --messages (10)" in done.stderr


def test_a_cluster_that_is_not_running_is_bad_input() -> None:
    done = run_recipe("takeover", "--cluster", "no-such-cluster", "--home", "/nonexistent")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "cluster 'no-such-cluster' is not running" in done.stderr


def test_the_takeover_benchmark_says_how_to_run_it() -> None:
    """The benchmark is not run by the tests; its command line is."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bench.takeover", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "native-graceful" in done.stdout
    assert "native-frozen" in done.stdout
    assert "guard-clean" in done.stdout
    assert "guard-expiry" in done.stdout
    short = subprocess.run([sys.executable, "-m", "bench.takeover", "--lease", "0.1"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                           check=False)
    assert short.returncode == 2
    assert "--lease must be in [0.2, 60] s, not 0.1" in short.stderr
    refused = subprocess.run([sys.executable, "-m", "bench.takeover", "--modes", "nope"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                             check=False)
    assert refused.returncode == 2
    assert "choose from native-graceful, native-frozen" in refused.stderr
