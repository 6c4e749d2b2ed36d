"""sac.sdk.Management's calls about the cluster (overview, feature flags, nodes), federation
links, shovels, runtime parameters, declaring a queue and the ``get`` escape hatch, against
the session cluster's real management API."""

from __future__ import annotations

import asyncio
import contextlib

import pika
import pytest

from sac.sdk import AsyncManagement
from sac.sdk.management import (
    Management,
    ManagementError,
    ManagementNotFound,
    ManagementSettings,
)
from sac.server import LocalCluster
from tests.helpers import wait_until

LINK_UP = 30.0
"""A link or shovel starts within a second or two here; generous for a loaded machine."""


def test_the_cluster_says_what_it_is(cluster: LocalCluster, management: Management) -> None:
    overview = management.overview()
    assert overview.product == "RabbitMQ"
    assert overview.version.startswith(cluster.spec.rabbitmq + ".")
    assert overview.erlang_version  # an OTP release, as the node reports it
    assert overview.node in {n.name for n in cluster.nodes}
    flags = {f.name: f.state for f in management.feature_flags()}
    assert flags["quorum_queue"] == "enabled"
    assert {n.name for n in management.nodes()} == {n.name for n in cluster.nodes}
    # A client of one node hears that node.
    third = cluster.nodes[2]
    assert cluster.management(third).overview().node == third.name


def test_a_queue_is_declared_where_its_client_points(
    cluster: LocalCluster, queue_name: str
) -> None:
    second = cluster.nodes[1]
    api = cluster.management(second)
    arguments = {"x-queue-type": "quorum", "x-single-active-consumer": True}
    api.put_queue(queue_name, arguments=arguments)
    try:
        api.put_queue(queue_name, arguments=arguments)  # the same again: nothing changes
        queue = api.queue(queue_name)
        assert (queue.type, queue.single_active, queue.node) == ("quorum", True, second.name)
        assert queue.synchronised_mirrors is None  # a quorum queue has no mirrors
        online = wait_until(lambda: api.queue(queue_name).online, 15,
                            "the queue's members listed online")
        assert set(online) == {n.name for n in cluster.nodes}
        with pytest.raises(ManagementError, match="put_queue") as caught:
            api.put_queue(queue_name, arguments={"x-queue-type": "classic"})
        assert caught.value.status == 400  # the broker refuses a different declaration
    finally:
        api.delete_queue(queue_name, if_empty=False)


@pytest.mark.rabbitmq("3.10")  # 4.0 has no mirrored queues
def test_a_mirrored_queue_lists_its_synchronised_mirrors(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    policy = f"ha-{queue_name}"
    management.put_policy(policy, f"^{queue_name}$", {"ha-mode": "all",
                                                       "ha-sync-mode": "automatic"})
    try:
        cluster.management(cluster.nodes[0]).put_queue(queue_name)
        mirrors = wait_until(
            lambda: len(management.queue(queue_name).synchronised_mirrors or ()) == 2
            and management.queue(queue_name).synchronised_mirrors, 30,
            "both mirrors synchronised")
        assert set(mirrors) == {n.name for n in cluster.nodes[1:]}
        assert management.queue(queue_name).online is None  # a classic queue's answer
    finally:
        management.delete_policy(policy)
        management.delete_queue(queue_name, if_empty=False)


def test_a_federation_link_is_listed_with_its_upstream(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    """The cluster federates ``queue_name`` from its own ``<queue>.up`` (an upstream is any
    broker, this one included)."""
    upstream = f"up-{queue_name}"
    management.put_parameter("federation-upstream", upstream,
                             {"uri": cluster.urls()[0], "queue": f"{queue_name}.up"})
    management.put_policy(upstream, f"^{queue_name}$", {"federation-upstream": upstream})
    try:
        management.put_queue(queue_name, arguments={"x-queue-type": "quorum"})
        params = management.parameters("federation-upstream", "/")
        assert [(p.component, p.vhost, p.value["queue"]) for p in params
                if p.name == upstream] == [("federation-upstream", "/", f"{queue_name}.up")]

        def link() -> list[tuple[str | None, str | None, str]]:
            return [(f.upstream, f.exchange, f.status) for f in management.federation_links()
                    if f.queue == queue_name and f.status == "running"]

        assert wait_until(link, LINK_UP, "the link running") == [(upstream, None, "running")]
        assert any(f.queue == queue_name for f in management.federation_links(None))
        with pytest.raises(ManagementNotFound, match="/api/federation-links/no-such-vhost"):
            management.federation_links("no-such-vhost")
    finally:
        management.delete_policy(upstream)
        management.delete_parameter("federation-upstream", upstream)
        management.delete_queue(queue_name, if_empty=False)
        with contextlib.suppress(ManagementNotFound):
            management.delete_queue(f"{queue_name}.up", if_empty=False)


def test_a_shovel_is_listed_restarted_and_moves_messages(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    source, target, shovel = f"{queue_name}.src", f"{queue_name}.dst", f"move-{queue_name}"
    management.put_queue(source)
    management.put_queue(target)
    management.put_parameter("shovel", shovel, {
        "src-uri": cluster.urls()[0], "src-queue": source,
        "dest-uri": cluster.urls()[1], "dest-queue": target, "ack-mode": "on-confirm"})
    try:
        def state() -> str | None:
            return next((s.state for s in management.shovels() if s.name == shovel), None)

        wait_until(lambda: state() == "running", LINK_UP, "the shovel running")
        assert [p.name for p in management.parameters("shovel") if p.name == shovel] == [shovel]
        management.restart_shovel(shovel)
        wait_until(lambda: state() == "running", LINK_UP, "the shovel running again")
        with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as connection:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.basic_publish("", source, b"moved", pika.BasicProperties(delivery_mode=2))
            method = wait_until(lambda: channel.basic_get(target, auto_ack=True)[0],
                                LINK_UP, "the message shovelled over")
            assert method is not None
        with pytest.raises(ManagementNotFound, match="restart_shovel"):
            management.restart_shovel(f"{shovel}-missing")
    finally:
        management.delete_parameter("shovel", shovel)
        management.delete_queue(source, if_empty=False)
        management.delete_queue(target, if_empty=False)


def test_the_escape_hatch_reads_what_no_method_does(
    cluster: LocalCluster, management: Management
) -> None:
    users = management.get("users")
    assert [u["name"] for u in users] == [cluster.credentials.user]
    columns = management.get("nodes", {"columns": "name"})
    assert sorted(n["name"] for n in columns) == sorted(n.name for n in cluster.nodes)
    assert set().union(*columns) == {"name"}  # the query reached the API
    with pytest.raises(ManagementNotFound, match=r"get\(\): GET /api/users/no-such-user "):
        management.get("users/no-such-user")
    with pytest.raises(ValueError, match="pass the query as query="):
        management.get("nodes?columns=name")


def test_the_asyncio_face_has_them_too(cluster: LocalCluster,
                                       management_settings: ManagementSettings) -> None:
    api = AsyncManagement(management_settings)

    async def read() -> tuple[str, int, bool, list[str]]:
        overview, flags, nodes, users = await asyncio.gather(
            api.overview(), api.feature_flags(), api.nodes(), api.get("users"))
        await api.federation_links(None)
        await api.shovels()
        await api.parameters("shovel")
        return (overview.version, len(nodes), any(f.name == "quorum_queue" for f in flags),
                [u["name"] for u in users])

    version, count, quorum, users = asyncio.run(read())
    assert version.startswith(cluster.spec.rabbitmq + ".")
    assert (count, quorum, users) == (3, True, [cluster.credentials.user])
