"""A local cluster's config files and certificates, from settings, without starting a node."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from sac.sdk.management import FeatureFlagInfo
from sac.server import ClusterSpec, Credentials, Node
from sac.server._rabbitmq_config import (
    COOKIE,
    SECRET,
    advanced_config,
    cluster_files,
    enabled_plugins,
    metadata_store_of,
    rabbitmq_conf,
)
from sac.server._tls import make_certificates, openssl_steps, server_extensions

CREDS = Credentials(user="sac-demo", password="pw-not-for-you")


def node(index: int, base: Path, host: str = "127.0.0.1") -> Node:
    return Node(index=index, name=f"sac-demo-{index}@localhost", amqp_port=5000 + index,
                amqps_port=5100 + index, management_port=5200 + index, dist_port=5300 + index,
                dir=base / f"node{index}", host=host)


def settings(conf: str) -> dict[str, str]:
    pairs = [line.split(" = ", 1) for line in conf.splitlines() if line]
    return {key: value for key, value in pairs}


def test_a_nodes_rabbitmq_conf(tmp_path: Path) -> None:
    spec = ClusterSpec(name="demo", home=tmp_path)
    conf = settings(rabbitmq_conf(spec, node(2, tmp_path), CREDS, tmp_path / "tls"))
    assert conf["listeners.tcp.1"] == "127.0.0.1:5002"
    assert conf["listeners.ssl.1"] == "127.0.0.1:5102"
    assert conf["management.tcp.port"] == "5202"
    assert conf["distribution.listener.port_range.min"] == "5302"
    assert conf["distribution.listener.port_range.max"] == "5302"
    assert conf["ssl_options.certfile"] == str(tmp_path / "tls" / "server.pem")
    assert (conf["default_user"], conf["default_pass"]) == ("sac-demo", "pw-not-for-you")
    assert (conf["net_ticktime"], conf["cluster_partition_handling"]) == ("60", "ignore")


def test_netns_defaults_reach_the_conf(tmp_path: Path) -> None:
    spec = ClusterSpec(name="demo", home=tmp_path, network="netns")
    conf = settings(rabbitmq_conf(spec, node(1, tmp_path, "198.18.7.1"), CREDS, tmp_path))
    assert (conf["net_ticktime"], conf["cluster_partition_handling"]) == ("5", "pause_minority")
    assert conf["management.tcp.ip"] == conf["distribution.listener.interface"] == "198.18.7.1"


def test_the_statistics_interval_reaches_the_conf(tmp_path: Path) -> None:
    """The management API's lag: 1000 ms on our clusters unless asked otherwise."""
    default = settings(rabbitmq_conf(ClusterSpec(name="demo", home=tmp_path), node(1, tmp_path),
                                     CREDS, tmp_path))
    assert default["collect_statistics_interval"] == "1000"
    spec = ClusterSpec(name="demo", home=tmp_path, statistics_interval_ms=250)
    conf = settings(rabbitmq_conf(spec, node(1, tmp_path), CREDS, tmp_path))
    assert conf["collect_statistics_interval"] == "250"
    # the management agent's collectors run at the finest retention step: whole seconds
    assert conf["management.sample_retention_policies.basic.605"] == "1"
    assert conf["management.sample_retention_policies.basic.3600"] == "60"
    slow = ClusterSpec(name="demo", home=tmp_path, statistics_interval_ms=5000)
    conf = settings(rabbitmq_conf(slow, node(1, tmp_path), CREDS, tmp_path))
    assert conf["management.sample_retention_policies.detailed.605"] == "5"
    for bad in (0, 99, True, 1.5):
        with pytest.raises(ValueError, match="statistics_interval_ms"):
            ClusterSpec(name="demo", home=tmp_path, statistics_interval_ms=bad)


