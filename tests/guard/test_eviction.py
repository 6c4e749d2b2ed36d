"""Lease eviction against real servers: the session's RabbitMQ cluster, the short-tick
ZooKeeper, PostgreSQL, both SDK faces.

A leader frozen (SIGSTOP) inside its effect on a native single-active queue loses its lease;
the standby wins with a newer token and has the broker close the frozen one's connection, so
it takes over within the lease and a moment instead of the heartbeats' 2-3 intervals; nothing
is done twice, and once thawed the old leader consumes nothing (its late commit is refused, it
contends again). A live leader is never evicted: a standby closes nothing, nor does a leader
whose group's record holds a newer token. With the management API down the takeover still
happens, by heartbeat, and the failed eviction is on record. A forged record (the group's
nodes open to anyone) naming a stranger's connection closes nothing: only a consumer of the
leader's own queue, in its vhost, under its user is ever evicted. Every wait is on a
condition."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pika
import pika.exceptions
import pytest
from kazoo.client import KazooClient

from sac.chaos._process import ActorProcess
from sac.chaos.actors import Sink
from sac.sdk import (
    ConnectionSettings,
    ConsumerSettings,
    Delivery,
    GuardSettings,
    LeaderRecord,
    Management,
    ManagementSettings,
    QueueSettings,
    Role,
)
from sac.sdk._core.eviction import names_one_instance
from sac.server import LocalCluster, LocalPostgres, LocalZooKeeper
from tests.guard.test_guard import guard_of, leads, publish
from tests.helpers import wait_until
from tests.sdk.conftest import consumer_actor
from tests.sdk.faces import ConsumerFace, PublisherFace

WAIT = 30.0
LEASE = 1.0
HEARTBEAT = 5
"""The broker notices a frozen consumer 2-3 heartbeats after it froze: 10-15 s."""


def events(tmp_path: Path, actor: str, kind: str) -> list[dict[str, Any]]:
    path = tmp_path / "events" / f"{actor}.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("type") == kind]


def guarded_actor(tmp_path: Path, name: str, face: str, queue: str, cluster: LocalCluster,
                  zookeeper: LocalZooKeeper, group: str, sink: Sink,
                  management: tuple[str, ...]) -> ActorProcess:
    spec = consumer_actor(tmp_path, name, face, queue, cluster.urls(), heartbeat=HEARTBEAT,
                          dedup="inbox", sink=sink.location, prefetch=10,
                          guard_hosts=zookeeper.hosts, guard_group=group, guard_lease=LEASE,
                          management_urls=management)
    return ActorProcess.start(spec)


def frozen_leader_run(
    tmp_path: Path, face: str, queue: str, cluster: LocalCluster, zookeeper: LocalZooKeeper,
    postgres: LocalPostgres, group: str, publishers: Callable[..., PublisherFace],
    conn: ConnectionSettings, management: tuple[str, ...],
) -> tuple[float, ActorProcess, ActorProcess, Sink, list[str]]:
    """A leads, B stands by, A freezes inside an effect: seconds to B's activity, both
    processes (A still frozen), the sink and the ids published."""
    (tmp_path / "events").mkdir(exist_ok=True)
    sink = Sink(postgres.create_database(f"evict_{uuid.uuid4().hex[:10]}"))
    sink.create()
    a = guarded_actor(tmp_path, "consumer-a", face, queue, cluster, zookeeper, group, sink,
                      management)
    a.expect("role", WAIT, role=Role.WAITING.value)
    wait_until(lambda: events(tmp_path, "consumer-a", "subscribed"), WAIT, "a to lead")
    b = guarded_actor(tmp_path, "consumer-b", face, queue, cluster, zookeeper, group, sink,
                      management)
    b.expect("role", WAIT, role=Role.WAITING.value)
    ids = publish(publishers, face, conn, QueueSettings(queue), 30, "m")
    a.tell("freeze")
    a.expect("in_effect", WAIT)
    froze = time.monotonic()
    a.signal(signal.SIGSTOP)
    a.tell("continue")  # read once thawed
    active = b.expect("role", WAIT, role=Role.ACTIVE.value)
    return float(active["monotonic"]) - froze, a, b, sink, ids


def test_a_frozen_leader_is_evicted_and_its_successor_takes_over_within_the_lease(
    face: str, conn: ConnectionSettings, queue_name: str, group: str, tmp_path: Path,
    cluster: LocalCluster, zookeeper_short_tick: LocalZooKeeper, postgres: LocalPostgres,
    publishers: Callable[..., PublisherFace],
) -> None:
    management = tuple(cluster.management_urls())
    took, a, b, sink, ids = frozen_leader_run(
        tmp_path, face, queue_name, cluster, zookeeper_short_tick, postgres, group,
        publishers, conn, management)
    try:
        # Natively the broker would wait 2-3 heartbeats (10-15 s): only the eviction is
        # this quick.
        assert took < 2 * HEARTBEAT, f"B became active {took:.1f} s after A froze"
        # Recorded once the API answered, which may be after the broker moved on.
        evicted = wait_until(lambda: events(tmp_path, "consumer-b", "evict"), WAIT,
                             "B's eviction on record")
        assert [(e["outcome"], e["closed"]) for e in evicted] == [("closed", 1)]
        assert evicted[0]["connection"].startswith("sac-chaos-consumer-a#sac-")
        assert names_one_instance(evicted[0]["connection"])
        assert evicted[0]["previous_token"] < evicted[0]["token"]
        wait_until(lambda: set(ids) <= sink.distinct(), WAIT, "B to handle every message")

        thawed = time.time()
        a.signal(signal.SIGCONT)
        # Thawed, A reads why its connection closed and steps down; its late commit is
        # refused (or, its store connection ended by B's claim, given up unacked).
        wait_until(lambda: a.role == Role.WAITING.value, WAIT, "A to contend again")
        more = publish(publishers, face, conn, QueueSettings(queue_name), 20, "more")
        wait_until(lambda: set(more) <= sink.distinct(), WAIT, "B to handle the rest")
        rows = list(sink.rows())
        counts = Counter(str(r["msg"]) for r in rows)
        assert [m for m, n in counts.items() if n > 1] == []  # nothing done twice
        assert set(counts) == set(ids + more)
        assert [r for r in rows if r["actor"] == "consumer-a" and r["ts"] >= thawed] == []
        assert [e for e in events(tmp_path, "consumer-a", "commit") if e["ts"] >= thawed] == []
        assert [e for e in events(tmp_path, "consumer-a", "deliver")
                if e["ts"] >= thawed] == []  # A, thawed, is handed nothing
        assert a.alive
    finally:
        b.close()
        a.close()


def test_with_the_management_api_down_the_takeover_waits_for_the_heartbeats(
    conn: ConnectionSettings, queue_name: str, group: str, tmp_path: Path,
    cluster: LocalCluster, zookeeper_short_tick: LocalZooKeeper, postgres: LocalPostgres,
    publishers: Callable[..., PublisherFace],
) -> None:
    """An API that refuses connections: B leads, its eviction fails and is logged, and the
    broker hands the queue over once A's heartbeats are missed."""
    down = ("http://guest:guest@127.0.0.1:1",)
    took, a, b, sink, ids = frozen_leader_run(
        tmp_path, "blocking", queue_name, cluster, zookeeper_short_tick, postgres, group,
        publishers, conn, down)
    try:
        assert took >= 2 * HEARTBEAT - 1, f"B active {took:.1f} s after A froze, by heartbeat?"
        evicted = wait_until(lambda: events(tmp_path, "consumer-b", "evict"), WAIT,
                             "B's failed eviction on record")
        assert [e["outcome"] for e in evicted] == ["failed"]
        assert "could not evict" in b.log_path.read_text()
        wait_until(lambda: set(ids) <= sink.distinct(), WAIT, "B to handle every message")
        counts = Counter(str(r["msg"]) for r in sink.rows())
        assert [m for m, n in counts.items() if n > 1] == []
    finally:
        b.close()
        a.close()


