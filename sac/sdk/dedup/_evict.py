"""The I/O half of evicting a frozen holder of a SQLite store's write lock: read ``/proc``,
and kill when ``sac.sdk._core.lock_holder.judge`` says so. Linux only; elsewhere nothing is
found and nothing is killed (the store then waits as it always did)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

from .._core.lock_holder import (
    Claim,
    ProcessId,
    Stat,
    Verdict,
    confirm,
    freezer_files,
    frozen_by_cgroup,
    judge,
    pid_namespace,
    write_lock_owner,
)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def this_process() -> ProcessId | None:
    """How this process names itself as an epoch's holder; None where ``/proc`` cannot say
    (then no successor will ever kill it)."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = pid_namespace(os.readlink("/proc/self/ns/pid"))
        stat = Stat.parse(Path("/proc/self/stat").read_text())
    except OSError:
        return None
    if not boot_id or namespace is None or stat is None:
        return None
    return ProcessId(boot_id, namespace, os.getpid(), stat.start_time)


def evict_frozen_holder(shm: Path, claim: Claim,
                        epoch_now: Callable[[], int]) -> tuple[Verdict, int | None]:
    """Kill the owner of the WAL write lock of ``shm`` if it is the frozen holder ``claim``
    began with and the queue's epoch (``epoch_now``, read once the owner was seen frozen)
    is still the one it began with; returns the verdict and the owner's pid."""
    me = this_process()
    if me is None:
        return Verdict.NO_HOLDER, None
    try:
        # stat, never open: closing a descriptor of the file would drop every POSIX lock this
        # process holds on it, SQLite's own included.
        st = os.stat(shm)
        owner = write_lock_owner(Path("/proc/locks").read_text(),
                                 os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    except OSError:
        return Verdict.NO_OWNER, None
    holder = claim.holder
    if owner is None or owner == me.pid or holder is None:
        return judge(me, holder, owner, None, False), owner
    try:
        # A pidfd pins the process: the signal cannot reach another one that got its pid.
        pidfd = os.pidfd_open(owner)
    except OSError:
        return judge(me, holder, owner, None, False), owner
    try:
        stat = _read(Path(f"/proc/{owner}/stat"))
        parsed = None if stat is None else Stat.parse(stat)
        frozen = False
        if parsed is not None and not parsed.stopped:
            cgroups = _read(Path(f"/proc/{owner}/cgroup")) or ""
            frozen = frozen_by_cgroup([text for name in freezer_files(cgroups)
                                       if (text := _read(CGROUP_ROOT / name)) is not None])
        verdict = judge(me, holder, owner, parsed, frozen)
        if verdict is Verdict.KILL:
            verdict = confirm(claim, epoch_now())
        if verdict is Verdict.KILL:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)
    return verdict, owner


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
