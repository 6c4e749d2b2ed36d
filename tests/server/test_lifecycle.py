"""`sac server` end to end on clusters of their own, and every bad input's error."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sac.server import (
    AlreadyRunningError,
    LocalCluster,
    LocalPostgres,
    LocalServer,
    LocalSpark,
    LocalZooKeeper,
    NotRunningError,
    PackageMissingError,
    PortBusyError,
    StartTimeoutError,
    _proc,
)
from sac.server._ports import port_is_free
from sac.server.zookeeper import four_letter


def sac(home: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run the installed ``sac`` console script, as an operator would."""
    exe = Path(sys.executable).with_name("sac")
    return subprocess.run(
        [str(exe), *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "SAC_HOME": str(home)},
    )


@pytest.fixture
def cli_name(tmp_path: Path) -> Iterator[str]:
    """The name of a cluster the test starts through the CLI; whatever the test leaves
    running when it fails is stopped (the CLI's processes outlive the test's, so a failed
    assertion would leave a node, its epmd and a ZooKeeper running)."""
    name = f"cli-{os.getpid()}"
    yield name
    if _proc.find_marked(tmp_path / name):
        with contextlib.suppress(NotRunningError):
            LocalCluster.attach(name, home=tmp_path).down()


def test_cli_up_status_kill_start_down_leaves_no_process(
    tmp_path: Path, cluster: LocalCluster, cli_name: str
) -> None:
    name = cli_name
    up = sac(tmp_path, "server", "up", "--nodes", "1", "--zookeeper", "--name", name)
    assert up.returncode == 0, up.stderr
    assert "***" in up.stdout
    assert f'eval "$(sac server env --name {name} --home {tmp_path} --show-password)"' \
        in up.stdout
    local = LocalCluster.attach(name, home=tmp_path)
    assert local.credentials.password not in up.stdout + up.stderr

    status = json.loads(sac(tmp_path, "server", "status", "--name", name).stdout)
    node = status["nodes"][0]
    assert node["running"] is True
    assert status["members"] == [{"name": node["name"], "running": True}]
    assert status["zookeeper"]["running"] is True
    assert four_letter(status["zookeeper"]["port"], "ruok") == "imok"
    # A second cluster runs beside the session's on ports of its own.
    session_ports = {n.amqp_port for n in cluster.nodes}
    assert node["amqp_port"] not in session_ports

    # The URLs for an application's shell: masked by default (as comments, so an eval sets
    # nothing that would fail to log in); with --show-password, exports that the SDK's
    # from_env() reads and that connect.
    masked = sac(tmp_path, "server", "env", "--name", name)
    assert masked.returncode == 0, masked.stderr
    assert local.credentials.password not in masked.stdout + masked.stderr
    assert masked.stdout.splitlines()[0].startswith("# export SAC_AMQP_URLS='amqp://")
    assert all(line.startswith("# export ") for line in masked.stdout.splitlines())
    assert "--show-password" in masked.stderr
    exe = Path(sys.executable).with_name("sac")
    check = ("from sac.sdk import *; "
             "p = Publisher(PublisherSettings(ConnectionSettings.from_env(), "
             "queue=QueueSettings('env-probe'))); p.start(); p.publish(b'x'); p.close(); "
             "m = Management(ManagementSettings.from_env()); print(m.queue('env-probe').name); "
             "m.delete_queue('env-probe', if_empty=False); "
             "print(ManagementSettings.from_env().statistics_interval); "
             "import os; print(os.environ['SAC_ZOOKEEPER_HOSTS'])")
    shell = subprocess.run(
        ["bash", "-c", f'eval "$({exe} server env --name {name} --home {tmp_path} '
                       f'--show-password)" && exec {sys.executable} -c "{check}"'],
        capture_output=True, text=True, timeout=60, check=False)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines() == [
        "env-probe", "1.0", f"127.0.0.1:{status['zookeeper']['port']}"]

    killed = sac(tmp_path, "server", "kill", "1", "--name", name)
    assert killed.returncode == 0, killed.stderr
    status = json.loads(sac(tmp_path, "server", "status", "--name", name).stdout)
    assert status["nodes"][0]["running"] is False
    assert not _proc.is_alive(node["pid"])

    started = sac(tmp_path, "server", "start", "1", "--name", name)
    assert started.returncode == 0, started.stderr
    status = json.loads(sac(tmp_path, "server", "status", "--name", name).stdout)
    assert status["nodes"][0]["running"] is True
    assert status["nodes"][0]["pid"] != node["pid"]

    pids = _proc.find_marked(local.dir)
    assert len(pids) >= 3  # node launcher and VM, epmd, ZooKeeper
    down = sac(tmp_path, "server", "down", "--name", name)
    assert down.returncode == 0, down.stderr
    assert _proc.find_marked(local.dir) == []
    assert [p for p in pids if _proc.is_alive(p)] == []
    layout = local.layout
    assert all(port_is_free(p) for p in layout.listening_ports(1, zookeeper=True))
    # Downing one cluster left the other alone.
    assert all(m["running"] for m in cluster.members())