def _connection_of(api: Management, prefix: str) -> str:
    found = wait_until(lambda: [c.client_name for c in api.connections()
                                if c.client_name is not None
                                and c.client_name.startswith(prefix)], WAIT,
                       f"a connection named {prefix}...")
    assert len(found) == 1, found
    return found[0]


def test_a_live_leader_is_never_evicted(
    face: str, conn: ConnectionSettings, queue_name: str, group: str, cluster: LocalCluster,
    zookeeper_short_tick: LocalZooKeeper, consumers: Callable[..., ConsumerFace],
    publishers: Callable[..., PublisherFace],
) -> None:
    """A leads; a standby of its group closes nothing while A's lease holds; a consumer of
    another group whose record names A's connection with a newer token than its own wins
    and closes nothing either. A keeps its connection and handles everything."""
    management = ManagementSettings(tuple(cluster.management_urls()),
                                    statistics_interval=1.0)
    api = Management(management)
    queue = QueueSettings(queue_name)
    guard = GuardSettings(zookeeper_short_tick.hosts, group, session_timeout=LEASE)

    def idle(_delivery: Delivery) -> None:
        pass

    def settings(name: str, group_guard: GuardSettings) -> ConsumerSettings:
        return ConsumerSettings(ConnectionSettings(conn.urls, heartbeat=2, name=f"{group}-{name}"),
                                queue, consumer_name=name, guard=group_guard,
                                management=management)

    a = consumers(face, settings("a", guard), idle).start()
    wait_until(lambda: leads(a), WAIT, "a to lead")
    a_connection = _connection_of(api, f"{group}-a#sac-")
    b = consumers(face, settings("b", guard), idle).start()
    wait_until(lambda: b.role is Role.WAITING, WAIT, "b to contend")

    # A record naming A's connection with a token no election of this ZooKeeper reaches yet.
    other = f"{group}-other"
    zk = KazooClient(hosts=zookeeper_short_tick.hosts)
    zk.start(timeout=10)
    try:
        zk.create(f"{other}/leader", LeaderRecord(
            token=2**62, consumer="a", connection=a_connection).encode(),
                  makepath=True)
    finally:
        zk.stop()
        zk.close()
    c = consumers(face, settings("c", attrs.evolve(guard, group=other)), idle).start()
    wait_until(lambda: leads(c), WAIT, "c to lead its own group")
    leadership = guard_of(c).leadership
    assert leadership is not None
    assert leadership.previous is None

    ids = publish(publishers, face, conn, queue, 20, "m")
    wait_until(lambda: a.count() == 20, WAIT, "a, still the active one, to handle all")
    assert a_connection in {conn_.client_name for conn_ in api.connections()}
    assert b.count() == 0
    assert c.count() == 0
    assert sorted(a.handled) == sorted(ids)
    assert leads(a)
    assert not leads(b)


