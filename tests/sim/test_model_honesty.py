"""The model must be honest: each case, written once as a script of client steps, is run
against the simulator following RabbitMQ 3.10 (``sim.model``) and against the real 3-node
RabbitMQ 3.10 cluster (``cluster`` on 3.10, by the marker below), and what the
clients hear must be the same (normalised as ``sim.script`` says: confirms per tag,
events per link and kind).

And each case must be able to fail: ``test_each_case_catches_a_wrong_model`` breaks the
model in the way the case is about and checks that the case's observation changes, which
the real broker (equal to the right model) would then not match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

import sac.sim.broker
from sac.server import LocalCluster
from sac.sim.confirms import ConfirmChannel
from sac.sim.methods import BasicPublish, BasicReturn, ChannelClose, ConnectionBlocked
from sac.sim.model import MODELS
from sac.sim.queue import Cancelled, Effect, QueueArgs, QuorumQueue
from sac.sim.sac import Consumer, Consumers, Status
from sac.sim.script import (
    Ack,
    Cancel,
    Case,
    CloseChannel,
    CloseConnection,
    Consume,
    Declare,
    Delete,
    Nack,
    Open,
    Publish,
    Qos,
    Reject,
    SetAlarm,
    run_case,
)
from .real_driver import heard_on

pytestmark = pytest.mark.rabbitmq("3.10")  # the simulator models 3.10.8

QQ = {"x-queue-type": "quorum"}


def queue_args(limit: int | None = 2, *, dead_letters: bool = True,
               **extra: Any) -> dict[str, Any]:
    """A quorum queue with a single active consumer, as the SDK declares it."""
    args: dict[str, Any] = {**QQ, "x-single-active-consumer": True}
    if limit is not None:
        args["x-delivery-limit"] = limit
    if dead_letters:
        args.update({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q.dlq",
                     "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
    return {**args, **extra}


def setup(args: dict[str, Any] | None = None) -> tuple[tuple[Any, ...], ...]:
    return ((Open(link="p", node=0, confirm=True),),
            (Declare(link="p", queue="q.dlq", arguments=QQ),
             Declare(link="p", queue="q", arguments=args or queue_args())))


def publish(*bodies: str) -> tuple[Any, ...]:
    return tuple(Publish(link="p", queue="q", body=b, message_id=f"id-{b}") for b in bodies)


def consumers(*links: str, prefetch: int = 10) -> tuple[tuple[Any, ...], ...]:
    """Each link opened on its own node, then consuming as ``link.upper()``, in order."""
    opened = tuple(Open(link=link, node=i % 3) for i, link in enumerate(links, start=1))
    return (opened, *((Qos(link=link, prefetch=prefetch),
                       Consume(link=link, queue="q", tag=link.upper())) for link in links))


CASES = [
    Case(name="confirms", steps=(
        *setup(),
        publish("m0", "m1", "m2", "m3", "m4"),
        (Declare(link="p", queue="q", passive=True),),
    )),
    Case(name="mandatory_return", steps=(
        *setup(),
        (Publish(link="p", queue="nowhere", body="x"),
         Publish(link="p", queue="nowhere", body="y", mandatory=False),
         Publish(link="p", queue="q", body="z")),
    )),
    Case(name="closed_channel_hands_over_counted", steps=(
        *setup(),
        publish("m0", "m1", "m2", "m3"),
        *consumers("a", "b"),
        (Ack(link="a", tag=2),),
        (CloseChannel(link="a"),),
        (Declare(link="p", queue="q", passive=True),),
        (Nack(link="b", tag=3, multiple=True),),
    )),
    Case(name="cancel_hands_over_at_once", steps=(
        *setup(),
        publish("m0", "m1", "m2", "m3"),
        (Open(link="a", node=1), Open(link="b", node=2)),
        (Qos(link="a", prefetch=2), Consume(link="a", queue="q", tag="A")),
        (Qos(link="b", prefetch=10), Consume(link="b", queue="q", tag="B")),
        (Ack(link="a", tag=1),),
        (Cancel(link="a", tag="A"),),
        (Declare(link="p", queue="q", passive=True),),
        (Ack(link="a", tag=2),),
        (CloseChannel(link="a"),),
    )),
    Case(name="cancelled_consumer_nacks_to_the_next", steps=(
        *setup(),
        publish("m0", "m1"),
        *consumers("a", "b"),
        (Cancel(link="a", tag="A"),),
        (Nack(link="a", tag=1),),
        (Ack(link="a", tag=2),),
    )),
    Case(name="delivery_limit_dead_letters", steps=(
        *setup(),
        publish("m0", "m1"),
        (Open(link="a", node=1), Open(link="d", node=2)),
        (Consume(link="d", queue="q.dlq", tag="D"), Qos(link="a", prefetch=1),
         Consume(link="a", queue="q", tag="A")),
        (Nack(link="a", tag=1),),
        (Nack(link="a", tag=2),),
        (Nack(link="a", tag=3),),
        (Reject(link="a", tag=4, requeue=False),),
    )),
    Case(name="requeue_goes_first_with_a_limit", steps=(
        *setup(),
        publish("m0", "m1", "m2", "m3"),
        *consumers("a", prefetch=3),
        (Nack(link="a", tag=3),),
        (Nack(link="a", tag=1),),
    )),
    Case(name="requeue_goes_last_without_a_limit", steps=(
        *setup(queue_args(None, dead_letters=False)),
        publish("m0", "m1", "m2", "m3"),
        *consumers("a", prefetch=3),
        (Nack(link="a", tag=3),),
        (Nack(link="a", tag=1),),
    )),
    Case(name="prefetch_is_respected", steps=(
        *setup(),
        publish("m0", "m1", "m2", "m3", "m4"),
        *consumers("a", prefetch=2),
        (Ack(link="a", tag=1),),
        (Ack(link="a", tag=3, multiple=True),),
    )),
    Case(name="closed_channel_hands_over_before_the_backlog", steps=(
        *setup(),
        publish("m0", "m1", "m2"),
        (Open(link="a", node=1), Open(link="b", node=2)),
        (Qos(link="a", prefetch=1), Consume(link="a", queue="q", tag="A")),
        (Qos(link="b", prefetch=10), Consume(link="b", queue="q", tag="B")),
        (CloseChannel(link="a"),),
    )),
    Case(name="closed_connection_hands_over_before_the_backlog", steps=(
        *setup(),
        publish("m0", "m1", "m2", "m3"),
        (Open(link="a", node=1), Open(link="b", node=2)),
        (Qos(link="a", prefetch=2), Consume(link="a", queue="q", tag="A")),
        (Qos(link="b", prefetch=10), Consume(link="b", queue="q", tag="B")),
        (CloseConnection(link="a"),),
    )),
    Case(name="waiting_line_keeps_its_order", steps=(
        *setup(),
        publish("m0", "m1"),
        *consumers("a", "b", "c", "d"),
        (Cancel(link="b", tag="B"),),
        (CloseChannel(link="a"),),
        (Declare(link="p", queue="q", passive=True),),
    )),
    Case(name="queue_deleted_cancels_everyone", steps=(
        *setup(),
        publish("m0"),
        *consumers("a", "b", prefetch=1),
        (Delete(link="p", queue="q"),),
        (Ack(link="a", tag=1),),
    )),
    Case(name="reject_publish_nacks_when_full", steps=(
        *setup(queue_args(**{"x-max-length": 2})),
        publish("m0", "m1", "m2"),
        publish("m3", "m4"),
        *consumers("a"),
        (Ack(link="a", tag=3, multiple=True),),
        publish("m5", "m6"),
    )),
    Case(name="alarm_blocks_who_publishes", steps=(
        *setup(),
        (Open(link="q2", node=1, confirm=True), Open(link="c", node=2)),
        publish("m0"),
        (SetAlarm(on=True),),
        (Publish(link="q2", queue="q", body="m1"),),
        (Consume(link="c", queue="q", tag="C"),),
        (SetAlarm(on=False),),
    )),
    Case(name="channel_errors", steps=(
        *setup(),
        (Open(link="x"), Open(link="y", node=1), Open(link="z", node=2)),
        (Declare(link="x", queue="nowhere", passive=True),),
        (Declare(link="y", queue="q", arguments=queue_args(5)),),
        (Consume(link="z", queue="nowhere", tag="Z"),),
    )),
]


# ------------------------------------------------------------------ against RabbitMQ


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_model_hears_what_rabbitmq_says(
        case: Case, cluster: LocalCluster, request: pytest.FixtureRequest) -> None:
    expected = run_case(case, broker=MODELS["3.10"]).normalised()
    assert heard_on(cluster, case, expected, request.node.nodeid[-100:]) == expected


# ------------------------------------------------------------------ every case can fail


def _wrap(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str,
          around: Callable[..., Any]) -> None:
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **k: around(original, *a, **k))


def _drop_frames(kind: type) -> Callable[[pytest.MonkeyPatch], None]:
    def mutate(monkeypatch: pytest.MonkeyPatch) -> None:
        _wrap(monkeypatch, sac.sim.broker.Broker, "_send",
              lambda send, self, conn, channel, method: (
                  None if isinstance(method, kind) else send(self, conn, channel, method)))
    return mutate


def _uncounted_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    def return_all(_orig: Any, self: QuorumQueue, consumer: Consumer,
                   **_how: Any) -> list[Effect]:
        for msg_id in sorted(consumer.checked_out):
            self.returns.append(consumer.checked_out.pop(msg_id))
        return []
    _wrap(monkeypatch, QuorumQueue, "_return_all", return_all)


def _next_served_before_the_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A close that cancels first (as pika's own close does): the next consumer is made
    active and served from the backlog before the closed one's messages are back."""
    def channel_down(orig: Any, self: QuorumQueue, connection: int,
                     channel: int) -> list[Effect]:
        gone = [c for c in self.consumers if c.key[:2] == (connection, channel)]
        held = {c.key: dict(c.checked_out) for c in gone}
        for consumer in gone:
            consumer.checked_out.clear()
        effects: list[Effect] = orig(self, connection, channel)
        for consumer in gone:
            consumer.checked_out.update(held[consumer.key])
            effects += self._return_all(consumer, failed=True)
        return effects + self._checkout()
    _wrap(monkeypatch, QuorumQueue, "channel_down", channel_down)


