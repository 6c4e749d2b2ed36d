"""Scripted clients: a case written once as steps of AMQP client actions, run against the
simulator here and against a real cluster by the honesty test's pika driver, each
producing the same kind of observation.

A *case* is a list of steps; each step is a few actions done together, after which the
driver waits until the broker has nothing more to say. The observation of a step is what
the clients heard meanwhile, normalised so that only what RabbitMQ promises is compared:

- confirms are expanded per delivery tag (``multiple`` coalescing depends on timing) and
  sorted by tag;
- events are grouped per link and kind (confirms, returns, deliveries, cancels, channel
  closes, declare-oks), each kind in arrival order: the interleaving of frames of
  different kinds, or of different connections, is not a promise of the protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from . import harness as h
from . import methods as m
from .model import BrokerModel
from .world import World

# ------------------------------------------------------------------ steps


@attrs.frozen(kw_only=True)
class Open:
    """A connection to ``node`` with channel 1 open (and in confirm mode if ``confirm``)."""

    link: str
    node: int = 0
    confirm: bool = False
    heartbeat: float = 0.0
    """The simulator's heartbeat (the real driver leaves pika's)."""


@attrs.frozen(kw_only=True)
class Declare:
    link: str
    queue: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    passive: bool = False


@attrs.frozen(kw_only=True)
class Publish:
    link: str
    queue: str
    body: str
    message_id: str | None = None
    headers: dict[str, Any] | None = None
    mandatory: bool = True


@attrs.frozen(kw_only=True)
class Qos:
    link: str
    prefetch: int


@attrs.frozen(kw_only=True)
class Consume:
    link: str
    queue: str
    tag: str
    priority: int | None = None
    """``x-priority``, None for none."""


@attrs.frozen(kw_only=True)
class Cancel:
    link: str
    tag: str


@attrs.frozen(kw_only=True)
class Ack:
    link: str
    tag: int
    multiple: bool = False


@attrs.frozen(kw_only=True)
class Nack:
    link: str
    tag: int
    multiple: bool = False
    requeue: bool = True


@attrs.frozen(kw_only=True)
class Reject:
    link: str
    tag: int
    requeue: bool = True


@attrs.frozen(kw_only=True)
class CloseChannel:
    link: str


@attrs.frozen(kw_only=True)
class CloseConnection:
    link: str


@attrs.frozen(kw_only=True)
class Drop:
    """Close the socket without a word (a process that dies)."""

    link: str


@attrs.frozen(kw_only=True)
class Delete:
    link: str
    queue: str


@attrs.frozen(kw_only=True)
class SetAlarm:
    """A memory alarm goes on or off, cluster-wide (the real driver lowers a node's
    memory watermark)."""

    on: bool
    link: str = ""


Step = (Open | Declare | Publish | Qos | Consume | Cancel | Ack | Nack | Reject | CloseChannel
        | CloseConnection | Drop | Delete | SetAlarm)


@attrs.frozen(kw_only=True)
class Case:
    name: str
    steps: tuple[tuple[Step, ...], ...]


# ------------------------------------------------------------------ observing


KINDS = ("declare_ok", "confirm", "return", "deliver", "cancel", "channel_closed", "blocked",
         "unblocked")


class Observer:
    """What the clients of a case heard, step by step; fed by either driver."""

    def __init__(self) -> None:
        self.steps: list[list[tuple[Any, ...]]] = []
        self._outstanding: dict[str, list[int]] = {}
        self._published: dict[str, int] = {}

    def next_step(self) -> None:
        self.steps.append([])

    def _add(self, event: tuple[Any, ...]) -> None:
        self.steps[-1].append(event)

    def confirm_mode(self, link: str) -> None:
        self._outstanding[link] = []
        self._published[link] = 0

    def published(self, link: str) -> None:
        if link in self._published:
            self._published[link] += 1
            self._outstanding[link].append(self._published[link])

    def confirmed(self, link: str, tag: int, multiple: bool, ack: bool) -> None:
        outstanding = self._outstanding.get(link, [])
        covered = [t for t in outstanding if t <= tag] if multiple else [tag]
        for t in covered:
            if t in outstanding:
                outstanding.remove(t)
            self._add(("confirm", link, t, "ack" if ack else "nack"))

    def returned(self, link: str, code: int, queue: str, body: bytes) -> None:
        self._add(("return", link, code, queue, body.decode()))

    def delivered(self, link: str, tag: str, delivery_tag: int, body: bytes,
                  redelivered: bool, headers: dict[str, Any] | None) -> None:
        headers = headers or {}
        count = headers.get("x-delivery-count")
        self._add(("deliver", link, tag, delivery_tag, body.decode(), redelivered,
                   None if count is None else int(count), headers.get("x-first-death-reason")))

    def cancelled(self, link: str, tag: str) -> None:
        self._add(("cancel", link, tag))

    def channel_closed(self, link: str, code: int) -> None:
        self._add(("channel_closed", link, code))

    def declared(self, link: str, queue: str, messages: int, consumers: int) -> None:
        self._add(("declare_ok", link, queue, messages, consumers))

    def blocked(self, link: str, on: bool) -> None:
        self._add(("blocked" if on else "unblocked", link))

    def normalised(self) -> list[list[tuple[Any, ...]]]:
        def key(item: tuple[int, tuple[Any, ...]]) -> tuple[Any, ...]:
            index, event = item
            order = event[2] if event[0] == "confirm" else index
            return (event[1], KINDS.index(event[0]), order)

        return [[event for _, event in sorted(enumerate(step), key=key)]
                for step in self.steps]


# ------------------------------------------------------------------ the simulator's driver


class ScriptClient:
    """Carries out steps in the simulated world and tells the observer what it hears."""

    name = "script"

    def __init__(self, observer: Observer, rename: Callable[[str], str] = str) -> None:
        self.observer = observer
        self.rename = rename
        self._after_open: dict[str, list[h.Action]] = {}
        self._opening: dict[str, tuple[type, list[h.Action]]] = {}
        """Links whose ``Open`` is not done (as pika's blocking calls would wait): what to
        wait for, and the actions of later steps that wait with it."""
        self.events: list[h.Event] = []

    def start(self, now: float) -> Sequence[h.Action]:
        return ()

    def tick(self, now: float) -> Sequence[h.Action]:
        return ()

    def next_tick(self) -> float | None:
        return None

    def actions(self, step: Step) -> list[h.Action]:
        """The AMQP methods a step sends; those on a link still opening wait for it."""
        link = step.link
        if isinstance(step, Open):
            later: list[h.Action] = [h.Send(link=link, channel=1, method=m.ChannelOpen())]
            if step.confirm:
                self.observer.confirm_mode(link)
                later.append(h.Send(link=link, channel=1, method=m.ConfirmSelect()))
            self._after_open[link] = later
            self._opening[link] = (m.ConfirmSelectOk if step.confirm else m.ChannelOpenOk, [])
            return [h.Connect(link=link, node=step.node, heartbeat=step.heartbeat)]
        actions = self._actions(step)
        if link in self._opening:
            self._opening[link][1].extend(actions)
            return []
        return actions

    def _actions(self, step: Step) -> list[h.Action]:
        link = step.link

        def send(method: Any, channel: int = 1) -> list[h.Action]:
            return [h.Send(link=link, channel=channel, method=method)]

        if isinstance(step, Declare):
            return send(m.QueueDeclare(queue=step.queue, arguments=step.arguments,
                                       passive=step.passive))
        if isinstance(step, Publish):
            self.observer.published(link)
            props = m.Properties(message_id=step.message_id, headers=step.headers)
            return send(m.BasicPublish(exchange="", routing_key=step.queue,
                                       body=step.body.encode(), properties=props,
                                       mandatory=step.mandatory))
        if isinstance(step, Qos):
            return send(m.BasicQos(prefetch_count=step.prefetch))
        if isinstance(step, Consume):
            arguments: dict[str, Any] = ({} if step.priority is None
                                         else {"x-priority": step.priority})
            return send(m.BasicConsume(queue=step.queue, consumer_tag=step.tag,
                                       arguments=arguments))
        if isinstance(step, Cancel):
            return send(m.BasicCancel(consumer_tag=step.tag))
        if isinstance(step, Ack):
            return send(m.BasicAck(delivery_tag=step.tag, multiple=step.multiple))
        if isinstance(step, Nack):
            return send(m.BasicNack(delivery_tag=step.tag, multiple=step.multiple,
                                    requeue=step.requeue))
        if isinstance(step, Reject):
            return send(m.BasicReject(delivery_tag=step.tag, requeue=step.requeue))
        if isinstance(step, CloseChannel):
            return send(m.ChannelClose())
        if isinstance(step, CloseConnection):
            return send(m.ConnectionClose(), channel=0)
        if isinstance(step, Drop):
            return [h.Disconnect(link=link)]
        if isinstance(step, Delete):
            return send(m.QueueDelete(queue=step.queue))
        raise TypeError(f"unknown step {step!r}")

    def receive(self, now: float, event: h.Event) -> Sequence[h.Action]:
        self.events.append(event)
        if isinstance(event, h.ConnectionLost | h.ConnectionRefused):
            return ()
        assert isinstance(event, h.Received)
        link, method, obs = event.link, event.method, self.observer
        if isinstance(method, m.ConnectionOpenOk):
            return self._after_open.pop(link, [])
        opening = self._opening.get(link)
        if opening is not None and isinstance(method, opening[0]):
            del self._opening[link]
            return opening[1]
        if isinstance(method, m.BasicAck):
            obs.confirmed(link, method.delivery_tag, method.multiple, ack=True)
        elif isinstance(method, m.BasicNack):
            obs.confirmed(link, method.delivery_tag, method.multiple, ack=False)
        elif isinstance(method, m.BasicReturn):
            obs.returned(link, method.reply_code, method.routing_key, method.body)
        elif isinstance(method, m.BasicDeliver):
            obs.delivered(link, method.consumer_tag, method.delivery_tag, method.body,
                          method.redelivered, method.properties.headers)
        elif isinstance(method, m.BasicCancel):
            obs.cancelled(link, method.consumer_tag)
        elif isinstance(method, m.ChannelClose):
            obs.channel_closed(link, method.reply_code)
            return [h.Send(link=link, channel=event.channel, method=m.ChannelCloseOk())]
        elif isinstance(method, m.QueueDeclareOk):
            obs.declared(link, method.queue, method.message_count, method.consumer_count)
        elif isinstance(method, m.ConnectionBlocked | m.ConnectionUnblocked):
            obs.blocked(link, isinstance(method, m.ConnectionBlocked))
        return ()


def run_case(case: Case, seed: int = 0, *, settle: float = 5.0,
             broker: BrokerModel | None = None) -> Observer:
    """Run a case in a fresh simulated world following ``broker`` (the default model when
    None); each step runs until the world is idle."""
    observer = Observer()
    world = World(seed, broker=broker)
    client = ScriptClient(observer)
    world.add(client)
    for step in case.steps:
        observer.next_step()
        for alarm in (s for s in step if isinstance(s, SetAlarm)):
            world.broker.set_alarm(alarm.on)
        actions = [a for s in step if not isinstance(s, SetAlarm) for a in client.actions(s)]
        world.inject(client, actions)
        world.run_until_idle(world.events.now + settle)
    return observer
