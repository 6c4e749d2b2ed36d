"""The arrows that must never exist (docs/architecture.md), checked on the source."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

# The command line: every module of sac/ that is not in one of its subpackages.
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
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
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
        ("sac/sdk",
         {"sac.server", "sac.chaos", "sac.checker", "sac.sim", "recipes", "bench"} | CLI),
        ("sac/sdk/_core", {"pika", "aio_pika", "aiormq", "kazoo", "socket", "asyncio", "ssl"}),
        # Of the SDK, only its management API client (test below).
        ("sac/server", {"sac.chaos", "recipes", "bench"} | CLI),
        # The pipeline reads histories, not code, and runs on a Spark cluster with only its
        # own dependencies.
        ("sac/checker", {"sac.sdk", "sac.server", "sac.chaos", "recipes", "bench", "pika"} | CLI),
        # The suite is a library the CLI, recipes and benchmarks use, not the other way.
        ("sac/chaos", {"recipes", "bench", "tests"} | CLI),
        # The simulation is pure and deterministic: no I/O, no threads, no wall clock.
        ("sac/sim", {"pika", "aio_pika", "aiormq", "kazoo", "socket", "asyncio", "ssl",
                     "threading", "concurrent", "multiprocessing", "subprocess", "selectors",
                     "select", "time", "datetime", "sac.server", "sac.chaos", "sac.checker",
                     "recipes", "bench", "tests"} | CLI),
    ],
)
def test_forbidden_imports(package: str, forbidden: set[str]) -> None:
    offenders = {
        path: sorted(names & forbidden)
        for path, names in imported_rooms(package).items()
        if names & forbidden
    }
    assert offenders == {}


def test_the_servers_use_only_the_sdks_management_client() -> None:
    """One client of the management API in the project: the servers use the SDK's, and
    nothing else of the SDK (its connections, consumers and settings are not theirs)."""
    used: dict[str, set[str]] = {}
    for path in (ROOT / "sac" / "server").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        home = parts if parts[-1] == "__init__" else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):  # ``from ..sdk import x`` resolved
                base = ".".join(home[: len(home) - node.level + 1]) if node.level else ""
                module = ".".join(filter(None, (base, node.module)))
                modules = [module] + [f"{module}.{a.name}" for a in node.names]
            else:
                continue
            for module in modules:
                if module == "sac.sdk" or module.startswith("sac.sdk."):
                    used.setdefault(str(path.relative_to(ROOT)), set()).add(module)
    assert used, "the servers' import of the SDK's management client was not seen"
    offenders = {path: sorted(m for m in modules
                              if m != "sac.sdk.management"
                              and not m.startswith("sac.sdk.management."))
                 for path, modules in used.items()}
    assert {path: found for path, found in offenders.items() if found} == {}


def test_rooms_are_seen_through_every_spelling() -> None:
    """The arrows above are named as the code spells them, or the test would pass on nothing."""
    chaos = set().union(*imported_rooms("sac/chaos").values())
    assert {"sac.sdk", "sac.server", "sac.checker", "sac.chaos"} <= chaos
    assert "sac.cli" in CLI
    assert "sac.chaos" not in CLI  # the suite, not a command
    face = imported_rooms("sac/sdk")["sac/sdk/__init__.py"]
    assert face == {"sac.sdk"}  # its relative imports, resolved


def test_the_history_contract_imports_only_the_standard_library() -> None:
    """The SDK's recorder and the checker both import ``sac.history``: anything it imported
    would come with the checker onto a Spark cluster (and with the SDK into applications)."""
    rooms = set().union(*imported_rooms("sac/history").values())
    assert "sac.history" in rooms  # its relative imports, resolved: the test sees them
    assert rooms - {"sac.history"} <= set(sys.stdlib_module_names) | {"__future__"}


@pytest.mark.parametrize("package", ["sac/server", "sac/sim"])
def test_only_the_sdk_the_checker_and_their_users_import_the_history_contract(
        package: str) -> None:
    """Arrows into the contract: sdk -> history and checker -> history (and chaos, the CLI
    and recipes, which use both); the servers and the simulation record no history."""
    assert {path for path, names in imported_rooms(package).items()
            if "sac.history" in names} == set()


def test_the_sdk_and_the_checker_use_the_history_contract() -> None:
    assert "sac.history" in imported_rooms("sac/sdk")["sac/sdk/_history.py"]
    assert "sac.history" in set().union(*imported_rooms("sac/checker").values())


def test_sim_uses_only_the_pure_parts_of_the_sdk() -> None:
    """The simulator may build on the SDK's pure core, its dedup stores and its errors, and
    on the plain values the engines take (settings, deliveries), never on its faces (which do
    I/O)."""
    allowed = ("sac.sdk._core", "sac.sdk.dedup", "sac.sdk._errors", "sac.sdk._settings",
               "sac.sdk._delivery")
    used = set()
    for path in (ROOT / "sac" / "sim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.startswith("sac.sdk")):
                used.add((node.module, tuple(a.name for a in node.names)))
    assert used, "the simulator's imports of the SDK were not seen"
    for module, names in sorted(used):
        if module == "sac.sdk":
            assert all(name.endswith(("Error", "Unavailable", "Epoch", "Store"))
                       for name in names), names
        else:
            assert module.startswith(allowed), module


def test_the_sdk_values_the_simulator_uses_are_pure() -> None:
    """Settings and deliveries are plain values: no I/O library behind them."""
    rooms = imported_rooms("sac/sdk")
    used = rooms["sac/sdk/_settings.py"] | rooms["sac/sdk/_delivery.py"]
    assert used <= {"__future__", "attrs", "os", "urllib", "collections", "typing", "sac.sdk"}


# ------------------------------------------------------------ pika's internals stay in the wire

WIRE = (ROOT / "sac" / "sdk" / "_wire").resolve()
OUR_FOLDERS = ("sac", "recipes", "bench", "tests")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_private_names(paths: list[Path]) -> set[str]:
    """Private names the code in ``paths`` defines: functions, classes, module globals and
    the attributes it assigns (``self._x = ...``)."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {name for name in names if _private(name)}