def _cancel_keeps_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def cancel(_orig: Any, self: Consumers, key: Any) -> None:
        consumer = self.attached.get(key)
        if consumer is not None:
            consumer.status = Status.CANCELLED
        return None
    _wrap(monkeypatch, Consumers, "cancel", cancel)


def _cancelled_cannot_return(monkeypatch: pytest.MonkeyPatch) -> None:
    def return_(orig: Any, self: QuorumQueue, key: Any, ids: Any, **how: Any) -> list[Effect]:
        held = self.consumers.get(key)
        if held is not None and held.status is Status.CANCELLED:
            return []
        result: list[Effect] = orig(self, key, ids, **how)
        return result
    _wrap(monkeypatch, QuorumQueue, "return_", return_)


def _limit_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def from_arguments(orig: Any, arguments: Any, *broker: Any) -> QueueArgs:
        args: QueueArgs = orig(arguments, *broker)
        if args.delivery_limit is None:
            return args
        return attrs.evolve(args, delivery_limit=args.delivery_limit - 1)
    _wrap(monkeypatch, QueueArgs, "from_arguments", from_arguments)


def _requeue_to(first: bool) -> Callable[[pytest.MonkeyPatch], None]:
    def mutate(monkeypatch: pytest.MonkeyPatch) -> None:
        _wrap(monkeypatch, QuorumQueue, "_return_one",
              lambda orig, self, consumer, msg_id, to_returns, failed: orig(
                  self, consumer, msg_id, to_returns=first, failed=failed))
    return mutate


