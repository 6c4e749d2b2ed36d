"""What a scenario acts on: the cluster, the actor processes, the fault proxy, the nemesis,
and waits bounded by the run's time limit."""

from __future__ import annotations

import contextlib
import functools
import json
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from sac.history import Commit, Confirm, Connected, HistoryEvent
from sac.sdk import ManagementError
from sac.server import LocalCluster, Node, ServerError, amqp_ready
from ._process import ActorProcess
from .actors import ConsumerActor, PublisherActor, Sink, default_ack_batch
from .errors import ChaosError, ChaosTimeout
from .faults import FaultProxy, Nemesis
from .partition import Grudge, Partitions
from .settings import (
    CONSUMER_STOP_S,
    GUARD_LEASE_S,
    REPAIR_AFTER_S,
    SPLIT_AFTER_S,
    SPLIT_SEEN_S,
    RunSettings,
)


class World:
    """What a scenario acts on: the cluster, the actors, the fault proxy and the nemesis."""

    def __init__(self, settings: RunSettings, cluster: LocalCluster, run_dir: Path,
                 proxy: FaultProxy, queue: str, queue_type: Literal["quorum", "classic"],
                 sink: Sink, *, single_active: bool = True, zookeeper: str | None = None,
                 management: tuple[str, ...] = (), other: LocalCluster | None = None,
                 short_batches: bool = False):
        """``zookeeper``: ZooKeeper's connection string; given, every consumer is guarded
        (group ``guard_group``, lease ``GUARD_LEASE_S``), each reaching ZooKeeper through
        a proxy of its own (``zk_cut``). ``management``: the cluster's management API URLs,
        given to guarded consumers (a new leader evicts its predecessor's connection).
        ``other``: a second cluster the queue is federated with (``sac/chaos/federation.py``);
        consumer slots then alternate between the two. ``short_batches``: the consumers' ack
        batch is half their prefetch (``Scenario.short_batches``)."""
        self.settings = settings
        self.ack_batch = (max(1, settings.prefetch // 2) if short_batches
                          else default_ack_batch(settings.prefetch))
        """The consumers' ``ack_batch``: the most messages one inbox batch holds."""
        self.cluster = cluster
        self.clusters = [cluster] if other is None else [cluster, other]
        """The sides of a federated world (side 0 is ``cluster``); one side otherwise."""
        self.run_dir = run_dir
        self.proxy = proxy
        self.queue = queue
        self.queue_type = queue_type
        self.single_active = single_active
        self.zookeeper = zookeeper
        self.management = management
        self.guard_group = f"/sac-chaos/{queue}"
        self.rng = random.Random(settings.seed)
        self.nemesis = Nemesis(run_dir)
        self.sink = sink
        self.consumers: dict[int, ActorProcess] = {}
        self.retired: list[ActorProcess] = []
        self.publishers: list[ActorProcess] = []
        self.planned = 0
        """Messages the publishers started so far were told to publish."""
        self.repaired: list[str] = []
        """Nodes restarted because they did not serve again after a fault."""
        self.restarts = 0
        self._histories: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self._lock = threading.RLock()
        self._stopping: set[str] = set()
        self._deadline = time.monotonic() + settings.time_limit
        self._closed = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="chaos-supervisor",
                                            daemon=True)

    # ------------------------------------------------------------------ time

    def left(self) -> float:
        """Seconds left of the run's time limit (every wait is cut to it)."""
        return max(0.0, self._deadline - time.monotonic())

    def bound(self, timeout: float) -> float:
        left = self.left()
        if left <= 0:
            raise ChaosTimeout(f"the run exceeded its time limit of "
                               f"{self.settings.time_limit:g} s")
        return min(timeout, left)

    def pause(self, seconds: float) -> None:
        """A fault's duration (the scenario's choice, seeded), cut short if the run ends."""
        self._closed.wait(min(seconds, self.left()))

    # ------------------------------------------------------------------ actors

    def _urls(self, actor: str, first: int, side: int = 0) -> list[str]:
        cluster = self.clusters[side]
        creds = cluster.credentials
        login = ":".join(urllib.parse.quote(x, safe="") for x in (creds.user, creds.password))
        nodes = cluster.nodes
        return [f"amqp://{login}@{self.proxy.route(actor, node.index, node.address)}/%2F"
                for node in nodes[first:] + nodes[:first]]

    def _consumer_spec(self, slot: int, actor: str) -> ConsumerActor:
        s = self.settings
        guard: dict[str, Any] = {}
        if self.zookeeper is not None:
            guard = {"guard_hosts": self.proxy.route(_zk_link(actor), 0, self.zookeeper),
                     "guard_group": self.guard_group, "guard_lease": GUARD_LEASE_S,
                     "management_urls": self.management}
        side = self.side_of_slot(slot)
        return ConsumerActor(
            actor=actor, run_dir=str(self.run_dir), queue=self.queue,
            urls=tuple(self._urls(actor, (slot + 1) % len(self.clusters[side].nodes), side)),
            queue_type=self.queue_type, heartbeat=s.heartbeat,
            single_active=self.single_active, face=s.faces[slot % len(s.faces)],
            dedup="off" if s.weakened == "dedup-off" else
            "redelivered-only" if s.weakened == "redelivered-only" else "inbox",
            fencing=s.weakened != "fencing-off", effect_ms=s.effect_ms, prefetch=s.prefetch,
            ack_batch=self.ack_batch,
            handover="cancel" if s.weakened == "cancel-first" else "close",
            sink=self.sink.location, **guard)

    def start_consumer(self, slot: int, *, held: bool = False) -> ActorProcess:
        """Start the consumer of ``slot`` (``consumer-a``, ``-b``...); a later incarnation of
        a slot is a new actor (``consumer-a.2``), so its events never mix with the old one's.
        ``held``: it connects only once released (``ActorProcess.release``)."""
        with self._lock:
            base = f"consumer-{chr(ord('a') + slot)}"
            n = sum(1 for p in [*self.retired, *self.consumers.values()]
                    if p.name.split(".")[0] == base)
            actor = base if n == 0 else f"{base}.{n + 1}"
            spec = self._consumer_spec(slot, actor)
            process = ActorProcess.start(spec, held=held)
            old = self.consumers.get(slot)
            if old is not None:
                self.retired.append(old)
            self.consumers[slot] = process
            return process

    def side_of_slot(self, slot: int) -> int:
        """The side (cluster) of consumer slot ``slot``: they alternate."""
        return slot % len(self.clusters)

    def side_of(self, process: ActorProcess) -> int:
        slot = next(s for s, p in self.consumers.items() if p is process)
        return self.side_of_slot(slot)

    def start_publisher(self, index: int = 0, messages: int | None = None,
                        side: int = 0, rate: float | None = None, *,
                        held: bool = False) -> ActorProcess:
        """Start publisher ``index``; ``held``: it publishes only once released."""
        s = self.settings
        actor = f"publisher-{index}"
        first = 0 if index == 0 else self.rng.randrange(len(self.clusters[side].nodes))
        spec = PublisherActor(actor=actor, run_dir=str(self.run_dir), queue=self.queue,
                              urls=tuple(self._urls(actor, first, side)),
                              queue_type=self.queue_type,
                              heartbeat=s.heartbeat, single_active=self.single_active,
                              messages=messages or s.messages, rate=rate or s.rate)
        process = ActorProcess.start(spec, held=held)
        self.publishers.append(process)
        self.planned += spec.messages
        return process

    def live_consumers(self) -> list[ActorProcess]:
        with self._lock:
            return [p for p in self.consumers.values() if p.alive]

    def active(self, timeout: float = 60.0, other_than: ActorProcess | None = None
               ) -> ActorProcess:
        """The consumer that reports itself active (not frozen), waiting for one."""
        found: list[ActorProcess] = []

        def one() -> bool:
            found[:] = [p for p in self.live_consumers()
                        if p.role == "active" and not p.frozen and p is not other_than]
            return bool(found)

        self.until("active consumer", one, timeout)
        return found[0]

    def stop_consumer(self, process: ActorProcess, timeout: float = CONSUMER_STOP_S) -> int:
        """A graceful stop the supervisor does not answer with a restart."""
        with self._lock:
            self._stopping.add(process.name)
        return process.stop(timeout)

    def restart(self, process: ActorProcess) -> ActorProcess:
        """Stop ``process`` gracefully and start its slot's next incarnation."""
        slot = next(s for s, p in self.consumers.items() if p is process)
        self.stop_consumer(process)
        return self.start_consumer(slot)

    def _supervise(self) -> None:
        """Like a service manager: a consumer that ended on its own (fenced off, gave up
        reconnecting) is started again, at most ten times a run."""
        while not self._closed.wait(0.2):
            with self._lock:
                for slot, process in list(self.consumers.items()):
                    if process.alive or process.name in self._stopping or self.restarts >= 10:
                        continue
                    self.restarts += 1
                    self.start_consumer(slot)

    # ------------------------------------------------------------------ progress

    def committed(self) -> int:
        return self.sink.count()

    def wait_committed(self, count: int, timeout: float = 120.0) -> None:
        """Until ``count`` distinct messages have an effect in the sink."""
        self.until(f"{count} messages handled", lambda: self.committed() >= count, timeout)

    def at_fraction(self, low: float, high: float) -> int:
        """A seeded point of the run, as a number of handled messages."""
        return max(1, int(self.settings.messages * self.rng.uniform(low, high)))

    def events(self, actor: str) -> list[dict[str, Any]]:
        """``actor``'s history so far (actors flush every event). Scenarios poll this, so
        each call parses only the lines appended since the last one (a line still being
        written waits for its newline); the list is shared: read it, don't change it."""
        path = self.run_dir / "events" / f"{actor}.jsonl"
        offset, found = self._histories.setdefault(actor, (0, []))
        if path.exists():
            with path.open("rb") as history:
                history.seek(offset)
                data = history.read()
            complete = data.rfind(b"\n") + 1
            for line in data[:complete].splitlines():
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
            self._histories[actor] = (offset + complete, found)
        return found

    def recorded(self, actor: str, kind: type[HistoryEvent], since: float) -> bool:
        """Whether ``actor`` recorded an event of ``kind`` at or after ``since``."""
        return any(e.get("type") == kind.KIND and float(e.get("ts", 0)) >= since
                   for e in self.events(actor))

    def until(self, what: str, condition: Callable[[], bool], timeout: float) -> None:
        """Until ``condition()`` holds (checked every 50 ms), or ``ChaosTimeout``."""
        deadline = time.monotonic() + self.bound(timeout)
        while not condition():
            if time.monotonic() >= deadline:
                raise ChaosTimeout(f"no {what} within {timeout:g} s")
            self._closed.wait(0.05)

    def wait_event(self, actor: str, kind: type[HistoryEvent], since: float,
                   timeout: float = 60.0) -> None:
        """Until ``actor`` records an event of ``kind`` at or after ``since``."""
        self.until(f"{kind.KIND!r} from {actor}", lambda: self.recorded(actor, kind, since),
                   timeout)

    def _all_events(self, pattern: str, kind: type[HistoryEvent]) -> Iterator[dict[str, Any]]:
        for path in sorted((self.run_dir / "events").glob(pattern)):
            for event in self.events(path.stem):
                if event.get("type") == kind.KIND and isinstance(event.get("msg"), str):
                    yield event

    def confirmed_ids(self) -> set[str]:
        return {event["msg"] for event in self._all_events("publisher-*.jsonl", Confirm)}

    def commit_times(self) -> dict[tuple[str, str], list[float]]:
        times: dict[tuple[str, str], list[float]] = {}
        for event in self._all_events("consumer-*.jsonl", Commit):
            times.setdefault((str(event["actor"]), event["msg"]), []).append(float(event["ts"]))
        for found in times.values():
            found.sort()
        return times

    # ------------------------------------------------------------------ nodes

    def queue_node(self) -> int:
        """The index of the node leading the queue (a quorum queue's leader, a classic
        queue's master)."""
        name = self.cluster.management().queue(self.queue).node
        return self.cluster.node(str(name).split("@")[0]).index

    def ensure_whole(self) -> None:
        """Every node running and serving before the run."""
        for node in self.cluster.nodes:
            if not self.cluster.is_running(node):
                self.cluster.start(node.index)
        self.recover()

    def recover(self) -> None:
        """Until every node serves; one that serves while most of the other nodes do not
        list it as running for ``SPLIT_SEEN_S``, or that they still do not list as running
        after ``SPLIT_AFTER_S`` (a partition RabbitMQ kept after the heal), or that does not
        serve within ``REPAIR_AFTER_S``, is killed and started again (listed in
        ``repaired``, and in ``run.json``)."""
        out = self._kept_split(SPLIT_AFTER_S)
        if out is None:
            return
        if not out:
            try:
                self.wait_serving(REPAIR_AFTER_S - SPLIT_AFTER_S)
                return
            except ChaosTimeout:
                pass
            out = set(outcasts({n.index: self._running_seen_by(n)
                                for n in self.cluster.nodes}))
        for node in self.cluster.nodes:
            if node.index in out or not self.serving(node):
                self.cluster.kill(node.index)
                self.cluster.start(node.index, timeout=self.bound(120))
                self.repaired.append(node.name)
        self.wait_serving()

    def _kept_split(self, timeout: float) -> set[int] | None:
        """Polls each node's view until the cluster is whole (``None``), or ``kept_split``
        names the same nodes for ``SPLIT_SEEN_S`` in a row (those), or for ``timeout`` (then
        the ``outcasts``, perhaps none)."""
        deadline = time.monotonic() + min(timeout, self.left())
        everyone = {n.index for n in self.cluster.nodes}
        seen: set[int] = set()
        since = time.monotonic()
        while True:
            views = {n.index: self._running_seen_by(n) for n in self.cluster.nodes}
            serving = {n.index for n in self.cluster.nodes if self.serving(n)}
            if serving == everyone and all(v == everyone for v in views.values()):
                return None
            split = set(kept_split(views, serving))
            now = time.monotonic()
            if not split or split != seen:
                seen, since = split, now
            elif now - since >= SPLIT_SEEN_S:
                return split
            if now >= deadline:
                return set(outcasts(views))
            self.pause(0.25)

    def node_of(self, process: ActorProcess) -> int:
        """The node ``process`` is connected to now (its latest ``connected`` event)."""
        connected = [e for e in self.events(process.name) if e.get("type") == Connected.KIND]
        node = self.proxy.node_of(process.name, str(connected[-1]["node"])) if connected \
            else None
        if node is None:
            raise ChaosError(f"{process.name} is not connected through any of its proxies")
        return node

    @contextlib.contextmanager
    def partition(self, grudge: Grudge) -> Iterator[None]:
        """Cut links between nodes (nftables in their namespaces) for the block, recorded;
        healed on exit, after which the cluster must be whole again (paused nodes resume)."""
        parts = Partitions(self.cluster)
        with self.nemesis.fault("partition", grudge.target, grudge=grudge.as_json()):
            parts.apply(grudge)
            try:
                yield
            finally:
                parts.heal()
        self.recover()

    def wait_serving(self, timeout: float = 120.0) -> None:
        """Until every node is a running member and answers AMQP and its management API
        (a node paused by pause_minority lists as running before its listeners are back)."""
        try:
            self.cluster.wait_members(self.cluster.nodes, self.bound(timeout))
        except ServerError as exc:
            raise ChaosTimeout(str(exc)) from exc
        for node in self.cluster.nodes:
            self.until(f"service from {node.name}", functools.partial(self.serving, node),
                       timeout)

    def _running_seen_by(self, node: Node) -> set[int] | None:
        """The members ``node`` lists as running (None: it does not answer)."""
        try:
            members = self.cluster.members(node)
        except (ServerError, ManagementError):
            return None
        return {self.cluster.node(m["name"]).index for m in members if m["running"]}

    def serving(self, node: Node) -> bool:
        if not amqp_ready(node.amqp_port, host=node.host):
            return False
        try:
            self.cluster.management(node).overview()
        except (ServerError, ManagementError):
            return False
        return True

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._supervisor.start()

    def close(self) -> None:
        self._closed.set()
        if self._supervisor.is_alive():
            self._supervisor.join(5)
        for process in [*self.retired, *self.consumers.values(), *self.publishers]:
            process.close()
        self.nemesis.close()


