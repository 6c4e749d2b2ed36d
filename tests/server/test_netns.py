"""netns clusters against the real kernel and RabbitMQ: each node in a network namespace of
its own, clients from the host through the bridge, and nothing left behind (root needed:
these tests fail, never skip, when the machine cannot make namespaces)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pika
import pytest

from sac.cli import main
from sac.server import (
    LocalCluster,
    NetnsPlan,
    PackageMissingError,
    ServerError,
    _netns,
    _proc,
)
from sac.server._ports import port_is_free
from tests.helpers import Lines, finish, is_loopback, listening_addresses, wait_until

SAC_ARGS = {"x-queue-type": "quorum", "x-single-active-consumer": True}
BOOT = 180.0  # seconds a boot may take here before a test fails


@pytest.fixture(scope="module")
def ns_cluster(sac_home: Path) -> Iterator[LocalCluster]:
    with LocalCluster(name=f"ns-{os.getpid()}", nodes=3, home=sac_home,
                      network="netns") as local:
        yield local


def ip_state() -> tuple[str, str]:
    """``ip netns list`` and ``ip -o link show`` as the kernel has them now."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           check=True)
    return netns.stdout, links.stdout


def assert_nothing_left(name: str, state_dir: Path) -> None:
    netns, links = ip_state()
    prefix, key = f"sac-{name}-", _netns.key_of(name)
    assert [n for n in netns.split() if n.startswith(prefix)] == []
    assert [line for line in links.splitlines() if f"sac{key}v" in line or f"sacb{key}" in line
            ] == []
    assert _proc.find_marked(state_dir) == []


def netns_inode(namespace: str) -> int:
    return os.stat(f"/run/netns/{namespace}").st_ino


def test_three_nodes_form_a_cluster_each_in_its_namespace(ns_cluster: LocalCluster) -> None:
    plan = ns_cluster.netns
    members = ns_cluster.members()
    assert sorted(m["name"] for m in members) == [
        f"sac-{ns_cluster.name}-{i}@{plan.address(i)}" for i in (1, 2, 3)]
    assert all(m["running"] for m in members)
    for node in ns_cluster.nodes:
        beam = ns_cluster._beam_pid(node)
        assert beam is not None
        assert os.stat(f"/proc/{beam}/ns/net").st_ino == netns_inode(plan.namespace(node.index))
        # Every listener binds the node's address (epmd adds its namespace's own loopback).
        addresses = listening_addresses([beam])
        assert {a.rsplit(":", 1)[0] for a in addresses} == {node.host}
        assert {int(a.rsplit(":", 1)[1]) for a in addresses} == {
            node.amqp_port, node.amqps_port, node.management_port, node.dist_port}
        # Nothing of the node listens on the host's loopback.
        assert port_is_free(node.amqp_port)
    port = ns_cluster.layout.epmd
    epmds = {a for a in listening_addresses(_proc.find_marked(ns_cluster.dir))
             if a.endswith(f":{port}")}
    hosts = {f"{n.host}:{port}" for n in ns_cluster.nodes}
    assert hosts <= epmds
    assert all(is_loopback(a) for a in epmds - hosts)  # each namespace's own lo
    # The namespaces route nowhere but their /24: no default route, no forwarding.
    for ns in plan.namespaces:
        routes = _netns.run_in(ns, ["ip", "-4", "route", "show"])
        assert routes.split() == [plan.subnet, "dev", "eth0", "proto", "kernel", "scope",
                                  "link", "src", plan.address(plan.namespaces.index(ns) + 1)]


