"""The simulated world: clients, the network between them and the broker, the broker, the
dedup store, and the faults, all on one virtual clock.

The network keeps each direction of a link in order (TCP) with a random latency per frame;
a reset loses what is in flight; a silence holds frames until it ends. Randomness comes
from the seed only, split into independent streams (network, broker, store) so that a
change in one part of a run disturbs the others as little as possible, which keeps
shrinking effective.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, assert_never

import attrs

from . import faults as f
from . import harness as h
from . import methods as m
from .broker import DEFAULT_TIMING, Broker, Timing
from .clock import EventQueue, Timer
from .model import BrokerModel
from .store import SimStore
from .trace import Trace

HEARTBEAT_TIMEOUT = (2.0, 3.0)
"""The broker closes a connection it heard nothing from for this many heartbeat intervals
(RabbitMQ 3.10 took 2.6-2.8 in our measurements)."""


class SimulationError(Exception):
    """The client under test misused the world (a bug in the client, not a fault)."""


@attrs.define(eq=False, kw_only=True)
class _Link:
    name: str
    client: str
    node: int
    heartbeat: float
    up: int
    """Generation of the client-to-broker direction: frames sent under an older one are
    lost (a reset)."""
    down: int
    """Generation of the broker-to-client direction."""
    state: str = "connecting"
    """connecting, open or closed."""
    conn_id: int | None = None
    to_broker_last: float = 0.0
    to_client_last: float = 0.0
    silent_until: float = -math.inf
    held: list[Callable[[], None]] = attrs.field(factory=list)
    broker_gave_up: bool = False
    close_seen: bool = False
    beat: Timer | None = None


@attrs.define(eq=False, kw_only=True)
class _Wire:
    fault: f.CutOnFrame
    remaining: int


class World:
    def __init__(self, seed: int, *, nodes: int = 3, timing: Timing = DEFAULT_TIMING,
                 latency: tuple[float, float] = (0.0002, 0.002),
                 trace_frames: bool = True, max_events: int | None = None,
                 broker: BrokerModel | None = None) -> None:
        self.seed = seed
        streams = random.Random(seed)
        self.net = random.Random(streams.getrandbits(64))
        self.events = EventQueue(max_events)
        self.trace = Trace(self.events)
        self.broker = Broker(self.events, random.Random(streams.getrandbits(64)), self.trace,
                             send=self._from_broker, closed=self._broker_closed, nodes=nodes,
                             timing=timing, broker=broker)
        self.store = SimStore(self.events, random.Random(streams.getrandbits(64)), self.trace)
        self.latency = latency
        self.trace_frames = trace_frames
        self.clients: dict[str, h.Client] = {}
        self.links: dict[str, _Link] = {}
        self._by_conn: dict[int, _Link] = {}
        self._ticks: dict[str, Timer] = {}
        self._wires: list[_Wire] = []
        self._alarms = 0
        self._generations = 0

    # ------------------------------------------------------------------ driving

    def add(self, client: h.Client) -> None:
        if client.name in self.clients:
            raise SimulationError(f"two clients named {client.name!r}")
        self.clients[client.name] = client
        self.events.after(0.0, lambda: self._do(client, client.start(self.events.now)))

    def schedule(self, faults: Iterable[f.Fault]) -> None:
        for fault in faults:
            self.events.at(max(fault.at, self.events.now), functools.partial(self.apply, fault))

    def run(self, until: float) -> None:
        self.events.run_until(until)

    def run_until_idle(self, limit: float) -> bool:
        return self.events.run_until_idle(limit)

    def inject(self, client: h.Client, actions: Sequence[h.Action]) -> None:
        """Carry out actions for ``client`` now (a test driving a scripted client)."""
        self._do(client, actions)

    # ------------------------------------------------------------------ clients

    def _do(self, client: h.Client, actions: Sequence[h.Action]) -> None:
        for action in actions:
            match action:
                case h.Connect():
                    self._connect(client, action)
                case h.Send():
                    self._send(client, action)
                case h.Disconnect():
                    self._disconnect(client, action.link)
                case h.Commit():
                    self.store.commit_later(action.queue, action.epoch, action.consumer,
                                            action.message_ids,
                                            functools.partial(self._tell, client), action.token)
                case h.ClaimEpoch():
                    self.store.claim_later(action.queue, functools.partial(self._tell, client),
                                           action.token)
                case _:
                    assert_never(action)
        self._retick(client)

    def _tell(self, client: h.Client, event: h.Event) -> None:
        if self.trace_frames and not (isinstance(event, h.Received)
                                      and isinstance(event.method, m.Heartbeat)):
            self.trace.record("client_got", client=client.name, event=repr(event))
        self._do(client, client.receive(self.events.now, event))

    def _retick(self, client: h.Client) -> None:
        old = self._ticks.pop(client.name, None)
        if old is not None:
            old.cancel()
        when = client.next_tick()
        if when is None:
            return

        def tick() -> None:
            self._ticks.pop(client.name, None)
            self._do(client, client.tick(self.events.now))

        idle = getattr(client, "idle", None)
        self._ticks[client.name] = self.events.at(
            max(when, self.events.now), tick, background=idle is not None and idle())

    def _owned(self, client: h.Client, name: str) -> _Link:
        link = self.links.get(name)
        if link is None or link.client != client.name:
            raise SimulationError(f"{client.name} has no link {name!r}")
        return link

    def _connect(self, client: h.Client, action: h.Connect) -> None:
        old = self.links.get(action.link)
        if old is not None and old.state != "closed":
            raise SimulationError(f"link {action.link!r} is already {old.state}")
        generation = self._next_generation()
        link = _Link(name=action.link, client=client.name, node=action.node,
                     heartbeat=action.heartbeat, up=generation, down=generation)
        self.links[action.link] = link
        self.trace.record("connect", link=link.name, node=link.node)

        def arrive() -> None:
            conn_id = self.broker.connect(link.node, link.name)
            if conn_id is None:
                link.state = "closed"
                self._after_latency(lambda: self._tell(client, h.ConnectionRefused(link=link.name)))
                return
            link.conn_id = conn_id
            link.state = "open"
            self._by_conn[conn_id] = link
            version = self.broker.model.version
            self._from_broker(conn_id, 0, m.ConnectionOpenOk(
                version=f"{version.major}.{version.minor}.{version.patch}"))
            if link.heartbeat > 0:
                self._beat(link)

        self._to_broker(link, arrive)

    def _send(self, client: h.Client, action: h.Send) -> None:
        link = self._owned(client, action.link)
        if link.state == "closed":
            self.trace.record("send_on_closed_link", link=link.name, method=repr(action.method))
            return
        if self.trace_frames:
            self.trace.record("client_sent", link=link.name, channel=action.channel,
                              method=repr(action.method))
        self._to_broker(link, lambda: self._broker_receives(link, action.channel, action.method))

    def _disconnect(self, client: h.Client, name: str) -> None:
        link = self._owned(client, name)
        if link.state == "closed":
            return
        self.trace.record("client_closed_socket", link=link.name)
        conn_id = link.conn_id
        silent_until = link.silent_until
        self._close_link(link, both=False)
        if conn_id is None:
            return

        def fin() -> None:
            self.broker.disconnect(conn_id, "client closed socket")

        # The FIN follows the frames already on their way (after a silence, if one holds
        # them).
        if self.events.now < silent_until:
            self.events.at(silent_until + self._latency(), fin)
        else:
            self._to_broker(link, fin)

    # ------------------------------------------------------------------ the network

    def _latency(self) -> float:
        return self.net.uniform(*self.latency)

    def _after_latency(self, action: Callable[[], None]) -> None:
        self.events.after(self._latency(), action)

    def _to_broker(self, link: _Link, deliver: Callable[[], None]) -> None:
        """Send toward the broker, in order; lost if the link is reset meanwhile."""
        generation = link.up

        def arrive() -> None:
            if link.up == generation:
                deliver()

        if self.events.now < link.silent_until:
            link.held.append(lambda: self._to_broker(link, deliver))
            return
        when = max(self.events.now + self._latency(), link.to_broker_last)
        link.to_broker_last = when
        self.events.at(when, arrive)

    def _broker_receives(self, link: _Link, channel: int, method: Any) -> None:
        if link.conn_id is None:
            return
        wire = self._trip(link, method, "broker")
        if wire is not None and not wire.delivered:
            self._cut(link, f"cut before {type(method).__name__} reached the broker")
            return
        self.broker.receive(link.conn_id, channel, method)
        if wire is not None:
            self._cut(link, f"cut after the broker took {type(method).__name__}")

    def _from_broker(self, conn_id: int, channel: int, method: Any) -> None:
        link = self._by_conn.get(conn_id)
        if link is None or link.state == "closed":
            return
        wire = self._trip(link, method, "client")
        if wire is not None and not wire.delivered:
            self._cut(link, f"cut before {type(method).__name__} reached the client")
            return
        generation = link.down
        client = self.clients[link.client]
        background = isinstance(method, m.Heartbeat)

        def arrive() -> None:
            if link.down != generation:
                return
            if isinstance(method, m.ConnectionClose | m.ConnectionCloseOk):
                link.close_seen = True
            self._tell(client, h.Received(link=link.name, channel=channel, method=method))
            if wire is not None:
                self._cut(link, f"cut after {type(method).__name__} reached the client")

        self._to_client(link, arrive, background=background)

    def _to_client(self, link: _Link, arrive: Callable[[], None], *,
                   background: bool = False) -> None:
        if self.events.now < link.silent_until:
            link.held.append(lambda: self._to_client(link, arrive, background=background))
            return
        when = max(self.events.now + self._latency(), link.to_client_last)
        link.to_client_last = when
        self.events.at(when, arrive, background=background)

    def _beat(self, link: _Link) -> None:
        """The broker's heartbeat frames (background: they are not work)."""
        generation = link.down

        def beat() -> None:
            if link.down != generation or link.state != "open" or link.conn_id is None:
                return
            self._from_broker(link.conn_id, 0, m.Heartbeat())
            link.beat = self.events.after(link.heartbeat, beat, background=True)

        link.beat = self.events.after(link.heartbeat, beat, background=True)

    def _close_link(self, link: _Link, *, both: bool = True) -> None:
        """Closed for the client; ``both``: what was in flight toward the broker is lost
        too (a reset), else it still arrives (the client closed its socket)."""
        link.state = "closed"
        link.down = self._next_generation()
        if both:
            link.up = link.down
            link.held.clear()
        if link.beat is not None:
            link.beat.cancel()
        if link.conn_id is not None:
            self._by_conn.pop(link.conn_id, None)

    def _next_generation(self) -> int:
        self._generations += 1
        return self._generations

    def _cut(self, link: _Link, why: str) -> None:
        """A reset: both ends learn of it, what was in flight is lost."""
        if link.state == "closed":
            return
        self.trace.record("link_cut", link=link.name, why=why)
        conn_id = link.conn_id
        self._close_link(link)
        if conn_id is not None:
            self.broker.disconnect(conn_id, why)
        client = self.clients[link.client]
        self._after_latency(
            lambda: self._tell(client, h.ConnectionLost(link=link.name, reason=why)))

    def _broker_closed(self, conn_id: int, why: str) -> None:
        """The broker closed the socket: the client reads what was already sent, then EOF
        (reported as ``ConnectionLost`` unless a ``connection.close`` said it first)."""
        link = self._by_conn.get(conn_id)
        if link is None:
            return
        generation = link.down
        client = self.clients[link.client]

        def eof() -> None:
            if link.down != generation:
                return
            seen = link.close_seen
            self._close_link(link)
            if not seen:
                self._tell(client, h.ConnectionLost(link=link.name, reason=why))

        self._to_client(link, eof)

    def _trip(self, link: _Link, method: Any, to: str) -> f.CutOnFrame | None:
        name = type(method).__name__
        for wire in self._wires:
            fault = wire.fault
            if fault.method == name and fault.to == to and _matches(fault.link, link.name):
                wire.remaining -= 1
                if wire.remaining <= 0:
                    self._wires.remove(wire)
                    self.trace.record("wire_tripped", fault=repr(fault))
                    return fault
        return None

    # ------------------------------------------------------------------ faults

    def apply(self, fault: f.Fault) -> None:
        self.trace.record("fault", fault=repr(fault))
        match fault:
            case f.Reset():
                for link in self._open_links(fault.link):
                    self._cut(link, "connection reset")
            case f.CutOnFrame():
                self._wires.append(_Wire(fault=fault, remaining=fault.nth))
            case f.Silence():
                for link in self._open_links(fault.link):
                    self._silence(link, fault.duration)
            case f.KillNode():
                self.broker.kill_node(fault.node)
                self.events.after(fault.duration, lambda: self.broker.restart_node(fault.node))
            case f.Election():
                self.broker.elect(fault.queue, fault.duration)
            case f.Alarm():
                self._alarms += 1
                self.broker.set_alarm(True)
                self.events.after(fault.duration, self._alarm_over)
            case f.LeaderMoved():
                self.broker.server_cancel(fault.queue)
            case f.StoreDown():
                self.store.fail_for(fault.duration)
            case f.StoreSlow():
                self.store.slow_for(fault.duration, fault.latency)
            case f.DeleteQueue():
                self.broker.delete_queue(fault.queue)
            case f.StopProcess():
                client = self.clients.get(fault.client)
                if client is None:
                    raise SimulationError(f"no client {fault.client!r} to stop")
                self._tell(client, h.Stop(kill=fault.kill))
                self.events.after(fault.down, lambda: self._tell(client, h.Restart()))
            case _:
                assert_never(fault)

    def _open_links(self, name: str) -> list[_Link]:
        return [link for link in self.links.values()
                if link.state != "closed" and _matches(name, link.name)]

    def _alarm_over(self) -> None:
        self._alarms -= 1
        if self._alarms == 0:
            self.broker.set_alarm(False)

    def _silence(self, link: _Link, duration: float) -> None:
        now = self.events.now
        link.silent_until = max(link.silent_until, now + duration)
        generation = link.up
        if link.heartbeat > 0 and link.conn_id is not None:
            detect = self.net.uniform(*HEARTBEAT_TIMEOUT) * link.heartbeat
            if duration >= detect:
                conn_id = link.conn_id

                def give_up() -> None:
                    if conn_id in self.broker.connections and not link.broker_gave_up:
                        link.broker_gave_up = True
                        self.trace.record("heartbeat_timeout", link=link.name)
                        self.broker.disconnect(conn_id, "missed heartbeats")

                self.events.at(now + detect, give_up)
        self.events.at(link.silent_until, lambda: self._unsilence(link, generation))

    def _unsilence(self, link: _Link, generation: int) -> None:
        if link.up != generation or self.events.now < link.silent_until:
            return
        if link.broker_gave_up and link.state != "closed":
            self._cut(link, "the broker had closed the connection (missed heartbeats)")
            return
        held, link.held = link.held, []
        for resend in held:
            resend()


def _matches(pattern: str, name: str) -> bool:
    """A fault names a link, or every incarnation ``name#n`` of it."""
    return name == pattern or name.startswith(pattern + "#")
