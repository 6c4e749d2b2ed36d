"""``sac/sdk/_wire/pika_hooks.py`` works with every pika release the dependency pin allows.

The hook module overrides and reads private parts of pika, which any release may change. This
test asks the package index which releases the pin in ``pyproject.toml`` allows (so a new one
is tested as soon as it is out), fetches each wheel once (kept in pytest's cache), and runs
``tests/sdk/pika_round_trip.py`` with that pika first on the path against the session cluster:
a confirmed publish (small and multi-frame) and both deliveries decoded by our decoder. Without
the network the test fails: it never skips.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from sac.server import LocalCluster

ROOT = Path(__file__).parents[2]
INDEX_TIMEOUT = 120.0
RUN_TIMEOUT = 90.0


def pika_pin() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [Requirement(dep) for dep in project["dependencies"]]
    return next(pin for pin in pins if pin.name == "pika")


def _pip(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
        capture_output=True, text=True, timeout=INDEX_TIMEOUT, check=False)
    if done.returncode != 0:
        pytest.fail(f"pip {' '.join(args)} failed (is the package index reachable?):\n"
                    f"{done.stderr.strip()[-2000:]}")
    return done.stdout


def releases(pin: Requirement) -> list[str]:
    """Every final release on the index that ``pin`` allows, oldest first."""
    listed = re.search(r"Available versions: (.+)", _pip("index", "versions", "pika"))
    assert listed is not None, "pip index versions printed no version list"
    versions = [Version(v.strip()) for v in listed[1].split(",")]
    return [str(v) for v in sorted(versions) if not v.is_prerelease and v in pin.specifier]


def wheel(version: str, cache: Path) -> Path:
    found = sorted(cache.glob(f"pika-{version}-*.whl"))
    if not found:
        _pip("download", "--no-deps", "--only-binary=:all:", "--dest", str(cache),
             f"pika=={version}")
        found = sorted(cache.glob(f"pika-{version}-*.whl"))
    assert found, f"pip download left no wheel of pika {version} in {cache}"
    return found[0]


def round_trip(version: str, wheel_path: Path, url: str, queue: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(wheel_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "tests.sdk.pika_round_trip", version, url, queue],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, (
        f"pika {version}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_hooks_work_with_every_pika_the_pin_allows(
    cluster: LocalCluster, queue_name: str, pytestconfig: pytest.Config
) -> None:
    pin = pika_pin()
    versions = releases(pin)
    # The pin's lower end and the releases known when this test was written must be listed.
    assert {"1.3.0", "1.3.1", "1.3.2", "1.4.4"} <= set(versions), versions
    cache = pytestconfig.cache.mkdir("pika-wheels")
    failures: dict[str, str] = {}
    for index, version in enumerate(versions):
        try:
            result = round_trip(version, wheel(version, cache), cluster.urls()[0],
                                f"{queue_name}-{index}")
            assert result["pika"] == version
            assert result["confirms"] == ["Ack", "Ack"]
            assert result["decoded_by_us"] == ["large", "small"]
            assert result["bodies_equal"] is True
            assert result["redelivered"] == [False, False]
            assert result["decoded_by_pika"] == 0
            assert result["dropped"]
            assert "dropped by the test" in str(result["dropped"][0])
        except AssertionError as exc:
            failures[version] = str(exc)
    assert failures == {}, f"tested {versions}"
