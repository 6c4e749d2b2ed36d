"""One import name: the SDK's face is pinned, and no module loads under a second name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sac import sdk

ROOT = Path(__file__).parents[2]

# The face, pinned: a name added or dropped is a decision, made here as well.
FACE = [
    "BYTES", "JSON", "RETRANSMIT_HEADER", "AsyncConsumer", "AsyncManagement", "AsyncMover",
    "AsyncParking", "AsyncPublisher",
    "AuthenticationError", "Backoff",
    "BlockedTimeout", "ClosedError", "ConfigurationError", "ConfirmTimeout", "ConnectError",
    "ConnectionSettings", "Consumer", "ConsumerError", "ConsumerSettings", "ConsumerStats",
    "Delivery", "GuardSettings", "GuardStatus", "Handover", "HistoryRecorder", "Inbox",
    "InboxStats",
    "LeaderRecord", "Leadership", "LifecycleError", "LookupPolicy", "Management",
    "ManagementError", "ManagementNotFound", "ManagementRefused", "ManagementSettings",
    "ManagementUnreachable", "MemoryStore",
    "MessageIdFrom", "MessageNacked", "MessageReturned", "MessageTooLarge", "MissingMessageId",
    "MoveError", "Moved", "Mover",
    "ParkedMessage", "Parking", "ParkingFailed", "Poison", "PostgresStore", "PublishError",
    "PublishOptions",
    "Publisher",
    "PublisherSettings", "PublisherStats", "QueueError", "QueueMismatch", "QueueNotFound",
    "QueueSettings", "ReplayError", "Retention", "Role", "SQLiteStore", "SacError",
    "SchemaMismatch", "Serializer", "SessionState", "StaleEpoch", "Store", "StoreError",
    "StoreUnavailable",
    "Transaction", "Unconfirmed", "UnfitMessage",
    "new_message_id",
]


def test_the_face_is_exactly_what_users_import() -> None:
    """A name added to or dropped from the face is a decision: change FACE with it."""
    assert sdk.__all__ == FACE
    for name in sdk.__all__:
        module = getattr(getattr(sdk, name), "__module__", "sac.sdk")
        assert module.startswith("sac.sdk"), (name, module)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter with the repository root first on ``sys.path``, as
    ``python -c`` from a checkout has it."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def test_every_module_has_one_path_and_one_name() -> None:
    """The subpackages live in ``sac/`` itself: no link in the package and no second folder
    at the root, so git, tracebacks, mypy and the import system name a file the same way (a
    module loaded under two names would be two copies, with two sets of globals)."""
    assert [path for path in (ROOT / "sac").rglob("*") if path.is_symlink()] == []
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert packages == {"sac", "recipes", "bench", "tests"}, packages


@pytest.mark.parametrize("package", ["sdk", "server", "chaos", "checker", "sim", "history"])
def test_a_subpackage_has_no_name_of_its_own(package: str) -> None:
    done = run_python(f"import sac.{package}\nimport {package}")
    assert done.returncode == 1
    assert f"ModuleNotFoundError: No module named '{package}'" in done.stderr


def test_the_checker_loads_without_the_sdk() -> None:
    """A Spark executor has the checker and its own dependencies only."""
    done = run_python(
        "import pkgutil, sys, sac.checker\n"
        "for info in pkgutil.walk_packages(sac.checker.__path__, 'sac.checker.'):\n"
        "    __import__(info.name)\n"
        "print(sorted({m.split('.')[0] if not m.startswith('sac.') else '.'.join(m.split('.')[:2])"
        " for m in sys.modules} & {'sac.sdk', 'sac.server', 'sac.chaos', 'sac.cli', 'pika'}))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
