"""The simulated broker: a few nodes, quorum queues, connections and channels, speaking AMQP
0-9-1 methods, in virtual time.

The rules live in small modules (``queue``: what a quorum queue does with each command;
``sac``: who is served; ``confirms``: how confirms are worded; ``connections``: tags,
prefetch, blocking). This module is the glue that gives them time, the way RabbitMQ's
processes do:

- every command for a queue (a publish, a consume, an ack, a channel gone) goes into that
  queue's log and is *committed* after a short, random raft latency, all pending commands at
  once and in order; only then does it take effect (so confirms of one batch coalesce, and
  the ``consume-ok`` comes before the first delivery);
- a message is durable once committed: no fault loses it afterwards. A publish the broker
  took but had not committed when its connection or the queue's leader died may be lost
  (drawn at random): it was never confirmed;
- while a queue has no leader (an election, or fewer than a majority of nodes up) its
  publishes are refused with ``basic.nack`` and everything else waits.

Every decision is recorded in the trace; ``committed`` and ``fate`` let invariants say what
became of each message.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import attrs

from . import methods as m
from .clock import EventQueue, Timer
from .confirms import ConfirmChannel
from .connections import BrokerChannel, BrokerConnection, Unacked, UnknownDeliveryTag
from .messages import Message
from .model import BrokerModel, Timeout, model
from .queue import (
    Activated,
    Cancelled,
    DeadLetter,
    Deliver,
    Effect,
    PublishStatus,
    QuorumQueue,
    UnsupportedQueue,
    inequivalent,
)
from .sac import ConsumerKey, Status
from .trace import Trace

NOT_IMPLEMENTED = 540
NOT_ALLOWED = 530
TIMED_OUT = "delivery acknowledgement"
"""How the channel-closing consumer timeout's text begins (after the code's name)."""

Send = Callable[[int, int, Any], None]
"""(connection id, channel, method): a frame from the broker to a client."""
Closed = Callable[[int, str], None]
"""(connection id, why): the broker closed the connection's socket."""


@attrs.frozen(kw_only=True)
class Timing:
    commit: tuple[float, float] = (0.0005, 0.003)
    """Raft latency of a queue command (seconds)."""
    election: tuple[float, float] = (0.25, 0.45)
    """How long a queue has no leader after its leader's node died; RabbitMQ 3.10 nacked
    publishes for 0.25-0.41 s after a SIGKILL in our measurements."""
    loss_if_uncommitted: float = 0.5
    """Chance that a publish taken but not committed is lost when its connection or the
    queue's leader dies."""


DEFAULT_TIMING = Timing()


@attrs.define(eq=False, kw_only=True)
class _Command:
    apply: Callable[[QuorumQueue], list[Effect]]
    conn: int | None = None
    channel: BrokerChannel | None = None
    seq: int | None = None
    message: Message | None = None
    """Set for an enqueue."""
    first: Callable[[], None] | None = None
    """Runs when committed, before the effects (a ``consume-ok``)."""


def _enqueue(message: Message) -> Callable[[QuorumQueue], list[Effect]]:
    return lambda queue: queue.enqueue(message)


def _down(connection: int, channel: int) -> Callable[[QuorumQueue], list[Effect]]:
    return lambda queue: queue.channel_down(connection, channel)


@attrs.define(eq=False, kw_only=True)
class _Log:
    pending: list[_Command] = attrs.field(factory=list)
    timer: Timer | None = None