def test_settings_reach_the_nodes_and_state(ns_cluster: LocalCluster,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    node = ns_cluster.nodes[2]
    assert ns_cluster.ctl(node, "eval", "net_kernel:get_net_ticktime().").strip() == "5"
    assert ns_cluster.ctl(node, "eval", "application:get_env(rabbit, "
                          "cluster_partition_handling).").strip() == "{ok,pause_minority}"
    again = LocalCluster.attach(ns_cluster.name, home=ns_cluster.spec.home)
    assert again.spec == attrs.evolve(ns_cluster.spec, base_port=ns_cluster.layout.base)
    assert again.netns == ns_cluster.netns
    assert again.urls() == ns_cluster.urls()

    code = main(["server", "status", "--name", ns_cluster.name,
                 "--home", str(ns_cluster.spec.home)])
    status = json.loads(capsys.readouterr().out)
    assert code == 0
    assert status["network"]["subnet"] == ns_cluster.netns.subnet
    assert status["network"]["host_address"].endswith(".254")
    assert [n["namespace"] for n in status["nodes"]] == ns_cluster.netns.namespaces
    assert status["epmd"]["running"] is True
    assert status["urls"][0].startswith(f"amqp://{ns_cluster.credentials.user}:***@198.1")


def test_a_host_client_publishes_and_consumes_through_every_node(
    ns_cluster: LocalCluster, queue_name: str
) -> None:
    for i, url in enumerate(ns_cluster.urls()):
        assert f"@{ns_cluster.netns.address(i + 1)}:" in url
        with pika.BlockingConnection(pika.URLParameters(url)) as conn:
            channel = conn.channel()
            channel.confirm_delivery()
            channel.queue_declare(queue_name, durable=True, arguments=SAC_ARGS)
            channel.basic_publish("", queue_name, f"via node {i + 1}".encode(),
                                  pika.BasicProperties(delivery_mode=2), mandatory=True)
            method, _props, body = next(channel.consume(queue_name, inactivity_timeout=20))
            assert method is not None, f"nothing delivered through node {i + 1}"
            assert body == f"via node {i + 1}".encode()
            channel.basic_ack(method.delivery_tag)
            channel.cancel()
            # The broker sees the client at the host's side of the bridge.
            peers = wait_until(
                lambda: [c.peer_host for c in ns_cluster.management().connections()],
                20, "the connection in the management API")
            assert set(peers) == {ns_cluster.netns.host_address}


def test_management_api_and_tls_answer_at_each_node_address(ns_cluster: LocalCluster) -> None:
    context = ssl.create_default_context(cafile=str(ns_cluster.ca_file))
    for node in ns_cluster.nodes:
        assert ns_cluster.management(node).overview().node == node.name
        # The certificate names every node's address: verification by IP passes.
        with socket.create_connection((node.host, node.amqps_port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname=node.host) as tls:
            assert tls.version() is not None
    assert [u.split("@")[1].split("/")[0] for u in ns_cluster.tls_urls()] == [
        f"{n.host}:{n.amqps_port}" for n in ns_cluster.nodes]


def test_kill_and_start_a_node_in_its_namespace(ns_cluster: LocalCluster) -> None:
    node = ns_cluster.kill(2)
    others = [n for n in ns_cluster.nodes if n.index != 2]
    ns_cluster.wait_members(others, 60)
    assert not ns_cluster.is_running(node)
    ns_cluster.start(2)
    ns_cluster.wait_members(ns_cluster.nodes, 60)
    beam = ns_cluster._beam_pid(node)
    assert beam is not None
    assert os.stat(f"/proc/{beam}/ns/net").st_ino == netns_inode(node.namespace or "")
    # A graceful stop and start too.
    ns_cluster.stop(3)
    ns_cluster.wait_members(ns_cluster.nodes[:2], 60)
    ns_cluster.start(3)
    assert all(m["running"] for m in ns_cluster.members())


def stale_network(name: str, nodes: int, subnet: str) -> subprocess.Popen[bytes]:
    """What a crashed run leaves: namespaces, veths, a bridge, and a stray process inside."""
    _netns.create(NetnsPlan(name, nodes, subnet))
    return subprocess.Popen(
        ["ip", "netns", "exec", f"sac-{name}-1", "sleep", "600"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_cli_up_cleans_a_crashed_runs_leftovers_and_down_removes_everything(
    tmp_path: Path, ns_cluster: LocalCluster
) -> None:
    name = f"nscli-{os.getpid()}"
    stray = stale_network(name, 2, "198.19.251.0/24")
    sac = Path(sys.executable).with_name("sac")
    up = subprocess.run(
        [str(sac), "server", "up", "--network", "netns", "--nodes", "1", "--name", name,
         "--home", str(tmp_path)], capture_output=True, text=True, timeout=BOOT, check=False)
    assert up.returncode == 0, up.stderr
    assert f"namespaces sac-{name}-1 on bridge sacb" in up.stdout
    assert stray.wait(10) != 0  # killed, with its namespace
    netns, _ = ip_state()
    assert f"sac-{name}-2" not in netns.split()  # the old run had two nodes
    local = LocalCluster.attach(name, home=tmp_path)
    assert local.members() == [{"name": local.nodes[0].name, "running": True}]
    # The session's other netns cluster is untouched.
    assert all(m["running"] for m in ns_cluster.members())

    down = subprocess.run([str(sac), "server", "down", "--name", name, "--home", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(name, local.dir)
    assert all(m["running"] for m in ns_cluster.members())


def test_up_refuses_namespaces_another_state_home_uses(tmp_path: Path) -> None:
    name = f"nsbusy-{os.getpid()}"
    _netns.create(NetnsPlan(name, 1, "198.19.252.0/24"))
    other = tmp_path / "elsewhere" / name
    pid = _proc.spawn(["ip", "netns", "exec", f"sac-{name}-1", "sleep", "600"],
                      {_proc.MARKER: str(other), "PATH": os.environ["PATH"]},
                      tmp_path / "sleep.log", tmp_path)
    try:
        with pytest.raises(ServerError,
                           match=rf"namespace sac-{name}-1 is in use .* {re.escape(str(other))}"):
            LocalCluster(name=name, nodes=1, home=tmp_path, network="netns").up()
        assert _proc.is_alive(pid)
        netns, _ = ip_state()
        assert f"sac-{name}-1" in netns.split()
    finally:
        _proc.signal_group(pid, signal.SIGKILL)
        _proc.wait_dead([pid], 10)
        _netns.remove(name, other)
    assert_nothing_left(name, tmp_path / name)


def test_up_refuses_a_bridge_name_that_is_not_ours(tmp_path: Path) -> None:
    name = f"nsalias-{os.getpid()}"
    bridge = _netns.bridge_of(name)
    _netns.ip("link", "add", bridge, "type", "bridge")  # without our alias: someone else's
    try:
        with pytest.raises(ServerError, match=f"link {bridge} exists and is not the bridge"):
            LocalCluster(name=name, nodes=1, home=tmp_path, network="netns").up()
    finally:
        _netns.ip("link", "del", bridge)


def test_ctrl_c_inside_with_leaves_nothing(tmp_path: Path) -> None:
    name = f"nsint-{os.getpid()}"
    script = (
        "import sys, time\n"
        "from sac.server import LocalCluster\n"
        f"with LocalCluster(name={name!r}, nodes=1, home={str(tmp_path)!r}, "
        "network='netns') as c:\n"
        "    print('up', c.netns.namespaces[0], flush=True)\n"
        "    time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        Lines(proc).expect("up", BOOT)
        marked = _proc.find_marked(tmp_path / name)
        assert len(marked) >= 2  # epmd and the node
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) != 0
        assert proc.stderr is not None
        assert "KeyboardInterrupt" in proc.stderr.read()
    finally:
        finish(proc)
        if proc.stderr is not None:
            proc.stderr.close()
    assert_nothing_left(name, tmp_path / name)
    assert [p for p in marked if _proc.is_alive(p)] == []


def test_without_privileges_or_iproute2_the_error_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"nspriv-{os.getpid()}"
    code = ("from sac.server import LocalCluster, ServerError\n"
            f"try: LocalCluster(name={name!r}, nodes=1, home={str(tmp_path)!r}, "
            "network='netns').up()\n"
            "except ServerError as exc: print(type(exc).__name__, exc)\n")
    # Root without CAP_NET_ADMIN and CAP_SYS_ADMIN, as in an unprivileged container.
    done = subprocess.run(
        ["setpriv", "--bounding-set=-net_admin,-sys_admin", "--inh-caps=-all",
         sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.startswith("ServerError netns mode needs root (CAP_NET_ADMIN"), (
        done.stdout + done.stderr)
    assert_nothing_left(name, tmp_path / name)

    monkeypatch.setenv("PATH", str(tmp_path))  # no ip on it
    with pytest.raises(PackageMissingError, match="Debian package iproute2"):
        LocalCluster(name=name, nodes=1, home=tmp_path, network="netns").up()


def record_signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every signal sent from here on, recorded and not sent: in the tests below a signal
    sent for real could reach processes outside the namespace (the whole machine, even)."""
    sent: list[tuple[str, int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append(("kill", pid, sig)))
    monkeypatch.setattr(os, "killpg", lambda pid, sig: sent.append(("killpg", pid, sig)))
    monkeypatch.setattr(signal, "pidfd_send_signal",
                        lambda fd, sig, *_: sent.append(("pidfd", fd, sig)))
    return sent


def test_a_name_that_mounts_the_hosts_namespace_is_never_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ip netns attach sac-<name>-1 <pid>`` gives one of our names to the host's namespace
    (ours: init's may be out of reach in a container): cleanup must refuse it (one line
    naming it), never stop the host's processes."""
    name = f"nshost-{os.getpid()}"
    namespace = f"sac-{name}-1"
    _netns.ip("netns", "attach", namespace, str(os.getpid()))
    try:
        assert os.stat(f"/run/netns/{namespace}").st_ino == os.stat("/proc/self/ns/net").st_ino
        sent = record_signals(monkeypatch)
        refused = rf"network namespace {namespace} is the host's network namespace"
        with pytest.raises(ServerError, match=refused):
            _netns.remove(name, tmp_path / name)
        with pytest.raises(ServerError, match=refused):
            LocalCluster(name=name, nodes=1, home=tmp_path, network="netns").up()
        assert sent == []
    finally:
        monkeypatch.undo()
        _netns.ip("netns", "del", namespace)


def test_a_listed_pid_that_left_the_namespace_is_not_signalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ip netns pids`` lists a pid; by the time it is signalled the process may have ended
    and its pid gone to another process. Here the listing names a process on the host (as
    a reused pid would): it keeps running, while the stray inside the namespace is stopped."""
    name = f"nspid-{os.getpid()}"
    stray = stale_network(name, 1, "198.19.250.0/24")
    outside = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    try:
        inside = wait_until(lambda: _netns.namespace_pids(f"sac-{name}-1"), 10,
                            "the stray process inside the namespace")
        listing = _netns.namespace_pids
        monkeypatch.setattr(_netns, "namespace_pids",
                            lambda ns: [*listing(ns), outside.pid])
        _netns.remove(name, tmp_path / name)
        assert outside.poll() is None, "a process outside the namespace was signalled"
        stray.wait(10)  # stopped, with its namespace
        assert [p for p in inside if _proc.is_alive(p)] == []
    finally:
        outside.kill()
        outside.wait(10)
        if stray.poll() is None:
            stray.kill()
            stray.wait(10)
    assert_nothing_left(name, tmp_path / name)