def outcasts(views: dict[int, set[int] | None]) -> list[int]:
    """The nodes that most of the other nodes do not list as running, from each node's view
    (``None``: it did not answer). Why: after a partition shorter than pause_minority needs
    to pause a side (measured on 4.0.5 with Mnesia: the isolated node saw one peer down,
    still had the other, healed before it saw the second go), Mnesia stays split
    (``inconsistent_database, running_partitioned_network``): the isolated node serves on
    its own while the others list it as not running, and only a restart of it (RabbitMQ's
    advice for a partitioned minority) makes the cluster whole."""
    nodes = sorted(views)
    found = []
    for node in nodes:
        others = [v for n, v in views.items() if n != node and v is not None]
        excluded = sum(1 for v in others if node not in v)
        if excluded * 2 > len(nodes) - 1:
            found.append(node)
    return found


def kept_split(views: dict[int, set[int] | None], serving: set[int]) -> list[int]:
    """The ``outcasts`` that serve all the same: nodes that never paused (pause_minority
    opens a paused node's listeners only once it has rejoined) and that RabbitMQ leaves
    apart after the heal."""
    return [node for node in outcasts(views) if node in serving]


def _zk_link(actor: str) -> str:
    """The fault proxy's name for ``actor``'s link to ZooKeeper (its AMQP links go by the
    actor's own name, so a toxic on those leaves this one alone)."""
    return f"{actor}-zk"


