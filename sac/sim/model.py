"""Which RabbitMQ the simulated broker follows: the rules that differ between the versions
our users run, one frozen value per version (``sac sim --broker``).

Each rule is a field, so the queue and the broker ask "does this broker count a return
after a lost channel?" instead of comparing version numbers, and a test can name the rule
it is about. Where a rule comes from:

- 3.10: ``tests/sim/test_model_honesty.py`` against RabbitMQ 3.10.8;
- 4.0: ``tests/sim/test_model_honesty4.py`` against RabbitMQ 4.0.5 (every 3.10 case, and
  the cases of what 4.0 changed: a default delivery limit of 20, a rejected message's count
  carried into its dead letter, consumer priorities on a single-active queue);
- 4.1 and 4.2: the same rules as 4.0 for everything modelled here (their release notes
  change no quorum-queue rule the simulator models; ``rabbit_fifo`` of those versions still
  checks the delivery limit against the count of every return, and quorum queues evaluate
  no consumer timeout before 4.3: the channel's timeout closes the channel, as in 3.10);
- 4.3 (not runnable here; from the quorum queue guide's table "When is delivery count
  incremented?", rabbitmq-server pull requests 13885 and 15387, discussion 18226 and issue
  17317): the delivery limit is checked against the count of *failed* deliveries: a
  ``basic.reject`` and a lost channel or connection (a client crash) raise it, a
  ``basic.nack`` with requeue and a consumer timeout do not; a redelivery carries
  ``x-acquired-count`` (every return) besides ``x-delivery-count``. The queue itself times
  consumers out: a ``basic.cancel`` to the client, its messages back in the queue uncounted,
  the consumer left registered but never served again (the channel ignores acks of what it
  took back); a single-active queue whose every registered consumer timed out serves nobody
  (17317).

A return the broker makes on its own (``LeaderMoved``: a server ``basic.cancel``) counts as a
lost channel's on every model (the 4.3 guide does not list it).
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from sac.sdk._core.queues import BrokerVersion


class Timeout(enum.Enum):
    """What a consumer that holds a delivery unacked past its consumer timeout gets."""

    CLOSE_CHANNEL = "close-channel"
    """The channel's own timer closes the channel (406 PRECONDITION_FAILED): what it held
    comes back as after any lost channel (3.10 to 4.2)."""
    CANCEL = "cancel"
    """The queue times the consumer out (4.3): ``basic.cancel``, its deliveries back
    uncounted, the consumer left registered and never served again."""


@attrs.frozen(kw_only=True)
class BrokerModel:
    name: str
    version: BrokerVersion
    """What a client of the simulated broker declares for (``QueueSettings.arguments``),
    so that it sends each argument as it would to that broker."""
    default_delivery_limit: int | None
    """A quorum queue declared without ``x-delivery-limit`` gets this one (4.0: 20)."""
    negative_limit_is_none: bool
    """``x-delivery-limit`` below 0 means no limit (4.0); 3.10 reads -1 as a limit below
    one delivery (the first return dead-letters)."""
    nack_counts: bool
    """A ``basic.nack`` with requeue raises the count the delivery limit is checked against
    (up to 4.2: every return does); 4.3 counts only failures (a reject, a lost channel)."""
    lost_channel_counts: bool
    """What a lost channel or connection gives back raises the count (every version
    modelled: the 4.3 guide counts a client crash as a failed delivery). The only bound on
    a message that kills every consumer process running it: the SDK remembers nothing
    across its process's death (``tests/sim/test_models.py`` shows the loop without it)."""
    acquired_header: bool
    """A redelivery carries ``x-acquired-count``, the count of every return (4.3)."""
    reject_counts_into_dead_letter: bool
    """A ``basic.reject`` without requeue raises the count, and the dead letter carries it
    (``x-delivery-count``, ``redelivered``), as 4.0.5 showed; 3.10's dead letter starts
    afresh."""
    priorities: bool
    """A single-active queue serves the waiting consumer of highest ``x-priority`` first,
    and one of higher priority than the active one takes over once the active one holds
    nothing unacked (4.0)."""
    timeout: Timeout

    def __str__(self) -> str:
        return f"RabbitMQ {self.name}"


_V4_0 = BrokerModel(
    name="4.0", version=BrokerVersion(4, 0, 5), default_delivery_limit=20,
    negative_limit_is_none=True, nack_counts=True, lost_channel_counts=True,
    acquired_header=False,
    reject_counts_into_dead_letter=True, priorities=True, timeout=Timeout.CLOSE_CHANNEL)

MODELS: dict[str, BrokerModel] = {
    "3.10": BrokerModel(
        name="3.10", version=BrokerVersion(3, 10, 8), default_delivery_limit=None,
        negative_limit_is_none=False, nack_counts=True, lost_channel_counts=True,
        acquired_header=False,
        reject_counts_into_dead_letter=False, priorities=False,
        timeout=Timeout.CLOSE_CHANNEL),
    "4.0": _V4_0,
    "4.1": attrs.evolve(_V4_0, name="4.1", version=BrokerVersion(4, 1, 0)),
    "4.2": attrs.evolve(_V4_0, name="4.2", version=BrokerVersion(4, 2, 0)),
    "4.3": attrs.evolve(_V4_0, name="4.3", version=BrokerVersion(4, 3, 0),
                        nack_counts=False, acquired_header=True, timeout=Timeout.CANCEL),
}
"""Every broker the simulator can follow, by the name ``sac sim --broker`` takes."""

DEFAULT_MODEL = "4.0"


def _known(_inst: object, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in MODELS:
        raise ValueError(f"unknown broker model {value!r}: one of {', '.join(MODELS)}")


@attrs.frozen(kw_only=True)
class BrokerChoice:
    """A run's broker model, by name (validated: an unknown name is refused with the
    choices)."""

    name: str = attrs.field(default=DEFAULT_MODEL, validator=_known)

    @property
    def model(self) -> BrokerModel:
        return MODELS[self.name]


def model(name: str = DEFAULT_MODEL) -> BrokerModel:
    """The model called ``name`` (ValueError naming the choices when there is none)."""
    return BrokerChoice(name=name).model