def _no_prefetch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Consumer, "has_credit", lambda self: self.status is Status.UP)


def _delete_spares_the_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    def delete(orig: Any, self: QuorumQueue) -> tuple[list[Effect], int]:
        waiting = {c.key for c in self.consumers.waiting}
        effects, dropped = orig(self)
        return [e for e in effects
                if not (isinstance(e, Cancelled) and e.consumer in waiting)], dropped
    _wrap(monkeypatch, QuorumQueue, "delete", delete)


def _last_in_line_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Consumers, "activate_next", lambda self: (
        self.attached.setdefault(self.waiting[-1].key, self.waiting.pop())
        if self.single_active and self.active() is None and self.waiting else None))


def _never_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(QuorumQueue, "_evaluate_limit", lambda self: [])


def _blocked_publish_goes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """Block only after taking the publish that triggered it."""
    def receive(orig: Any, self: sac.sim.broker.Broker, conn_id: int, channel: int,
                method: Any) -> None:
        conn = self.connections.get(conn_id)
        alarm = self.alarm
        if conn is not None and not conn.blocked and isinstance(method, BasicPublish):
            self.alarm = False
            orig(self, conn_id, channel, method)
            self.alarm = alarm
            if alarm:
                conn.blocked = True
                self._send(conn, 0, ConnectionBlocked())
            return
        orig(self, conn_id, channel, method)
    _wrap(monkeypatch, sac.sim.broker.Broker, "receive", receive)


MUTANTS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "confirms": lambda mp: mp.setattr(ConfirmChannel, "committed", lambda self, s, q: None),
    "mandatory_return": _drop_frames(BasicReturn),
    "closed_channel_hands_over_counted": _uncounted_returns,
    "cancel_hands_over_at_once": _cancel_keeps_the_line,
    "closed_channel_hands_over_before_the_backlog": _next_served_before_the_returns,
    "closed_connection_hands_over_before_the_backlog": _next_served_before_the_returns,
    "cancelled_consumer_nacks_to_the_next": _cancelled_cannot_return,
    "delivery_limit_dead_letters": _limit_off_by_one,
    "requeue_goes_first_with_a_limit": _requeue_to(first=False),
    "requeue_goes_last_without_a_limit": _requeue_to(first=True),
    "prefetch_is_respected": _no_prefetch,
    "waiting_line_keeps_its_order": _last_in_line_first,
    "queue_deleted_cancels_everyone": _delete_spares_the_waiting,
    "reject_publish_nacks_when_full": _never_full,
    "alarm_blocks_who_publishes": _blocked_publish_goes_through,
    "channel_errors": _drop_frames(ChannelClose),
}


def test_every_case_has_a_mutant() -> None:
    assert sorted(MUTANTS) == sorted(c.name for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_case_catches_a_wrong_model(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    right = run_case(case, broker=MODELS["3.10"]).normalised()
    MUTANTS[case.name](monkeypatch)
    wrong = run_case(case, broker=MODELS["3.10"]).normalised()
    assert wrong != right