class Broker:
    def __init__(self, events: EventQueue, rng: random.Random, trace: Trace, *,
                 send: Send, closed: Closed, nodes: int = 3,
                 timing: Timing = DEFAULT_TIMING, broker: BrokerModel | None = None) -> None:
        self.model = broker or model()
        """The RabbitMQ whose rules the queues follow (``sim.model``)."""
        self.events = events
        self.rng = rng
        self.trace = trace
        self.timing = timing
        self._send_frame = send
        self._closed = closed
        self.nodes_up = [True] * nodes
        self.queues: dict[str, QuorumQueue] = {}
        self.leaders: dict[str, int] = {}
        self.electing_until: dict[str, float] = {}
        self.logs: dict[str, _Log] = {}
        self.connections: dict[int, BrokerConnection] = {}
        self.alarm = False
        self.dlx_pending: dict[str, list[Message]] = {}
        self.committed: dict[int, Message] = {}
        """uid -> the message as first committed: every message the broker made durable."""
        self.fate: dict[int, str] = {}
        """uid -> how it left the broker (acked, dead-lettered and dropped, deleted, ...)."""
        self._ids = itertools.count(1)
        self._uids = itertools.count(1)
        self._ctags = itertools.count(1)

    # ------------------------------------------------------------------ connections

    def connect(self, node: int, name: str) -> int | None:
        """A client's TCP connection and handshake reached ``node``; its id, or None when
        the node is down."""
        if not self.nodes_up[node]:
            return None
        conn = BrokerConnection(id=next(self._ids), node=node, name=name)
        self.connections[conn.id] = conn
        self.trace.record("connected", conn=name, node=node)
        return conn.id

    def disconnect(self, conn_id: int, why: str) -> None:
        """The connection's socket is gone (the client closed or reset it, the broker gave
        up on its heartbeats, its node died)."""
        conn = self.connections.pop(conn_id, None)
        if conn is None:
            return
        conn.open = False
        self.trace.record("disconnected", conn=conn.name, why=why)
        for channel in list(conn.channels.values()):
            self._channel_down(conn, channel)
        for queue, log in self.logs.items():
            for cmd in list(log.pending):
                if cmd.message is not None and cmd.conn == conn_id:
                    self._maybe_lose(queue, log, cmd, why="connection closed before commit")

    def receive(self, conn_id: int, channel: int, method: Any) -> None:
        """One frame from a client."""
        conn = self.connections.get(conn_id)
        if conn is None or not conn.open:
            return
        if not conn.blocked and self.alarm and isinstance(method, m.BasicPublish):
            conn.blocked = True
            self._send(conn, 0, m.ConnectionBlocked())
            self.trace.record("blocked", conn=conn.name)
        if conn.blocked:
            conn.held.append((channel, method))
            return
        self._dispatch(conn, channel, method)

    def _dispatch(self, conn: BrokerConnection, number: int, method: Any) -> None:
        if number == 0:
            if isinstance(method, m.ConnectionClose):
                self._send(conn, 0, m.ConnectionCloseOk())
                self.disconnect(conn.id, "closed by client")
                self._closed(conn.id, "closed by client")
            return
        channel = conn.channels.get(number)
        if isinstance(method, m.ChannelOpen):
            if channel is not None:
                self._connection_error(conn, m.CHANNEL_ERROR,
                                       "CHANNEL_ERROR - second 'channel.open' seen")
                return
            conn.channels[number] = BrokerChannel(number=number)
            self._send(conn, number, m.ChannelOpenOk())
            return
        if channel is None:
            self._connection_error(conn, m.CHANNEL_ERROR,
                                   "CHANNEL_ERROR - expected 'channel.open'")
            return
        if channel.closing:
            if isinstance(method, m.ChannelCloseOk | m.ChannelClose):
                del conn.channels[number]
            return
        self._on_channel(conn, channel, method)
        if conn.open and conn.channels.get(number) is channel:
            self._flush(conn, channel)

    def _on_channel(self, conn: BrokerConnection, ch: BrokerChannel, method: Any) -> None:
        if isinstance(method, m.BasicPublish):
            self._publish(conn, ch, method)
        elif isinstance(method, m.BasicAck):
            self._settle(conn, ch, method.delivery_tag, method.multiple, "ack")
        elif isinstance(method, m.BasicNack):
            self._settle(conn, ch, method.delivery_tag, method.multiple,
                         "return" if method.requeue else "discard")
        elif isinstance(method, m.BasicReject):
            self._settle(conn, ch, method.delivery_tag, False,
                         "requeue" if method.requeue else "discard")
        elif isinstance(method, m.BasicConsume):
            self._consume(conn, ch, method)
        elif isinstance(method, m.BasicCancel):
            self._cancel(conn, ch, method.consumer_tag)
        elif isinstance(method, m.BasicQos):
            ch.prefetch = method.prefetch_count
            self._send(conn, ch.number, m.BasicQosOk())
        elif isinstance(method, m.ConfirmSelect):
            if ch.confirms is None:
                ch.confirms = ConfirmChannel()
            self._send(conn, ch.number, m.ConfirmSelectOk())
        elif isinstance(method, m.QueueDeclare):
            self._declare(conn, ch, method)
        elif isinstance(method, m.QueueDelete):
            count = self.delete_queue(method.queue, by=conn.name)
            self._send(conn, ch.number, m.QueueDeleteOk(message_count=count))
        elif isinstance(method, m.ChannelClose):
            self._channel_down(conn, ch)
            del conn.channels[ch.number]
            self._send(conn, ch.number, m.ChannelCloseOk())
        else:
            self._connection_error(conn, NOT_IMPLEMENTED,
                                   f"NOT_IMPLEMENTED - {type(method).__name__} is not modelled")

    # ------------------------------------------------------------------ errors

    def _channel_error(self, conn: BrokerConnection, ch: BrokerChannel, code: int,
                       text: str) -> None:
        self.trace.record("channel_error", conn=conn.name, channel=ch.number, code=code,
                          text=text)
        self._channel_down(conn, ch)
        ch.closing = True
        ch.confirms = None
        self._send(conn, ch.number, m.ChannelClose(reply_code=code, reply_text=text))

    def _connection_error(self, conn: BrokerConnection, code: int, text: str) -> None:
        self.trace.record("connection_error", conn=conn.name, code=code, text=text)
        self._send(conn, 0, m.ConnectionClose(reply_code=code, reply_text=text))
        self.disconnect(conn.id, text)
        self._closed(conn.id, text)

    def _channel_down(self, conn: BrokerConnection, ch: BrokerChannel) -> None:
        """Its consumers leave their queues, which take back what it held unacked."""
        for queue in ch.consumed:
            if queue in self.queues:
                self._submit(queue, _Command(apply=_down(conn.id, ch.number)))
        ch.consumed.clear()
        ch.consumers.clear()
        ch.unacked.clear()

    # ------------------------------------------------------------------ queues

    def _declare(self, conn: BrokerConnection, ch: BrokerChannel, method: m.QueueDeclare) -> None:
        queue = self.queues.get(method.queue)
        if queue is None and method.passive:
            self._channel_error(conn, ch, m.NOT_FOUND,
                                f"NOT_FOUND - no queue '{method.queue}' in vhost '/'")
            return
        if queue is None:
            try:
                queue = QuorumQueue(method.queue, method.arguments, self.model)
            except UnsupportedQueue as exc:
                self._channel_error(conn, ch, NOT_IMPLEMENTED, f"NOT_IMPLEMENTED - {exc}")
                return
            self.queues[queue.name] = queue
            self.logs[queue.name] = _Log()
            self.leaders[queue.name] = conn.node
            self.electing_until[queue.name] = 0.0
            self.trace.record("queue_declared", queue=queue.name, leader=conn.node)
            for message in self.dlx_pending.pop(queue.name, []):
                self._submit(queue.name, _Command(apply=_enqueue(message), message=message))
        elif not method.passive:
            text = inequivalent(queue.name, queue.arguments, method.arguments)
            if text is not None:
                self._channel_error(conn, ch, m.PRECONDITION_FAILED, text)
                return
        self._send(conn, ch.number,
                   m.QueueDeclareOk(queue=queue.name, message_count=queue.ready(),
                                    consumer_count=queue.consumer_count()))

    def delete_queue(self, name: str, *, by: str = "operator") -> int:
        """Delete a queue: its consumers are cancelled, its messages are gone."""
        queue = self.queues.pop(name, None)
        if queue is None:
            return 0
        log = self.logs.pop(name)
        if log.timer is not None:
            log.timer.cancel()
        for cmd in log.pending:
            if cmd.message is not None:
                self._refuse(cmd, why="queue deleted")
        count = queue.ready()
        for message in queue.holding():
            self.fate[message.uid] = f"deleted from {name} by {by}"
        effects, _ = queue.delete()
        self.trace.record("queue_deleted", queue=name, by=by, messages=count)
        self._effects(queue, effects)
        return count

    def _available(self, queue: str) -> bool:
        up = sum(self.nodes_up)
        return up * 2 > len(self.nodes_up) and self.events.now >= self.electing_until[queue]

    # ------------------------------------------------------------------ publishing

    def _publish(self, conn: BrokerConnection, ch: BrokerChannel, method: m.BasicPublish) -> None:
        if method.exchange != "":
            self._channel_error(conn, ch, m.NOT_FOUND,
                                f"NOT_FOUND - no exchange '{method.exchange}' in vhost '/'")
            return
        queue = self.queues.get(method.routing_key)
        routed = [] if queue is None else [queue.name]
        seq = None if ch.confirms is None else ch.confirms.published(routed)
        uid = next(self._uids)
        self.trace.record("publish", conn=conn.name, channel=ch.number, seq=seq, uid=uid,
                          id=method.properties.message_id, routed=bool(routed))
        if queue is None:
            self.fate[uid] = "unroutable"
            if method.mandatory:
                self._send(conn, ch.number, m.BasicReturn(
                    reply_code=m.NO_ROUTE, reply_text="NO_ROUTE", exchange=method.exchange,
                    routing_key=method.routing_key, body=method.body,
                    properties=method.properties))
        else:
            message = Message(uid=uid, exchange=method.exchange, routing_key=method.routing_key,
                              body=method.body, properties=method.properties)
            cmd = _Command(apply=_enqueue(message), conn=conn.id, channel=ch, seq=seq,
                           message=message)
            if not self._available(queue.name) or queue.rejecting:
                why = "queue full" if queue.rejecting else "no leader"
                self._refuse(cmd, why=why)
            else:
                self._submit(queue.name, cmd)

    def _refuse(self, cmd: _Command, *, why: str) -> None:
        assert cmd.message is not None
        self.fate[cmd.message.uid] = f"refused: {why}"
        self.trace.record("publish_refused", uid=cmd.message.uid, why=why)
        if cmd.channel is not None and cmd.seq is not None and cmd.channel.confirms is not None:
            cmd.channel.confirms.refused(cmd.seq)
            conn = self.connections.get(cmd.conn) if cmd.conn is not None else None
            if conn is not None and conn.channels.get(cmd.channel.number) is cmd.channel:
                self._flush(conn, cmd.channel)

    def _maybe_lose(self, queue: str, log: _Log, cmd: _Command, *, why: str) -> None:
        """A publish taken but not committed when its connection or leader died."""
        assert cmd.message is not None
        if self.rng.random() >= self.timing.loss_if_uncommitted:
            return
        log.pending.remove(cmd)
        self.fate[cmd.message.uid] = f"lost unconfirmed: {why}"
        self.trace.record("publish_lost", uid=cmd.message.uid, queue=queue, why=why)
        if cmd.channel is not None and cmd.channel.confirms is not None and cmd.seq is not None:
            conn = self.connections.get(cmd.conn) if cmd.conn is not None else None
            if conn is not None and conn.open:
                cmd.channel.confirms.refused(cmd.seq)
                self._flush(conn, cmd.channel)

    def _flush(self, conn: BrokerConnection, ch: BrokerChannel) -> None:
        if ch.confirms is None:
            return
        for frame in ch.confirms.flush():
            self._send(conn, ch.number, frame)

    # ------------------------------------------------------------------ consuming

    def _consume(self, conn: BrokerConnection, ch: BrokerChannel, method: m.BasicConsume) -> None:
        if method.queue not in self.queues:
            self._channel_error(conn, ch, m.NOT_FOUND,
                                f"NOT_FOUND - no queue '{method.queue}' in vhost '/'")
            return
        tag = method.consumer_tag or f"amq.ctag-{next(self._ctags)}"
        if tag in ch.consumers:
            self._connection_error(conn, NOT_ALLOWED,
                                   f"NOT_ALLOWED - attempt to reuse consumer tag '{tag}'")
            return
        ch.consumers[tag] = method.queue
        ch.consumed[method.queue] = None
        key = (conn.id, ch.number, tag)
        prefetch = ch.prefetch
        priority = int(method.arguments.get("x-priority", 0))

        def ok() -> None:
            if conn.open and conn.channels.get(ch.number) is ch:
                self._send(conn, ch.number, m.BasicConsumeOk(consumer_tag=tag))

        self._submit(method.queue, _Command(apply=lambda q: q.consume(key, prefetch, priority),
                                            first=ok))

    def _cancel(self, conn: BrokerConnection, ch: BrokerChannel, tag: str) -> None:
        queue = ch.consumers.pop(tag, None)

        def ok() -> None:
            if conn.open and conn.channels.get(ch.number) is ch:
                self._send(conn, ch.number, m.BasicCancelOk(consumer_tag=tag))

        if queue is None or queue not in self.queues:
            ok()
            return
        key = (conn.id, ch.number, tag)
        self._submit(queue, _Command(apply=lambda q: q.cancel(key), first=ok))

    def _settle(self, conn: BrokerConnection, ch: BrokerChannel, tag: int, multiple: bool,
                how: str) -> None:
        try:
            entries = ch.settle(tag, multiple)
        except UnknownDeliveryTag as exc:
            self._channel_error(conn, ch, m.PRECONDITION_FAILED, str(exc))
            return
        self.trace.record("settle", conn=conn.name, how=how, tag=tag, multiple=multiple,
                          uids=tuple(e.uid for e in entries))
        groups: dict[tuple[str, ConsumerKey], list[Unacked]] = {}
        for entry in entries:
            groups.setdefault((entry.queue, entry.consumer), []).append(entry)
        for (queue, consumer), group in groups.items():
            if queue in self.queues:  # else deleted meanwhile: RabbitMQ ignores such acks
                self._submit(queue, _Command(apply=self._settling(how, consumer, group)))

    def _settling(self, how: str, consumer: ConsumerKey,
                  group: list[Unacked]) -> Callable[[QuorumQueue], list[Effect]]:
        ids = [e.msg_id for e in group]
        if how in ("requeue", "return"):
            rejected = how == "requeue"
            return lambda q: q.return_(consumer, ids, rejected=rejected)
        if how == "discard":
            return lambda q: q.discard(consumer, ids)

        def ack(q: QuorumQueue) -> list[Effect]:
            held = q.consumers.get(consumer)
            for e in group:
                if held is not None and e.msg_id in held.checked_out:
                    self.fate[e.uid] = f"acked from {q.name}"
            return q.settle(consumer, ids)

        return ack

    # ------------------------------------------------------------------ the queue logs

    def _submit(self, queue: str, cmd: _Command) -> None:
        self.logs[queue].pending.append(cmd)
        self._schedule_commit(queue)

    def _schedule_commit(self, queue: str) -> None:
        log = self.logs.get(queue)
        if log is None or log.timer is not None or not log.pending:
            return
        if not self._available(queue):
            return
        delay = self.rng.uniform(*self.timing.commit)
        log.timer = self.events.after(delay, lambda: self._commit(queue))

    def _commit(self, name: str) -> None:
        log = self.logs.get(name)
        queue = self.queues.get(name)
        if log is None or queue is None:
            return
        log.timer = None
        if not self._available(name):
            return
        batch, log.pending = log.pending, []
        touched: dict[int, tuple[BrokerConnection, BrokerChannel]] = {}
        for cmd in batch:
            effects = cmd.apply(queue)
            if cmd.message is not None:
                self._committed(queue, cmd, touched)
            if cmd.first is not None:
                cmd.first()
            self._effects(queue, effects)
        for conn, ch in touched.values():
            if conn.open and conn.channels.get(ch.number) is ch:
                self._flush(conn, ch)

    def _committed(self, queue: QuorumQueue, cmd: _Command,
                   touched: dict[int, tuple[BrokerConnection, BrokerChannel]]) -> None:
        assert cmd.message is not None
        uid = cmd.message.uid
        self.committed.setdefault(uid, cmd.message)
        self.trace.record("commit", queue=queue.name, uid=uid)
        ch = cmd.channel
        if ch is None or cmd.seq is None or ch.confirms is None or cmd.conn is None:
            return
        conn = self.connections.get(cmd.conn)
        if conn is None or conn.channels.get(ch.number) is not ch:
            return
        ch.confirms.committed(cmd.seq, queue.name)
        touched[id(ch)] = (conn, ch)

    def _effects(self, queue: QuorumQueue, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Deliver):
                self._deliver(queue, effect)
            elif isinstance(effect, DeadLetter):
                self._dead_letter(queue, effect.message, effect.reason)
            elif isinstance(effect, Cancelled):
                conn_id, number, tag = effect.consumer
                conn = self.connections.get(conn_id)
                ch = None if conn is None else conn.channels.get(number)
                if conn is not None and ch is not None and not ch.closing:
                    ch.consumers.pop(tag, None)
                    self.trace.record("server_cancel", conn=conn.name, tag=tag,
                                      queue=queue.name)
                    self._send(conn, number, m.BasicCancel(consumer_tag=tag))
            elif isinstance(effect, Activated):
                conn = self.connections.get(effect.consumer[0])
                self.trace.record("active", queue=queue.name,
                                  conn=None if conn is None else conn.name,
                                  tag=effect.consumer[2], takeover=effect.takeover)
            elif isinstance(effect, PublishStatus):
                self.trace.record("reject_publish", queue=queue.name, on=effect.rejecting)

    def _deliver(self, queue: QuorumQueue, effect: Deliver) -> None:
        conn_id, number, tag = effect.consumer
        conn = self.connections.get(conn_id)
        ch = None if conn is None else conn.channels.get(number)
        message = effect.message
        if conn is None or ch is None or ch.closing or not conn.open:
            # The channel is gone and its "down" is still in the log: the message stays
            # checked out until that command returns it.
            return
        dtag = ch.delivered(Unacked(queue=queue.name, consumer=effect.consumer,
                                    msg_id=effect.msg_id, uid=message.uid))
        count = message.delivery_count
        redelivered = message.acquired > 0
        headers: dict[str, Any] = {} if count == 0 else {"x-delivery-count": count}
        if self.model.acquired_header and message.acquired > 0:
            headers["x-acquired-count"] = message.acquired
        properties = message.properties.with_headers(headers) if headers else message.properties
        self.trace.record("deliver", queue=queue.name, conn=conn.name, tag=tag, dtag=dtag,
                          uid=message.uid, redelivered=redelivered, count=count)
        self._send(conn, number, m.BasicDeliver(
            consumer_tag=tag, delivery_tag=dtag, redelivered=redelivered,
            exchange=message.exchange, routing_key=message.routing_key, body=message.body,
            properties=properties))
        timeout = queue.args.consumer_timeout
        if timeout is not None:
            self.events.after(timeout, lambda: self._timed_out(queue.name, effect))

    def _timed_out(self, name: str, delivery: Deliver) -> None:
        """A delivery's consumer timeout ran out: if it is still unacked, the consumer
        times out, as its broker does (``sim.model.Timeout``)."""
        queue = self.queues.get(name)
        held = None if queue is None else queue.consumers.get(delivery.consumer)
        if (queue is None or held is None or held.status is not Status.UP
                or delivery.msg_id not in held.checked_out):
            return
        conn_id, number, tag = delivery.consumer
        conn = self.connections.get(conn_id)
        ch = None if conn is None else conn.channels.get(number)
        if conn is None or ch is None or ch.closing:
            return
        assert queue.args.consumer_timeout is not None
        ms = round(queue.args.consumer_timeout * 1000)
        self.trace.record("consumer_timeout", queue=name, conn=conn.name, tag=tag,
                          uid=delivery.message.uid)
        if self.model.timeout is Timeout.CLOSE_CHANNEL:
            self._channel_error(conn, ch, m.PRECONDITION_FAILED,
                                f"PRECONDITION_FAILED - {TIMED_OUT} on channel {number} "
                                f"timed out. Timeout value used: {ms} ms. This timeout value "
                                f"can be configured, see consumers doc guide to learn more")
            return
        ch.reclaim(delivery.consumer)
        key = delivery.consumer
        self._submit(name, _Command(apply=lambda q: q.time_out(key)))

    def _dead_letter(self, source: QuorumQueue, message: Message, reason: str) -> None:
        args = source.args
        if args.dead_letter_exchange is None:
            self.fate[message.uid] = f"dropped from {source.name}: {reason}, no dead-letter target"
            self.trace.record("dropped", uid=message.uid, queue=source.name, reason=reason)
            return
        target = args.dead_letter_routing_key or message.routing_key
        death = {"count": 1, "reason": reason, "queue": source.name,
                 "exchange": message.exchange, "routing-keys": [message.routing_key]}
        counted = reason == "rejected" and self.model.reject_counts_into_dead_letter
        dead = attrs.evolve(
            message, exchange=args.dead_letter_exchange, routing_key=target,
            delivery_count=message.delivery_count if counted else 0,
            acquired=message.acquired if counted else 0,
            properties=message.properties.with_headers({
                "x-death": [death], "x-first-death-reason": reason,
                "x-first-death-queue": source.name,
                "x-first-death-exchange": message.exchange}))
        self.trace.record("dead_letter", uid=message.uid, queue=source.name, reason=reason,
                          target=target)
        if args.dead_letter_exchange == "" and target in self.queues:
            self._submit(target, _Command(apply=_enqueue(dead), message=dead))
        elif args.at_least_once:
            self.dlx_pending.setdefault(target, []).append(dead)
        else:
            self.fate[message.uid] = f"dropped: dead-lettered from {source.name} to nowhere"
            self.trace.record("dropped", uid=message.uid, queue=source.name, reason="no route")

    # ------------------------------------------------------------------ faults

    def kill_node(self, node: int) -> None:
        """The node's process dies: its connections are reset, the queues it led elect a
        new leader; publishes it had not committed may be lost."""
        if not self.nodes_up[node]:
            return
        self.nodes_up[node] = False
        self.trace.record("node_down", node=node)
        for conn in [c for c in self.connections.values() if c.node == node]:
            self.disconnect(conn.id, f"node {node} down")
            self._closed(conn.id, f"node {node} down")
        for name, leader in list(self.leaders.items()):
            if leader == node:
                log = self.logs[name]
                for cmd in list(log.pending):
                    if cmd.message is not None:
                        self._maybe_lose(name, log, cmd, why=f"leader node {node} died")
                self.elect(name)

    def restart_node(self, node: int) -> None:
        if self.nodes_up[node]:
            return
        self.nodes_up[node] = True
        self.trace.record("node_up", node=node)
        for name in self.queues:
            self._schedule_commit(name)

    def elect(self, queue: str, duration: float | None = None) -> None:
        """The queue loses its leader for ``duration`` (drawn when None) and then has a
        new one on another node that is up."""
        if queue not in self.queues:
            return
        if duration is None:
            duration = self.rng.uniform(*self.timing.election)
        until = self.events.now + duration
        self.electing_until[queue] = max(self.electing_until[queue], until)
        log = self.logs[queue]
        if log.timer is not None:
            log.timer.cancel()
            log.timer = None
        candidates = [n for n, up in enumerate(self.nodes_up) if up]
        old = self.leaders[queue]
        later = [n for n in candidates if n != old] or candidates
        if later:
            self.leaders[queue] = later[0]
        self.trace.record("election", queue=queue, until=until, leader=self.leaders[queue])
        self.events.at(until, lambda: self._schedule_commit(queue))

    def set_alarm(self, on: bool) -> None:
        """A memory alarm: connections that publish meanwhile are blocked until it clears
        (see ``connections``)."""
        if on == self.alarm:
            return
        self.alarm = on
        self.trace.record("alarm", on=on)
        if on:
            return
        for conn in list(self.connections.values()):
            if conn.blocked:
                held = conn.unblock()
                self._send(conn, 0, m.ConnectionUnblocked())
                self.trace.record("unblocked", conn=conn.name, held=len(held))
                for number, method in held:
                    if conn.open and not conn.blocked:
                        self._dispatch(conn, number, method)
                    else:
                        conn.held.append((number, method))

    def server_cancel(self, queue: str) -> None:
        """The queue's consumers are cancelled by the broker (its leader moved, as a
        mirrored queue with ``x-cancel-on-ha-failover`` tells them); what they held unacked
        comes back counted, and their later acks of it are ignored."""
        q = self.queues.get(queue)
        if q is None:
            return
        self.trace.record("leader_moved", queue=queue)
        self._effects(q, q.server_cancel())

    # ------------------------------------------------------------------ sending

    def _send(self, conn: BrokerConnection, channel: int, method: Any) -> None:
        if conn.open or isinstance(method, m.ConnectionClose | m.ConnectionCloseOk):
            self._send_frame(conn.id, channel, method)
