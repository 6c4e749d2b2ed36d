"""What an epoch claim does to the previous holder of the queue's epoch while that holder, a
process of its own, keeps a batch open: on PostgreSQL its waiting session is ended; on SQLite
it is killed if and only if it is frozen and holds the write lock, and otherwise waited for."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sac.sdk import StaleEpoch
from sac.sdk.dedup import PostgresStore, SQLiteStore
from tests.dedup.conftest import new_database
from tests.helpers import Lines, finish

if TYPE_CHECKING:
    from sac.server import LocalPostgres

Q = "orders"
ROOT = Path(__file__).parents[2]


class Holder:
    """The holder process, holding its batch open once constructed (``rounds``: claims and
    batches in a row, each held until released)."""

    def __init__(self, kind: str, location: str, queue: str = Q, rounds: int = 1,
                 message: str = "m-1", adopt: int | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.dedup.holder_process", kind, location, queue, message,
             str(rounds), *([] if adopt is None else [str(adopt)])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.out = Lines(self.proc)
        self.out.expect("holding", 30)

    def release(self) -> str:
        """Let it commit; what it printed about its commit."""
        self.proc.send_signal(signal.SIGCONT)
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self.out.expect("", 30)


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for holder in made:
        finish(holder.proc)


# ---------------------------------------------------------------------- SQLite


@pytest.mark.parametrize("case", ["running", "frozen-holder-of-another-queue",
                                  "frozen-eviction-off"])
def test_sqlite_a_claim_waits_for_a_holder_it_may_not_kill(
    case: str, tmp_path: Path, holders: list[Holder]
) -> None:
    """Only the frozen, recorded holder of this queue's epoch is killed: a running process,
    a frozen one that holds another queue's epoch (this queue's is held by us) and a frozen
    one when eviction is off are waited for, ``busy_timeout``, and survive."""
    path = tmp_path / "dedup.db"
    store = SQLiteStore(path, busy_timeout=0.5, evict_frozen_holder=case != "frozen-eviction-off")
    store.open()  # the tables exist before the holder takes the lock
    if case == "frozen-holder-of-another-queue":
        store.claim_epoch(Q)
    holder = Holder("sqlite", str(path), "other" if "another" in case else Q)
    holders.append(holder)
    if case != "running":
        holder.proc.send_signal(signal.SIGSTOP)
    began = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store.claim_epoch(Q)
    assert time.monotonic() - began >= 0.5
    assert holder.proc.poll() is None, "the holder was killed"
    assert holder.release() == "committed"
    assert store.seen(Q if "another" not in case else "other", "m-1")
    store.claim_epoch(Q)  # the lock is free again
    store.close()


def test_sqlite_a_claim_kills_the_frozen_holder_of_the_queue_and_goes_on(
    tmp_path: Path, holders: list[Holder]
) -> None:
    path = tmp_path / "dedup.db"
    store = SQLiteStore(path, busy_timeout=10.0)
    store.open()
    holder = Holder("sqlite", str(path))
    holders.append(holder)
    holder.proc.send_signal(signal.SIGSTOP)
    began = time.monotonic()
    assert store.claim_epoch(Q) == 2
    assert time.monotonic() - began < 1.0
    assert holder.proc.wait(10) == -signal.SIGKILL
    assert not store.seen(Q, "m-1")  # its batch never committed
    with store.transaction(Q, "m-1", 2):
        pass
    store.close()


@pytest.mark.parametrize("newer", ["another process", "the same process, claiming again"])
def test_sqlite_a_claim_never_kills_a_holder_newer_than_the_one_it_began_with(
    newer: str, tmp_path: Path, holders: list[Holder]
) -> None:
    """A claim waits for a running holder; meanwhile that holder commits, a newer consumer
    claims the next epoch, holds the write lock in a batch and is stopped (a debugger,
    Ctrl-Z). The waiting claim, whose holder was replaced before it got the lock, leaves the
    newer one alive and claims after it. The waiting claim is itself stopped while the
    newer one takes over, so the order of events is the same on every run."""
    path = tmp_path / "dedup.db"
    with SQLiteStore(path):
        pass  # the tables exist before the first holder takes the lock
    first = Holder("sqlite", str(path), rounds=2 if newer.startswith("the same") else 1)
    holders.append(first)
    claimant = subprocess.Popen(
        [sys.executable, "-m", "tests.dedup.holder_process", "claim", str(path), Q, "30"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    claiming = Lines(claimant)
    try:
        assert f"held by {first.proc.pid}: " in claiming.expect("log DEBUG", 30)
        claimant.send_signal(signal.SIGSTOP)
        assert first.release() == "committed"
        if newer.startswith("the same"):
            second = first
            second.out.expect("holding", 30)
        else:
            second = Holder("sqlite", str(path), message="m-2")
            holders.append(second)
        second.proc.send_signal(signal.SIGSTOP)
        claimant.send_signal(signal.SIGCONT)
        # What the claim decides about the stopped newer holder, three slices in a row (a
        # decision read before the stop may come first).
        decisions: list[str] = []
        while len(decisions) < 3 and not any("killed" in d for d in decisions):
            line = claiming.expect("log", 30)
            if str(second.proc.pid) in line and "running, not frozen" not in line:
                decisions.append(line)
        assert [d for d in decisions if "killed" in d] == []
        assert second.proc.poll() is None
        assert second.release() == "committed"
        assert claiming.expect("claimed", 30) == "claimed 3"
    finally:
        finish(claimant)
    with SQLiteStore(path) as store:
        assert store.seen(Q, "m-2" if newer == "another process" else "m-1-2")


def test_sqlite_an_adoption_older_than_the_frozen_holders_epoch_kills_nothing(
    tmp_path: Path, holders: list[Holder]
) -> None:
    """A guarded consumer's adoption of token 5 while the holder of token 10 is stopped in
    its batch: the adoption would be refused anyway (a newer leader holds the queue), so it
    replaces nobody: it waits (``busy_timeout``), the holder survives, and once the lock is
    free the adoption is refused."""
    path = tmp_path / "dedup.db"
    store = SQLiteStore(path, busy_timeout=0.5)
    store.open()
    holder = Holder("sqlite", str(path), adopt=10)
    holders.append(holder)
    holder.proc.send_signal(signal.SIGSTOP)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store.adopt_epoch(Q, 5)
    assert holder.proc.poll() is None, "the holder of the newer epoch was killed"
    assert holder.release() == "committed"
    with pytest.raises(StaleEpoch):
        store.adopt_epoch(Q, 5)
    store.close()


# ---------------------------------------------------------------------- PostgreSQL


def test_postgres_a_claim_ends_the_previous_holders_open_transaction(
    postgres: LocalPostgres, holders: list[Holder]
) -> None:
    """The holder's session waits inside its batch, holding m-1's record; the successor's
    claim ends it, so the successor commits m-1 at once, and the holder's commit fails."""
    dsn = new_database(postgres, "holder")
    holder = Holder("postgres", dsn)
    holders.append(holder)
    store = PostgresStore(dsn)
    store.open()
    began = time.monotonic()
    epoch = store.claim_epoch(Q)
    with store.transaction(Q, "m-1", epoch):
        pass
    assert time.monotonic() - began < 2.0
    assert holder.release().startswith("failed")
    assert [(m, e) for m, e, _, _ in store.records(Q)] == [("m-1", epoch)]
    store.close()


def test_postgres_a_refused_adoption_ends_nothing(
    postgres: LocalPostgres, holders: list[Holder]
) -> None:
    dsn = new_database(postgres, "holder")
    holder = Holder("postgres", dsn)  # holds epoch 1
    holders.append(holder)
    store = PostgresStore(dsn)
    store.open()
    with pytest.raises(StaleEpoch):
        store.adopt_epoch(Q, 0)
    assert holder.release() == "committed"
    store.close()
