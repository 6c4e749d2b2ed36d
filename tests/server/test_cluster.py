"""The session's 3-node cluster and ZooKeeper behave as the SDK and chaos suite will need."""

from __future__ import annotations

import json
import stat

import pika
import pika.exceptions
import pytest
from kazoo.client import KazooClient

from sac.cli import main
from sac.server import LocalCluster, LocalZooKeeper, _proc
from sac.server.zookeeper import four_letter
from tests.helpers import is_loopback, listening_addresses, wait_until

SAC_ARGS = {"x-queue-type": "quorum", "x-single-active-consumer": True}


def test_cluster_has_three_running_members(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    members = cluster.members()
    assert sorted(m["name"] for m in members) == sorted(n.name for n in cluster.nodes)
    assert all(m["running"] for m in members)

    # The CLI reads the same cluster back from its state directory.
    code = main(["server", "status", "--name", cluster.name, "--home", str(cluster.spec.home)])
    status = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [n["running"] for n in status["nodes"]] == [True, True, True]
    assert len({n["amqp_port"] for n in status["nodes"]}) == 3
    assert all(m["running"] for m in status["members"])
    for node in status["nodes"]:
        assert _proc.is_ours(node["pid"], cluster.dir)


def test_servers_listen_on_loopback_only(
    cluster: LocalCluster, zookeeper: LocalZooKeeper
) -> None:
    pids = _proc.find_marked(cluster.dir) + _proc.find_marked(zookeeper.dir)
    addresses = listening_addresses(pids)
    ports = {int(a.rsplit(":", 1)[1]) for a in addresses}
    for node in cluster.nodes:
        assert {node.amqp_port, node.management_port, node.dist_port} <= ports
    assert zookeeper.port in ports
    assert [a for a in addresses if not is_loopback(a)] == []


def test_guest_is_gone_and_password_stays_secret(cluster: LocalCluster) -> None:
    password = cluster.credentials.password
    users = [u["name"] for u in cluster.management().get("users")]
    assert users == [cluster.credentials.user]
    guest = pika.URLParameters(f"amqp://guest:guest@{cluster.nodes[0].address}/%2F")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(guest)

    assert stat.S_IMODE(cluster.credentials_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((cluster.dir / ".erlang.cookie").stat().st_mode) == 0o400
    shown = [repr(cluster), repr(cluster.credentials), json.dumps(cluster.status()),
             *cluster.display_urls()]
    assert not [text for text in shown if password in text]
    assert not [str(p) for p in cluster.log_files() if password in p.read_text(errors="replace")]
    # The URLs meant for code do carry it, and work.
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as conn:
        assert conn.is_open


@pytest.mark.rabbitmq("4.0", "3.10")
def test_quorum_queue_with_single_active_consumer_delivers_to_one(
    cluster: LocalCluster, queue_name: str
) -> None:
    urls = cluster.urls()
    received: dict[str, list[bytes]] = {"b": [], "c": []}
    conns = {label: pika.BlockingConnection(pika.URLParameters(url))
             for label, url in (("b", urls[1]), ("c", urls[2]))}
    try:
        for label, conn in conns.items():
            channel = conn.channel()
            channel.queue_declare(queue_name, durable=True, arguments=SAC_ARGS)

            def on_message(ch, method, props, body, label=label):  # type: ignore[no-untyped-def]
                received[label].append(body)
                ch.basic_ack(method.delivery_tag)

            channel.basic_consume(queue_name, on_message, consumer_tag=f"consumer-{label}")

        with pika.BlockingConnection(pika.URLParameters(urls[0])) as pub:
            channel = pub.channel()
            channel.confirm_delivery()
            for i in range(200):
                channel.basic_publish("", queue_name, str(i).encode(),
                                      pika.BasicProperties(delivery_mode=2), mandatory=True)

        def all_received() -> bool:
            for conn in conns.values():
                conn.process_data_events(time_limit=0.05)
            return len(received["b"]) + len(received["c"]) >= 200

        wait_until(all_received, 30, "200 deliveries")
        counts = sorted(len(v) for v in received.values())
        assert counts == [0, 200]
        active = "consumer-b" if received["b"] else "consumer-c"

        def active_tag() -> str | None:
            for conn in conns.values():
                conn.process_data_events(time_limit=0)
            return cluster.management().queue(queue_name).single_active_consumer_tag

        assert wait_until(active_tag, 15, "the broker to name its active consumer") == active
    finally:
        for conn in conns.values():
            conn.close()


def test_sigkilled_node_restarts_and_rejoins(cluster: LocalCluster, queue_name: str) -> None:
    victim = cluster.nodes[2]
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as conn:
        conn.channel().queue_declare(queue_name, durable=True,
                                     arguments={"x-queue-type": "quorum"})

    cluster.kill(victim.index)
    assert not cluster.is_running(victim)
    cluster.wait_members(cluster.nodes[:2], timeout=30)

    cluster.start(victim.index)
    cluster.wait_members(cluster.nodes, timeout=60)
    # It is a working member again: it serves the queue declared while it was up.
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[2])) as conn:
        ok = conn.channel().queue_declare(queue_name, passive=True)
        assert ok.method.queue == queue_name


def test_zookeeper_answers(zookeeper: LocalZooKeeper) -> None:
    assert four_letter(zookeeper.port, "ruok") == "imok"
    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(timeout=15)
    try:
        client.ensure_path("/sac/test")
        client.create("/sac/test/node", b"hello", ephemeral=True)
        data, _stat = client.get("/sac/test/node")
        assert data == b"hello"
    finally:
        client.stop()
        client.close()
    assert zookeeper.status()["mode"] == "standalone"
