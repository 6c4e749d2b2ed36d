"""``PartitionedQueue``: the partitions' queues and parking queues named and set alike, a key
always routed to the same partition, and bad names, counts, templates and keys refused with
the reason."""

from __future__ import annotations

import pytest

from sac.sdk import ConfigurationError, QueueSettings
from sac.sdk._core.partitioning import partition_of
from sac.sdk._settings import PartitionedQueue


def test_each_partition_is_a_single_active_queue_with_its_own_parking_queue() -> None:
    orders = PartitionedQueue("orders", 4, template=QueueSettings("x", delivery_limit=5))
    assert [q.name for q in orders.queues()] == [f"orders.p{i}" for i in range(4)]
    third = orders.queue(2)
    assert third.parking_queue == "orders.p2.parked"
    assert third.single_active_consumer
    assert third.delivery_limit == 5
    assert third.arguments()["x-dead-letter-routing-key"] == "orders.p2.parked"


def test_a_key_is_routed_to_its_partition_every_time() -> None:
    orders = PartitionedQueue("orders", 16)
    for key in ("customer-42", b"customer-42", "ü"):
        assert orders.route(key) == f"orders.p{partition_of(key, 16)}"
        assert orders.route(key) == orders.route(key)
    assert orders.route("customer-42") == orders.route(b"customer-42")


def test_a_template_without_parking_gives_partitions_without_parking() -> None:
    orders = PartitionedQueue("orders", 2, template=QueueSettings(
        "x", parking_queue=None, dead_letter_exchange="dlx"))
    assert orders.queue(1).parking_queue is None


@pytest.mark.parametrize(("build", "fault"), [
    (lambda: PartitionedQueue("orders", 0), "partitions"),
    (lambda: PartitionedQueue("orders", 10_001), "partitions"),
    (lambda: PartitionedQueue("orders", True), "partitions"),
    (lambda: PartitionedQueue("", 4), "queue name"),
    (lambda: PartitionedQueue("amq.orders", 4), "reserved"),
    (lambda: PartitionedQueue("o" * 245, 4), "too long"),
    (lambda: PartitionedQueue("orders", 4, template="orders"), "must be a QueueSettings"),
    (lambda: PartitionedQueue("orders", 4, template=QueueSettings(
        "x", single_active_consumer=False)), "single_active_consumer"),
])
def test_bad_settings_name_their_fault(build: object, fault: str) -> None:
    with pytest.raises(ConfigurationError, match=fault):
        build()  # type: ignore[operator]


def test_bad_keys_and_partitions_are_refused() -> None:
    orders = PartitionedQueue("orders", 4)
    for key in ("", b"", None, 42):
        with pytest.raises(ValueError, match="partition key"):
            orders.route(key)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"not one of orders.s 0\.\.3"):
        orders.queue(4)
