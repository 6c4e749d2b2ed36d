"""Knowing the role from the management API, both faces, on the session cluster (statistics
interval 1 s): a consumer learns it became the active one without a delivery, and is told
when it lost the role; without a management URL nothing polls and nothing changes."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pika
import pytest

from sac.sdk import (
    ConnectionSettings,
    ConsumerSettings,
    Management,
    ManagementSettings,
    QueueSettings,
    Role,
)
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.sdk.faces import ConsumerFace

BOUND = 5.0
"""Longest a role change may take to be seen: the statistics interval (1 s) and a poll
(0.5 s, jittered) with room for a busy machine; measured 0.6-1.6 s."""
W, A, C = Role.WAITING, Role.ACTIVE, Role.CONNECTING

Make = Callable[..., ConsumerFace]


def named(conn: ConnectionSettings, suffix: str) -> ConnectionSettings:
    return attrs.evolve(conn, name=f"{conn.name}-{suffix}")


def when(consumer: ConsumerFace, role: Role, after: float = 0.0) -> float:
    """When ``consumer`` last became ``role`` (at or after ``after``)."""
    return max(t for t, r in consumer.role_times if r is role and t >= after)


def test_the_standby_becomes_active_on_an_empty_queue_when_the_active_one_stops(
    face: str, conn: ConnectionSettings, queue: QueueSettings, consumers: Make,
    management_settings: ManagementSettings,
) -> None:
    settings = ConsumerSettings(conn, queue, management=management_settings)
    first = consumers(face, settings).start()
    wait_until(lambda: first.role is A, BOUND, "the first consumer told it is active")
    second = consumers(face, settings).start()
    assert second.role is W
    first.stop()
    stopped = when(first, Role.STOPPED)
    wait_until(lambda: second.role is A, BOUND, "the standby told it is active")
    lag = when(second, A) - stopped
    print(f"{face}: the standby knew it was active {lag:.2f} s after the handover")
    assert 0 < lag < BOUND
    assert (first.stats.delivered, second.stats.delivered) == (0, 0)  # no delivery told them
    assert first.roles == [C, W, A, Role.STOPPING, Role.STOPPED]
    assert second.roles == [C, W, A]


def test_without_a_management_url_nothing_polls(
    face: str, conn: ConnectionSettings, queue: QueueSettings, consumers: Make,
    management_settings: ManagementSettings, monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    ask = Management.queue

    def counted(self: Management, name: str, vhost: str = "/") -> object:
        asked.append(name)
        return ask(self, name, vhost)

    monkeypatch.setattr(Management, "queue", counted)
    plain = consumers(face, ConsumerSettings(conn, queue)).start()
    other = QueueSettings(f"{queue.name}-polled")
    polled = consumers(face, ConsumerSettings(conn, other, management=management_settings))
    polled.start()
    # The polled consumer's questions measure out the time the plain one had to ask any.
    wait_until(lambda: polled.role is A and asked.count(other.name) >= 3, 3 * BOUND,
               "the polled consumer active, after three polls")
    assert asked.count(queue.name) == 0
    assert plain.roles == [C, W]  # as before: active only at its first delivery


def test_a_consumer_whose_connection_is_closed_is_told_and_its_standby_takes_over(
    face: str, conn: ConnectionSettings, queue: QueueSettings, consumers: Make,
    management_settings: ManagementSettings, management: Management,
) -> None:
    first_conn = named(conn, "first")
    first = consumers(face, ConsumerSettings(first_conn, queue,
                                             management=management_settings)).start()
    second = consumers(face, ConsumerSettings(named(conn, "second"), queue,
                                              management=management_settings)).start()
    wait_until(lambda: first.role is A, BOUND, "the first consumer told it is active")
    wait_until(lambda: any(c.client_name == first_conn.name for c in management.connections()),
               BOUND, "the first consumer's connection listed")
    closed = management.close_connections(str(first_conn.name), reason="test: the role moves")
    assert len(closed.closed) == 1
    wait_until(lambda: second.role is A, BOUND, "the standby told it is active")
    wait_until(lambda: first.role is W, BOUND, "the first consumer back, waiting")
    assert first.roles == [C, W, A, C, W]
    assert second.roles == [C, W, A]
    assert (first.stats.reconnects, first.stats.delivered, second.stats.delivered) == (1, 0, 0)


def test_a_consumer_cancelled_by_the_broker_is_told_and_active_again_on_its_new_queue(
    face: str, cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
    consumers: Make, management_settings: ManagementSettings,
) -> None:
    only = consumers(face, ConsumerSettings(conn, queue, management=management_settings))
    only.start()
    wait_until(lambda: only.role is A, BOUND, "the consumer told it is active")
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[1])) as admin:
        admin.channel().queue_delete(queue.name)  # the broker cancels the consumer
    # It consumes again (declaring the queue anew) and is the only one: active again. (The
    # API lists the cancelled subscription as active too: a broker quirk the poll sees
    # through.) Now and then no basic.cancel reaches the consumer at all (2 of 20 here): the
    # poll finds its queue gone, and it subscribes again all the same; or the cancel came
    # while it subscribed again to the queue being deleted: then once more.
    wait_until(lambda: len(only.roles) >= 6 and only.roles[-1] is A, 3 * BOUND,
               "lost, subscribed again, told it is active")
    lost, again = only.roles[:3], only.roles[3:]
    assert lost == [C, W, A]
    assert again in ([C, W, A], [C, W, C, W, A]), only.roles
    # Each time it was subscribed again: in place on its channel, or, when the queue's
    # deletion was still under way as it subscribed again (the broker closes the channel:
    # 404 no queue), over a new connection.
    assert only.stats.resubscribes + only.stats.reconnects == len(again) // 2
    assert only.stats.delivered == 0
