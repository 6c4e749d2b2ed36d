"""The named scenarios. Each is a function of a ``World`` that injects its faults while the
workload runs, with every choice (when, how long, which parameters) drawn from the run's
seeded generator, so ``--seed`` replays the same plan (the broker's timing is its own).

Each names the weakening its fault exposes and what the checker must then find: a suite that
cannot fail proves nothing. ``rolling-handover`` is the exception that proves a point: with
dedup off it must still be valid, because a graceful handover redelivers nothing.
``handover-backlog``'s weakening is the stop order the SDK had before (``basic.cancel`` first,
``Handover.CANCEL``): the next consumer works ahead of what the stopped one had prefetched,
which the checker must find ``reordered``.
"""

from __future__ import annotations

import functools
import operator
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from sac.history import (
    Commit,
    CommitRejected,
    Connected,
    ConnectionLost,
    Deliver,
    DuplicateSkipped,
    Evict,
    Reject,
)
from sac.sdk import QueueSettings
from sac.server import LocalCluster, amqp_ready
from ._process import ActorProcess
from .errors import ChaosTimeout
from .federation import link_actor, links_running, unacked
from .partition import Grudge, isolate, majorities_ring, one_way
from .scenario import Body, Scenario
from .world import World, toxic, zk_cut

EFFECT_WAIT_S = 30.0
MOVER_SPAN_S = 8.0
"""How long ``federation-link-reset``'s publisher on the other cluster goes on publishing."""


