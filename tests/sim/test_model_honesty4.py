"""The 4.0 model must be honest too: every case of ``test_model_honesty`` and the cases of
what RabbitMQ 4.0 changed, each run against the simulator following 4.0 (``sim.model``)
and against the real 3-node RabbitMQ 4.0.5 cluster (the ``cluster4`` fixture); what the
clients hear must be the same.

What 4.0 changed, as these cases pin it: a quorum queue declared without a delivery limit
has one of 20 (so a return goes to the head of the queue, and the 21st return
dead-letters), ``-1`` means none; a message rejected without requeue is dead-lettered
counted (its dead letter arrives ``redelivered`` with ``x-delivery-count`` 1); on a
single-active queue a consumer of higher ``x-priority`` takes over once the active one
holds nothing unacked, and the waiting line is ordered by priority.

Each case about a 4.0 rule can fail: ``test_each_4_0_case_catches_the_rule_taken_away``
runs it under the model without that rule, and the observation changes.
"""

from __future__ import annotations

import attrs
import pytest

from sac.server import LocalCluster
from sac.sim.model import MODELS, BrokerModel
from sac.sim.script import Ack, Case, CloseChannel, Consume, Nack, Open, Qos, run_case
from .real_driver import heard_on
from .test_model_honesty import CASES, consumers, publish, queue_args, setup

V4 = MODELS["4.0"]

CASES4 = [
    Case(name="default_limit_is_twenty", steps=(
        *setup(queue_args(None)),
        publish("m0"),
        (Open(link="a", node=1), Open(link="d", node=2)),
        (Consume(link="d", queue="q.dlq", tag="D"), Qos(link="a", prefetch=1),
         Consume(link="a", queue="q", tag="A")),
        *((Nack(link="a", tag=tag),) for tag in range(1, 22)),
    )),
    Case(name="minus_one_is_no_limit", steps=(
        *setup(queue_args(-1, dead_letters=False)),
        publish("m0", "m1", "m2", "m3"),
        *consumers("a", prefetch=3),
        (Nack(link="a", tag=3),),
        (Nack(link="a", tag=1),),
    )),
    Case(name="priority_takes_over_once_the_active_holds_nothing", steps=(
        *setup(),
        publish("m0", "m1", "m2", "m3"),
        (Open(link="a", node=1), Open(link="b", node=2)),
        (Qos(link="a", prefetch=2), Consume(link="a", queue="q", tag="A")),
        (Qos(link="b", prefetch=10), Consume(link="b", queue="q", tag="B", priority=5)),
        (Ack(link="a", tag=1),),
        (Ack(link="a", tag=2),),
    )),
    Case(name="waiting_line_by_priority", steps=(
        *setup(),
        publish("m0", "m1"),
        (Open(link="a", node=1), Open(link="b", node=2), Open(link="c", node=0)),
        (Qos(link="a", prefetch=1), Consume(link="a", queue="q", tag="A", priority=10)),
        (Qos(link="b", prefetch=10), Consume(link="b", queue="q", tag="B", priority=1)),
        (Qos(link="c", prefetch=10), Consume(link="c", queue="q", tag="C", priority=5)),
        (CloseChannel(link="a"),),
    )),
]


@pytest.mark.parametrize("case", [*CASES, *CASES4], ids=lambda c: c.name)
def test_the_4_0_model_hears_what_rabbitmq_4_0_says(
        case: Case, cluster4: LocalCluster, request: pytest.FixtureRequest) -> None:
    expected = run_case(case, broker=V4).normalised()
    assert heard_on(cluster4, case, expected, request.node.nodeid[-100:]) == expected


WITHOUT: dict[str, BrokerModel] = {
    "default_limit_is_twenty": attrs.evolve(V4, default_delivery_limit=None),
    "minus_one_is_no_limit": attrs.evolve(V4, negative_limit_is_none=False),
    "priority_takes_over_once_the_active_holds_nothing": attrs.evolve(V4, priorities=False),
    "waiting_line_by_priority": attrs.evolve(V4, priorities=False),
    "delivery_limit_dead_letters": attrs.evolve(V4, reject_counts_into_dead_letter=False),
    "requeue_goes_last_without_a_limit": attrs.evolve(V4, default_delivery_limit=None),
}
"""Each case about a rule 4.0 changed, and the 4.0 model without that rule."""


@pytest.mark.parametrize("name", sorted(WITHOUT))
def test_each_4_0_case_catches_the_rule_taken_away(name: str) -> None:
    case = next(c for c in [*CASES, *CASES4] if c.name == name)
    assert run_case(case, broker=WITHOUT[name]).normalised() != run_case(
        case, broker=V4).normalised()


def test_every_4_0_case_has_its_rule() -> None:
    assert {c.name for c in CASES4} <= set(WITHOUT)
