"""Detached server processes that we can find again, and only ours.

Every process we start carries ``SAC_STATE_DIR=<its state directory>`` in its environment and
leads its own session (``setsid``), so that ``down`` can kill the whole process group and then
prove, by scanning ``/proc``, that nothing with that marker is left. Checking the marker before
sending a signal protects against a recycled pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._errors import ServerError

MARKER = "SAC_STATE_DIR"

# Children started by this process, kept so that they are reaped by ``poll()`` and never
# garbage-collected while running (Popen warns about that).
_children: dict[int, subprocess.Popen[bytes]] = {}


def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path) -> int:
    """Start ``argv`` in a new session, output appended to ``log_path``; return its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _children[proc.pid] = proc
    return proc.pid


def _reap(pid: int) -> None:
    # A child we started and that died stays a zombie (and "alive" to kill(0)) until reaped.
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _children[pid]
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie."""
    if pid <= 0:
        return False
    _reap(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state letter follows the command name, which is in parentheses and may hold spaces.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def marker_of(pid: int) -> str | None:
    """The ``SAC_STATE_DIR`` a process was started with, or None."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{MARKER}=".encode()
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def pids() -> list[int]:
    """Every process id in ``/proc`` right now."""
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def argv_of(pid: int) -> list[str]:
    """A process's command line, or [] if it is gone (or a kernel thread)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]


def is_ours(pid: int, state_dir: Path) -> bool:
    """True if ``pid`` is alive and was started for ``state_dir``."""
    return is_alive(pid) and marker_of(pid) == str(state_dir)


def find_marked(state_dir: Path) -> list[int]:
    """Every live process started for ``state_dir`` (or under it: one cluster's ZooKeeper...)."""
    found = []
    root = str(state_dir)
    for pid in pids():
        mark = marker_of(pid)
        if mark is not None and (mark == root or mark.startswith(root + os.sep)) and is_alive(pid):
            found.append(pid)
    return sorted(found)


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group that ``pid`` leads (it was started with setsid)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # not a group leader any more: fall back to the process alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_dead(pids: Sequence[int], timeout: float) -> list[int]:
    """Wait until every pid has exited; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if is_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if is_alive(p)]
    return alive


def terminate(pids: Sequence[int], grace: float) -> None:
    """SIGTERM each process group, then SIGKILL whatever outlives ``grace`` seconds."""
    for pid in pids:
        signal_group(pid, signal.SIGTERM)
    for pid in wait_dead(pids, grace):
        signal_group(pid, signal.SIGKILL)
    wait_dead(pids, 5.0)


def kill_all(pids: Sequence[int], what: str) -> None:
    """SIGKILL each process and the group it leads at once, as a crash would; raise if any
    survives."""
    for pid in pids:
        signal_group(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # a child that leads no group of its own
    left = wait_dead(pids, 10.0)
    if left:
        raise ServerError(f"{what} processes {left} survived SIGKILL")


def stop_marked(state_dir: Path, recorded: Sequence[int], grace: float, what: str) -> list[int]:
    """Stop every process of one server: those marked with ``state_dir`` (children a server
    spawned included) and the ``recorded`` pids that are still ours; raise if any survives.
    Returns the pids that were running (none: the server was not)."""
    pids = sorted(set(find_marked(state_dir)) | set(recorded))
    pids = [p for p in pids if is_ours(p, state_dir)]
    terminate(pids, grace=grace)
    left = find_marked(state_dir)
    if left:
        raise ServerError(f"{what} processes {left} survived SIGKILL")
    return pids