def _our_files() -> list[Path]:
    """Every Python file of ours but the wire's."""
    found = {path.resolve() for folder in OUR_FOLDERS for path in (ROOT / folder).rglob("*.py")}
    return sorted(path for path in found if WIRE not in path.parents)


def _pika_private_offences(path: Path, pika_private: set[str], shared: set[str]) -> list[str]:
    """Where ``path`` touches a private pika name: imports one, reads or writes a private
    attribute pika defines (a name our own code defines too, such as ``_state``, only on
    ``self`` or ``cls``: on anything else it may be a pika object), names one in
    ``getattr``/``setattr``/``hasattr``, or subclasses a pika class (and so may override its
    private hooks)."""
    tree = ast.parse(path.read_text(), str(path))
    from_pika: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "pika" or node.module.startswith("pika.")):
            for alias in node.names:
                from_pika.add(alias.asname or alias.name)
                if _private(alias.name) or any(map(_private, node.module.split("."))):
                    found.append(f"{node.lineno}: imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pika" and any(
                        map(_private, alias.name.split("."))):
                    found.append(f"{node.lineno}: imports {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in pika_private:
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if node.attr not in shared or not on_self:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and node.args[1].value in pika_private):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                root = base
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and (root.id == "pika" or root.id in from_pika):
                    found.append(f"{node.lineno}: class {node.name}({ast.unparse(base)})")
    return found


def test_only_the_wire_touches_pika_internals() -> None:
    """Nothing outside ``sdk/_wire/`` uses a private pika name: ``pika_hooks.py`` checks at
    import that each one it uses still exists, and only it is tested against every pika
    release the pin allows. pika's private names come from its installed source."""
    import pika

    pika_files = sorted(Path(pika.__file__).parent.rglob("*.py"))
    pika_private = _defined_private_names(pika_files)
    assert {"_on_data_available", "_frame_buffer", "_terminate_stream"} <= pika_private
    ours = _our_files()
    shared = pika_private & _defined_private_names(ours)
    offences = {
        str(path.relative_to(ROOT.resolve())): found
        for path in ours
        if (found := _pika_private_offences(path, pika_private, shared))
    }
    assert {path: found for path, found in offences.items() if path not in ALLOWED} == {}
    assert set(ALLOWED) <= set(offences), "an allowance nothing needs any more"


ALLOWED = {
    # The honesty test's driver of the real broker watches raw frames (confirms with their
    # ``multiple`` flag, a channel's close) through the BlockingChannel's underlying channel,
    # which has no public accessor. It is a test: a pika release that moves it fails loudly.
    "tests/sim/real_driver.py": "ch._impl",
    # Not pika's: kazoo's client has a ``_connection`` too (a name pika also defines). The
    # guard reads the session timeout ZooKeeper granted off it, checked when a guard is built.
    "sac/sdk/guard.py": "client._connection (kazoo's)",
}


def test_the_pika_internals_check_sees_what_it_should(tmp_path: Path) -> None:
    """The check above finds each kind of use (it would pass on nothing otherwise)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import pika\n"
        "from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport\n"
        "from pika.adapters.asyncio_connection import AsyncioConnection\n"
        "class Mine(AsyncioConnection):\n"
        "    pass\n"
        "def f(conn, self):\n"
        "    conn._terminate_stream(None)\n"
        "    getattr(conn, '_frame_buffer')\n"
        "    conn._state\n"
        "    self._state\n"
    )
    found = _pika_private_offences(sample, {"_frame_buffer", "_terminate_stream", "_state"},
                                   shared={"_state"})
    assert sorted(int(line.split(":")[0]) for line in found) == [2, 4, 7, 8, 9]


def test_no_file_points_outside_the_checkout() -> None:
    """Users who clone the project have only the project: nothing may send them to the team's
    own notes beside it (``..`` then ``/shared``), in code, docs or build files."""
    import subprocess

    outside = "../" + "shared"  # spelled in two parts so that this file does not hold it
    names = ("HISTORY", "INFRA", "ARCHITECTURE", "STYLE", "TOXIPROXY_API")
    notes = [f"shared/{name}.md" for name in names]
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    offences = []
    for name in filter(None, tracked):
        path = ROOT / name
        if not path.is_file() or path.is_symlink():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        offences += [f"{name}: {needle}" for needle in (outside, *notes) if needle in text]
    assert offences == []


# ------------------------------------------------------------ the consumer's rooms (issue 23)

CONSUMER_ROOMS = (
    *(str(path.relative_to(ROOT)) for path in sorted((ROOT / "sac" / "sdk" / "_consumer").glob(
        "*.py")) if path.name != "__init__.py"),
    "sac/sdk/_core/dispatch.py")
RUN_SIDE = ("sac/sdk/_consumer/runs.py", "sac/sdk/_consumer/workers.py")
"""Where runs execute, in whatever thread: told by their ticket, never reading the machine."""
MACHINE_STATE = {"machine", "_machine", "stage", "paused", "generation", "live"}


def _sdk_modules() -> dict[str, set[str]]:
    """Each module of ``sac.sdk`` and the modules of ``sac.sdk`` it imports (any import,
    ``TYPE_CHECKING`` and function-level ones too: a circle is a circle to a reader)."""
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "sac" / "sdk").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        home = parts if parts[-1] == "__init__" else parts[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(home[: len(home) - node.level + 1]) if node.level else ""
                module = ".".join(filter(None, (base, node.module)))
                for alias in node.names:
                    targets.add(f"{module}.{alias.name}")
                    targets.add(module)
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        graph[name] = targets
    return {name: {t for t in targets if t in graph and t != name and not (
        name.startswith(t + ".") and (ROOT / t.replace(".", "/")
                                      / "__init__.py").exists())}
        for name, targets in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (strongly connected parts of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_sdk_has_no_import_circles() -> None:
    """The engine and its workers imported each other; every room now points one way."""
    graph = _sdk_modules()
    assert "sac.sdk._consumer.runs" in graph["sac.sdk._consumer.workers"]
    assert _cycles(graph) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _machine_reads(path: Path) -> list[str]:
    """Where ``path`` names the consumer machine or the state a run used to read off it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in MACHINE_STATE:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and "consuming" in node.module:
            found += [f"{node.lineno}: imports {alias.name}" for alias in node.names
                      if alias.name not in ("Run", "Admission")]
    return found


def test_a_run_never_reads_the_machine() -> None:
    """One owner: the loop thread owns the consumer machine. The code that executes runs (in
    the blocking face's thread, or the inbox's) imports only the run's values and reads no
    machine state: what it must know comes with its ticket."""
    rooms = _sdk_modules()
    for path in RUN_SIDE:
        module = path.removesuffix(".py").replace("/", ".")
        assert not {m for m in rooms[module]
                    if m.startswith("sac.sdk._consumer.") and m not in (
                        "sac.sdk._consumer.runs",)}, path
        assert _machine_reads(ROOT / path) == [], path


def test_the_machine_read_check_sees_what_it_should(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from ._core.consuming import ConsumerMachine, Run\n"
                      "def f(engine, run):\n"
                      "    return engine.machine.generation == run.generation\n")
    assert len(_machine_reads(sample)) == 4  # the import, .machine, two .generation


def test_the_consumer_rooms_stay_small_and_touch_no_private_machine_state() -> None:
    """Rooms a reader can take in at once; the machines' insides stay theirs."""
    assert len(CONSUMER_ROOMS) >= 10, CONSUMER_ROOMS
    for path in CONSUMER_ROOMS:
        source = (ROOT / path).read_text()
        assert len(source.splitlines()) <= 320, path
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not \
                    node.attr.startswith("__"):
                owner = ast.unparse(node.value)
                assert not owner.endswith(("machine", "_consumer")), f"{path}: {owner}"


def test_the_sdk_sets_nothing_on_a_users_inbox() -> None:
    """The inbox is the user's object: the consumer takes a session from it
    (``Inbox.session``) and passes each batch's epoch with the batch."""
    offences = []
    for path in (ROOT / "sac" / "sdk").rglob("*.py"):
        if "dedup" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            offences += [f"{path.name}:{node.lineno}" for t in targets
                         if isinstance(t, ast.Attribute) and "inbox" in ast.unparse(t.value)]
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "bind" and "inbox" in ast.unparse(node.func.value)):
                offences.append(f"{path.name}:{node.lineno}")
    assert offences == []


