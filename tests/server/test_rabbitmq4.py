"""RabbitMQ 4.0 beside 3.10: a 4.0.5 cluster boots from the cached Debian 13 root filesystem,
serves our SDK (quorum queue, single active consumer, confirms, TLS), loses and regains a
node, boots in network namespaces; a broken tree is rebuilt; a bad series is refused."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
from pathlib import Path

import pika
import pytest

from sac.cli import main
from sac.sdk import (
    ConnectionSettings,
    ConsumerSettings,
    Publisher,
    PublisherSettings,
    QueueSettings,
    Role,
)
from sac.sdk.management import ConnectionInfo
from sac.server import LocalCluster, _proc, _rootfs
from tests.helpers import is_loopback, listening_addresses, wait_until
from tests.sdk.faces import ConsumerFace

VERSION = "4.0.5"


def test_a_4_0_cluster_runs_4_0_5_each_node_inside_the_root_filesystem(
    cluster4: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    members = cluster4.members()
    assert sorted(m["name"] for m in members) == sorted(n.name for n in cluster4.nodes)
    assert all(m["running"] for m in members)
    assert cluster4.ctl(cluster4.nodes[1], "version").strip() == VERSION
    assert cluster4.management().overview().version == VERSION

    code = main(["server", "status", "--name", cluster4.name, "--home", str(cluster4.spec.home)])
    status = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (status["rabbitmq"], status["rabbitmq_version"]) == ("4.0", VERSION)
    root = Path(status["rootfs"])
    assert not _rootfs.problems(root, "4.0")
    own_mounts = os.readlink("/proc/self/ns/mnt")
    for node in status["nodes"]:
        beam = node["pid"]
        assert _proc.is_ours(beam, cluster4.dir)
        assert Path(_proc.argv_of(beam)[0]).name == "beam.smp"
        # Chrooted into the tree, in a mount namespace (with its /proc) of its own.
        assert os.readlink(f"/proc/{beam}/root") == str(root)
        assert os.readlink(f"/proc/{beam}/ns/mnt") != own_mounts
    # Its state stays in the cluster's directory, where log_files() points; the cached tree
    # holds nothing of it.
    assert cluster4.nodes[0].log_file in cluster4.log_files()
    assert "Starting RabbitMQ 4.0.5" in cluster4.nodes[0].log_file.read_text()
    assert list((root / "sac").iterdir()) == []
    addresses = listening_addresses(_proc.find_marked(cluster4.dir))
    assert {f"127.0.0.1:{n.amqp_port}" for n in cluster4.nodes} <= addresses
    assert [a for a in addresses if not is_loopback(a)] == []


def test_the_sdk_consumes_a_single_active_quorum_queue_on_4_0(
    cluster4: LocalCluster, queue_name: str
) -> None:
    conn = ConnectionSettings(urls=cluster4.urls(), heartbeat=2, name="sdk-on-4.0")
    queue = QueueSettings(queue_name)
    consumers = [ConsumerFace("blocking", ConsumerSettings(conn, queue)).start()
                 for _ in range(2)]
    try:
        with Publisher(PublisherSettings(conn, queue=queue)) as pub:
            ids = pub.publish_many([b"order %d" % i for i in range(200)])
        wait_until(lambda: sum(c.count() for c in consumers) >= 200, 30, "200 deliveries")
        active, standby = sorted(consumers, key=lambda c: -c.count())
        assert active.handled == ids
        assert standby.handled == []
        assert active.role is Role.ACTIVE
        info = cluster4.management().queue(queue_name)
        assert info.type == "quorum"
        assert info.arguments["x-single-active-consumer"] is True
    finally:
        for consumer in consumers:
            consumer.stop()


def test_tls_urls_and_federation_work_on_4_0(cluster4: LocalCluster, queue_name: str) -> None:
    tls = ConnectionSettings(urls=cluster4.tls_urls(), ca_file=str(cluster4.ca_file),
                             name="tls-on-4.0")

    def ours() -> list[ConnectionInfo]:
        return [c for c in cluster4.management().connections() if c.client_name == "tls-on-4.0"]

    with Publisher(PublisherSettings(tls, queue=QueueSettings(queue_name))) as pub:
        pub.publish(b"over TLS")
        # The management API lists a connection within its statistics interval.
        assert all(c.ssl for c in wait_until(ours, 15, "the TLS connection listed"))
    # The federation plugin runs: its parameters are accepted and its links listed.
    api = cluster4.management()
    api.put_parameter("federation-upstream", queue_name, {"uri": cluster4.urls()[0]})
    try:
        assert queue_name in [p.name for p in api.parameters("federation-upstream", "/")]
        assert api.federation_links(None) == []
    finally:
        api.delete_parameter("federation-upstream", queue_name)


def test_a_killed_4_0_node_and_a_stopped_one_start_again_and_rejoin(
    cluster4: LocalCluster, queue_name: str
) -> None:
    with pika.BlockingConnection(pika.URLParameters(cluster4.urls()[0])) as conn:
        conn.channel().queue_declare(queue_name, durable=True,
                                     arguments={"x-queue-type": "quorum"})
    victim = cluster4.nodes[2]
    beam = cluster4.status()["nodes"][2]["pid"]
    cluster4.kill(victim.index)
    # The Erlang VM itself is gone, found through the pid file the node wrote inside the tree.
    assert not _proc.is_alive(beam)
    assert not cluster4.is_running(victim)
    cluster4.wait_members(cluster4.nodes[:2], timeout=30)
    cluster4.start(victim.index)

    cluster4.stop(2)
    assert not cluster4.is_running(cluster4.nodes[1])
    cluster4.start(2)
    cluster4.wait_members(cluster4.nodes, timeout=60)
    for url in cluster4.urls()[1:]:
        with pika.BlockingConnection(pika.URLParameters(url)) as conn:
            assert conn.channel().queue_declare(queue_name, passive=True).method.queue == \
                queue_name


@pytest.mark.slow
def test_sac_server_up_rabbitmq_4_0_boots_in_network_namespaces_with_khepri(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"ns4-{os.getpid()}"
    where = ["--name", name, "--home", str(tmp_path)]
    code = main(["server", "up", "--network", "netns", "--nodes", "2",
                 "--metadata-store", "khepri", *where])
    local = LocalCluster.attach(name, home=tmp_path)
    try:
        assert code == 0
        assert (f"cluster {name!r} is up: 2 nodes of RabbitMQ {VERSION}, metadata in khepri"
                in capsys.readouterr().out)
        assert [m["running"] for m in local.members()] == [True, True]
        assert local.status()["rabbitmq_version"] == VERSION
        # The broker itself says Khepri holds its metadata, on every node; attach knows it.
        assert local.spec.metadata_store == "khepri"
        assert local.status()["metadata_store"] == "khepri"
        assert [local.broker(n)["metadata_store"] for n in local.nodes] == ["khepri"] * 2
        assert "khepri_db\tenabled" in local.ctl(local.nodes[1], "list_feature_flags",
                                                  "name", "state")
        for node, url in zip(local.nodes, local.urls(), strict=True):
            assert node.host == local.netns.address(node.index)
            with pika.BlockingConnection(pika.URLParameters(url)) as conn:
                assert conn.is_open
    finally:
        assert main(["server", "down", *where]) == 0
    assert not _proc.find_marked(local.dir)
    assert local.nodes[0].log_file.exists()


@pytest.mark.slow
def test_a_half_built_or_broken_root_filesystem_is_rebuilt_once(
    cluster4: LocalCluster, tmp_path: Path
) -> None:
    good = Path(cluster4.status()["rootfs"])
    cache = tmp_path / "cache"
    tree = cache / _rootfs.tree_name("4.0")
    cache.mkdir()
    try:
        # A copy of a good tree whose server is gone, and an interrupted build beside it.
        subprocess.run(["cp", "-a", str(good), str(tree)], check=True)
        (tree / "usr/lib/rabbitmq/bin/rabbitmq-server").unlink()
        (cache / f".{tree.name}.build-x" / "root").mkdir(parents=True)
        assert _rootfs.problems(tree, "4.0") == [
            "/usr/lib/rabbitmq/bin/rabbitmq-server is missing"]

        # Two clusters starting at once: one builds, the other waits and uses what it built.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(_rootfs.ensure, "4.0", cache) for _ in range(2)]
            results = [f.result(timeout=_rootfs.BUILD_TIMEOUT) for f in futures]
        assert sorted(r.built for r in results) == [False, True]
        assert {(r.path, r.version) for r in results} == {(tree, VERSION)}
        assert _rootfs.problems(tree, "4.0") == []
        assert (tree / "usr/lib/rabbitmq/bin/rabbitmq-server").exists()
        # Nothing half-built is left beside it.
        assert sorted(p.name for p in cache.iterdir()) == sorted(
            [tree.name, tree.name + ".lock", tree.name + ".build.log"])
    finally:  # 240 MB: not kept with the test's other files
        shutil.rmtree(cache)


@pytest.mark.parametrize("value", ["4.1", "3.10.8", "", 4.0, None])
def test_a_bad_series_is_refused_in_one_line(value: object) -> None:
    with pytest.raises(ValueError, match=r"^rabbitmq must be one of '3\.10', '4\.0'; got ") as info:
        LocalCluster(name="bad", rabbitmq=value)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_the_cli_refuses_a_series_it_does_not_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["server", "up", "--rabbitmq", "4.1", "--name", "bad"])
    assert info.value.code == 2
    assert "argument --rabbitmq: invalid choice: '4.1'" in capsys.readouterr().err


def test_khepri_on_3_10_is_refused_in_one_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["server", "up", "--rabbitmq", "3.10", "--metadata-store", "khepri",
                 "--name", "bad", "--home", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sac: error: metadata_store='khepri' needs rabbitmq='4.0': RabbitMQ 3.10 "
                   "keeps its metadata in Mnesia only"]
    assert not list(tmp_path.iterdir())  # refused before anything was made
