"""What one chaos run does: ``RunSettings``, frozen and validated, shared by the runner, the
world a scenario acts on and the campaign."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import attrs

from sac.history import MESSAGE_ANOMALIES
from .actors import Face
from .errors import ChaosError

Weakening = Literal["dedup-off", "redelivered-only", "fencing-off", "cancel-first"]
WEAKENINGS: tuple[Weakening, ...] = ("dedup-off", "redelivered-only", "fencing-off",
                                     "cancel-first")
ANOMALIES = MESSAGE_ANOMALIES
"""What a run's verdict may find among its messages (``sac.history``, where they are named)."""
CONSUMER_STOP_S = 30.0
"""A graceful stop finishes the running effect and acks: far less than this."""
GUARD_LEASE_S = 1.0
"""The ZooKeeper session timeout of guarded consumers: a leader cut off from ZooKeeper is
replaced this long after ZooKeeper last heard from it (the run's ZooKeeper must grant it:
a tick of at most half of it)."""
GUARD_TICK_MS = 100
"""The tickTime of the ZooKeeper a guarded run starts for itself: leases from 0.2 s, each
expired within a tick of its end."""
REPAIR_AFTER_S = 60.0
"""A node that does not serve again within this long (before a run, after a heal) is
restarted, as an operator would. RabbitMQ 3.10.8 on Erlang 25.2 needs it: a node paused by
pause_minority that restarts its applications around a heal can hang in Erlang's
``global`` sync ("Global hang workaround: global state ... seems broken" in its log, then
nothing for minutes; rabbitmq-server#6034: the workaround no longer works from OTP 25.1)."""

SPLIT_SEEN_S = 3.0
"""A node that serves while most other nodes list it as not running, this long without a
break after a heal, is taken for one Mnesia kept split at once (``kept_split``): a node
paused by pause_minority opens its listeners only after it has rejoined, so a node that
serves unseen never paused, and on 4.0.5 stays apart for good. Waiting ``SPLIT_AFTER_S``
for it cost every run of partition-consumer-node 15 s."""

SPLIT_AFTER_S = 15.0
"""A node that most other nodes still list as not running this long after a heal (a whole
cluster takes 0.4-4 s) is taken for one Mnesia kept split, and restarted without waiting
``REPAIR_AFTER_S``: on 4.0.5 a cut healed before the isolated node paused left it serving
alone, for good."""


def _faces(values: Iterable[Face]) -> tuple[Face, ...]:
    """A converter typed for its callers (``converter=tuple`` leaves the argument's type
    unsolved for mypy: any iterable of anything)."""
    return tuple(values)


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ChaosError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen
class RunSettings:
    """What one run does. Sizes are small by default: a run in ``make test`` takes seconds
    of traffic; a campaign raises ``messages`` and ``rate``."""

    scenario: str
    seed: int = attrs.field(default=1, validator=attrs.validators.instance_of(int))
    messages: int = attrs.field(default=300, validator=_positive)
    rate: float = attrs.field(default=100.0, validator=_positive)
    consumers: int = attrs.field(default=2, validator=[_positive, attrs.validators.le(5)])
    faces: tuple[Face, ...] = attrs.field(
        default=("blocking", "asyncio"), converter=_faces,
        validator=attrs.validators.deep_iterable(
            attrs.validators.in_(("blocking", "asyncio")), attrs.validators.min_len(1)))
    weakened: Weakening | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(WEAKENINGS)))
    heartbeat: int = attrs.field(default=2, validator=_positive)
    effect_ms: float = attrs.field(default=2.0, validator=attrs.validators.ge(0))
    prefetch: int = attrs.field(default=20, validator=_positive)
    time_limit: float = attrs.field(default=300.0, validator=_positive)
    store: Literal["sqlite", "postgres"] | None = attrs.field(
        default=None, validator=attrs.validators.optional(
            attrs.validators.in_(("sqlite", "postgres"))))
    """The inbox's store and sink; ``None``: the scenario's choice."""

    @property
    def label(self) -> str:
        weak = f"-{self.weakened}" if self.weakened else ""
        return f"{self.scenario}-s{self.seed}{weak}"


