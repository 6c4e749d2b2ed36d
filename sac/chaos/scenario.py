"""What a chaos scenario is: its fault (a body run against the world), the weakening that
fault exposes and the anomaly expected of the weakened run, and what the run needs (queue
type, store, network, guard, federation, RabbitMQ series). Its own module so that the
scenarios (``scenarios.py``) and the runner (``runner.py``) both build on it, neither on the
other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

from sac.server import LocalCluster
from .errors import ChaosError
from .settings import Weakening
from .world import World

Body = Callable[[World], None]


@attrs.frozen
class Scenario:
    name: str
    summary: str
    body: Body
    weakened: Weakening
    """The weakening this scenario's fault exposes; its anomaly is ``expect``."""
    expect: tuple[str, ...]
    queue_type: Literal["quorum", "classic"] = "quorum"
    prepare: Callable[[LocalCluster, str], None] | None = None
    """Set-up before the queue exists (a policy), given the queue name."""
    store: Literal["sqlite", "postgres"] = "sqlite"
    """PostgreSQL where the fault is about row locks held by a frozen consumer: SQLite's one
    writer serialises consumers whatever the fencing."""
    network: Literal["loopback", "netns"] = "loopback"
    """``netns``: the scenario cuts links between nodes, so each node needs a namespace."""
    guard: bool = False
    """The consumers are guarded by a ZooKeeper election (``World.zookeeper``), with a lease
    of ``GUARD_LEASE_S``: the run needs a ZooKeeper with a short tick."""
    single_active: bool = True
    """The queue's native single active consumer; False (a plain queue) only with ``guard``,
    which is then all that keeps a second consumer off it."""
    evict: bool = False
    """Guarded consumers get the cluster's management API: a new leader has the broker
    close its predecessor's connection (``GuardSettings.evict``)."""
    federated: bool = False
    """The queue federated with a second cluster (``sac/chaos/federation.py``), consumer slots
    alternating between the two: only a guard keeps one active across both."""
    short_batches: bool = False
    """The consumers ack (and commit) in batches of half their prefetch rather than all of
    it: a batch held inside an effect then leaves room in the prefetch for messages behind
    it, even with a backlog."""
    rabbitmq: str | None = None
    """The RabbitMQ series the fault needs (``3.10`` for classic mirrored queues, which 4.0
    removed); ``None``: any. The CLI runs such a scenario on that series whatever the
    default, and ``run`` refuses it on another."""
    rabbitmq_why: str = ""
    """Why it needs that series: the refusal's reason."""

    def __attrs_post_init__(self) -> None:
        if not (self.single_active or self.guard):
            raise ChaosError(f"scenario {self.name}: a queue without single active consumer "
                             "needs guarded consumers (guard=True)")
        if self.evict and not self.guard:
            raise ChaosError(f"scenario {self.name}: eviction needs guarded consumers")
        if self.federated and (self.single_active or not self.guard):
            raise ChaosError(f"scenario {self.name}: a federated queue is kept to one "
                             "consumer by the guard (guard=True, single_active=False)")
        if (self.rabbitmq is None) != (not self.rabbitmq_why):
            raise ChaosError(f"scenario {self.name}: a required RabbitMQ series comes with "
                             "its reason (rabbitmq and rabbitmq_why)")

    def series(self, asked: str | None, default: str) -> str:
        """The series a run of this scenario uses when ``asked`` (``None``: not asked), the
        default being ``default``; ChaosError when asked for a series it cannot run on."""
        if self.rabbitmq is None:
            return asked or default
        if asked is not None and asked != self.rabbitmq:
            raise ChaosError(self.refusal(asked))
        return self.rabbitmq

    def refusal(self, series: str) -> str:
        return (f"scenario {self.name} needs RabbitMQ {self.rabbitmq}, not {series}: "
                f"{self.rabbitmq_why}")
