"""The arrows that must never exist (shared/ARCHITECTURE.md), checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sdk

ROOT = Path(__file__).parents[2]


def imported_modules(package: str) -> dict[str, set[str]]:
    """Top-level modules each file of ``package`` imports (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("sdk", {"server", "chaos", "checker", "recipes", "sac", "bench", "sim"}),
        ("sdk/_core", {"pika", "aio_pika", "aiormq", "kazoo", "socket", "asyncio", "ssl"}),
        ("server", {"sdk", "chaos", "recipes", "bench"}),
        # The pipeline reads histories, not code, and runs on a Spark cluster with only its
        # own dependencies.
        ("checker", {"sdk", "server", "chaos", "recipes", "sac", "bench", "pika"}),
        # The suite is a library the CLI, recipes and benchmarks use, not the other way.
        ("chaos", {"sac", "recipes", "bench", "tests"}),
        # The simulation is pure and deterministic: no I/O, no threads, no wall clock.
        ("sim", {"pika", "aio_pika", "aiormq", "kazoo", "socket", "asyncio", "ssl", "threading",
                 "concurrent", "multiprocessing", "subprocess", "selectors", "select", "time",
                 "datetime", "server", "chaos", "checker", "recipes", "sac", "bench", "tests"}),
    ],
)
def test_forbidden_imports(package: str, forbidden: set[str]) -> None:
    offenders = {
        path: sorted(names & forbidden)
        for path, names in imported_modules(package).items()
        if names & forbidden
    }
    assert offenders == {}


def test_sim_uses_only_the_pure_parts_of_the_sdk() -> None:
    """The simulator may build on the SDK's pure core, its dedup stores and its errors,
    never on its faces (which do I/O)."""
    allowed = ("sdk._core", "sdk.dedup", "sdk._errors")
    used = set()
    for path in (ROOT / "sim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] == "sdk"):
                used.add((node.module, tuple(a.name for a in node.names)))
    for module, names in sorted(used):
        if module == "sdk":
            assert all(name.endswith(("Error", "Unavailable", "Epoch", "Store"))
                       for name in names), names
        else:
            assert module.startswith(allowed), module


def test_public_face_is_complete() -> None:
    """Everything in ``__all__`` exists, comes from the SDK, and every public class of the
    private modules that users need is exported (ruff's RUF022 keeps the list sorted)."""
    assert len(set(sdk.__all__)) == len(sdk.__all__)
    for needed in ("AsyncConsumer", "AsyncPublisher", "Consumer", "Publisher", "Delivery",
                   "ConnectionSettings", "QueueSettings", "PublisherSettings",
                   "ConsumerSettings", "SacError", "Role", "HistoryRecorder"):
        assert needed in sdk.__all__
    missing = [name for name in sdk.__all__ if not hasattr(sdk, name)]
    assert missing == []
    for name in sdk.__all__:
        obj = getattr(sdk, name)
        module = getattr(obj, "__module__", "sdk")
        assert module.startswith("sdk"), (name, module)
