"""The benchmarks' parts that a run on RabbitMQ 3.10 and 4.0 relies on, against the real
clusters of both series: the queue the throughput bench declares is the one the SDK accepts,
the broker's CPU is read from the cluster's own VMs, and the priority handover hands the
queue over in order, once each."""

from __future__ import annotations

import argparse

import pika
import pytest

from bench import handover, throughput
from bench._report import broker_cpu_s
from sac.sdk import ConnectionSettings, Publisher, PublisherSettings, QueueSettings
from sac.server import LocalCluster


@pytest.mark.rabbitmq("4.0", "3.10")
def test_the_sdk_publishes_to_the_queue_the_throughput_bench_declared(
    cluster: LocalCluster, queue_name: str,
) -> None:
    """The bench declares every variant's queue before the run; an SDK variant then declares
    it again. On 3.10 the bench's parking queue had 4.0's delivery limit (-1), and every SDK
    publisher variant failed with QueueMismatch."""
    url = cluster.urls()[0]
    throughput.declare_queue(url, queue_name)
    try:
        settings = PublisherSettings(ConnectionSettings(urls=cluster.urls()),
                                     queue=QueueSettings(queue_name))
        with Publisher(settings) as publisher:
            publisher.publish_many([b"x"] * 10)
        assert throughput.queue_depth(url, queue_name) == 10
    finally:
        throughput.delete_queue(url, queue_name)


@pytest.mark.rabbitmq("4.0", "3.10")
def test_the_brokers_cpu_grows_with_the_work_it_is_given(
    cluster: LocalCluster, queue_name: str,
) -> None:
    """What the throughput bench reports as the broker's CPU per message: the cluster's VMs'
    CPU, which grows while they take persistent messages."""
    url = cluster.urls()[0]
    throughput.declare_queue(url, queue_name)
    try:
        before = broker_cpu_s(cluster)
        connection = pika.BlockingConnection(pika.URLParameters(url))
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            for _ in range(300):
                channel.basic_publish("", queue_name, b"x" * 256,
                                      pika.BasicProperties(delivery_mode=2))
        finally:
            connection.close()
        assert broker_cpu_s(cluster) > before
    finally:
        throughput.delete_queue(url, queue_name)


def _handover_args(series: str) -> argparse.Namespace:
    return handover.parse_args(["--rabbitmq", series, "--scenarios", "priority",
                                "--warmup", "200", "--tail", "200", "--timeout", "30"])


@pytest.mark.parametrize("face", handover.FACES)
def test_a_priority_handover_on_4_0_keeps_the_order_and_is_timed(
    face: str, cluster4: LocalCluster,
) -> None:
    """B subscribes with a higher priority while A runs: B takes over, every message once,
    A's then B's in publish order, and the gap from A's last to B's first is measured."""
    args = _handover_args("4.0")
    [scenario] = handover.scenarios(args)
    result = handover.Bench(cluster4, args).run_once(scenario, face, 0)
    assert result.errors == []
    assert result.handled_a > 0
    assert result.handled_b > 0
    assert result.lost == 0
    assert result.duplicates == 0
    assert result.in_order is True
    assert result.overlap is False
    assert result.gap_s is not None
    assert result.handover_s is not None
    assert 0 < result.gap_s < args.timeout
    assert 0 < result.handover_s < args.timeout
    assert result.left_in_queue == 0


def test_the_priority_handover_is_left_out_where_the_broker_ignores_priorities(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """3.x keeps the first consumer active whatever B's priority: the scenario would only
    time out there, so it is left out, and asked for alone it is refused in one line."""
    args = handover.parse_args(["--rabbitmq", "3.10", "--scenarios", "graceful,priority"])
    assert [s.fault for s in handover.scenarios(args)] == ["graceful"]
    with pytest.raises(SystemExit) as refused:
        _handover_args("3.10")
    assert refused.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert "nothing to run on RabbitMQ 3.10: the priority scenario needs 4.0" in error