# ------------------------------------------------------------ one import style

ROOMS = ("sdk", "server", "chaos", "checker", "sim", "history")


def _import_style_offences(room: str) -> list[str]:
    """Inside a room, its own modules by relative import (the room can be read, and moved, as
    one folder); another room by its absolute name, ``sac.<room>`` (the arrow reads the same
    as in the table of rooms and in the tests above)."""
    offences = []
    for path in sorted((ROOT / "sac" / room).rglob("*.py")):
        home = list(path.relative_to(ROOT).parts[:-1])  # the package the module is in
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    target = home[: len(home) - node.level + 1]
                    if target[:2] != ["sac", room]:
                        offences.append(f"{path.relative_to(ROOT)}:{node.lineno} leaves {room}"
                                        " by a relative import")
                elif (node.module or "").split(".")[:2] == ["sac", room]:
                    offences.append(f"{path.relative_to(ROOT)}:{node.lineno} imports its own"
                                    " room by its absolute name")
            elif isinstance(node, ast.Import):
                offences += [f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name}"
                             for alias in node.names if alias.name.startswith("sac.")]
    return offences


@pytest.mark.parametrize("room", ROOMS)
def test_one_import_style(room: str) -> None:
    assert _import_style_offences(room) == []


def test_the_import_style_check_sees_both_offences(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    folder = tmp_path / "sac" / "sdk" / "_core"
    folder.mkdir(parents=True)
    (folder / "x.py").write_text("from sac.sdk._core import acks\nfrom ...history import Ack\n"
                                 "from ..dedup import Inbox\nfrom . import retry\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert [offence.split(":")[1].split()[0]
            for offence in _import_style_offences("sdk")] == ["1", "2"]
