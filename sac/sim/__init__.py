"""Deterministic simulation: a RabbitMQ broker in memory and in virtual time, a dedup store
that fails or is slow, fault schedules drawn from a seed, exact replay and shrinking.

Pure: no sockets, threads, asyncio or wall clock; everything random comes from the seed, so
a run is a function of its seed and its workload::

    outcome = run(seed, workload)          # workload: see run.Workload
    if outcome.failed:
        small = shrink(outcome.schedule, lambda s: run(seed, workload, s).failed)

The broker's rules (``queue``, ``sac``, ``confirms``, ``connections``) are RabbitMQ's, with
what differs between 3.10, 4.0, 4.1, 4.2 and 4.3 as the fields of a ``model.BrokerModel``
(4.0 by default), checked against real 3.10.8 and 4.0.5 clusters by
``tests/sim/test_model_honesty.py`` and ``test_model_honesty4.py``; ``world`` gives them a
network and faults; ``harness`` says what a client under test implements.

``sac sim`` drives the SDK's real engines here: ``publisher`` (the outbox) and ``consumer``
(the consumer machine with an ``Inbox`` over the simulated store), dumb translators over
``shell`` (what pika and the SDK's recovery do); ``workload`` runs them under random
schedules and checks ``invariants``; ``campaign`` runs many seeds and shrinks the first
failure; ``variants`` are deliberately broken engines the invariants must catch.
"""

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
)
from .invariants import broker_violations
from .model import DEFAULT_MODEL, MODELS, BrokerChoice, BrokerModel, Timeout
from .run import Outcome, Workload, run, schedule_for
from .shrink import ddmin, shrink
from .store import LedgerEntry, SimStore
from .trace import Entry, Trace
from .world import SimulationError, World

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "Action",
    "Alarm",
    "Broker",
    "BrokerChoice",
    "BrokerModel",
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
    "Timeout",
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
