"""Whether the process holding a SQLite store's write lock may be killed: pure decisions on
the text of ``/proc`` files, which the SQLite store reads and passes in.

The case it exists for: the queue's active consumer is frozen (SIGSTOP, a debugger, a frozen
cgroup) in the middle of a batch that has already written, so its open transaction holds
SQLite's one write lock. The broker hands the queue to a successor, whose epoch claim needs
that lock; the frozen process will never release it by itself, and a POSIX lock held by
another process is released only when that process closes the file or dies. So the
successor kills it, but only when every one of these holds:

- the lock's owner is the process recorded as the holder of this queue's current epoch
  (same boot, same pid namespace, same pid, same start time: a reused pid, a process of
  another container or another host never matches);
- it is not the process asking;
- it is frozen, not merely slow: a running process will commit or roll back by itself.

The holder being replaced is what the successor's claim means: it claims only when the
broker has just made it the active consumer, so the recorded holder no longer is. Its batch
could never commit after the claim anyway (the epoch check at commit refuses it).

That holds only for the holder recorded when the claim began (``Claim``), and only while
that claim is still the newest activation: a claim may wait up to ``busy_timeout``, and
meanwhile the holder may commit and a newer consumer (or the same process, active again)
claim the next epoch and be stopped inside its batch. That one is not being replaced by
this claim, it replaced it: ``confirm`` keeps it alive by reading the queue's epoch once the
owner was seen frozen, as the last step before the kill. While the frozen owner holds the
write lock nobody can commit a newer claim, so an epoch unchanged then stays unchanged until
the signal lands (short of the owner being thawed in that very instant, as for any frozen
owner).
"""

from __future__ import annotations

import enum

import attrs

WAL_WRITE_LOCK_BYTE = 120
"""The byte of the ``-shm`` file whose POSIX write lock is SQLite's WAL write lock
(``WALINDEX_LOCK_OFFSET`` 120 + slot 0, in SQLite's unix VFS)."""


@attrs.frozen
class ProcessId:
    """A process, named so that the name cannot come back: the pid alone is reused, and is
    only meaningful within one pid namespace of one boot of one host."""

    boot_id: str
    pid_namespace: int
    pid: int
    start_time: int
    """Clock ticks after boot (``/proc/<pid>/stat`` field 22)."""

    def __str__(self) -> str:
        return f"{self.boot_id}/{self.pid_namespace}/{self.pid}/{self.start_time}"

    @classmethod
    def parse(cls, text: str | None) -> ProcessId | None:
        """The recorded holder, or None when there is none or it is not ours to read (a
        store written by an older version, or a holder that could not name itself)."""
        if not text:
            return None
        parts = text.split("/")
        if len(parts) != 4 or not all(part.isdigit() for part in parts[1:]) or not parts[0]:
            return None
        return cls(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))


def pid_namespace(link: str) -> int | None:
    """The inode of a pid namespace from its ``/proc/<pid>/ns/pid`` link text
    (``pid:[4026531836]``)."""
    if link.startswith("pid:[") and link.endswith("]") and link[5:-1].isdigit():
        return int(link[5:-1])
    return None


@attrs.frozen
class Stat:
    """The two fields of ``/proc/<pid>/stat`` that matter here."""

    state: str
    start_time: int

    @classmethod
    def parse(cls, text: str) -> Stat | None:
        # The command name (field 2) is in parentheses and may itself hold spaces and
        # parentheses: the fields that follow start after the last ')'.
        _, paren, rest = text.rpartition(")")
        fields = rest.split()
        if not paren or len(fields) < 20 or not fields[19].isdigit():
            return None
        return cls(fields[0], int(fields[19]))

    @property
    def stopped(self) -> bool:
        """Stopped by a signal (``T``) or by a tracer (``t``)."""
        return self.state in ("T", "t")


