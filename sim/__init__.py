"""Deterministic simulation: a RabbitMQ broker in memory and in virtual time, a dedup store
that fails or is slow, fault schedules drawn from a seed, exact replay and shrinking.

Pure: no sockets, threads, asyncio or wall clock; everything random comes from the seed, so
a run is a function of its seed and its workload::

    outcome = run(seed, workload)          # workload: see harness.Workload
    if outcome.failed:
        small = shrink(outcome.schedule, lambda s: run(seed, workload, s).failed)

The broker's rules (``queue``, ``sac``, ``confirms``, ``connections``) are RabbitMQ 3.10's,
checked against a real cluster by ``tests/sim/test_model_honesty.py``; ``world`` gives them
a network and faults; ``harness`` says what a client under test implements.
"""

if __name__ != "sac.sim":  # one name per module: a second would load a second copy
    raise ImportError(
        f"import sac.sim, not {__name__}: sim/ is the package sac.sim", name=__name__
    )

from .broker import Broker, Timing
from .faults import (
    Alarm,
    CutOnFrame,
    DeleteQueue,
    Election,
    Fault,
    KillNode,
    LeaderMoved,
    Reset,
    Schedule,
    Silence,
    Space,
    StoreDown,
    StoreSlow,
    describe,
    draw,
)
from .harness import (
    Action,
    ClaimEpoch,
    Client,
    Commit,
    CommitDone,
    Connect,
    ConnectionLost,
    ConnectionRefused,
    Disconnect,
    EpochClaimed,
    Event,
    Received,
    Send,
    Workload,
)
from .invariants import broker_violations
from .run import Outcome, run, schedule_for
from .shrink import ddmin, shrink
from .store import LedgerEntry, SimStore
from .trace import Entry, Trace
from .world import SimulationError, World

__all__ = [
    "Action",
    "Alarm",
    "Broker",
    "ClaimEpoch",
    "Client",
    "Commit",
    "CommitDone",
    "Connect",
    "ConnectionLost",
    "ConnectionRefused",
    "CutOnFrame",
    "DeleteQueue",
    "Disconnect",
    "Election",
    "Entry",
    "EpochClaimed",
    "Event",
    "Fault",
    "KillNode",
    "LeaderMoved",
    "LedgerEntry",
    "Outcome",
    "Received",
    "Reset",
    "Schedule",
    "Send",
    "Silence",
    "SimStore",
    "SimulationError",
    "Space",
    "StoreDown",
    "StoreSlow",
    "Timing",
    "Trace",
    "Workload",
    "World",
    "broker_violations",
    "ddmin",
    "describe",
    "draw",
    "run",
    "schedule_for",
    "shrink",
]
