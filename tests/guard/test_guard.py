"""The ZooKeeper guard against real servers: the session's RabbitMQ cluster and ZooKeeper,
both SDK faces.

Only the leader of a group consumes; a clean stop hands over to the next contender; a lost
session (the leader cut off from ZooKeeper past its lease) abandons the in-flight work, a
successor takes a newer token, and the old leader's late commit is refused; a suspended
session pauses new work and a reconnection resumes it; bad settings and a missing kazoo are
clear errors. Every wait is on a condition, with a timeout."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from toxiproxy.proxy import Proxy

from sac.sdk import (
    ConfigurationError,
    ConnectError,
    ConnectionSettings,
    ConsumerSettings,
    Delivery,
    GuardSettings,
    GuardStatus,
    Inbox,
    MemoryStore,
    PublisherSettings,
    QueueSettings,
    Role,
    SessionState,
    SQLiteStore,
)
from sac.server import LocalCluster, LocalZooKeeper
from tests.dedup.ledger import Ledger
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace, PublisherFace

WAIT = 30.0
ROOT = Path(__file__).parents[2]


def guard_of(consumer: ConsumerFace) -> GuardStatus:
    status = consumer.blocking.guard if consumer.blocking is not None else consumer._async().guard
    assert status is not None
    return status


def token_of(consumer: ConsumerFace) -> int:
    leadership = guard_of(consumer).leadership
    assert leadership is not None
    return leadership.token


def leads(consumer: ConsumerFace) -> bool:
    return guard_of(consumer).leadership is not None


def consumer_count(cluster: LocalCluster, queue: str) -> int:
    """Subscriptions on ``queue`` now (the CLI: the management API's counts lag)."""
    node = next(n for n in cluster.nodes if cluster.is_running(n))
    out = cluster.ctl(node, "list_consumers", "queue_name", "--no-table-headers", "--quiet")
    return sum(line.strip() == queue for line in out.splitlines())


def publish(publishers: Callable[..., PublisherFace], face: str, conn: ConnectionSettings,
            queue: QueueSettings, count: int, prefix: str) -> list[str]:
    pub = publishers(face, PublisherSettings(conn, queue=queue))
    pub.start()
    return pub.publish_many([f"{prefix}-{i}".encode() for i in range(count)])


# ------------------------------------------------------------------ leadership and handover


def test_only_the_leader_consumes_and_a_clean_stop_hands_over(
    face: str, conn: ConnectionSettings, queue_name: str, group: str, cluster: LocalCluster,
    zookeeper_short_tick: LocalZooKeeper, consumers: Callable[..., ConsumerFace],
    publishers: Callable[..., PublisherFace],
) -> None:
    """On a queue without native single active consumer, so that only the guard keeps the
    second consumer off it."""
    queue = QueueSettings(queue_name, single_active_consumer=False)
    guard = GuardSettings(zookeeper_short_tick.hosts, group, session_timeout=2.0)
    work = threading.Event()

    def slow(_delivery: Delivery) -> None:
        work.wait(0.01)  # a little work per message, so the stop falls mid-stream

    a = consumers(face, ConsumerSettings(
        ConnectionSettings(conn.urls, heartbeat=2, name=f"{group}-a"), queue, prefetch=5,
        consumer_name="a", guard=guard), slow).start()
    wait_until(lambda: leads(a), WAIT, "a to lead")
    b = consumers(face, ConsumerSettings(
        ConnectionSettings(conn.urls, heartbeat=2, name=f"{group}-b"), queue, prefetch=5,
        consumer_name="b", guard=guard), slow).start()
    wait_until(lambda: b.role is Role.WAITING, WAIT, "b to stand by")
    assert not leads(b)

    first = publish(publishers, face, conn, queue, 40, "first")
    wait_until(lambda: a.count() == 40, WAIT, "a to handle the first 40")
    assert b.count() == 0
    assert b.stats.delivered == 0
    assert consumer_count(cluster, queue_name) == 1  # b never subscribed

    second = publish(publishers, face, conn, queue, 200, "second")
    wait_until(lambda: a.count() > 60, WAIT, "a to be busy with the second batch")
    a_token = token_of(a)
    a.stop()
    wait_until(lambda: leads(b), WAIT, "b to lead after a's clean stop")
    wait_until(lambda: len(set(a.handled) | set(b.handled)) == 240, WAIT,
               "every message handled")
    handled = Counter(a.handled + b.handled)
    assert set(handled) == set(first + second)
    assert [m for m, n in handled.items() if n > 1] == []  # a graceful handover: none twice
    assert b.count() > 0
    leadership = guard_of(b).leadership
    assert leadership is not None
    assert leadership.token > a_token
    assert leadership.previous is not None
    assert (leadership.previous.token, leadership.previous.consumer) == (a_token, "a")
    # The connection's name is made unique to the instance, for a successor's eviction.
    assert leadership.previous.connection is not None
    assert leadership.previous.connection.startswith(f"{group}-a#sac-")


# ------------------------------------------------------------------ a lost session


def test_a_lost_session_abandons_in_flight_work_and_its_late_commit_is_refused(
    face: str, conn: ConnectionSettings, queue: QueueSettings, group: str, tmp_path: Path,
    zookeeper_short_tick: LocalZooKeeper, zk_link: Callable[[], Proxy],
    consumers: Callable[..., ConsumerFace], publishers: Callable[..., PublisherFace],
) -> None:
    """The leader, inside an effect, is cut off from ZooKeeper past its lease (1 s): the
    server expires its session, the standby leads with a newer token; when the old leader
    hears that its session is lost it gives its channel up (the native single-active queue
    then goes to the standby), and its effect, once it ends, is refused (StaleEpoch)."""
    path = tmp_path / "dedup.db"
    ledger = Ledger(SQLiteStore(path))
    link = zk_link()
    entered, release = threading.Event(), threading.Event()

    def stuck(_delivery: Delivery) -> None:
        entered.set()
        assert release.wait(120), "the test never released the old leader's effect"

    a_inbox = Inbox(SQLiteStore(path), ledger.effect("a", stuck))
    b_inbox = Inbox(SQLiteStore(path), ledger.effect("b"))
    a = consumers(face, ConsumerSettings(
        conn, queue, consumer_name="a",
        guard=GuardSettings(link.listen, group, session_timeout=1.0)), inbox=a_inbox).start()
    wait_until(lambda: leads(a), WAIT, "a to lead")
    b = consumers(face, ConsumerSettings(
        conn, queue, consumer_name="b",
        guard=GuardSettings(zookeeper_short_tick.hosts, group, session_timeout=1.0)),
        inbox=b_inbox).start()
    try:
        ids = publish(publishers, face, conn, queue, 10, "m")
        assert entered.wait(WAIT), "a never ran its effect"
        a_token = token_of(a)

        link.disable()  # a's ZooKeeper traffic stops: suspended at once, expired after 1 s
        wait_until(lambda: guard_of(a).paused, WAIT, "a to pause")
        wait_until(lambda: leads(b), WAIT, "b to lead once a's session expired")
        assert token_of(b) > a_token
        link.enable()  # a reconnects and hears that its session is gone
        wait_until(lambda: not leads(a), WAIT, "a to step down")
        wait_until(lambda: len(ledger.rows()) == len(ids), WAIT, "b to commit every message")
    finally:
        release.set()
    wait_until(lambda: a_inbox.stats.stale == 1, WAIT, "a's late commit to be refused")
    assert Counter(ledger.rows()) == Counter((m, "b") for m in ids)
    assert a_inbox.stats.committed == 0
    wait_until(lambda: guard_of(a).session is SessionState.CONNECTED
               and not guard_of(a).paused, WAIT, "a to contend again on a new session")
    assert not leads(a)
    # a gave its channel up: it goes on, as a contender, once it has reconnected
    wait_until(lambda: a.role is Role.WAITING, WAIT, "a to wait as a contender again")
    assert not leads(a)

    b_token = token_of(b)
    b.stop()
    wait_until(lambda: leads(a), WAIT, "a to lead again after b's clean stop")
    assert token_of(a) > b_token


# ------------------------------------------------------------------ a suspended session


def test_a_suspended_session_pauses_new_work_and_reconnecting_resumes_it(
    face: str, conn: ConnectionSettings, queue: QueueSettings, group: str,
    zk_link: Callable[[], Proxy], consumers: Callable[..., ConsumerFace],
    publishers: Callable[..., PublisherFace],
) -> None:
    """Cut off from ZooKeeper for less than its lease (10 s): the running delivery finishes
    (and is acked), new ones wait in hand; back on the same session, with the same token,
    they run."""
    link = zk_link()
    entered, release = threading.Event(), threading.Event()

    def work(delivery: Delivery) -> None:
        if delivery.body == b"first-0":
            entered.set()
            assert release.wait(60), "the test never released the first delivery"

    a = consumers(face, ConsumerSettings(
        conn, queue, guard=GuardSettings(link.listen, group, session_timeout=10.0)),
        work).start()
    wait_until(lambda: leads(a), WAIT, "a to lead")
    token = token_of(a)
    try:
        first = publish(publishers, face, conn, queue, 1, "first")
        assert entered.wait(WAIT)
        link.disable()
        wait_until(lambda: guard_of(a).paused, WAIT, "a to pause")
        assert guard_of(a).session is SessionState.SUSPENDED
        later = publish(publishers, face, conn, queue, 3, "later")
        wait_until(lambda: a.stats.delivered == 4, WAIT, "the later ones to reach a")
    finally:
        release.set()
    wait_until(lambda: a.count() == 1, WAIT, "the running delivery to finish")
    wait_until(lambda: a.stats.acked == 1, WAIT, "its ack, paused or not")
    assert a.handled == first
    assert guard_of(a).paused  # nothing new started: the later ones wait in hand
    assert a.count() == 1
    link.enable()
    wait_until(lambda: a.count() == 4, WAIT, "the later ones to run once resumed")
    assert a.handled == first + later
    status = guard_of(a)
    assert status.session is SessionState.CONNECTED
    assert not status.paused
    assert token_of(a) == token  # the same session, the same leadership


# ------------------------------------------------------------------ settings and errors


def _start_fails(face: str, settings: ConsumerSettings,
                 consumers: Callable[..., ConsumerFace]) -> BaseException:
    with pytest.raises((ConfigurationError, ConnectError)) as caught:
        consumers(face, settings, lambda _d: None).start()
    return caught.value


NOWHERE = ConnectionSettings("amqp://u:p@127.0.0.1:1/")  # the guard fails before any AMQP


@pytest.mark.parametrize(("lease", "told"), [
    (2, ["GuardSettings.session_timeout=2 s is below the server's minimum", "granted 4 s"]),
    (90, ["GuardSettings.session_timeout=90 s is above the server's maximum", "granted 60 s"]),
])
def test_a_lease_the_server_does_not_grant_is_refused_at_start(
    lease: float, told: list[str], face: str, zookeeper: LocalZooKeeper, group: str,
    consumers: Callable[..., ConsumerFace],
) -> None:
    """The default server's tick is 2 s: sessions from 4 s to 60 s."""
    error = _start_fails(face, ConsumerSettings(
        NOWHERE, QueueSettings("guard-lease"),
        guard=GuardSettings(zookeeper.hosts, group, session_timeout=lease)), consumers)
    assert isinstance(error, ConfigurationError)
    for text in told:
        assert text in str(error)


def test_the_lease_asked_for_is_the_lease_granted(
    zookeeper_short_tick: LocalZooKeeper, group: str,
) -> None:
    from sac.sdk.guard import ZooKeeperGuard, identity

    sessions: list[SessionState] = []
    guard = ZooKeeperGuard(GuardSettings(zookeeper_short_tick.hosts, group, session_timeout=0.2),
                           identity("c", "conn"), on_session=sessions.append,
                           on_won=lambda _a, _l: None, on_failed=lambda _a, _e: None)
    guard.connect()
    try:
        assert guard._negotiation.granted_ms == 200
        assert sessions == [SessionState.CONNECTED]
    finally:
        guard.close()


def test_no_zookeeper_is_a_connect_error_naming_it(
    face: str, group: str, consumers: Callable[..., ConsumerFace],
) -> None:
    hosts = "127.0.0.1:1"
    error = _start_fails(face, ConsumerSettings(
        NOWHERE, QueueSettings("guard-nozk"),
        guard=GuardSettings(hosts, group, connect_timeout=1.0)), consumers)
    assert isinstance(error, ConnectError)
    assert f"ZooKeeper at {hosts}: no session within 1 s" in str(error)


def test_an_inbox_with_its_own_epoch_source_is_refused(group: str) -> None:
    inbox = Inbox(MemoryStore(), lambda _d, _tx: None, epoch_source=lambda: 7)
    settings = ConsumerSettings(NOWHERE, QueueSettings("guard-epoch"),
                                guard=GuardSettings("127.0.0.1:1", group))
    from sac.sdk import Consumer

    with pytest.raises(ConfigurationError, match="epoch_source"):
        Consumer(settings, inbox)


@pytest.mark.parametrize("group", ["", "sac", "/", "/sac/", "/sac//x", "/sac/./x", "/zookeeper"])
def test_bad_group_paths_are_refused(group: str) -> None:
    with pytest.raises(ConfigurationError, match=r"GuardSettings\.group"):
        GuardSettings("zk:2181", group)


@pytest.mark.parametrize("hosts", ["", " ", "zk:port", "zk:0", ":2181", "zk:2181,,b:1",
                                   "zk:2181/", "zk:2181/a//b"])
def test_bad_hosts_are_refused(hosts: str) -> None:
    with pytest.raises(ConfigurationError, match=r"GuardSettings\.hosts"):
        GuardSettings(hosts, "/g")


def test_good_hosts_and_groups() -> None:
    for hosts in ("zk", "zk:2181", "[::1]:2182", "a:1,b:2/chroot/x", "10.0.0.1:2181, b"):
        assert GuardSettings(hosts, "/sac/orders-1").hosts == hosts


def test_without_kazoo_the_sdk_imports_and_a_guard_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['kazoo'] = None\n"
        "from sac.sdk import (ConfigurationError, ConnectionSettings, Consumer,\n"
        "                     ConsumerSettings, GuardSettings, QueueSettings)\n"
        "conn = ConnectionSettings('amqp://u:p@127.0.0.1:1/')\n"
        "plain = ConsumerSettings(conn, QueueSettings('q'))\n"
        "Consumer(plain, print)\n"
        "guarded = ConsumerSettings(conn, QueueSettings('q'),\n"
        "                           guard=GuardSettings('127.0.0.1:2181', '/g'))\n"
        "try:\n"
        "    Consumer(guarded, print)\n"
        "except ConfigurationError as exc:\n"
        "    print('refused:', exc)\n"
        "print(sorted(m for m in sys.modules if m.startswith('kazoo') and sys.modules[m]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: ConsumerSettings.guard needs kazoo")
    assert "`zk` extra" in lines[0]
    assert "pip install 'sac[zk]'" in lines[0]
    assert lines[1] == "[]"
