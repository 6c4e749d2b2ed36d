"""recipes/mirrored_to_quorum.py: its decisions, and the script end to end in a process of
its own against the session cluster (``--cluster``), as a user runs it."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator

import pika
import pytest

from recipes.mirrored_to_quorum import assess, global_qos_channels, mirrored, twin_settings
from sac.sdk import Management, ManagementNotFound
from sac.sdk._core.management_api import ChannelInfo, parse_queue
from sac.server import LocalCluster
from tests.helpers import wait_until
from tests.recipes.conftest import Recipe, run_recipe

pytestmark = pytest.mark.rabbitmq("3.10")  # mirrored queues: gone in 4.0

MIRRORED = {"name": "legacy", "vhost": "/", "type": "classic", "durable": True,
            "exclusive": False, "auto_delete": False, "policy": "ha",
            "effective_policy_definition": {"ha-mode": "all", "ha-sync-mode": "automatic"},
            "arguments": {"x-single-active-consumer": True, "x-message-ttl": 60000}}


def test_a_plain_mirrored_queue_carries_its_arguments_over() -> None:
    queue = parse_queue(MIRRORED)
    assert mirrored(queue)
    item = assess(queue)
    assert item.can_migrate
    assert dict(item.arguments) == {"x-message-ttl": 60000}
    assert item.not_carried == ("ha-mode=all, ha-sync-mode=automatic: replication comes from "
                                "the quorum queue's members (x-quorum-initial-group-size) "
                                "instead",)
    twin = twin_settings(item, "legacy-quorum")
    args = twin.arguments()
    assert (args["x-queue-type"], args["x-single-active-consumer"], args["x-message-ttl"]) == (
        "quorum", True, 60000)
    assert args["x-dead-letter-routing-key"] == "legacy-quorum.parked"


def test_what_blocks_and_what_does_not_carry_over() -> None:
    odd = parse_queue(dict(MIRRORED, exclusive=True, durable=False, auto_delete=True,
                           effective_policy_definition={"ha-mode": "all", "queue-mode": "lazy"},
                           arguments={"x-max-priority": 5, "x-overflow": "drop-head",
                                      "x-queue-master-locator": "min-masters",
                                      "x-dead-letter-exchange": "dlx", "x-custom": 1}))
    item = assess(odd, ["ch (1)"])
    assert not item.can_migrate
    assert [b.split(" ")[0] for b in item.blockers] == ["exclusive", "non-durable",
                                                        "auto-delete"]
    lost = "\n".join(item.not_carried)
    for words in ("priorities (x-max-priority=5", "lazy mode", "global QoS on 1 consuming",
                  "x-overflow=drop-head", "does not know: x-custom"):
        assert words in lost
    assert dict(item.arguments) == {"x-dead-letter-exchange": "dlx",
                                    "x-queue-leader-locator": "balanced"}
    twin = twin_settings(item, "t").arguments()
    assert (twin["x-dead-letter-exchange"], twin["x-queue-leader-locator"]) == ("dlx",
                                                                               "balanced")
    assert not mirrored(parse_queue(dict(MIRRORED, effective_policy_definition={})))
    assert not mirrored(parse_queue(dict(MIRRORED, type="quorum")))


def test_global_qos_is_found_on_the_channels_consuming_the_queue() -> None:
    queue = parse_queue(dict(MIRRORED, consumer_details=[
        {"consumer_tag": "a", "channel_details": {"name": "c1 (1)"}},
        {"consumer_tag": "b", "channel_details": {"name": "c2 (1)"}}]))
    channels = [ChannelInfo("c1 (1)", "c1", 1, 0, 10, 1, "/"),
                ChannelInfo("c2 (1)", "c2", 1, 10, 0, 1, "/"),
                ChannelInfo("c3 (1)", "c3", 1, 0, 10, 1, "/")]
    assert global_qos_channels(queue, channels) == ["c1 (1)"]


# ---------------------------------------------------------------- the script, as users run it


def test_help() -> None:
    done = run_recipe("mirrored_to_quorum", "--help")
    assert done.returncode == 0, done.stderr
    assert "--migrate QUEUE" in done.stdout
    assert "graceful stop on the old queue and a start on the twin" in " ".join(
        done.stdout.split())


def test_a_broker_by_url_needs_its_management_api_too() -> None:
    done = run_recipe("mirrored_to_quorum", "--url", "amqp://u:p@127.0.0.1:1/")
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: with --url, give the management API too: "
                                   "--management-url http://user:password@host:15672 (once "
                                   "per node)")


@pytest.fixture
def management(cluster: LocalCluster) -> Management:
    return cluster.management()


@pytest.fixture
def odd_queues(cluster: LocalCluster, management: Management) -> Iterator[str]:
    """Mirrored queues a quorum queue cannot replace as they are, held by a connection of
    their own: non-durable, exclusive, and one consumed under a global QoS."""
    prefix = f"mtq-test-{uuid.uuid4().hex[:6]}"
    management.put_policy(f"{prefix}-ha", f"^{prefix}-", {"ha-mode": "all"})
    connection = pika.BlockingConnection(pika.URLParameters(cluster.urls()[0]))
    try:
        channel = connection.channel()
        channel.queue_declare(f"{prefix}-transient", durable=False)
        channel.queue_declare(f"{prefix}-exclusive", exclusive=True)
        channel.queue_declare(f"{prefix}-shared", durable=True)
        channel.basic_qos(prefetch_count=10, global_qos=True)
        channel.basic_consume(f"{prefix}-shared", lambda *_: None)
        wait_until(lambda: sum(q.name.startswith(prefix) and q.policy == f"{prefix}-ha"
                               for q in management.queues("/")) == 3, 10,
                   "the policy on the three queues")
        # Channel statistics lag the queue's: the recipe reads both.
        wait_until(lambda: global_qos_channels(management.queue(f"{prefix}-shared"),
                                               management.channels()), 10,
                   "the consuming channel's global QoS in the management API")
        yield prefix
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            cleanup = connection.channel()
            cleanup.queue_delete(f"{prefix}-shared")
            cleanup.queue_delete(f"{prefix}-transient")
            connection.close()
        management.delete_policy(f"{prefix}-ha")


def test_the_demo_migrates_without_loss_and_reports_what_does_not_carry_over(
    recipe: Recipe, management: Management, odd_queues: str
) -> None:
    done = recipe("mirrored_to_quorum", "--demo", "300")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    print(out)
    assert "PROVED: nothing lost, nothing handled twice, the old queue empty and deleted" in out
    assert re.search(r"published 330: handled (\d+) on .* before the switch, (\d+) on .* after "
                     r"it \((\d+) moved, 30 new\); missing 0, handled twice 0", out)
    prefix = odd_queues
    for line in (f"{prefix}-transient (policy {prefix}-ha, 0 messages, 0 consumers): CANNOT",
                 f"{prefix}-exclusive (policy {prefix}-ha, 0 messages, 0 consumers): CANNOT",
                 f"{prefix}-shared (policy {prefix}-ha, 0 messages, 1 consumers): can become"):
        assert line in out
    assert "blocker: exclusive" in out
    assert "blocker: non-durable" in out
    assert "not carried over: global QoS on 1 consuming channel(s)" in out
    assert "not carried over: priorities (x-max-priority=5" in out
    assert "not carried over: lazy mode" in out
    demo = re.search(r"demo: policy '(mtq-demo-\w+)-ha'", out)
    assert demo is not None
    assert not [q.name for q in management.queues("/") if q.name.startswith(demo[1])]
    assert not [p.name for p in management.policies("/") if p.name.startswith(demo[1])]


def test_one_queue_migrated_with_its_binding(
    recipe: Recipe, cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    name = f"mtq-{queue_name}"[:100]
    exchange = f"{name}-x"
    management.put_policy(f"{name}-ha", f"^{name}$", {"ha-mode": "exactly", "ha-params": 2})
    management.put_exchange(exchange, "direct")
    connection = pika.BlockingConnection(pika.URLParameters(cluster.urls()[2]))
    try:
        channel = connection.channel()
        channel.queue_declare(name, durable=True, arguments={"x-single-active-consumer": True})
        channel.queue_bind(name, exchange, "orders")
        channel.confirm_delivery()
        for i in range(50):
            channel.basic_publish(exchange, "orders", f"{i}".encode(),
                                  pika.BasicProperties(message_id=f"m{i}", delivery_mode=2))
        wait_until(lambda: management.queue(name).policy == f"{name}-ha", 10, "the policy")
        done = recipe("mirrored_to_quorum", "--migrate", name, "--delete-source")
        assert done.returncode == 0, done.stdout + done.stderr
        print(done.stdout)
        assert "c. moved 50 message(s)" in done.stdout
        assert "d. switched 1 binding(s)" in done.stdout
        twin = f"{name}-quorum"
        with pytest.raises(ManagementNotFound):
            management.queue(name)  # deleted, empty
        assert [(b.source, b.routing_key) for b in management.queue_bindings(twin)
                if b.source] == [(exchange, "orders")]
        channel.basic_publish(exchange, "orders", b"50", pika.BasicProperties(message_id="m50"))
        ids = []
        for method, props, _body in channel.consume(twin, auto_ack=True, inactivity_timeout=5):
            assert method is not None, f"only {len(ids)} of 51 came"
            ids.append(props.message_id)
            if len(ids) == 51:
                break
        channel.cancel()
        assert ids == [f"m{i}" for i in range(51)]  # in order; the new one routed to the twin
        channel.queue_delete(twin)
        channel.queue_delete(f"{twin}.parked")
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.close()
        management.delete_policy(f"{name}-ha")
        management.delete_exchange(exchange)
