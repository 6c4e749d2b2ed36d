"""``recipes/federated_queue.py`` end to end against two clusters and a ZooKeeper."""

from __future__ import annotations

import re

from sac.server import LocalCluster, LocalZooKeeper
from tests.recipes.conftest import number, run_recipe


def federated(cluster: LocalCluster, cluster_b: LocalCluster, *args: str) -> tuple[int, str]:
    done = run_recipe("federated_queue", "--cluster", cluster.name, "--cluster-b",
                      cluster_b.name, "--home", str(cluster.spec.home), *args)
    return done.returncode, done.stdout + done.stderr


def test_each_message_once_across_two_clusters_and_a_takeover(
        cluster: LocalCluster, cluster_b: LocalCluster, zookeeper: LocalZooKeeper) -> None:
    code, out = federated(cluster, cluster_b, "--zookeeper", zookeeper.hosts,
                          "--messages", "80", "--rate", "80")
    assert code == 0, out
    assert number(out, "published and confirmed") == 160
    handled_a = number(out, "handled by a (on A, then stopped)")
    handled_b = number(out, "handled by b (on B, took over)")
    assert handled_a > 0
    assert handled_b > 0
    assert handled_a + handled_b == 160
    # each consumer handled messages published on the other cluster: they crossed
    crossed = re.findall(r"of which (\d+) published on cluster", out)
    assert len(crossed) == 2
    assert all(int(n) > 0 for n in crossed), out
    assert number(out, "missing") == 0
    assert number(out, "done twice") == 0
    assert "federation links                  A: running" in out
    assert "PROVED:" in out
    # the queue, the policies and the upstreams are gone from both clusters again
    for side in (cluster, cluster_b):
        api = side.management()
        assert not [q.name for q in api.queues("/") if q.name.startswith("federated-")]
        assert not [p.name for p in api.policies("/") if p.name.startswith("federated-")]
        assert not api.parameters("federation-upstream", "/")


def test_bad_input_is_one_line_and_status_2(cluster: LocalCluster) -> None:
    code, out = federated(cluster, cluster, "--zookeeper", "127.0.0.1:1")
    assert code == 2
    assert out.count("\n") == 1
    assert "--cluster and --cluster-b name the same cluster" in out


def test_no_zookeeper_is_bad_input(cluster: LocalCluster, cluster_b: LocalCluster) -> None:
    code, out = federated(cluster, cluster_b)
    assert code == 2
    assert out.count("\n") == 1, out
    assert "no ZooKeeper: give --zookeeper HOSTS" in out
