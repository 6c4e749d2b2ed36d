"""Whether the owner of a SQLite store's write lock may be killed, decided from /proc text."""

from __future__ import annotations

import pytest

from sac.sdk._core.lock_holder import (
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

LOCKS = """\
1: POSIX  ADVISORY  WRITE 4184 fe:00:2146813 120 120
2: POSIX  ADVISORY  READ 4184 fe:00:2146813 124 124
3: POSIX  ADVISORY  READ 4184 fe:00:2146813 128 128
4: POSIX  ADVISORY  READ 4184 fe:00:2146811 1073741826 1073742335
5: FLOCK  ADVISORY  WRITE 77 fe:00:2146813 0 EOF
5: -> POSIX  ADVISORY  WRITE 5000 fe:00:2146813 120 120
"""

ME = ProcessId("boot-a", 4026531836, 100, 5000)
ZOMBIE = ProcessId("boot-a", 4026531836, 4184, 9000)


def stat(state: str, start: int, comm: str = "python3") -> str:
    fields = [state, *["0"] * 18, str(start), "0", "0"]
    return f"4184 ({comm}) {' '.join(fields)}"


def test_the_write_lock_owner_is_found_by_file_and_byte() -> None:
    major, minor = 0xFE, 0x00
    assert write_lock_owner(LOCKS, major, minor, 2146813) == 4184
    assert write_lock_owner(LOCKS, major, minor, 2146811) is None  # the database file
    assert write_lock_owner(LOCKS, 0xFE, 0x01, 2146813) is None  # another device
    only_read = "\n".join(LOCKS.splitlines()[1:])
    assert write_lock_owner(only_read, major, minor, 2146813) is None  # only waited for


@pytest.mark.parametrize(("start", "end", "owns"), [
    ("120", "121", True), ("118", "EOF", True), ("121", "121", False), ("0", "119", False)])
def test_a_merged_range_covers_the_write_lock_byte(start: str, end: str, owns: bool) -> None:
    line = f"1: POSIX  ADVISORY  WRITE 42 08:01:7 {start} {end}"
    assert (write_lock_owner(line, 8, 1, 7) == 42) is owns


def test_garbage_in_proc_locks_is_skipped() -> None:
    text = "nonsense\n1: POSIX ADVISORY WRITE x 08:01:7 120 120\n" \
           "2: POSIX ADVISORY WRITE 9 zz:01:7 120 120\n3: POSIX ADVISORY WRITE 8 08:01:7 120 120"
    assert write_lock_owner(text, 8, 1, 7) == 8


def test_process_names_round_trip_and_reject_what_is_not_one() -> None:
    assert ProcessId.parse(str(ZOMBIE)) == ZOMBIE
    for bad in (None, "", "a/b/c/d", "boot/1/2", "/1/2/3", "sac-dedup:ab12"):
        assert ProcessId.parse(bad) is None
    assert pid_namespace("pid:[4026531836]") == 4026531836
    assert pid_namespace("net:[1]") is None


def test_stat_is_read_after_a_command_name_with_spaces_and_parentheses() -> None:
    assert Stat.parse(stat("T", 9000, comm="a) (b")) == Stat("T", 9000)
    assert Stat.parse(stat("t", 1)).stopped  # type: ignore[union-attr]
    assert not Stat.parse(stat("S", 1)).stopped  # type: ignore[union-attr]
    assert Stat.parse("4184 (python3) T 1 2") is None


@pytest.mark.parametrize(("recorded", "owner", "owner_stat", "cgroup_frozen", "verdict"), [
    (ZOMBIE, 4184, Stat("T", 9000), False, Verdict.KILL),
    (ZOMBIE, 4184, Stat("t", 9000), False, Verdict.KILL),  # stopped by a debugger
    (ZOMBIE, 4184, Stat("S", 9000), True, Verdict.KILL),  # a frozen cgroup
    (ZOMBIE, 4184, Stat("S", 9000), False, Verdict.RUNNING),
    (ZOMBIE, 4184, Stat("R", 9000), False, Verdict.RUNNING),
    (ZOMBIE, 4184, Stat("T", 9001), False, Verdict.NOT_THE_HOLDER),  # pid reused
    (ZOMBIE, 4185, Stat("T", 9000), False, Verdict.NOT_THE_HOLDER),  # another process
    (ProcessId("boot-b", 4026531836, 4184, 9000), 4184, Stat("T", 9000), False,
     Verdict.NOT_THE_HOLDER),  # recorded in another boot, or on another host
    (ProcessId("boot-a", 4026532000, 4184, 9000), 4184, Stat("T", 9000), False,
     Verdict.NOT_THE_HOLDER),  # a pid of another container's namespace
    (ZOMBIE, 4184, None, False, Verdict.GONE),
    (None, 4184, Stat("T", 9000), False, Verdict.NO_HOLDER),
    (ZOMBIE, None, None, False, Verdict.NO_OWNER),
    (ProcessId("boot-a", 4026531836, 100, 5000), 100, Stat("T", 5000), False, Verdict.SELF),
])
def test_only_the_frozen_recorded_holder_is_killed(
    recorded: ProcessId | None, owner: int | None, owner_stat: Stat | None,
    cgroup_frozen: bool, verdict: Verdict,
) -> None:
    assert judge(ME, recorded, owner, owner_stat, cgroup_frozen) is verdict


def test_freezer_state_of_cgroup_v1_and_v2() -> None:
    assert freezer_files("0::/app/worker\n") == [
        "app/worker/cgroup.events", "unified/app/worker/cgroup.events"]
    assert freezer_files("9:name=systemd:/\n6:freezer:/docker/abc\n") == [
        "freezer/docker/abc/freezer.state"]
    assert frozen_by_cgroup(["populated 1\nfrozen 1\n"])
    assert frozen_by_cgroup(["FROZEN\n"])
    assert not frozen_by_cgroup(["populated 1\nfrozen 0\n", "THAWED\n"])
    assert not frozen_by_cgroup([])


def test_only_a_claim_still_current_kills_the_holder_it_began_with() -> None:
    began = Claim(4, ZOMBIE)
    assert confirm(began, 4) is Verdict.KILL
    assert confirm(began, 5) is Verdict.SUPERSEDED  # a newer consumer claimed meanwhile
    assert confirm(Claim(4, ZOMBIE, adopting=7), 4) is Verdict.KILL
    assert confirm(Claim(4, ZOMBIE, adopting=7), 6) is Verdict.SUPERSEDED
    assert confirm(Claim(7, ZOMBIE, adopting=7), 7) is Verdict.STALE  # refused anyway
    assert confirm(Claim(9, ZOMBIE, adopting=7), 9) is Verdict.STALE
