"""The arrows that must never exist (shared/ARCHITECTURE.md), checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

# The command line: every module of sac/ that is not one of the linked subpackages.
CLI = {"sac"} | {f"sac.{path.stem}" for path in (ROOT / "sac").glob("*.py")} - {"sac.__init__"}


def room(module: str) -> str:
    """What an arrow points at: ``sac.sdk`` for ``sac.sdk.dedup.Inbox``, ``pika`` for
    ``pika.spec``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "sac" else parts[0]


def imported_rooms(package: str) -> dict[str, set[str]]:
    """The rooms each file of ``package`` imports, relative imports resolved: inside
    ``sac.sdk``, ``from .. import server`` would reach ``sac.server``."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = ["sac", *path.relative_to(ROOT).with_suffix("").parts]
        home = parts if parts[-1] == "__init__" else parts[:-1]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(home[: len(home) - node.level + 1]) if node.level else ""
                module = ".".join(filter(None, (base, node.module)))
                names |= {f"{module}.{alias.name}" for alias in node.names}
        found[str(path.relative_to(ROOT))] = {room(name) for name in names}
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("sdk", {"sac.server", "sac.chaos", "sac.checker", "recipes", "bench"} | CLI),
        ("sdk/_core", {"pika", "aio_pika", "aiormq", "kazoo", "socket", "asyncio", "ssl"}),
        ("server", {"sac.sdk", "sac.chaos", "recipes", "bench"}),
        # The pipeline reads histories, not code, and runs on a Spark cluster with only its
        # own dependencies.
        ("checker", {"sac.sdk", "sac.server", "sac.chaos", "recipes", "bench", "pika"} | CLI),
        # The suite is a library the CLI, recipes and benchmarks use, not the other way.
        ("chaos", {"recipes", "bench", "tests"} | CLI),
    ],
)
def test_forbidden_imports(package: str, forbidden: set[str]) -> None:
    offenders = {
        path: sorted(names & forbidden)
        for path, names in imported_rooms(package).items()
        if names & forbidden
    }
    assert offenders == {}


def test_rooms_are_seen_through_every_spelling() -> None:
    """The arrows above are named as the code spells them, or the test would pass on nothing."""
    chaos = set().union(*imported_rooms("chaos").values())
    assert {"sac.sdk", "sac.server", "sac.checker", "sac.chaos"} <= chaos
    assert "sac.cli" in CLI
    assert "sac.chaos" not in CLI  # the suite, not a command
    face = imported_rooms("sdk")["sdk/__init__.py"]
    assert face == {"sac.sdk"}  # its relative imports, resolved
