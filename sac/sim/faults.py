"""Faults as values, and fault schedules drawn from a seed.

A schedule is a tuple of faults, each with the virtual time it strikes at (``at``). The
world applies them (``World.apply``); here they are only data, so that a schedule can be
printed, replayed and shrunk. A ``CutOnFrame`` is armed at ``at`` and strikes on a frame
instead of at a time: that is how a connection is lost exactly before or after the broker
took a publish, or right after it sent a confirm.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs


@attrs.frozen(kw_only=True)
class Reset:
    """The link's TCP connection is reset: both ends notice at once, frames in flight are
    lost."""

    at: float
    link: str


@attrs.frozen(kw_only=True)
class CutOnFrame:
    """Reset ``link`` when its ``nth`` frame of ``method`` (a class name such as
    ``BasicPublish``) goes ``to`` the broker or the client after ``at``. ``delivered``:
    the frame arrives before the cut (the broker took the publish; the client got the
    confirm); otherwise it is lost with the connection."""

    at: float
    link: str
    method: str
    to: str = "broker"
    nth: int = 1
    delivered: bool = False


@attrs.frozen(kw_only=True)
class Silence:
    """Nothing passes on ``link`` for ``duration`` s (a frozen network path). Frames wait
    and arrive late if the connection survives; the broker closes it if the silence
    outlasts its heartbeat timeout (2-3 heartbeats), and the client then learns of it when
    the silence ends."""

    at: float
    link: str
    duration: float


@attrs.frozen(kw_only=True)
class KillNode:
    """A node dies for ``duration`` s: its connections are reset, the queues it led elect
    another leader."""

    at: float
    node: int
    duration: float


@attrs.frozen(kw_only=True)
class Election:
    """A queue has no leader for ``duration`` s: publishes are nacked meanwhile."""

    at: float
    queue: str
    duration: float


@attrs.frozen(kw_only=True)
class Alarm:
    """A memory alarm for ``duration`` s: publishing connections are blocked."""

    at: float
    duration: float


@attrs.frozen(kw_only=True)
class LeaderMoved:
    """The broker cancels the queue's consumers (``basic.cancel``) as a mirrored queue
    with ``x-cancel-on-ha-failover`` does when its master moves."""

    at: float
    queue: str


@attrs.frozen(kw_only=True)
class StoreDown:
    at: float
    duration: float


@attrs.frozen(kw_only=True)
class StoreSlow:
    at: float
    duration: float
    latency: float


@attrs.frozen(kw_only=True)
class DeleteQueue:
    """An operator deletes the queue (loses its messages: never drawn at random)."""

    at: float
    queue: str


@attrs.frozen(kw_only=True)
class StopProcess:
    """A client's process is stopped (SIGTERM: its graceful stop, a handover to the next
    consumer) or, with ``kill``, dies at once; it is started again ``down`` s later."""

    at: float
    client: str
    kill: bool
    down: float


Fault = (Reset | CutOnFrame | Silence | KillNode | Election | Alarm | LeaderMoved | StoreDown
         | StoreSlow | DeleteQueue | StopProcess)
Schedule = tuple[Fault, ...]

CUT_POINTS = (
    ("BasicPublish", "broker", False),   # lost before the broker took it
    ("BasicPublish", "broker", True),    # taken, connection lost before the confirm
    ("BasicAck", "client", False),       # the confirm (or a delivery's ack) lost on the way
    ("BasicDeliver", "client", False),   # a delivery lost on the way
    ("BasicAck", "broker", False),       # a consumer's ack lost on the way
    ("BasicAck", "broker", True),        # a consumer's ack taken, then the connection lost
)


@attrs.frozen(kw_only=True)
class Space:
    """What a drawn schedule may touch."""

    links: tuple[str, ...]
    queues: tuple[str, ...] = ()
    nodes: int = 3
    horizon: float = 5.0
    max_faults: int = 4
    store: bool = False
    heartbeat: float = 2.0
    clients: tuple[str, ...] = ()
    """Clients whose process may be stopped or killed (``StopProcess``)."""


def _ms(value: float) -> float:
    return round(value, 3)


def draw(rng: random.Random, space: Space) -> Schedule:
    """A random schedule within ``space``: 0 to ``max_faults`` faults, sorted by time."""
    faults: list[Fault] = []
    for _ in range(rng.randint(0, space.max_faults)):
        at = _ms(rng.uniform(0.0, space.horizon))
        kinds = ["reset", "cut", "silence", "kill", "alarm"]
        if space.queues:
            kinds += ["election", "moved"]
        if space.store:
            kinds += ["store_down", "store_slow"]
        if space.clients:
            kinds += ["stop"]
        kind = rng.choice(kinds)
        if kind == "reset":
            faults.append(Reset(at=at, link=rng.choice(space.links)))
        elif kind == "cut":
            method, to, delivered = rng.choice(CUT_POINTS)
            faults.append(CutOnFrame(at=at, link=rng.choice(space.links), method=method, to=to,
                                     nth=rng.randint(1, 5), delivered=delivered))
        elif kind == "silence":
            duration = _ms(rng.uniform(0.1, 4.0) * space.heartbeat)
            faults.append(Silence(at=at, link=rng.choice(space.links), duration=duration))
        elif kind == "kill":
            faults.append(KillNode(at=at, node=rng.randrange(space.nodes),
                                   duration=_ms(rng.uniform(0.5, 3.0))))
        elif kind == "alarm":
            faults.append(Alarm(at=at, duration=_ms(rng.uniform(0.05, 1.5))))
        elif kind == "election":
            faults.append(Election(at=at, queue=rng.choice(space.queues),
                                   duration=_ms(rng.uniform(0.1, 0.5))))
        elif kind == "moved":
            faults.append(LeaderMoved(at=at, queue=rng.choice(space.queues)))
        elif kind == "stop":
            faults.append(StopProcess(at=at, client=rng.choice(space.clients),
                                      kill=rng.random() < 0.5,
                                      down=_ms(rng.uniform(0.1, 2.0))))
        elif kind == "store_down":
            faults.append(StoreDown(at=at, duration=_ms(rng.uniform(0.05, 2.0))))
        else:
            faults.append(StoreSlow(at=at, duration=_ms(rng.uniform(0.1, 2.0)),
                                    latency=_ms(rng.uniform(0.05, 1.0))))
    return tuple(sorted(faults, key=lambda f: f.at))


def describe(schedule: Sequence[Fault]) -> str:
    return "\n".join(repr(f) for f in schedule) or "(no faults)"
