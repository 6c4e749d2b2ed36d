"""A command whose optional dependency is missing names the extra that installs it, in one
line, exit status 1; the core install (the SDK's) has a working ``sac``. The missing package is
simulated the way Python's import system allows (``None`` in ``sys.modules``), in a process of
its own."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from sac.checker.generate import generate_run
from sac.cli import EXTRAS, missing_extra

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_EXTRAS = (
    "import sys\n"
    f"for m in {sorted(EXTRAS)!r}: sys.modules[m] = None\n"
    "from sac.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def sac_without_extras(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("argv", "package", "extra"), [
    (["chaos", "list"], "toxiproxy", "chaos"),
    (["sim", "--schedules", "1", "--seed", "1"], "tqdm", "chaos"),
    (["check", "RUN", "--engine", "python"], "jinja2", "checker"),
    (["check", "RUN", "--engine", "spark"], "pyspark", "checker"),
])
def test_a_command_without_its_extra_names_the_extra_in_one_line(
        argv: list[str], package: str, extra: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    generate_run(run, events=100)
    argv = [str(run) if a == "RUN" else a for a in argv]
    done = sac_without_extras(*argv, *(["--out", str(tmp_path / "out")]
                                       if argv[0] == "check" else []))
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"sac: error: this command needs the Python package {package!r}, "
                           f"which the {extra!r} extra installs: pip install 'sac[{extra}]' "
                           "(or 'sac[all]')\n")


def test_the_core_commands_need_no_extra() -> None:
    done = sac_without_extras("dlq", "list", "orders")
    assert done.returncode != 0
    assert "name the broker" in done.stderr  # it got as far as asking where the broker is
    assert "Traceback" not in done.stderr


def test_a_missing_module_that_no_extra_installs_is_not_disguised() -> None:
    assert missing_extra(ModuleNotFoundError("No module named 'nope'", name="nope")) is None
    line = missing_extra(ModuleNotFoundError("x", name="pyspark.sql"))
    assert line is not None
    assert "'sac[checker]'" in line


def test_the_version_is_the_installed_distributions() -> None:
    installed = importlib.metadata.version("sac")
    done = subprocess.run([sys.executable, "-m", "sac", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout == f"sac {installed}\n"
    import sac

    assert sac.__version__ == installed
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        sac.nothing  # noqa: B018


def test_every_extra_named_is_one_the_distribution_declares() -> None:
    """``EXTRAS`` repeats what ``pyproject.toml`` says (an uninstalled package cannot be
    traced to its extra at run time): an extra renamed there must be renamed here."""
    declared = set(importlib.metadata.metadata("sac").get_all("Provides-Extra") or [])
    assert set(EXTRAS.values()) <= declared