def _forge_record(zookeeper: LocalZooKeeper, group: str, record: LeaderRecord) -> None:
    """What anyone who reaches ZooKeeper can do to a group without ``GuardSettings.auth``."""
    zk = KazooClient(hosts=zookeeper.hosts)
    zk.start(timeout=10)
    try:
        zk.create(f"{group}/leader", record.encode(), makepath=True)
    finally:
        zk.stop()
        zk.close()


@pytest.mark.parametrize("stranger", ["consuming another queue", "of another user, on this queue"])
def test_a_forged_record_never_closes_a_strangers_connection(
    stranger: str, face: str, conn: ConnectionSettings, queue_name: str, group: str,
    cluster: LocalCluster, zookeeper_short_tick: LocalZooKeeper,
    consumers: Callable[..., ConsumerFace], caplog: pytest.LogCaptureFixture,
) -> None:
    """A predecessor's record forged in the group names a stranger's connection, under a
    name a guarded consumer's could have (an instance id). The new leader finds the
    connection but it is not a consumer of the leader's queue under the leader's user: it
    stays open, and the leader's log says why."""
    caplog.set_level(logging.INFO, logger="sac")
    management = ManagementSettings(tuple(cluster.management_urls()), statistics_interval=1.0)
    api = Management(management)
    queue = QueueSettings(queue_name)
    name = f"{group}-stranger#sac-0123456789abcdef"
    url, user = cluster.urls()[0], None
    if stranger.startswith("of another user"):
        user = f"stranger-{uuid.uuid4().hex[:8]}"
        cluster.ctl(cluster.nodes[0], "add_user", user, "stranger-pw")
        cluster.ctl(cluster.nodes[0], "set_permissions", "-p", "/", user, ".*", ".*", ".*")
        url = f"amqp://{user}:stranger-pw@{cluster.nodes[0].address}/%2F"
    params = pika.URLParameters(url)
    params.client_properties = {"connection_name": name}
    strange = pika.BlockingConnection(params)
    try:
        channel = strange.channel()
        if user is None:
            target = channel.queue_declare("", exclusive=True).method.queue
        else:
            target = queue_name
            channel.queue_declare(queue_name, durable=True, arguments=queue.arguments())
        channel.basic_consume(target, lambda *_: None)
        # Listed, as the new leader will look it up (the API's statistics lag).
        wait_until(lambda: any(c.client_name == name for c in api.connections()), WAIT,
                   "the stranger's connection listed")
        if user is not None:
            wait_until(lambda: api.queue(queue_name).consumers, WAIT,
                       "the stranger listed as the queue's consumer")
        _forge_record(zookeeper_short_tick, group,
                      LeaderRecord(token=1, consumer="stranger", connection=name))

        def idle(_delivery: Delivery) -> None:
            pass

        c = consumers(face, ConsumerSettings(
            ConnectionSettings(conn.urls, heartbeat=2, name=f"{group}-c"), queue,
            consumer_name="c", management=management,
            guard=GuardSettings(zookeeper_short_tick.hosts, group, session_timeout=LEASE)),
            idle).start()
        wait_until(lambda: leads(c), WAIT, "c to lead")
        leadership = guard_of(c).leadership
        assert leadership is not None
        assert leadership.previous is not None
        assert leadership.previous.connection == name
        ended = wait_until(lambda: [m for r in caplog.records if (
            "evicted the previous leader" in (m := r.getMessage()) or "could not evict" in m)],
            WAIT, "c's eviction to end")
        assert len(ended) == 1
        assert f"0 connection(s) named {name!r} closed" in ended[0], ended[0]
        why = "belongs to user" if user is not None else "is not a consumer of queue"
        assert [m for r in caplog.records if "which is not closed" in (m := r.getMessage())
                and why in m]
        # Still open: a round trip on it succeeds.
        channel.queue_declare(target, passive=True)
        assert strange.is_open
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            strange.close()
        if user is not None:
            cluster.ctl(cluster.nodes[0], "delete_user", user)
