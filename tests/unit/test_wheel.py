"""The wheel puts one name into site-packages, ``sac``, with the package data inside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[2]
# What a build reads; the copy keeps build/ and *.egg-info out of the checkout.
SOURCES = ("pyproject.toml", "README.md", "sac")


def test_the_wheel_holds_only_sac(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "out"),
         str(source)],
        check=True, timeout=300,
    )
    [wheel] = (tmp_path / "out").glob("sac-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top == {"sac"}
    for data in ("sac/py.typed", "sac/sdk/py.typed", "sac/server/py.typed",
                 "sac/checker/py.typed", "sac/sim/py.typed", "sac/checker/SPEC.md",
                 "sac/checker/templates/report.html", "sac/chaos/actors/consumer.py",
                 "sac/sdk/_core/backoff.py", "sac/cli.py"):
        assert data in names
