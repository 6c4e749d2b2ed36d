"""The two-cluster world of the federated scenarios: the run's queue federated both ways
between the run's cluster (side 0) and a second one (side 1), each side's federation link
reaching the other cluster through the fault proxy, so that a scenario can cut it (either
cluster may run on loopback or in network namespaces).

Each side's copy of the queue has an upstream parameter naming the other cluster (its every
node, through the proxy: the link is an AMQP client of the other cluster, like an actor) and
a policy applying it; ``ack-mode: on-confirm``, so the link acks upstream only after the
downstream confirmed: nothing is lost between the clusters, and a link cut before its ack
moves the message again (the inbox absorbs the copy).
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Sequence

from sac.sdk import ManagementError
from sac.server import LocalCluster
from .faults import FaultProxy

SIDES = "ab"
RECONNECT_DELAY_S = 1


def link_actor(side: int) -> str:
    """The fault proxy's name for side ``side``'s federation link (to the other side)."""
    return f"federation-{SIDES[side]}"


def _upstream(queue: str, side: int) -> str:
    return f"{queue}-from-{SIDES[1 - side]}"


def federate(clusters: Sequence[LocalCluster], queue: str, proxy: FaultProxy) -> None:
    """Each side's ``queue`` pulls from the other's, through the proxy."""
    for side, cluster in enumerate(clusters):
        upstream = clusters[1 - side]
        creds = upstream.credentials
        login = ":".join(urllib.parse.quote(x, safe="") for x in (creds.user, creds.password))
        # The link is a client of the downstream's broker: the proxy listens where that
        # broker can reach the host (its bridge, when its nodes run in namespaces).
        host = cluster.netns.host_address if cluster.spec.network == "netns" else "127.0.0.1"
        uris = [f"amqp://{login}@{proxy.route(link_actor(side), node.index, node.address, host)}"
                "/%2F" for node in upstream.nodes]
        name = _upstream(queue, side)
        api = cluster.management()
        api.put_parameter("federation-upstream", name, {
            "uri": uris, "ack-mode": "on-confirm", "reconnect-delay": RECONNECT_DELAY_S})
        api.put_policy(name, f"^{queue}$", {"federation-upstream": name}, priority=10)


def links_running(clusters: Sequence[LocalCluster], queue: str) -> bool:
    """Whether each side's federation link of ``queue`` runs (it starts once the policy
    finds the queue declared, and again after a reconnect delay when it was cut)."""
    for cluster in clusters:
        links = cluster.management().federation_links()
        if not any(link.queue == queue and link.status == "running" for link in links):
            return False
    return True


def unacked(cluster: LocalCluster, queue: str) -> int:
    """How many of ``queue``'s messages on ``cluster`` the federation link pulling them has
    not yet acked, as its channels last reported (each statistics interval: 1 s here). Not
    the queue's own count: a quorum queue refreshes that on its leader's tick (5 s), and a
    few seconds of acks held back could pass between two ticks unseen."""
    api = cluster.management()
    link = f"Federation link (upstream: {queue}-from-"
    connections = {c.name for c in api.connections()
                   if c.client_name is not None and c.client_name.startswith(link)}
    return sum(ch.messages_unacknowledged for ch in api.channels()
               if ch.connection in connections)


def unfederate(clusters: Sequence[LocalCluster], queue: str) -> None:
    """The policies, the upstreams and the queue's copy on side 1 (the runner deletes the
    run's cluster's own)."""
    for side, cluster in enumerate(clusters):
        name, api = _upstream(queue, side), cluster.management()
        with contextlib.suppress(ManagementError):
            api.delete_policy(name)
        with contextlib.suppress(ManagementError):
            api.delete_parameter("federation-upstream", name)
    other = clusters[1].management()
    for name in (queue, f"{queue}.parked"):
        with contextlib.suppress(ManagementError):
            other.delete_queue(name, if_empty=False)