def test_every_file_with_a_secret_is_owner_only(tmp_path: Path) -> None:
    spec = ClusterSpec(name="demo", nodes=3, home=tmp_path)
    nodes = [node(i, tmp_path) for i in (1, 2, 3)]
    files = cluster_files(spec, nodes, CREDS, "cookie-123", tmp_path)
    names = sorted(str(path.relative_to(tmp_path)) for path in files)
    per_node = [f"node{i}/{f}" for i in (1, 2, 3)
                for f in ("advanced.config", "enabled_plugins", "rabbitmq.conf")]
    assert names == sorted([".erlang.cookie", "credentials.json", "rabbitmq-env.conf",
                            *per_node])
    secret = {str(p.relative_to(tmp_path)) for p, f in files.items()
              if CREDS.password in f.text or "cookie-123" in f.text}
    assert secret == {".erlang.cookie", "credentials.json",
                      "node1/rabbitmq.conf", "node2/rabbitmq.conf", "node3/rabbitmq.conf"}
    for path, file in files.items():
        is_secret = str(path.relative_to(tmp_path)) in secret
        assert (file.mode is not None) == is_secret, path
    assert files[tmp_path / ".erlang.cookie"].mode == COOKIE
    assert files[tmp_path / "credentials.json"].mode == SECRET


def test_erlang_terms() -> None:
    assert advanced_config() == "[].\n"
    assert enabled_plugins(["a", "b"]) == "[a,b].\n"


def test_the_certificate_names_every_node_address_once() -> None:
    assert server_extensions(["127.0.0.1"] * 3).startswith(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    netns = server_extensions(["198.18.7.1", "198.18.7.2", "198.18.7.2"])
    assert netns.startswith(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:198.18.7.1,IP:198.18.7.2\n")
    assert "extendedKeyUsage=serverAuth" in netns
    assert "/CN=sac demo local CA" in openssl_steps("demo")[0]


def test_certificates_verify_against_the_clusters_ca(tmp_path: Path) -> None:
    tls = tmp_path / "tls"
    make_certificates(tls, "demo", ["127.0.0.1", "198.18.7.2"])
    assert stat.S_IMODE(tls.stat().st_mode) == 0o700
    for key in ("ca.key", "server.key"):
        assert stat.S_IMODE((tls / key).stat().st_mode) == 0o600
    for host in ("127.0.0.1", "198.18.7.2"):
        done = subprocess.run(
            ["openssl", "verify", "-CAfile", "ca.pem", "-verify_ip", host, "server.pem"],
            cwd=tls, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    wrong = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.pem", "-verify_ip", "198.18.7.3", "server.pem"],
        cwd=tls, capture_output=True, text=True, check=False)
    assert wrong.returncode != 0


def test_inside_a_root_filesystem_the_files_name_the_cluster_directory_as_sac(
    tmp_path: Path,
) -> None:
    spec = ClusterSpec(name="demo", nodes=1, home=tmp_path, rabbitmq="4.0")
    files = cluster_files(spec, [node(1, tmp_path)], CREDS, "cookie-123", tmp_path,
                          seen_as=Path("/sac"))
    # Written on the host where they are; naming what the node sees.
    conf = settings(files[tmp_path / "node1" / "rabbitmq.conf"].text)
    assert conf["ssl_options.cacertfile"] == "/sac/tls/ca.pem"
    assert conf["ssl_options.keyfile"] == "/sac/tls/server.key"
    assert not [text for text in (f.text for f in files.values()) if str(tmp_path) in text]


def test_4_0_is_the_default_and_khepri_is_refused_on_3_10_in_one_line(tmp_path: Path) -> None:
    assert ClusterSpec(home=tmp_path).rabbitmq == "4.0"
    assert ClusterSpec(home=tmp_path).metadata_store == "mnesia"
    assert ClusterSpec(home=tmp_path, metadata_store="khepri").metadata_store == "khepri"
    with pytest.raises(ValueError, match=r"^metadata_store='khepri' needs rabbitmq='4.0': "
                       r"RabbitMQ 3.10 keeps its metadata in Mnesia only$"):
        ClusterSpec(home=tmp_path, rabbitmq="3.10", metadata_store="khepri")
    with pytest.raises(ValueError, match=r"^metadata_store must be one of mnesia, khepri; "
                       r"got 'raft'$"):
        ClusterSpec(home=tmp_path, metadata_store="raft")


def test_the_metadata_store_is_read_off_the_khepri_db_flag() -> None:
    assert metadata_store_of([]) == "mnesia"  # 3.10: no such flag
    assert metadata_store_of([FeatureFlagInfo(name="khepri_db", state="disabled"),
                              FeatureFlagInfo(name="quorum_queue", state="enabled")]) == "mnesia"
    assert metadata_store_of([FeatureFlagInfo(name="khepri_db", state="enabled")]) == "khepri"