def _keep_flowing(w: World) -> None:
    """Another publisher when the published messages are nearly all handled, so that a
    fault that waits for a consumer inside an effect meets messages in flight (at small
    sizes the workload can be over before the fault begins: 100 messages on 4.0)."""
    if w.publishers[-1].last("done") is not None or w.committed() > 0.8 * w.planned:
        w.start_publisher(len(w.publishers), messages=max(10, w.settings.messages // 2))


def _inside_effect(w: World) -> ActorProcess:
    """Arm every live consumer and wait until one is inside an effect, holding it there:
    that one is the active consumer (a consumer cut off may still call itself active).
    Messages are kept flowing (``_keep_flowing``) so that one comes."""
    _keep_flowing(w)
    armed = {p: p.count("in_effect") for p in w.live_consumers()}
    for process in armed:
        process.tell("freeze")
    found: list[ActorProcess] = []

    def inside() -> bool:
        found[:] = [p for p, n in armed.items() if p.count("in_effect") > n]
        return bool(found)

    w.until("effect to stop in", inside, EFFECT_WAIT_S)
    for process in armed:
        if process is not found[0]:
            process.tell("disarm")
    return found[0]


def _reset_active(w: World) -> None:
    """Reset the active consumer's connection while it is inside an effect: the effect
    completes after the connection is gone, so its message comes again to the next one."""
    victim = _inside_effect(w)
    since = time.time()
    with toxic(w, [victim], "reset_peer", ("downstream", "upstream"), timeout=0):
        w.wait_event(victim.name, ConnectionLost, since, 30)
        victim.tell("continue")
        w.pause(w.rng.uniform(0.3, 1.5))


def consumer_reset(w: World) -> None:
    w.wait_committed(w.at_fraction(0.2, 0.4))
    _reset_active(w)


def consumer_blackhole(w: World) -> None:
    """Nothing passes either way and nothing closes: both sides find out by heartbeats."""
    w.wait_committed(w.at_fraction(0.2, 0.4))
    victim = _inside_effect(w)
    since = time.time()
    with toxic(w, [victim], "timeout", ("downstream", "upstream"), timeout=0):
        victim.tell("continue")
        w.active(other_than=victim)
        w.wait_event(victim.name, ConnectionLost, since, 60)
        w.pause(w.rng.uniform(0.0, 1.0))


def consumer_freeze(w: World) -> None:
    w.wait_committed(w.at_fraction(0.2, 0.4))
    _freeze_active(w, _inside_effect_with_work_behind(w))


HOLD_ATTEMPTS = 5
BEHIND_WAIT_S = 3.0


def _inside_effect_with_work_behind(w: World) -> ActorProcess:
    """``_inside_effect``, held only once a message waits behind the held batch. Its
    successor is given the held batch back first, and waits on its row locks until the
    frozen one's late commit (fencing off: it is not evicted). Only a message the frozen one
    had not begun lets the successor's effects overlap that commit: when the held batch and
    what the frozen one handled but had not yet acked fill its prefetch, the late commit
    comes first and overlaps nothing (the weakened run then looks valid, and rightly so).

    A message is behind the batch when it was delivered after the hold (a batch is made
    before its first effect), or when more messages are delivered and not handled than one
    batch holds (``World.ack_batch``): with a backlog the prefetch fills before the hold.
    An effect with nothing behind it is let go and the next one held, up to
    ``HOLD_ATTEMPTS`` times."""
    for _ in range(HOLD_ATTEMPTS):
        victim = _inside_effect(w)
        try:
            w.until(f"a delivery to {victim.name} behind its held effect",
                    functools.partial(_work_behind, w, victim, time.time()), BEHIND_WAIT_S)
        except ChaosTimeout:
            victim.tell("continue")
            continue
        return victim
    raise ChaosTimeout(f"no effect held with a delivery behind it in {HOLD_ATTEMPTS} tries")


def _work_behind(w: World, victim: ActorProcess, held: float) -> bool:
    return w.recorded(victim.name, Deliver, held) \
        or len(_unhandled(w.events(victim.name))) > w.ack_batch


_HANDLED = frozenset({Commit.KIND, DuplicateSkipped.KIND, CommitRejected.KIND, Reject.KIND})


def _unhandled(events: list[dict[str, Any]]) -> set[str]:
    """Messages a consumer was delivered on its current connection and has not handled
    (committed, skipped, refused or rejected) yet."""
    pending: set[str] = set()
    for event in events:
        kind = event.get("type")
        if kind == Connected.KIND:
            pending.clear()  # what the last connection held is the broker's again
        elif kind == Deliver.KIND:
            pending.add(event["msg"])
        elif kind in _HANDLED:
            pending.discard(event.get("msg", ""))
    return pending


def publisher_reset(w: World) -> None:
    """Confirms stop coming back (the broker still enqueues), then the connection is reset:
    the publisher retransmits what it never saw confirmed, marked, and some of it twice."""
    w.wait_committed(w.at_fraction(0.1, 0.3))
    publisher = w.publishers[0]
    since = time.time()
    with toxic(w, [publisher], "timeout", ("downstream",), timeout=0):
        w.pause(w.rng.uniform(0.3, 1.0))
        with toxic(w, [publisher], "reset_peer", ("upstream",), timeout=0):
            w.wait_event(publisher.name, ConnectionLost, since, 30)


def kill_queue_node(w: World) -> None:
    """SIGKILL the node leading the queue (a quorum queue's leader, a mirrored queue's
    master) while publishing and consuming, and start it again. The queue was declared by
    the first consumer, so it leads from that consumer's node, and that consumer is the
    active one: the kill takes its connection inside an effect (a mirrored queue's other
    consumers get the broker's ``basic.cancel``). A second publisher then checks the cluster
    serves again once the node is back."""
    w.wait_committed(w.at_fraction(0.2, 0.4))
    node = w.queue_node()
    victim = _inside_effect(w)
    with w.nemesis.fault("kill_node", f"node{node}"):
        w.cluster.kill(node)
        victim.tell("continue")
        w.pause(w.rng.uniform(1.0, 3.0))
        w.cluster.start(node, timeout=w.bound(120))
    w.start_publisher(len(w.publishers), messages=max(10, w.settings.messages // 5))


def _mirror(cluster: LocalCluster, queue: str) -> None:
    cluster.management().put_policy(queue, f"^{queue}$",
                                    {"ha-mode": "all", "ha-sync-mode": "automatic"},
                                    priority=10)


def _degraded(kind: str, **choices: tuple[float, float]) -> Body:
    def body(w: World) -> None:
        w.wait_committed(w.at_fraction(0.1, 0.3))
        attributes = {name: round(w.rng.uniform(*span)) for name, span in choices.items()}
        clients = [*w.live_consumers(), *w.publishers]
        with toxic(w, clients, kind, ("downstream", "upstream"), **attributes):
            w.pause(w.rng.uniform(0.5, 1.5))
            _reset_active(w)
            w.pause(w.rng.uniform(0.5, 1.5))
    body.__doc__ = (f"Every client link under {kind} ({', '.join(choices)}), and the active "
                    "consumer's connection dropped while it is so.")
    return body


def rolling_handover(w: World) -> None:
    """Each consumer restarted in turn with a graceful stop, twice round, spread over the
    messages so that every restart happens while messages flow."""
    restarts = 2 * len(w.consumers)
    step = max(1, w.settings.messages // (restarts + 2))
    for n in range(restarts):
        slot = sorted(w.consumers)[n % len(w.consumers)]
        w.wait_committed(min(w.settings.messages, (n + 1) * step))
        process = w.consumers[slot]
        with w.nemesis.fault("graceful_restart", process.name):
            w.restart(process).wait_for(
                "subscription", lambda p: p.role in ("waiting", "active"), w.bound(60))


def handover_backlog(w: World) -> None:
    """The active consumer held inside an effect while a publisher goes on, so a backlog
    builds and its prefetch (``RunSettings.prefetch``) fills; its graceful stop begins there
    (SIGTERM), then the effect ends: the stop finishes that batch, acks it and hands over
    with a prefetch-worth unstarted. The next consumer must go on with the first message the
    stopped one did not finish, in order. Twice, so that each consumer hands over once."""
    for low, high in ((0.2, 0.35), (0.5, 0.65)):
        w.wait_committed(w.at_fraction(low, high))
        # Messages flow (the first publisher may be done by the second round) and keep
        # coming while the victim is held: a backlog behind its full prefetch.
        w.start_publisher(len(w.publishers), messages=max(10, w.settings.messages // 2))
        victim = _inside_effect(w)
        w.pause(w.rng.uniform(0.5, 1.0))
        slot = next(s for s, p in w.consumers.items() if p is victim)
        _stop_in_effect(w, victim)
        w.start_consumer(slot).wait_for(
            "subscription", lambda p: p.role in ("waiting", "active"), w.bound(60))


def _stop_in_effect(w: World, victim: ActorProcess) -> None:
    """The graceful stop of ``victim``, held inside an effect: begun (SIGTERM), then the
    effect let go; until the process has ended."""
    with w.nemesis.fault("graceful_stop", victim.name):
        stopping = threading.Thread(target=w.stop_consumer, args=(victim,))
        stopping.start()
        w.until(f"{victim.name}'s stop to begin",
                lambda: victim.role == "stopping" or not victim.alive, 30)
        victim.tell("continue")
        stopping.join()


def flapping(w: World) -> None:
    """Three to five client faults drawn from the list above, at random moments, a consumer
    reset first (so there is always a redelivery). Another publisher joins whenever the
    published messages are nearly all handled, so every fault meets messages in flight."""
    faults = [_reset_active, _freeze_active, _blackhole_active]
    plan = [_reset_active, *(w.rng.choice(faults) for _ in range(w.rng.randint(2, 4)))]
    for fault in plan:
        _keep_flowing(w)
        w.pause(w.rng.uniform(0.2, 1.0))
        fault(w)



def _blackhole_active(w: World) -> None:
    victim = w.active()
    since = time.time()
    with toxic(w, [victim], "timeout", ("downstream", "upstream"), timeout=0):
        w.wait_event(victim.name, ConnectionLost, since, 60)


def _freeze_active(w: World, held: ActorProcess | None = None) -> None:
    """SIGSTOP inside an effect (``held``'s, or the next one's); the broker hands over
    after missed heartbeats; SIGCONT soon after, so the zombie's commit races its
    successor's (fencing must refuse it)."""
    victim = held if held is not None else _inside_effect(w)
    with w.nemesis.fault("sigstop", victim.name):
        victim.signal(signal.SIGSTOP)
        victim.tell("continue")  # read only once thawed
        w.active(other_than=victim)
        w.pause(w.rng.uniform(0.0, 0.5))
        victim.signal(signal.SIGCONT)


# ---------------------------------------------------------------------- partitions


CUT_ATTEMPTS = 3
"""Cuts tried until one costs the active consumer its queue (``_cut_around_effect``)."""


GrudgeOf = Callable[[list[int], int], Grudge]
"""A cut, given the cluster's nodes and the active consumer's node."""


def _cut_around_effect(w: World, grudge_of: GrudgeOf, last: GrudgeOf | None = None,
                       attempts: int = CUT_ATTEMPTS) -> None:
    """Cut links (``grudge_of(nodes, the active consumer's node)``) while the active
    consumer is inside an effect; let it go on once another consumer took over or its own
    connection was closed (pause_minority pauses a node that lost the majority); heal after
    a seeded while; publish more once the cluster is whole again. A cut that only paused
    another node (4.0.5 pauses one end of a one-way cut, not always the consumer's, whose
    node then keeps a majority and its consumer the queue) is healed and made again, up to
    ``attempts`` times, the consumer held inside its effect meanwhile; the last time
    with ``last``'s cut, when given (one the consumer's node cannot come through)."""
    w.wait_committed(w.at_fraction(0.2, 0.4))
    victim = _inside_effect(w)
    node = w.node_of(victim)
    since = time.time()
    nodes = [n.index for n in w.cluster.nodes]

    def moved() -> bool:
        return any(p.role == "active" for p in w.live_consumers() if p is not victim) \
            or w.recorded(victim.name, ConnectionLost, since)

    for attempt in range(1, attempts + 1):
        cut = last if attempt == attempts and last is not None else grudge_of
        with w.partition(cut(nodes, node)):
            w.until(f"a handover, {victim.name}'s connection closed or a node paused",
                    lambda: moved() or not all(amqp_ready(n.amqp_port, host=n.host)
                                               for n in w.cluster.nodes), 60)
            held = w.cluster.node(node)
            if attempt < attempts and not moved() and amqp_ready(held.amqp_port,
                                                                     host=held.host):
                continue  # another node paused: heal, wait for a whole cluster, cut again
            victim.tell("continue")
            w.pause(w.rng.uniform(1.0, 3.0))
        break
    w.start_publisher(len(w.publishers), messages=max(10, w.settings.messages // 5))


def partition_consumer_node(w: World) -> None:
    """The active consumer's node cut off from the other two: it loses the queue's majority,
    the broker activates the waiting consumer on the majority side."""
    _cut_around_effect(w, lambda nodes, node: isolate(node, nodes))


def partition_one_way(w: World) -> None:
    """Packets from another node to the active consumer's node are dropped, the other way
    flows: a partial partition, which RabbitMQ 3.10 answers by pausing both ends, 4.0.5 by
    pausing one, mostly the end that stops hearing the other (the consumer's here: 6 of 7
    times measured; cut the other way round, its node kept a majority and the consumer went
    on, with nothing to redeliver). Which end pauses is a race between the two ends'
    tick timeouts, and a busy host loses it for the consumer's node several times in a
    row: the last attempt drops the packets of both other nodes to the consumer's node,
    still one way, and a node that hears no one is the minority that pauses."""
    _cut_around_effect(
        w, lambda nodes, node: one_way(next(n for n in nodes if n != node), node),
        last=lambda nodes, node: functools.reduce(
            operator.or_, (one_way(n, node) for n in nodes if n != node)))


def partition_majorities_ring(w: World) -> None:
    """Every node sees a majority, no two the same one (Jepsen's majorities ring). The node
    that pauses is mostly not the consumer's (whose consumer then keeps the queue); a ring
    that left the consumer's node serving it is healed and followed by a cut of that node
    from both others, so that every run meets a handover inside an effect."""
    _cut_around_effect(w, lambda nodes, node: majorities_ring(
        [node, *(n for n in nodes if n != node)]), last=lambda nodes, node: isolate(node, nodes),
        attempts=2)


def partition_leader(w: World) -> None:
    """The queue's leader (node 1, the publisher's) cut off while the consumers work on the
    majority side. Its confirms were held back just before: the publisher, closed by the
    paused node, retransmits what the leader had already committed."""
    w.wait_committed(w.at_fraction(0.1, 0.3))
    publisher = w.publishers[0]
    leader = w.queue_node()
    nodes = [n.index for n in w.cluster.nodes]
    since = time.time()
    old = w.cluster.node(leader)
    with toxic(w, [publisher], "timeout", ("downstream",), timeout=0):
        w.pause(w.rng.uniform(0.3, 1.0))
        with w.partition(isolate(leader, nodes)):
            w.until("pause of the old leader", lambda: not amqp_ready(
                old.amqp_port, host=old.host), 60)
    w.wait_event(publisher.name, ConnectionLost, since, 60)
    w.start_publisher(len(w.publishers), messages=max(10, w.settings.messages // 5))


# ---------------------------------------------------------------------- the ZooKeeper guard


def zk_session_expiry(w: World) -> None:
    """The leading consumer, inside an effect whose batch holds row locks, is cut off from
    ZooKeeper (its connections reset, or black-holed: a seeded choice) past its lease, while
    messages flow: ZooKeeper expires its session, the standby wins the election with a newer
    token and subscribes (the queue has no native single active consumer: only the guard
    kept it off) and works. Then the old leader's effect ends, and its commit must be
    refused; the link heals, the old leader hears that its session is gone, gives its
    channel up (what it held goes back to the queue) and contends again."""
    w.wait_committed(w.at_fraction(0.2, 0.4))
    victim = _inside_effect(w)
    since = time.time()
    with zk_cut(w, victim, w.rng.choice(["reset", "blackhole"])):
        w.start_publisher(len(w.publishers), messages=max(10, w.settings.messages // 2))
        w.until("the new leader's first effect", lambda: any(
            w.recorded(p.name, Commit, since) for p in w.live_consumers()
            if p is not victim), 60)
        victim.tell("continue")
        w.until(f"{victim.name}'s late commit, refused or not", lambda: any(
            w.recorded(victim.name, kind, since) for kind in (CommitRejected, Commit)), 30)
        w.pause(w.rng.uniform(0.0, 0.5))
    w.until(f"{victim.name} to stand by", lambda: victim.role == "waiting", 60)


def evict_frozen(w: World) -> None:
    """The leading guarded consumer of a native single-active queue frozen (SIGSTOP) inside
    its effect: its lease runs out, the standby wins with a newer token and has the broker
    close the frozen one's connection (the management API), so the broker hands it the
    queue and what the frozen one held at once, not after missed heartbeats. Thawed soon
    after, the old leader reads why its connection closed, steps down, and its late commit
    must be refused; it contends again."""
    w.wait_committed(w.at_fraction(0.2, 0.4))
    victim = _inside_effect(w)
    since = time.time()
    with w.nemesis.fault("sigstop", victim.name):
        victim.signal(signal.SIGSTOP)
        victim.tell("continue")  # read only once thawed
        w.start_publisher(len(w.publishers), messages=max(10, w.settings.messages // 2))
        successor = w.active(other_than=victim)
        w.wait_event(successor.name, Evict, since, 30)
        w.pause(w.rng.uniform(0.0, 0.5))
        victim.signal(signal.SIGCONT)
    w.until(f"{victim.name} to stand by", lambda: victim.role == "waiting", 60)


# ---------------------------------------------------------------------- a federated queue


def _federated_start(w: World) -> None:
    """A publisher on the second cluster too, and both federation links running."""
    w.start_publisher(1, side=1)
    w.until("both federation links running", lambda: links_running(w.clusters, w.queue), 60)


def zk_leader_freeze(w: World) -> None:
    """The leading consumer, inside an effect whose batch holds row locks, is stopped
    (SIGSTOP): its ZooKeeper session expires after the lease, the consumer on the other
    cluster wins the election with a newer token and subscribes there, and federation
    brings it what a publisher started now on the frozen one's cluster publishes (and what
    the frozen one had prefetched, once the broker gives up on it). Thawed, the old
    leader's commit must be refused; it hears that its session is gone and stands by."""
    _federated_start(w)
    w.wait_committed(w.at_fraction(0.2, 0.4))
    victim = _inside_effect(w)
    side = w.side_of(victim)
    since = time.time()
    with w.nemesis.fault("sigstop", victim.name, side=side):
        victim.signal(signal.SIGSTOP)
        victim.tell("continue")  # read only once thawed
        others = [p for p in w.live_consumers() if p is not victim]
        w.until("the new leader's first effect", lambda: any(
            w.recorded(p.name, Commit, since) for p in others), 60)
        mover = w.start_publisher(len(w.publishers), max(10, w.settings.messages // 4), side)
        w.pause(w.rng.uniform(0.0, 0.5))
        victim.signal(signal.SIGCONT)
    # Its late commit is refused, or goes through (fencing off), or is given up: a successor
    # that evicted it closed its store connection, and its session is found lost while it
    # tries again (it then gives its channel up, acking nothing).
    w.until(f"{victim.name}'s late commit, refused, made or given up", lambda: any(
        w.recorded(victim.name, kind, since)
        for kind in (CommitRejected, Commit, ConnectionLost)), 30)
    w.until(f"a message of {mover.name} (on {victim.name}'s cluster) handled on the other",
            lambda: _committed(w, others, f"{mover.name}-"), 60)
    w.until(f"{victim.name} to stand by", lambda: victim.role == "waiting", 60)


def federation_link_reset(w: World) -> None:
    """The federation link into the active consumer's cluster has its acks to the other
    cluster held back (the messages it moved are not yet acked there), then its
    connections cut: the other cluster gives those messages to the link again when it
    reconnects, and they arrive a second time (federation is at least once).

    The acks are delayed (a latency toxic), not blocked: on 4.0 the link asks the other
    cluster for messages with credit sent the same way, and a link that can send nothing
    moves nothing. A publisher on the other cluster starts with the delay and goes on for
    ``MOVER_SPAN_S``, so the link keeps moving messages whose acks are still on their way;
    the cut comes once the link's channel on the other cluster reports one unacked (the
    queue's own count, refreshed on its leader's 5 s tick, could miss them). Waiting for one
    of them to be handled instead was not enough: behind a backlog, its ack had arrived by
    then, and a cut with nothing unacked moves nothing twice. The cut is a ``timeout`` toxic
    added and removed (removing one closes the connection at once, whether or not data
    flows, dropping what the latency still holds), not ``reset_peer``, which waits for the
    next data in its direction: an idle link may send none before its acks arrive."""
    _federated_start(w)
    w.wait_committed(w.at_fraction(0.2, 0.4))
    side = w.side_of(w.active())
    link = link_actor(side)
    delay_ms = w.rng.randint(1500, 2500)
    with w.nemesis.fault("cut", link, held_back="acks", delay_ms=delay_ms):
        labels = [w.proxy.add(link, "latency", stream="upstream",
                              attributes={"latency": delay_ms, "jitter": 0})]
        try:
            count = max(30, w.settings.messages // 4)
            w.start_publisher(len(w.publishers), count, 1 - side, rate=count / MOVER_SPAN_S)
            w.until("a message moved, its ack held back",
                    lambda: unacked(w.clusters[1 - side], w.queue) > 0, EFFECT_WAIT_S)
            w.pause(w.rng.uniform(0.0, 0.3))
            labels.append(w.proxy.add(link, "timeout", stream="upstream",
                                      attributes={"timeout": 0}, name="cut"))
        finally:
            for label in reversed(labels):
                w.proxy.remove(link, label)
    w.until("both federation links running again",
            lambda: links_running(w.clusters, w.queue), 60)
    # The run ends once every published message is handled: without this wait it could
    # end before the link, reconnected, moves the unacked messages a second time, or
    # while the second copy waits in a consumer's prefetch (taken, not yet handled: the
    # consumers stop, it goes back unhandled, and nothing shows the duplicate). Any
    # message: those unacked at the cut may be an earlier publisher's, not the mover's.
    w.until("a message moved a second time and handled again", lambda: _handled_twice(w), 60)


def _committed(w: World, consumers: list[ActorProcess], prefix: str,
               since: float = 0.0) -> bool:
    """Whether one of ``consumers`` committed a message whose id starts with ``prefix``
    (at or after ``since``)."""
    return any(e.get("type") == Commit.KIND and str(e.get("msg")).startswith(prefix)
               and float(e.get("ts", 0)) >= since
               for p in consumers for e in w.events(p.name))


def _handled_twice(w: World) -> bool:
    """Whether some message was handled twice by the consumers: committed twice (no
    dedup), or committed and then found a duplicate (skipped after a lookup, or refused at
    its commit). A second delivery alone is not enough: it may still wait in a prefetch."""
    seen: set[str] = set()
    for process in w.live_consumers():
        for event in w.events(process.name):
            kind = event.get("type")
            if kind in (Commit.KIND, DuplicateSkipped.KIND) or (
                    kind == CommitRejected.KIND and event.get("why") == "duplicate"):
                msg = str(event.get("msg"))
                if msg in seen:
                    return True
                seen.add(msg)
    return False


def _declare_on_first_node(cluster: LocalCluster, queue: str) -> None:
    """The queue declared (as the SDK declares it) through node 1, which then leads it."""
    settings = QueueSettings(queue)
    cluster.management(cluster.nodes[0]).put_queue(queue, arguments=settings.arguments())


SCENARIOS: dict[str, Scenario] = {
    s.name: s for s in [
        Scenario("consumer-reset", "reset_peer on the active consumer's connection "
                 "mid-stream", consumer_reset, "dedup-off", ("duplicated",)),
        Scenario("consumer-blackhole", "timeout 0 on the active consumer's link: "
                 "client-side detection", consumer_blackhole, "dedup-off", ("duplicated",)),
        Scenario("consumer-freeze", "SIGSTOP the active consumer inside its effect, "
                 "SIGCONT after the handover", consumer_freeze, "fencing-off",
                 ("concurrent", "duplicated"), store="postgres", short_batches=True),
        Scenario("publisher-reset", "the publisher's connection dropped between publish "
                 "and confirm", publisher_reset, "redelivered-only", ("duplicated",)),
        Scenario("leader-kill", "SIGKILL of the quorum queue leader's node",
                 kill_queue_node, "dedup-off", ("duplicated",)),
        Scenario("latency", "every client link slowed", _degraded(
            "latency", latency=(50, 300), jitter=(0, 50)), "dedup-off", ("duplicated",)),
        Scenario("slicer", "every client link cut into small pieces", _degraded(
            "slicer", average_size=(8, 64), size_variation=(0, 8), delay=(0, 200)),
                 "dedup-off", ("duplicated",)),
        Scenario("bandwidth", "every client link throttled", _degraded(
            "bandwidth", rate=(16, 64)), "dedup-off", ("duplicated",)),
        Scenario("mirrored-failover", "classic mirrored queue, master's node killed",
                 kill_queue_node, "dedup-off", ("duplicated",), queue_type="classic",
                 prepare=_mirror, rabbitmq="3.10",
                 rabbitmq_why="RabbitMQ 4.0 removed classic queue mirroring (it refuses "
                              "ha-mode policies)"),
        Scenario("rolling-handover", "consumers restarted one after another, gracefully",
                 rolling_handover, "dedup-off", ()),
        Scenario("handover-backlog", "the active consumer stopped gracefully with a "
                 "backlog and a full prefetch, twice", handover_backlog, "cancel-first",
                 ("reordered",)),
        Scenario("flapping", "random client faults at random times", flapping,
                 "dedup-off", ("duplicated",)),
        Scenario("partition-consumer-node", "the active consumer's node cut off from the "
                 "other two, then healed", partition_consumer_node, "dedup-off",
                 ("duplicated",), network="netns"),
        Scenario("partition-leader", "the queue leader's node cut off (confirms held back "
                 "just before)", partition_leader, "redelivered-only", ("duplicated",),
                 network="netns", prepare=_declare_on_first_node),
        Scenario("partition-majorities-ring", "every node sees a majority, no two the same",
                 partition_majorities_ring, "dedup-off", ("duplicated",), network="netns"),
        Scenario("partition-one-way", "another node cannot send to the active consumer's node",
                 partition_one_way, "dedup-off", ("duplicated",), network="netns"),
        Scenario("zk-session-expiry", "the guarded leader cut off from ZooKeeper inside an "
                 "effect until its session expires; a plain queue", zk_session_expiry,
                 "fencing-off", ("concurrent",), store="postgres", guard=True,
                 single_active=False),
        Scenario("evict-frozen", "the guarded leader of a native single-active queue "
                 "frozen inside an effect; its successor evicts its connection once its "
                 "lease expires", evict_frozen, "fencing-off", ("concurrent",),
                 store="postgres", guard=True, evict=True),
        Scenario("zk-leader-freeze", "SIGSTOP of the guarded leader on a queue federated "
                 "between two clusters; the other cluster's consumer takes over",
                 zk_leader_freeze, "fencing-off", ("concurrent", "duplicated"),
                 store="postgres", guard=True, single_active=False, federated=True),
        Scenario("federation-link-reset", "the federation link into the active consumer's "
                 "cluster reset with its acks held back", federation_link_reset,
                 "dedup-off", ("duplicated",), store="postgres", guard=True,
                 single_active=False, federated=True),
    ]
}