@contextlib.contextmanager
def zk_cut(world: World, process: ActorProcess, kind: Literal["reset", "blackhole"]
           ) -> Iterator[None]:
    """``process``'s link to ZooKeeper cut for the block, recorded as fault ``zk_<kind>``:
    ``reset`` closes its connections and refuses new ones (kazoo suspends at once),
    ``blackhole`` lets nothing through either way and closes nothing (kazoo suspends after
    two thirds of its lease without an answer). Either way ZooKeeper hears nothing from
    the session, and expires it once the lease is over."""
    if world.zookeeper is None:
        raise ChaosError("zk_cut needs guarded consumers: the scenario names no ZooKeeper")
    link = _zk_link(process.name)
    proxies = world.proxy.of(link)
    with world.nemesis.fault(f"zk_{kind}", process.name):
        labels: list[str] = []
        try:
            if kind == "reset":
                for proxy in proxies:
                    proxy.disable()
            else:
                labels = [world.proxy.add(link, "timeout", stream=stream,
                                          attributes={"timeout": 0})
                          for stream in ("downstream", "upstream")]
            yield
        finally:
            for label in labels:
                world.proxy.remove(link, label)
            if kind == "reset":
                for proxy in proxies:
                    proxy.enable()


@contextlib.contextmanager
def toxic(world: World, actors: list[ActorProcess], kind: str,
          streams: tuple[str, ...] = ("downstream",), **attributes: Any) -> Iterator[None]:
    """A toxic on every link of ``actors`` for the duration of the block, recorded as one
    fault (target: the actor, or ``clients`` for several)."""
    target = actors[0].name if len(actors) == 1 else "clients"
    with world.nemesis.fault(kind, target, streams=list(streams), **attributes):
        added = [(actor.name, world.proxy.add(actor.name, kind, stream=stream,
                                              attributes=attributes))
                 for actor in actors for stream in streams]
        try:
            yield
        finally:
            for name, label in added:
                world.proxy.remove(name, label)