def write_lock_owner(proc_locks: str, major: int, minor: int, inode: int) -> int | None:
    """The pid holding the POSIX write lock on the WAL write-lock byte of the ``-shm`` file
    with this device and inode, from the text of ``/proc/locks``; None if nobody does.

    A line reads ``1: POSIX  ADVISORY  WRITE 4184 fe:00:2146813 120 120`` (device numbers
    in hex; the end may be ``EOF``); a lock waiting to be granted is prefixed ``->`` and is
    not held. The kernel merges adjacent ranges of one owner, so the byte may lie inside a
    wider range.
    """
    for line in proc_locks.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[1] == "->":
            continue
        _, kind, _, mode, pid, file_id, start, end = fields[:8]
        if kind != "POSIX" or mode != "WRITE":
            continue
        where = file_id.split(":")
        if len(where) != 3 or not pid.lstrip("-").isdigit():
            continue
        try:
            same_file = (int(where[0], 16), int(where[1], 16), int(where[2])) == (
                major, minor, inode)
            first = int(start)
            last = None if end == "EOF" else int(end)
        except ValueError:
            continue
        if same_file and first <= WAL_WRITE_LOCK_BYTE and (
                last is None or last >= WAL_WRITE_LOCK_BYTE):
            return int(pid) if int(pid) > 0 else None
    return None


def frozen_by_cgroup(contents: list[str]) -> bool:
    """Whether one of the owner's freezer files says so: cgroup v2 ``cgroup.events``
    (``frozen 1``) or cgroup v1 ``freezer.state`` (``FROZEN``)."""
    return any("frozen 1" in text.splitlines() or text.strip() == "FROZEN" for text in contents)


def freezer_files(proc_cgroup: str) -> list[str]:
    """Where the owner's freezer state is, relative to the cgroup mount
    (``/sys/fs/cgroup``), from the text of ``/proc/<pid>/cgroup``."""
    found = []
    for line in proc_cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not path.startswith("/"):
            continue
        base = path.rstrip("/")
        if controllers == "":  # cgroup v2, mounted alone or beside v1 (as "unified")
            found += [f"{base}/cgroup.events".lstrip("/"), f"unified{base}/cgroup.events"]
        elif "freezer" in controllers.split(","):
            found.append(f"freezer{base}/freezer.state")
    return found


@attrs.frozen
class Claim:
    """What an epoch claim read when it began: the queue's epoch and its recorded holder
    (the only process it may replace), and, for an adoption, the epoch it adopts."""

    epoch: int
    holder: ProcessId | None
    adopting: int | None = None


class Verdict(enum.Enum):
    """What to do about the write lock's owner; only ``KILL`` acts."""

    KILL = "the frozen holder of the queue's epoch"
    NO_OWNER = "nobody holds the write lock now"
    SELF = "this process holds the write lock"
    NO_HOLDER = "the queue's epoch names no holder this process can identify"
    NOT_THE_HOLDER = "the lock's owner is not the holder of the queue's epoch"
    GONE = "the lock's owner has ended"
    RUNNING = "the lock's owner is running, not frozen"
    SUPERSEDED = ("the queue's epoch was claimed again since this claim began: the lock's "
                  "owner holds a newer epoch, which this claim does not replace")
    STALE = "the adopted epoch is not newer than the queue's: this adoption replaces nobody"


def judge(
    me: ProcessId,
    recorded: ProcessId | None,
    owner: int | None,
    owner_stat: Stat | None,
    owner_frozen_by_cgroup: bool,
) -> Verdict:
    """``owner`` is the pid from ``write_lock_owner`` (in this process's pid namespace),
    ``owner_stat`` its parsed ``/proc/<owner>/stat`` (None when it has ended)."""
    if owner is None:
        return Verdict.NO_OWNER
    if owner == me.pid:
        return Verdict.SELF
    if recorded is None:
        return Verdict.NO_HOLDER
    if (recorded.boot_id, recorded.pid_namespace, recorded.pid) != (
            me.boot_id, me.pid_namespace, owner):
        return Verdict.NOT_THE_HOLDER
    if owner_stat is None:
        return Verdict.GONE
    if owner_stat.start_time != recorded.start_time:
        return Verdict.NOT_THE_HOLDER  # the holder ended and its pid was reused
    if not (owner_stat.stopped or owner_frozen_by_cgroup):
        return Verdict.RUNNING
    return Verdict.KILL


def confirm(claim: Claim, epoch_now: int) -> Verdict:
    """The last word on a ``KILL`` from ``judge``, given the queue's epoch read after the
    owner was seen frozen: the claim still replaces the holder it began with only if no
    newer epoch was claimed since, and an adoption only if it adopts a newer epoch than the
    holder's (an older one is refused: it replaces nobody)."""
    if claim.adopting is not None and claim.adopting <= claim.epoch:
        return Verdict.STALE
    if epoch_now != claim.epoch:
        return Verdict.SUPERSEDED
    return Verdict.KILL
