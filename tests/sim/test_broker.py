"""The simulated broker's rules and faults, without a real broker: what the honesty test
cannot show on a real cluster (faults at exact points, silences, elections, alarms)."""

from __future__ import annotations

from typing import Any

import pytest

from sac.sdk._core.queues import parse_inequivalent
from sac.sim.clock import EventQueue
from sac.sim.confirms import ConfirmChannel
from sac.sim.faults import Alarm, CutOnFrame, Election, KillNode, LeaderMoved, Reset, Silence
from sac.sim.harness import ConnectionLost, ConnectionRefused
from sac.sim.messages import Message
from sac.sim.methods import (
    BasicAck,
    BasicCancel,
    BasicDeliver,
    BasicNack,
    ChannelClose,
    ConnectionBlocked,
    ConnectionUnblocked,
    Properties,
)
from sac.sim.model import MODELS
from sac.sim.queue import DeadLetter, Deliver, QuorumQueue
from sac.sim.script import (
    Ack,
    Cancel,
    Consume,
    Declare,
    Nack,
    Open,
    Publish,
    Qos,
)
from .rig import Rig

QUORUM = {"x-queue-type": "quorum"}
SAC = {**QUORUM, "x-single-active-consumer": True, "x-delivery-limit": 2,
       "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q.dlq",
       "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


def message(uid: int) -> Message:
    return Message(uid=uid, exchange="", routing_key="q", body=f"m{uid}".encode(),
                   properties=Properties(message_id=str(uid)))


def bodies(events: list[Any], kind: str = "deliver") -> list[str]:
    return [e[4] for e in events if e[0] == kind]


# ------------------------------------------------------------------ pure parts


def test_event_queue_runs_in_time_then_scheduling_order() -> None:
    events = EventQueue()
    seen: list[str] = []
    events.at(2.0, lambda: seen.append("b"))
    events.at(1.0, lambda: seen.append("a"))
    events.at(2.0, lambda: seen.append("c"))
    cancelled = events.at(1.5, lambda: seen.append("x"))
    cancelled.cancel()
    events.at(3.0, lambda: seen.append("beat"), background=True)
    assert events.run_until_idle(10.0)
    assert seen == ["a", "b", "c"]
    assert events.now == 2.0


@pytest.mark.parametrize(
    ("published", "commits", "refusals", "frames"),
    [
        # One confirm alone is never "multiple".
        (5, [1], [], [BasicAck(delivery_tag=1)]),
        # Everything below the lowest unconfirmed folds into one multiple ack.
        (5, [1, 2, 3], [], [BasicAck(delivery_tag=3, multiple=True)]),
        # 2 still unconfirmed: 1 folds, 3 goes alone.
        (5, [1, 3], [], [BasicAck(delivery_tag=1, multiple=True), BasicAck(delivery_tag=3)]),
        # Nacks are coalesced even alone (seen on 3.10: nack 4 multiple, nack 5 multiple)...
        (1, [], [1], [BasicNack(delivery_tag=1, multiple=True, requeue=False)]),
        # ... but not past what is still unconfirmed; acks come first.
        (5, [1, 3], [2], [BasicAck(delivery_tag=1, multiple=True), BasicAck(delivery_tag=3),
                          BasicNack(delivery_tag=2, requeue=False)]),
    ],
)
def test_confirms_are_worded_as_rabbitmq_does(
        published: int, commits: list[int], refusals: list[int], frames: list[Any]) -> None:
    channel = ConfirmChannel()
    for _ in range(published):
        channel.published(["q"])
    for seq in commits:
        channel.committed(seq, "q")
    for seq in refusals:
        channel.refused(seq)
    assert channel.flush() == frames


def test_unroutable_publish_is_confirmed_at_once() -> None:
    channel = ConfirmChannel()
    assert channel.published([]) == 1
    assert channel.flush() == [BasicAck(delivery_tag=1)]


@pytest.mark.parametrize(("broker", "limit", "order"), [
    ("3.10", 3, ["m1", "m2", "m3"]),
    ("3.10", None, ["m2", "m3", "m1"]),
    ("4.0", None, ["m1", "m2", "m3"]),  # 4.0's default limit of 20
    ("4.0", -1, ["m2", "m3", "m1"]),  # no limit at all
])
def test_returns_go_first_with_a_delivery_limit_and_last_without(
        broker: str, limit: int | None, order: list[str]) -> None:
    args = {**QUORUM, **({} if limit is None else {"x-delivery-limit": limit})}
    queue = QuorumQueue("q", args, MODELS[broker])
    key = (1, 1, "A")
    queue.consume(key, prefetch=1)
    effects = []
    for uid in (1, 2, 3):
        effects += queue.enqueue(message(uid))
    assert [e.message.body for e in effects if isinstance(e, Deliver)] == [b"m1"]
    queue.cancel(key)  # holds m1; nothing more for it
    redelivered = queue.return_(key, [0])
    assert redelivered == []
    queue.consume((1, 1, "B"), prefetch=0)
    held = queue.consumers.get((1, 1, "B"))
    assert held is not None
    assert [m.body.decode() for m in held.checked_out.values()] == order


def test_the_delivery_limit_counts_returns_and_dead_letters_past_it() -> None:
    queue = QuorumQueue("q", {**QUORUM, "x-delivery-limit": 2})
    key = (1, 1, "A")
    queue.consume(key, prefetch=1)
    deliveries = [e for e in queue.enqueue(message(1)) if isinstance(e, Deliver)]
    counts = []
    for _ in range(3):
        counts.append(deliveries[-1].message.delivery_count)
        effects = queue.return_(key, [deliveries[-1].msg_id])
        deliveries += [e for e in effects if isinstance(e, Deliver)]
    assert counts == [0, 1, 2]
    assert [(e.reason, e.message.delivery_count) for e in effects
            if isinstance(e, DeadLetter)] == [("delivery_limit", 3)]


def test_sac_cancel_activates_the_next_while_the_old_one_holds_its_messages() -> None:
    queue = QuorumQueue("q", {**QUORUM, "x-single-active-consumer": True})
    a, b = (1, 1, "A"), (2, 1, "B")
    queue.consume(a, prefetch=2)
    queue.consume(b, prefetch=10)
    for uid in (1, 2, 3):
        queue.enqueue(message(uid))
    got = queue.cancel(a)
    assert [(e.consumer, e.message.uid) for e in got if isinstance(e, Deliver)] == [(b, 3)]
    back = queue.channel_down(1, 1)
    assert [(e.message.uid, e.message.delivery_count) for e in back
            if isinstance(e, Deliver)] == [(1, 1), (2, 1)]


def test_a_mismatched_declare_is_worded_so_the_sdk_reads_it() -> None:
    rig = Rig()
    rig.do(Open(link="p"), Declare(link="p", queue="q", arguments=SAC))
    seen = rig.do(Declare(link="p", queue="q", arguments={**SAC, "x-delivery-limit": 5}))
    assert seen == [("channel_closed", "p", 406)]
    [close] = rig.heard("p", ChannelClose)
    parsed = parse_inequivalent(close.reply_text)
    assert parsed is not None
    assert (parsed.argument, parsed.received, parsed.current) == ("x-delivery-limit", "5", "2")


# ------------------------------------------------------------------ faults at points


def published_world(seed: int, *faults: Any) -> Rig:
    rig = Rig(seed)
    rig.do(Open(link="p", confirm=True), Declare(link="p", queue="q", arguments=SAC))
    rig.world.schedule(faults)
    rig.do(*(Publish(link="p", queue="q", body=f"m{i}", message_id=str(i)) for i in range(3)))
    return rig


def test_a_publish_lost_before_the_broker_took_it_never_exists() -> None:
    rig = published_world(
        1, CutOnFrame(at=0.0, link="p", method="BasicPublish", to="broker", nth=2))
    assert [e.get("id") for e in rig.world.trace.of("publish")] == ["0"]
    assert [e.reason for e in rig.lost("p") if isinstance(e, ConnectionLost)] == [
        "cut before BasicPublish reached the broker"]
    assert len(rig.world.broker.committed) == 1


def test_a_publish_taken_before_the_loss_is_committed_or_lost_never_confirmed() -> None:
    fates = set()
    for seed in range(12):
        rig = published_world(
            seed, CutOnFrame(at=0.0, link="p", method="BasicPublish", to="broker", nth=2,
                             delivered=True))
        taken = [e.get("uid") for e in rig.world.trace.of("publish")]
        assert taken == [1, 2]
        acked = {a.delivery_tag for a in rig.heard("p", BasicAck)}
        assert 2 not in acked
        fates.add(2 in rig.world.broker.committed)
        # What was committed stays, confirmed or not; what was not is gone for good.
        assert set(rig.world.broker.committed) <= {1, 2}
        for uid in {1, 2} - set(rig.world.broker.committed):
            assert rig.world.broker.fate[uid].startswith("lost unconfirmed")
    assert fates == {True, False}


def test_a_confirm_lost_on_the_way_leaves_the_message_durable() -> None:
    rig = published_world(1, CutOnFrame(at=0.0, link="p", method="BasicAck", to="client"))
    assert rig.heard("p", BasicAck) == []
    assert len(rig.world.broker.committed) >= 1
    assert any(isinstance(e, ConnectionLost) for e in rig.lost("p"))


def consumers(rig: Rig, heartbeat: float = 0.0) -> None:
    rig.do(Open(link="a", node=1, heartbeat=heartbeat), Open(link="b", node=2, heartbeat=heartbeat))
    rig.do(Qos(link="a", prefetch=10), Consume(link="a", queue="q", tag="A"))
    rig.do(Qos(link="b", prefetch=10), Consume(link="b", queue="q", tag="B"))


def test_a_silent_consumer_is_dropped_after_its_heartbeats_and_the_next_takes_over() -> None:
    rig = published_world(3)
    consumers(rig, heartbeat=1.0)
    assert len(rig.heard("a", BasicDeliver)) == 3
    start = rig.now
    rig.world.apply(Silence(at=start, link="a", duration=10.0))
    seen = rig.run(4.0)
    # The broker gave up within 2-3 heartbeats; B has everything, counted once.
    [timeout] = rig.world.trace.of("heartbeat_timeout")
    assert 2.0 <= timeout.t - start <= 3.0
    assert [(e[4], e[5], e[6]) for e in seen if e[1] == "b"] == [
        ("m0", True, 1), ("m1", True, 1), ("m2", True, 1)]
    assert rig.lost("a") == []  # A hears nothing while silent
    rig.run(7.0)
    assert [type(e) for e in rig.lost("a")] == [ConnectionLost]


def test_a_short_silence_delays_frames_and_loses_nothing() -> None:
    rig = published_world(3)
    consumers(rig, heartbeat=1.0)
    rig.world.apply(Silence(at=rig.now, link="a", duration=1.5))
    rig.do(Ack(link="a", tag=3, multiple=True), settle=0.5)
    assert rig.world.trace.of("settle") == []
    rig.run(2.0)
    assert [e.get("uids") for e in rig.world.trace.of("settle")] == [(1, 2, 3)]
    assert rig.lost("a") == []


def test_publishes_during_an_election_are_nacked_then_accepted_again() -> None:
    rig = Rig(5)
    rig.do(Open(link="p", confirm=True), Declare(link="p", queue="q", arguments=SAC))
    rig.world.apply(Election(at=rig.now, queue="q", duration=0.3))
    during = rig.do(Publish(link="p", queue="q", body="a"), Publish(link="p", queue="q", body="b"),
                    settle=0.1)
    assert [e[3] for e in during] == ["nack", "nack"]
    rig.run(0.3)
    after = rig.do(Publish(link="p", queue="q", body="c"))
    assert after == [("confirm", "p", 3, "ack")]


def test_an_alarm_blocks_a_connection_at_its_first_publish_until_it_clears() -> None:
    rig = Rig(2)
    rig.do(Open(link="p", confirm=True), Open(link="q2", confirm=True),
           Declare(link="p", queue="q", arguments=SAC))
    rig.do(Publish(link="p", queue="q", body="before"))
    rig.world.schedule([Alarm(at=rig.now, duration=1.0)])
    rig.run(0.01)
    # Publishing before the alarm does not matter: nobody is blocked yet.
    assert rig.heard("p", ConnectionBlocked) == []
    # The publish that blocks q2 waits, and so does what follows it.
    assert rig.do(Publish(link="q2", queue="q", body="first"), settle=0.5) == [("blocked", "q2")]
    assert rig.do(Publish(link="q2", queue="q", body="held"), settle=0.5) == []
    rig.run(1.0)
    assert len(rig.heard("q2", ConnectionUnblocked)) == 1
    assert rig.heard("p", ConnectionUnblocked) == []
    assert [(e.delivery_tag) for e in rig.heard("q2", BasicAck)] in ([1, 2], [2])


def test_a_killed_node_resets_its_connections_and_refuses_new_ones() -> None:
    rig = published_world(4)
    consumers(rig)
    rig.world.apply(KillNode(at=rig.now, node=1, duration=1.0))
    seen = rig.run(0.5)
    assert [type(e) for e in rig.lost("a")] == [ConnectionLost]
    assert [e[4] for e in seen if e[0] == "deliver"] == ["m0", "m1", "m2"]
    rig.do(Open(link="a2", node=1))
    assert [type(e) for e in rig.lost("a2")] == [ConnectionRefused]


def test_a_leader_move_cancels_consumers_and_gives_their_messages_back() -> None:
    rig = published_world(6)
    consumers(rig)
    rig.world.apply(LeaderMoved(at=rig.now, queue="q"))
    seen = rig.run(0.5)
    assert [m.consumer_tag for m in rig.heard("a", BasicCancel)] == ["A"]
    assert [m.consumer_tag for m in rig.heard("b", BasicCancel)] == ["B"]
    assert seen == [("cancel", "a", "A"), ("cancel", "b", "B")]
    # Acking what the broker took back changes nothing: the messages wait, counted.
    rig.do(Ack(link="a", tag=3, multiple=True))
    queue = rig.world.broker.queues["q"]
    assert [(m.body, m.delivery_count) for m in queue.returns] == [
        (b"m0", 1), (b"m1", 1), (b"m2", 1)]


def test_an_unknown_delivery_tag_closes_the_channel() -> None:
    rig = published_world(7)
    consumers(rig)
    seen = rig.do(Nack(link="a", tag=9))
    assert seen[0] == ("channel_closed", "a", 406)
    # The channel's messages went to B.
    assert bodies(seen) == ["m0", "m1", "m2"]


def test_a_reset_returns_what_was_unacked() -> None:
    rig = published_world(8)
    consumers(rig)
    rig.world.apply(Reset(at=rig.now, link="a"))
    seen = rig.run(0.5)
    assert [(e[4], e[6]) for e in seen if e[0] == "deliver"] == [
        ("m0", 1), ("m1", 1), ("m2", 1)]
    rig.do(Cancel(link="b", tag="B"))
    assert rig.world.broker.queues["q"].unacked() == 3