def test_down_of_a_cluster_that_is_not_running(tmp_path: Path) -> None:
    done = sac(tmp_path, "server", "down", "--name", "nothing-here")
    assert done.returncode == 1
    assert "cluster 'nothing-here' is not running" in done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(NotRunningError, match="not running"):
        LocalCluster.attach("nothing-here", home=tmp_path)


def test_up_of_a_running_cluster(cluster: LocalCluster) -> None:
    again = LocalCluster(name=cluster.name, nodes=3, home=cluster.spec.home)
    with pytest.raises(AlreadyRunningError, match="already running"):
        again.up()
    assert all(m["running"] for m in cluster.members())


def test_busy_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(PortBusyError, match=rf"127\.0\.0\.1:{port} \(AMQP of node 1\)"):
            LocalCluster(name="busy", nodes=1, base_port=port, home=tmp_path).up()
    assert _proc.find_marked(tmp_path / "busy") == []


def test_missing_debian_packages_are_named(tmp_path: Path) -> None:
    with pytest.raises(PackageMissingError, match="rabbitmq-server"):
        LocalCluster(name="nopkg", nodes=1, home=tmp_path, rabbitmq="3.10",
                     rabbitmq_dir=tmp_path / "no").up()
    with pytest.raises(PackageMissingError, match="Debian package zookeeper"):
        LocalZooKeeper(name="nozk", home=tmp_path, jars=(tmp_path / "zookeeper.jar",)).up()


def test_node_that_does_not_come_up_in_time(tmp_path: Path) -> None:
    local = LocalCluster(name="slow", nodes=1, start_timeout=1.0, home=tmp_path)
    with pytest.raises(StartTimeoutError) as caught:
        local.up()
    message = str(caught.value)
    assert message.startswith("cluster 'slow' failed to start: ")
    assert "within 1 s" in message
    assert str(local.nodes[0].log_file) in message
    assert _proc.find_marked(local.dir) == []  # nothing left behind
    assert not (local.dir / "state.json").exists()


@pytest.mark.parametrize("kind", ["zookeeper", "postgres", "spark"])
def test_a_server_that_fails_halfway_leaves_nothing_and_says_which(
        tmp_path: Path, kind: str) -> None:
    """Every server's ``up()`` stops what it started when it fails, names itself in the
    error; stopping again (a ``with`` block's exit) is no error, ``down()`` says nothing
    runs."""
    servers: dict[str, LocalServer] = {
        "zookeeper": LocalZooKeeper(name="slow-zk", home=tmp_path, start_timeout=0.01),
        "postgres": LocalPostgres(name="slow-pg", home=tmp_path, start_timeout=0.01),
        "spark": LocalSpark(name="slow-spark", home=tmp_path, start_timeout=0.01),
    }
    server = servers[kind]
    with pytest.raises(StartTimeoutError) as caught, server:
        pytest.fail("the block ran although up() failed")
    what = {"zookeeper": "ZooKeeper", "postgres": "PostgreSQL", "spark": "Spark"}[kind]
    assert str(caught.value).startswith(f"{what} in {server.dir} failed to start: ")
    assert _proc.find_marked(server.dir) == []
    assert server.status()["running"] is False
    server.__exit__(None, None, None)  # idempotent
    with pytest.raises(NotRunningError, match=f"in {re.escape(str(server.dir))} is not running"):
        server.down()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"name": "Bad Name"}, "name"), ({"nodes": 0}, "nodes"), ({"nodes": 10}, "nodes"),
     ({"base_port": 80}, "base_port"), ({"start_timeout": 0}, "start_timeout")],
)
def test_bad_cluster_settings_are_rejected(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        LocalCluster(**kwargs)  # type: ignore[arg-type]
