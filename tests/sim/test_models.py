"""The broker models (``sim.model``): chosen by name, each rule where the versions differ as
a client hears it, and the SDK's engines keeping every invariant under each model (with
consumer timeouts, and with a message that kills every process running it)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from sac.cli import main
from sac.sim.campaign import campaign, run_one
from sac.sim.messages import Message
from sac.sim.methods import BasicCancel, BasicDeliver, ChannelClose, Properties
from sac.sim.model import DEFAULT_MODEL, MODELS, BrokerChoice, BrokerModel
from sac.sim.queue import DeadLetter, Deliver, QuorumQueue
from sac.sim.script import Ack, CloseChannel, Consume, Declare, Nack, Open, Publish, Qos, Reject
from sac.sim.workload import EnginesWorkload
from sac.sim.world import World
from sac.sim_command import BROKERS, DEFAULT_BROKER
from .rig import Rig
from .test_engines import Watched

QQ = {"x-queue-type": "quorum"}
SAC = {**QQ, "x-single-active-consumer": True}


def message(uid: int) -> Message:
    return Message(uid=uid, exchange="", routing_key="q", body=f"m{uid}".encode(),
                   properties=Properties(message_id=str(uid)))


# ------------------------------------------------------------------ choosing


def test_a_model_is_chosen_by_name_and_an_unknown_one_is_refused_with_the_choices(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert BrokerChoice().model is MODELS["4.0"] is MODELS[DEFAULT_MODEL]
    assert BrokerChoice(name="4.3").model.version.minor == 3
    with pytest.raises(ValueError, match=r"^unknown broker model '5\.0': one of 3\.10, 4\.0, "
                                         r"4\.1, 4\.2, 4\.3$"):
        BrokerChoice(name="5.0")
    assert main(["sim", "--broker", "5.0", "--schedules", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown broker model '5.0': one of 3.10, 4.0, 4.1, 4.2, 4.3" in err
    assert len(err.splitlines()) == 1
    assert (tuple(MODELS), DEFAULT_MODEL) == (BROKERS, DEFAULT_BROKER)


def test_the_command_names_the_model_it_ran(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--broker", "4.3", "--consumer-timeout", "0.5", "--priorities",
                 "--lethal", "--schedules", "5", "--seed", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["broker"], report["schedules"], report["violations"]) == ("4.3", 5, 0)
    assert main(["sim", "--broker", "3.10", "--schedules", "1", "--seed", "3"]) == 0
    assert "(variant real, RabbitMQ 3.10 rules)" in capsys.readouterr().out


def test_a_client_declares_for_the_version_the_broker_names() -> None:
    """The SDK declares ``delivery_limit=-1`` (the parking queue) as -1 on 4.x, not at all
    on 3.10, from the version ``connection.start`` names."""
    for name, expected in (("3.10", None), ("4.0", -1), ("4.3", -1)):
        world = World(1, broker=MODELS[name])
        EnginesWorkload(broker=MODELS[name]).build(world)
        world.run(1.0)
        parking = world.broker.queues["q.parked"]
        assert parking.arguments.get("x-delivery-limit") == expected, name
        assert parking.args.delivery_limit is None, name


# ------------------------------------------------------------------ the delivery count


def returns_until_dropped(broker: BrokerModel, arguments: dict[str, Any],
                          give_back: Callable[[QuorumQueue, int], list[Any]]) -> int:
    """How many times one message is given back before the queue drops it (at most 30)."""
    queue = QuorumQueue("q", arguments, broker)
    key = (1, 1, "A")
    queue.consume(key, prefetch=1)
    effects = queue.enqueue(message(1))
    for returns in range(30):
        [delivered] = [e for e in effects if isinstance(e, Deliver)]
        effects = give_back(queue, delivered.msg_id)
        if any(isinstance(e, DeadLetter) for e in effects):
            return returns + 1
    return 30


def nack(queue: QuorumQueue, msg_id: int) -> list[Any]:
    return queue.return_((1, 1, "A"), [msg_id], rejected=False)


def reject(queue: QuorumQueue, msg_id: int) -> list[Any]:
    return queue.return_((1, 1, "A"), [msg_id], rejected=True)


def channel_lost(queue: QuorumQueue, msg_id: int) -> list[Any]:
    effects = queue.channel_down(1, 1)
    return effects + queue.consume((1, 1, "A"), prefetch=1)


@pytest.mark.parametrize(("name", "arguments", "give_back", "returns"), [
    ("3.10", QQ, nack, 30),  # no default limit
    ("4.0", QQ, nack, 21),  # 20 by default: the 21st return drops it
    ("4.0", {**QQ, "x-delivery-limit": -1}, nack, 30),
    ("4.2", {**QQ, "x-delivery-limit": 2}, nack, 3),
    ("4.3", {**QQ, "x-delivery-limit": 2}, nack, 30),  # a nack is no failure on 4.3
    ("4.3", {**QQ, "x-delivery-limit": 2}, reject, 3),
    ("4.3", {**QQ, "x-delivery-limit": 2}, channel_lost, 3),  # a crash is one
])
def test_what_counts_towards_the_delivery_limit(
        name: str, arguments: dict[str, Any], give_back: Callable[[QuorumQueue, int], Any],
        returns: int) -> None:
    assert returns_until_dropped(MODELS[name], arguments, give_back) == returns


def test_4_3_tells_every_return_in_x_acquired_count_and_failures_in_x_delivery_count() -> None:
    rig = Rig(1, broker=MODELS["4.3"])
    rig.do(Open(link="p", confirm=True),
           Declare(link="p", queue="q", arguments={**QQ, "x-delivery-limit": 5}))
    rig.do(Publish(link="p", queue="q", body="m0"), Open(link="a", node=1))
    rig.do(Qos(link="a", prefetch=1), Consume(link="a", queue="q", tag="A"))
    for give_back in (Nack, Reject, Nack):
        rig.do(give_back(link="a", tag=rig.heard("a", BasicDeliver)[-1].delivery_tag))
    delivered = rig.heard("a", BasicDeliver)
    assert [d.properties.headers for d in delivered] == [
        None, {"x-acquired-count": 1}, {"x-delivery-count": 1, "x-acquired-count": 2},
        {"x-delivery-count": 1, "x-acquired-count": 3}]
    assert [d.redelivered for d in delivered] == [False, True, True, True]


# ------------------------------------------------------------------ consumer timeouts


def timed_out(name: str, *consumer_links: str) -> Rig:
    """A single-active queue with a 1 s consumer timeout, two messages, and a consumer on
    each link (the first active) that never acks; run past the timeout."""
    rig = Rig(1, broker=MODELS[name])
    rig.do(Open(link="p", confirm=True),
           Declare(link="p", queue="q",
                   arguments={**SAC, "x-delivery-limit": 5, "x-consumer-timeout": 1000}))
    rig.do(Publish(link="p", queue="q", body="m0"), Publish(link="p", queue="q", body="m1"),
           *(Open(link=link, node=i % 3) for i, link in enumerate(consumer_links, start=1)))
    for link in consumer_links:
        rig.do(Qos(link=link, prefetch=1), Consume(link=link, queue="q", tag=link.upper()))
    rig.run(1.5)
    return rig


@pytest.mark.parametrize("name", ["3.10", "4.0", "4.2"])
def test_up_to_4_2_a_consumer_timeout_closes_the_channel_and_the_return_counts(
        name: str) -> None:
    rig = timed_out(name, "a", "b")
    [close] = rig.heard("a", ChannelClose)
    assert close.reply_code == 406
    assert close.reply_text.startswith(
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out")
    assert rig.heard("a", BasicCancel) == []
    [(body, headers)] = [(d.body, d.properties.headers) for d in rig.heard("b", BasicDeliver)]
    assert (body, headers) == (b"m0", {"x-delivery-count": 1})


def test_4_3_cancels_a_timed_out_consumer_keeps_its_channel_and_does_not_count() -> None:
    rig = timed_out("4.3", "a", "b")
    assert rig.heard("a", ChannelClose) == []
    assert [c.consumer_tag for c in rig.heard("a", BasicCancel)] == ["A"]
    [first] = rig.heard("a", BasicDeliver)
    # The late ack of what was taken back is ignored: no channel error, and b still has it.
    rig.do(Ack(link="a", tag=first.delivery_tag))
    assert rig.heard("a", ChannelClose) == []
    [again] = rig.heard("b", BasicDeliver)
    assert (again.body, again.properties.headers) == (b"m0", {"x-acquired-count": 1})
    assert rig.world.broker.fate.get(1) is None  # not acked: m0 is b's now


def test_4_3_a_queue_whose_every_consumer_timed_out_serves_nobody_until_one_comes_anew() -> None:
    """rabbitmq-server#17317: the consumers stay registered, timed out, and none is made
    active; what comes back waits. A consumer registered anew (as the SDK's resubscribe
    after the cancel does) is served."""
    rig = timed_out("4.3", "a", "b")
    rig.run(1.5)  # b times out too
    queue = rig.world.broker.queues["q"]
    assert [c.consumer_tag for c in rig.heard("b", BasicCancel)] == ["B"]
    assert (queue.ready(), queue.unacked(), queue.consumers.active()) == (2, 0, None)
    assert len(list(queue.consumers)) == 2
    rig.run(5.0)
    assert queue.ready() == 2
    rig.do(Consume(link="b", queue="q", tag="B2"), settle=0.5)
    assert [(d.consumer_tag, d.body) for d in rig.heard("b", BasicDeliver)] == [
        ("B", b"m0"), ("B2", b"m0")]
    assert queue.ready() == 1


def test_a_timed_out_consumer_leaves_with_its_channel() -> None:
    rig = timed_out("4.3", "a", "b")
    rig.do(CloseChannel(link="a"))
    queue = rig.world.broker.queues["q"]
    assert [c.key[2] for c in queue.consumers] == ["B"]


# ------------------------------------------------------------------ the SDK's engines


def lethal_run(broker: BrokerModel, seed: int = 4) -> tuple[Any, World]:
    watched = Watched(EnginesWorkload(broker=broker, lethal=True))
    outcome = run_one(seed, watched, ())  # type: ignore[arg-type]
    assert watched.world is not None
    return outcome, watched.world


@pytest.mark.parametrize("name", list(MODELS))
def test_a_message_that_kills_every_consumer_is_parked_by_the_delivery_limit(
        name: str) -> None:
    """The SDK remembers nothing across its process's death: the broker's count of a lost
    channel's returns is what ends the loop, on every version modelled (4.3 counts a client
    crash as a failed delivery): the message is delivered limit + 1 = 4 times, then
    dead-lettered into the parking queue, and every invariant holds."""
    outcome, world = lethal_run(MODELS[name])
    assert outcome.violations == ()
    lethal = world.clients["c1"].effect.lethal  # type: ignore[attr-defined]
    uids = {u for u, m in world.broker.committed.items() if m.properties.message_id == lethal}
    deliveries = [e for e in world.trace.of("deliver")
                  if e.get("uid") in uids and e.get("queue") == "q"]
    assert len(deliveries) == 4
    assert [e.get("reason") for e in world.trace.of("dead_letter")
            if e.get("uid") in uids] == ["delivery_limit"]


def test_without_that_count_the_lethal_message_loops_and_the_simulator_says_so() -> None:
    outcome, world = lethal_run(attrs.evolve(MODELS["4.3"], lost_channel_counts=False))
    assert any("did not come to rest" in v or "still holds" in v or "raised" in v
               for v in outcome.violations), outcome.violations
    assert len(world.trace.of("dead_letter")) == 0


@pytest.mark.parametrize("name", list(MODELS))
def test_the_engines_keep_every_invariant_under_each_model_with_consumer_timeouts(
        name: str) -> None:
    """A short campaign per model, the queue declared with a 0.5 s consumer timeout (slow
    stores and retries in place outlast it): no violation, and the runs did meet timeouts
    (the channel closed up to 4.2, the consumer cancelled on 4.3)."""
    workload = EnginesWorkload(broker=MODELS[name], consumer_timeout=0.5)
    assert campaign(workload, 0, 40).found is None
    watched = Watched(workload)
    seen: Counter[str] = Counter()
    for seed in range(12):
        run_one(seed, watched)  # type: ignore[arg-type]
        assert watched.world is not None
        trace = watched.world.trace
        seen["timeouts"] += len(trace.of("consumer_timeout"))
        seen["closed"] += sum("timed out" in str(e.get("text"))
                              for e in trace.of("channel_error"))
    assert seen["timeouts"] > 0
    assert (seen["closed"] > 0) is (MODELS[name].timeout.value == "close-channel")


def test_the_engines_keep_every_invariant_when_a_favoured_consumer_takes_over() -> None:
    """One consumer subscribes with a higher priority (``ConsumerSettings.priority``): on
    4.0 it takes the queue over each time it (re)subscribes, from an active consumer that
    is told nothing (it just gets no more), and nothing is lost, done twice or fenced
    wrongly; on 3.10 the priority plays no part."""
    taken: dict[str, int] = {}
    for name in ("3.10", "4.0"):
        workload = EnginesWorkload(broker=MODELS[name], priorities=True)
        assert campaign(workload, 0, 30).found is None
        watched = Watched(workload)
        taken[name] = 0
        for seed in range(10):
            run_one(seed, watched)  # type: ignore[arg-type]
            assert watched.world is not None
            taken[name] += sum(1 for e in watched.world.trace.of("active")
                               if e.get("takeover"))
    assert taken["3.10"] == 0
    assert taken["4.0"] > 0
